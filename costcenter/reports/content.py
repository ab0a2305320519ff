"""Everything a report says, as plain data for the templates.

No cost rule lives here: spend, tasks, tokens, idle and unallocated cost come from
``selectors.cost_totals`` / ``cost_rows`` / ``pool_cost_rows`` (what ``/api/v1/costs/`` answers
for the same range and filters), the explanation from ``cost_change.cost_change`` and budgets from
``budgets.budget_status``. This module picks the period, the scope and the top items.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from urllib.parse import urlencode

from django.urls import reverse

from costcenter import budgets as budget_service
from costcenter.access import sees_all_teams, visible_teams
from costcenter.cost_change import cost_change
from costcenter.dashboards import Kpi, Mover, label_of, rank_movers, total_tokens, url_value
from costcenter.emails import site_url
from costcenter.models import AlertEvent, Budget, Membership
from costcenter.reports.models import Scope, Subscription
from costcenter.reports.periods import ReportPeriod, local_midnight
from costcenter.selectors import CostQuery, cost_rows, cost_totals, pool_cost_rows

MOVER_DIMENSIONS = ("team", "model", "workload")
TOP_MOVERS = 3
TOP_EFFECTS = 3
MAX_ALERTS = 10
MAX_BUDGETS = 10
TREND_PERIODS = 8  # points on the cost-per-successful-task trend


@dataclass(frozen=True)
class ReportScope:
    """Whose view (``user``) and which teams: ``team_slugs`` None means every team the user sees."""

    user: object
    team_slugs: tuple[str, ...] | None
    label: str

    @property
    def filters(self) -> tuple:
        return (("team", self.team_slugs),) if self.team_slugs is not None else ()

    @property
    def org_wide(self) -> bool:
        return self.team_slugs is None and sees_all_teams(self.user)


def scope_of(subscription: Subscription) -> ReportScope:
    """The subscription's scope, narrowed to what its user may see *now* (roles change)."""
    user = subscription.user
    if subscription.scope == Scope.ORG and sees_all_teams(user):
        return ReportScope(user, None, "the whole organisation")
    chosen = list(subscription.teams.values_list("slug", flat=True)) if subscription.pk else []
    if not chosen:
        chosen = list(Membership.objects.filter(user=user).values_list("team__slug", flat=True))
    allowed = sorted(set(visible_teams(user).filter(slug__in=chosen).values_list("slug", flat=True)))
    label = f"team{'s' if len(allowed) > 1 else ''} {', '.join(allowed)}" if allowed else "no team"
    return ReportScope(user, tuple(allowed), label)


@dataclass
class Effect:
    label: str
    amount: Decimal


@dataclass
class BudgetLine:
    name: str
    scope: str
    status: object  # budgets.BudgetStatus
    link: str


@dataclass
class AlertLine:
    title: str
    created_at: datetime
    link: str


@dataclass
class Report:
    period: ReportPeriod
    previous: ReportPeriod
    scope: ReportScope
    totals: dict
    previous_totals: dict
    kpis: list[Kpi]
    explanation: str
    effects: list[Effect]
    movers: dict[str, list[Mover]]
    budgets: list[BudgetLine]
    alerts: list[AlertLine]
    alert_count: int
    idle_cost: Decimal | None
    previous_idle_cost: Decimal | None
    least_utilised_pool: dict | None
    unpriced_models: list[dict]
    spend_by_day: list[dict]  # rows for charts.spend_over_time (local days)
    unallocated_by_day: dict | None
    trend: list[dict]  # one row per period for charts.explorer_chart
    links: dict[str, str] = field(default_factory=dict)

    @property
    def has_usage(self) -> bool:
        return bool(self.totals["attempts"] or self.previous_totals["attempts"] or self.totals["total_spend"])

    @property
    def kpi(self) -> dict[str, Kpi]:
        return {kpi.key: kpi for kpi in self.kpis}


def _query(period: ReportPeriod, scope: ReportScope, group_by=(), granularity="total") -> CostQuery:
    return CostQuery(period.start, period.end, tuple(group_by), granularity, scope.filters)


def _movers(scope: ReportScope, period: ReportPeriod, previous: ReportPeriod, dimension: str) -> list[Mover]:
    costs: dict[object, list] = defaultdict(lambda: [None, None])
    for slot, span in enumerate((previous, period)):
        for row in cost_rows(user=scope.user, query=_query(span, scope, (dimension,))):
            if row["cost"] is not None:
                costs[row[dimension]][slot] = row["cost"]
    return rank_movers(dimension, costs, TOP_MOVERS)


def _spend_by_day(scope: ReportScope, period: ReportPeriod, dimension: str) -> tuple[list[dict], dict | None]:
    """Spend per *local* day by ``dimension``: hourly rows summed into the recipient's days."""
    zone = period.zone
    day_start = {day: local_midnight(day, zone) for day in period.days}

    def local_day(hour: datetime):
        return day_start[hour.astimezone(zone).date()]

    sums: dict[tuple, Decimal] = defaultdict(Decimal)
    for row in cost_rows(user=scope.user, query=_query(period, scope, (dimension,), "hour")):
        if row["cost"] is not None:
            sums[(local_day(row["period"]), row[dimension])] += row["cost"]
    # Charts get the local *date* (not the UTC instant of local midnight, which plotly would
    # draw on the evening before for zones east of UTC).
    local_date = {start: day for day, start in day_start.items()}
    rows = [
        {"period": local_date[day], dimension: value, "cost": cost}
        for (day, value), cost in sorted(sums.items(), key=lambda item: (item[0][0], str(item[0][1])))
    ]
    unallocated = None
    if scope.org_wide:
        unallocated = defaultdict(Decimal)
        for row in pool_cost_rows(user=scope.user, start=period.start, end=period.end, granularity="hour"):
            if row["unallocated_cost"] is not None:
                unallocated[local_date[local_day(row["period"])]] += row["unallocated_cost"]
        unallocated = dict(unallocated)
    return rows, unallocated


def _trend(scope: ReportScope, period: ReportPeriod) -> list[dict]:
    """Cost per successful task of the last ``TREND_PERIODS`` periods (this one last)."""
    periods = [period]
    for _ in range(TREND_PERIODS - 1):
        periods.insert(0, periods[0].previous())
    first = CostQuery(periods[0].start, period.end, (), "hour", scope.filters)
    starts = [(p.start, p.end) for p in periods]
    first_days = {p.start: p.first_day for p in periods}  # local dates for the chart's x axis
    sums = {start: {"cost": None, "successful_tasks": 0, "attempts": 0} for start, _ in starts}
    for row in cost_rows(user=scope.user, query=first):
        start = next(s for s, e in starts if s <= row["period"] < e)
        bucket = sums[start]
        bucket["attempts"] += row["attempts"]
        bucket["successful_tasks"] += row["successful_tasks"]
        if row["cost"] is not None:
            bucket["cost"] = (bucket["cost"] or Decimal(0)) + row["cost"]
    out = []
    for start, bucket in sums.items():
        successes = bucket["successful_tasks"]
        cost = bucket["cost"]
        per_task = cost / successes if successes and cost is not None else None
        out.append(
            {
                "period": first_days[start],
                "label": "All usage",
                **bucket,
                "cost_per_successful_task": per_task,
            }
        )
    return out


def _day_params(period: ReportPeriod) -> dict[str, str]:
    return {"period": "custom", "start": period.first_day.isoformat(), "end": period.last_day.isoformat()}


def _links(scope: ReportScope, period: ReportPeriod, previous: ReportPeriod) -> dict[str, str]:
    """Dashboard links for each section; the dashboards count whole UTC days, the local days' dates."""
    teams = [("team", url_value(slug)) for slug in scope.team_slugs or ()]
    days = list(_day_params(period).items())
    change = [
        ("before_start", previous.first_day.isoformat()),
        ("before_end", previous.last_day.isoformat()),
        ("after_start", period.first_day.isoformat()),
        ("after_end", period.last_day.isoformat()),
    ]
    return {
        "overview": site_url(reverse("cc-overview") + "?" + urlencode(days + teams)),
        "explorer": site_url(reverse("cc-explorer") + "?" + urlencode(days + teams + [("group_by", "team")])),
        "cost_change": site_url(reverse("cc-cost-change") + "?" + urlencode(change + teams)),
        "budgets": site_url(reverse("cc-budgets")),
        "alerts": site_url(reverse("cc-alerts")),
        "fleet": site_url(reverse("cc-fleet") + "?" + urlencode(days)),
        "ingestion": site_url(reverse("cc-ingestion")),
        "settings": site_url(reverse("reports:settings")),
    }


def _budgets(scope: ReportScope, now: datetime) -> list[BudgetLine]:
    rows = budget_service.visible_owned(scope.user, Budget.objects.select_related("team"))
    if scope.team_slugs is not None:
        rows = rows.filter(team__slug__in=scope.team_slugs)
    lines = []
    for budget in rows.order_by("name")[:MAX_BUDGETS]:
        status = budget_service.budget_status(budget, now=now, with_forecast=True)
        lines.append(
            BudgetLine(
                budget.name,
                budget_service.budget_scope_text(budget),
                status,
                site_url(reverse("cc-budget", kwargs={"pk": budget.pk})),
            )
        )
    lines.sort(key=lambda line: (-line.status.percent, line.name))
    return lines


def _alerts(scope: ReportScope, period: ReportPeriod) -> tuple[list[AlertLine], int]:
    events = budget_service.visible_owned(scope.user, AlertEvent.objects.all()).filter(
        firing=True, created_at__gte=period.start, created_at__lt=period.end
    )
    if scope.team_slugs is not None:
        events = events.filter(team__slug__in=scope.team_slugs)
    count = events.count()
    shown = [
        AlertLine(event.title, event.created_at, site_url(reverse("cc-alerts") + f"#event-{event.pk}"))
        for event in events.order_by("-created_at", "-pk")[:MAX_ALERTS]
    ]
    return shown, count


def build_report(subscription: Subscription, period: ReportPeriod, *, now: datetime) -> Report:
    """Every figure of ``subscription``'s report for ``period`` (budgets as of ``now``)."""
    scope = scope_of(subscription)
    previous = period.previous()
    totals = cost_totals(user=scope.user, query=_query(period, scope))
    before = cost_totals(user=scope.user, query=_query(previous, scope))
    if scope.team_slugs == ():
        # No team in scope: nothing to decompose (and an empty IN () is not SQL the decomposition can run).
        explanation, effects = "There is no team in this report's scope, so there is no spend to explain.", []
    else:
        change = cost_change(user=scope.user, before=_query(previous, scope), after=_query(period, scope))
        explanation = change.explanation
        effects = sorted((e for e in change.effects if e.amount), key=lambda e: -abs(e.amount))[:TOP_EFFECTS]

    idle, idle_before, least = totals["idle_cost"], before["idle_cost"], None
    if scope.org_wide:
        # Org-wide: the pools' whole idle cost, and the pool that sat idle the most.
        pools = pool_cost_rows(user=scope.user, start=period.start, end=period.end)
        pools_before = pool_cost_rows(user=scope.user, start=previous.start, end=previous.end)
        known = [row["idle_cost"] for row in pools if row["idle_cost"] is not None]
        idle = sum(known, Decimal(0)) if known else None
        known = [row["idle_cost"] for row in pools_before if row["idle_cost"] is not None]
        idle_before = sum(known, Decimal(0)) if known else None
        measured = [row for row in pools if row["mean_utilisation"] is not None]
        if measured:
            least = min(measured, key=lambda row: (row["mean_utilisation"], row["pool"]))

    unpriced_models = [
        {"model": label_of("model", row["model"]), "attempts": row["unpriced_attempts"], "tokens": row["unpriced_tokens"]}
        for row in cost_rows(user=scope.user, query=_query(period, scope, ("model",)))
        if row["unpriced_attempts"]
    ]  # fmt: skip
    unpriced_models.sort(key=lambda row: (-row["attempts"], row["model"]))

    kpis = [
        Kpi("spend", "Spend", totals["total_spend"], before["total_spend"], "money",
            incomplete=bool(totals["unpriced_attempts"])),
        Kpi("successful_tasks", "Successful tasks", totals["successful_tasks"], before["successful_tasks"], "count", "up"),
        Kpi("cost_per_successful_task", "Cost per successful task", totals["cost_per_successful_task"],
            before["cost_per_successful_task"], "money_precise", "down", incomplete=bool(totals["unpriced_attempts"])),
        Kpi("success_rate", "Task success rate", totals["success_rate"], before["success_rate"], "pct", "up"),
        Kpi("retry_rate", "Retry rate", totals["retry_rate"], before["retry_rate"], "pct", "down"),
        Kpi("tokens", "Tokens", total_tokens(totals), total_tokens(before), "tokens", "", "prompt + completion"),
    ]  # fmt: skip
    spend_rows, unallocated = _spend_by_day(scope, period, "team" if scope.team_slugs is None else "model")
    alerts, alert_count = _alerts(scope, period)
    return Report(
        period=period,
        previous=previous,
        scope=scope,
        totals=totals,
        previous_totals=before,
        kpis=kpis,
        explanation=explanation,
        effects=[Effect(e.label, e.amount) for e in effects],
        movers={dimension: _movers(scope, period, previous, dimension) for dimension in MOVER_DIMENSIONS},
        budgets=_budgets(scope, now),
        alerts=alerts,
        alert_count=alert_count,
        idle_cost=idle,
        previous_idle_cost=idle_before,
        least_utilised_pool=least,
        unpriced_models=unpriced_models,
        spend_by_day=spend_rows,
        unallocated_by_day=unallocated,
        trend=_trend(scope, period),
        links=_links(scope, period, previous),
    )


def idle_change(report: Report) -> float | None:
    from costcenter.dashboards import change_ratio

    return change_ratio(report.idle_cost, report.previous_idle_cost)
