"""Read queries shared by pages, the API, alerts and e-mails. Each returns plain rows."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from django.db.models import Count, Prefetch, Q

from costcenter.access import sees_all_teams, visible_teams
from costcenter.models import (
    ROLLUP_SUM_FIELDS,
    Endpoint,
    GpuHourPrice,
    LlmModel,
    Membership,
    Pool,
    Team,
    TokenPrice,
)
from costcenter.pricing import in_force


@dataclass(frozen=True)
class PoolRow:
    name: str
    vendor: str
    vendor_label: str
    gpu_model: str
    gpu_count: int
    gpu_hour_price: Decimal | None  # in force now; None = unpriced
    kwh_price: Decimal | None
    prometheus_match: dict
    endpoint_names: list[str]


@dataclass(frozen=True)
class ModelRow:
    name: str
    version: str
    family: str
    input_per_mtok: Decimal | None  # generic (any-endpoint) price in force now
    cached_input_per_mtok: Decimal | None
    output_per_mtok: Decimal | None
    endpoint_price_count: int  # endpoint-specific series on top of the generic one
    auto_registered: bool  # first seen in usage, not (yet) described in the catalog

    @property
    def priced(self) -> bool:
        return self.input_per_mtok is not None


@dataclass(frozen=True)
class TeamRow:
    slug: str
    name: str
    member_count: int
    role: str | None  # the viewer's own membership role, if any


@dataclass(frozen=True)
class CatalogOverview:
    teams: list[TeamRow]
    pools: list[PoolRow]
    endpoints: list[Endpoint]
    models: list[ModelRow]


def team_rows(*, user) -> list[TeamRow]:
    """Teams the user may see, with member counts and the user's own role; two queries."""
    own_roles = dict(Membership.objects.filter(user=user).values_list("team_id", "role"))
    return [
        TeamRow(team.slug, team.name, team.member_count, own_roles.get(team.pk))
        for team in visible_teams(user)
        .annotate(member_count=Count("memberships", distinct=True))
        .order_by("slug")
    ]


def catalog_overview(*, user, at: datetime) -> CatalogOverview:
    """The catalog as the user may see it, with the prices in force at ``at``.

    Teams are scoped to the user; pools, endpoints and models are org-wide reference data.
    Runs a fixed number of queries whatever the catalog's size.
    """
    teams = team_rows(user=user)
    pools = []
    for pool in Pool.objects.prefetch_related(
        Prefetch("prices", queryset=GpuHourPrice.objects.order_by("-effective_from")),
        Prefetch("endpoints", queryset=Endpoint.objects.order_by("name")),
    ):
        price = in_force(pool.prices.all(), at)
        pools.append(
            PoolRow(
                name=pool.name,
                vendor=pool.vendor,
                vendor_label=pool.get_vendor_display(),
                gpu_model=pool.gpu_model,
                gpu_count=pool.gpu_count,
                gpu_hour_price=price.gpu_hour_price if price else None,
                kwh_price=pool.kwh_price,
                prometheus_match=pool.prometheus_match,
                endpoint_names=[endpoint.name for endpoint in pool.endpoints.all()],
            )
        )
    models = []
    for model in LlmModel.objects.prefetch_related(
        Prefetch("prices", queryset=TokenPrice.objects.order_by("-effective_from"))
    ):
        prices = list(model.prices.all())
        generic = in_force([p for p in prices if p.endpoint_id is None], at)
        models.append(
            ModelRow(
                name=model.name,
                version=model.version,
                family=model.family,
                input_per_mtok=generic.input_per_mtok if generic else None,
                cached_input_per_mtok=generic.effective_cached_input_per_mtok if generic else None,
                output_per_mtok=generic.output_per_mtok if generic else None,
                endpoint_price_count=len({p.endpoint_id for p in prices if p.endpoint_id is not None}),
                auto_registered=model.auto_registered,
            )
        )
    endpoints = list(Endpoint.objects.select_related("pool"))
    return CatalogOverview(teams=teams, pools=pools, endpoints=endpoints, models=models)


def team_detail(*, user, slug: str) -> tuple[Team, list[Membership]] | None:
    """A team the user may see, with its members; None when it does not exist *or* is hidden."""
    team = visible_teams(user).filter(slug=slug).first()
    if team is None:
        return None
    members = list(team.memberships.select_related("user").order_by("user__username"))
    return team, members


# --- Costs over the rollups ----------------------------------------------------------------------
# Every page, the API, budgets and reports read cost numbers through these functions, so they
# always agree. They read hourly or daily rollups only, never raw attempts.

GROUP_FIELDS = {
    "model": "model__name",
    "vendor": "endpoint__pool__vendor",
    "workload": "workload__name",
    "team": "team__slug",
    "endpoint": "endpoint__name",
    "pool": "endpoint__pool__name",
}
GRANULARITIES = ("hour", "day", "week", "month", "total")
_SUMS = (*ROLLUP_SUM_FIELDS, "cost", "idle_cost")


@dataclass(frozen=True)
class CostQuery:
    """A half-open UTC range [start, end), dimensions to group by, a bucket size, and filters
    (dimension → allowed values, e.g. {"team": ["netops"], "vendor": ["amd"]})."""

    start: datetime
    end: datetime
    group_by: tuple[str, ...] = ()
    granularity: str = "total"
    filters: tuple[tuple[str, tuple[str, ...]], ...] = ()


def usage_queryset(*, user, query: CostQuery):
    """The rollup rows of ``query``, scoped to what ``user`` may see, and their time field.

    Day-aligned ranges read the daily rollups unless hourly buckets are asked for. Every reader of
    usage rollups starts here, so scoping and filters cannot differ between pages and the API.
    """
    from costcenter.models import DailyUsage, HourlyUsage

    day_aligned = all(
        moment.hour == 0 and moment.minute == 0 and moment.second == 0 and moment.microsecond == 0
        for moment in (query.start.astimezone(UTC), query.end.astimezone(UTC))
    )
    if query.granularity != "hour" and day_aligned:
        table, time_field = DailyUsage, "day"
    else:
        table, time_field = HourlyUsage, "hour"
    rows = table.objects.filter(**{f"{time_field}__gte": query.start, f"{time_field}__lt": query.end})
    if not sees_all_teams(user):
        rows = rows.filter(team_id__in=visible_teams(user).values("pk"))
    for dimension, values in query.filters:
        field_name = GROUP_FIELDS[dimension]
        condition = Q(**{f"{field_name}__in": [value for value in values if value != ""]})
        if "" in values:  # "" selects rows without that dimension (no team, hosted API vendor …)
            condition |= Q(**{f"{field_name}__isnull": True})
        rows = rows.filter(condition)
    return rows, time_field


def grouped_cost_queryset(*, user, query: CostQuery):
    """The grouped rollup sums of ``query`` as a values() queryset; None for one ungrouped total
    (values() without fields would group by every column)."""
    from django.db.models import Sum
    from django.db.models.functions import Trunc

    rows, time_field = usage_queryset(user=user, query=query)
    keys = [GROUP_FIELDS[dimension] for dimension in query.group_by]
    if query.granularity != "total":
        rows = rows.annotate(period=Trunc(time_field, query.granularity, tzinfo=UTC))
        keys.append("period")
    if not keys:
        return None
    return rows.values(*keys).annotate(**{name: Sum(name) for name in _SUMS}).order_by(*keys)


def iter_cost_rows(*, user, query: CostQuery, chunk_size: int | None = None) -> Iterator[dict]:
    """The rows of ``cost_rows`` one by one; with ``chunk_size`` read through a server-side
    cursor, so an export of any size streams in constant memory."""
    from django.db.models import Sum

    grouped = grouped_cost_queryset(user=user, query=query)
    if grouped is None:
        rows, _ = usage_queryset(user=user, query=query)
        total = rows.aggregate(**{name: Sum(name) for name in _SUMS})
        aggregated = [total] if total["attempts"] is not None else []
    else:
        aggregated = grouped.iterator(chunk_size=chunk_size) if chunk_size else grouped
    for row in aggregated:
        out = {dimension: row[GROUP_FIELDS[dimension]] for dimension in query.group_by}
        if query.granularity != "total":
            out["period"] = row["period"]
        out.update({name: row[name] for name in _SUMS})
        yield with_ratios(out)


def cost_rows(*, user, query: CostQuery) -> list[dict]:
    """Cost rows of the API contract: group keys, ``period`` (unless total), sums and ratios.

    ``cost`` is the known cost of the group's attempts (null when none is priced);
    ``cost_complete`` is false when some attempts are unpriced. Ratios are null where undefined.
    """
    return list(iter_cost_rows(user=user, query=query))


def with_ratios(row: dict) -> dict:
    """Add cost per successful task and the success/retry rates to a row of sums (in place)."""
    tasks, successes, attempts = row["tasks"], row["successful_tasks"], row["attempts"]
    cost = row["cost"]
    row["cost_complete"] = row["unpriced_attempts"] == 0
    row["cost_per_successful_task"] = cost / successes if successes and cost is not None else None
    row["success_rate"] = successes / tasks if tasks else None
    row["attempt_success_rate"] = row["successful_attempts"] / attempts if attempts else None
    row["retry_rate"] = (attempts - tasks) / tasks if tasks else None
    row["failed_attempts"] = attempts - row["successful_attempts"]
    return row


def cost_totals(*, user, query: CostQuery) -> dict:
    """Ungrouped totals of the range, plus unallocated pool cost and total spend.

    Unallocated pool cost belongs to no team: it is part of the totals only for users who see
    every team, and only when the query is not filtered to some teams, models or workloads.
    """
    totals = cost_rows(user=user, query=CostQuery(query.start, query.end, (), "total", query.filters))
    row = (
        totals[0] if totals else with_ratios({name: 0 for name in _SUMS} | {"cost": None, "idle_cost": None})
    )
    unallocated = None
    filtered_to_usage = any(
        dimension in {"team", "model", "workload", "endpoint"} for dimension, _ in query.filters
    )
    if sees_all_teams(user) and not filtered_to_usage:
        pools = pool_cost_rows(
            user=user, start=query.start, end=query.end, granularity="total", filters=query.filters
        )
        unallocated = sum((pool["unallocated_cost"] or 0 for pool in pools), Decimal(0))
    row["unallocated_cost"] = unallocated
    known = [value for value in (row["cost"], unallocated) if value is not None]
    row["total_spend"] = sum(known, Decimal(0)) if known else None
    return row


def pool_cost_rows(
    *, user, start: datetime, end: datetime, granularity: str = "total", filters=()
) -> list[dict]:
    """Per pool (and period): pool, allocated, unallocated and idle cost, energy, utilisation, GPU-hours.

    Pools are shared infrastructure whose cost spans teams, so these rows are for org-wide viewers.
    """
    from django.db.models import Avg, Count, Sum
    from django.db.models.functions import Trunc

    from costcenter.models import PoolHour

    if not sees_all_teams(user):
        return []
    rows = PoolHour.objects.filter(hour__gte=start, hour__lt=end)
    for dimension, values in filters:
        if dimension == "pool":
            rows = rows.filter(pool__name__in=values)
        elif dimension == "vendor":
            rows = rows.filter(pool__vendor__in=values)
    keys = ["pool__name", "pool__vendor"]
    if granularity != "total":
        rows = rows.annotate(period=Trunc("hour", granularity, tzinfo=UTC))
        keys.append("period")
    aggregated = (
        rows.values(*keys)
        .annotate(
            pool_cost=Sum("pool_cost"),
            allocated_cost=Sum("allocated_cost"),
            unallocated_cost=Sum("unallocated_cost"),
            idle_cost=Sum("idle_cost"),
            energy_kwh=Sum("energy_kwh"),
            mean_utilisation=Avg("mean_utilisation"),
            gpu_hours=Sum("gpu_count"),
            hours=Count("id"),
            unpriced_hours=Count("id", filter=Q(gpu_hour_price__isnull=True)),
            attempts=Sum("attempts"),
        )
        .order_by(*keys)
    )
    result = []
    for row in aggregated:
        out = {"pool": row["pool__name"], "vendor": row["pool__vendor"]}
        if granularity != "total":
            out["period"] = row["period"]
        out.update(
            {name: value for name, value in row.items() if not name.startswith("pool__") and name != "period"}
        )
        result.append(out)
    return result
