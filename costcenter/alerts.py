"""Evaluation of budgets and alert rules: state changes become rows, and only they notify.

``evaluate_all`` runs every minute (Celery beat), after each rollup run and from
``manage.py check_budgets``. For each budget it:

1. finds the current period, creating its ``BudgetPeriod`` row; the worker whose INSERT wins
   records the period **reset** (and resolves the previous period's open alerts);
2. reads the status through the selectors and moves the period's ``level`` (highest threshold
   crossed) with a conditional ``UPDATE … WHERE level = <level read>``; only the worker whose
   UPDATE changed the row writes the ``AlertEvent`` and its notifications, in the same
   transaction, so overlapping workers and retries never notify twice;
3. claims the forecast alert once per period the same way (``forecast_fired_at IS NULL``).

Rules move ``AlertRule.state`` ok ↔ firing with the same conditional UPDATE.

Method of the spend anomaly rule: spend of the last ``window_hours`` complete hours against the
same hours of each of the previous 4 weeks; with at least 2 of those weeks having spend, it fires
when spend > median + k × max(1.4826 × MAD, 10 % of the median), k being the rule's threshold.
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.utils import timezone

from costcenter import budgets as budget_service
from costcenter.models import (
    AlertEvent,
    AlertEventKind,
    AlertRule,
    AlertRuleKind,
    AlertRuleState,
    Budget,
    BudgetPeriod,
    BudgetState,
    Notification,
    NotificationChannel,
)
from costcenter.selectors import CostQuery, cost_rows, cost_totals, pool_cost_rows

log = logging.getLogger(__name__)
HOUR = timedelta(hours=1)


@dataclass
class EvaluationReport:
    budgets: int = 0
    rules: int = 0
    events: list[int] = field(default_factory=list)
    notifications: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def evaluate_all(*, now: datetime | None = None, budget_ids=None, rule_ids=None) -> EvaluationReport:
    """Evaluate every budget and enabled rule (or only the given ids); one bad one cannot stop
    the others. Returns the events and notifications created (to be delivered after commit)."""
    now = now or timezone.now()
    report = EvaluationReport()
    budgets = Budget.objects.select_related("team").order_by("pk")
    if budget_ids is not None:
        budgets = budgets.filter(pk__in=budget_ids)
    for budget in budgets:
        try:
            evaluate_budget(budget, now=now, report=report)
        except Exception as exc:  # noqa: BLE001 - logged, reported, and the next budget goes on
            log.exception("evaluating budget %s failed", budget.pk)
            report.errors.append(f"budget {budget.name}: {exc}")
        report.budgets += 1
    rules = AlertRule.objects.filter(enabled=True).select_related("team").order_by("pk")
    if rule_ids is not None:
        rules = rules.filter(pk__in=rule_ids)
    for rule in rules:
        try:
            evaluate_rule(rule, now=now, report=report)
        except Exception as exc:  # noqa: BLE001
            log.exception("evaluating alert rule %s failed", rule.pk)
            report.errors.append(f"rule {rule.name}: {exc}")
        report.rules += 1
    return report


# --- Notifications ---------------------------------------------------------------------------------
def _create_notifications(event: AlertEvent, *, emails, webhooks, now, report) -> None:
    """One outbox row per recipient; the unique (event, channel, target) keeps each single."""
    targets = [(NotificationChannel.EMAIL, address) for address in dict.fromkeys(emails or [])]
    for hook in webhooks or []:
        channel = NotificationChannel.SLACK if hook.get("format") == "slack" else NotificationChannel.WEBHOOK
        targets.append((channel, hook["url"]))
    for channel, target in dict.fromkeys(targets):
        notification = Notification.objects.create(
            event=event, channel=channel, target=target, created_at=now, next_attempt_at=now
        )
        report.notifications.append(notification.pk)


def _event(*, now, report, emails, webhooks, notify=True, **fields) -> AlertEvent:
    event = AlertEvent.objects.create(created_at=now, **fields)
    report.events.append(event.pk)
    if notify:
        _create_notifications(event, emails=emails, webhooks=webhooks, now=now, report=report)
    return event


# --- Budgets ---------------------------------------------------------------------------------------
def _money(value: Decimal | None) -> str | None:
    return None if value is None else str(value)


def _budget_details(budget: Budget, status, **extra) -> dict:
    details = {
        "budget_id": budget.pk,
        "budget": budget.name,
        "scope": budget_service.budget_scope_text(budget),
        "period": budget.period,
        "period_start": status.period_start.isoformat(),
        "period_end": status.period_end.isoformat(),
        "amount": _money(status.amount),
        "spent": _money(status.spent),
        "percent": str(status.percent.quantize(Decimal("0.01"))),
        "projected": _money(status.projected),
        "projected_exceed_at": status.projected_exceed_at.isoformat() if status.projected_exceed_at else None,
        "unpriced_attempts": status.unpriced_attempts,
        "cost_complete": status.cost_complete,
    }
    details.update(extra)
    return details


def _start_period(budget: Budget, start: datetime, end: datetime, *, now, report) -> BudgetPeriod:
    """The period row; the worker that creates it records the reset of the previous period."""
    try:
        with transaction.atomic():
            period = BudgetPeriod.objects.create(budget=budget, start=start, end=end)
    except IntegrityError:
        return BudgetPeriod.objects.get(budget=budget, start=start)
    previous = BudgetPeriod.objects.filter(budget=budget, start__lt=start).order_by("-start").first()
    if previous is not None:
        AlertEvent.objects.filter(period=previous, resolved_at__isnull=True, firing=True).update(
            resolved_at=now
        )
        scope = budget_service.budget_scope_text(budget)
        _event(
            now=now,
            report=report,
            emails=budget.emails,
            webhooks=budget.webhooks,
            # Only a reset that ends a warning or an overrun is news worth a message.
            notify=previous.state != BudgetState.OK,
            kind=AlertEventKind.RESET,
            budget=budget,
            period=period,
            team=budget.team,
            from_state=previous.state,
            to_state=BudgetState.OK,
            level=0,
            firing=False,
            title=f"Budget {budget.name} ({scope}): new {budget.period} period, state reset to OK",
            details={
                "budget_id": budget.pk,
                "budget": budget.name,
                "scope": scope,
                "period": budget.period,
                "period_start": start.isoformat(),
                "period_end": end.isoformat(),
                "previous_period_start": previous.start.isoformat(),
                "previous_state": previous.state,
                "previous_spent": _money(previous.spent),
                "amount": _money(budget.amount),
            },
        )
    return period


def evaluate_budget(budget: Budget, *, now: datetime, report: EvaluationReport | None = None) -> None:
    report = report if report is not None else EvaluationReport()
    status = budget_service.budget_status(budget, now=now)
    scope = budget_service.budget_scope_text(budget)
    with transaction.atomic():
        period = _start_period(budget, status.period_start, status.period_end, now=now, report=report)
        BudgetPeriod.objects.filter(pk=period.pk).update(
            spent=status.spent,
            unpriced_attempts=status.unpriced_attempts,
            projected=status.projected,
            projected_exceed_at=status.projected_exceed_at,
            evaluated_at=now,
        )
        target = status.level
        if target != period.level:
            new_state = status.state
            # The claim: only the worker whose UPDATE matches the level it read goes on.
            claimed = BudgetPeriod.objects.filter(pk=period.pk, level=period.level).update(
                level=target, state=new_state
            )
            if claimed:
                rising = target > period.level
                if rising:
                    title = f"Budget {budget.name} ({scope}): {target} % threshold crossed"
                else:
                    title = f"Budget {budget.name} ({scope}): back below {period.level} % ({new_state})"
                    AlertEvent.objects.filter(
                        period=period,
                        kind=AlertEventKind.THRESHOLD,
                        level__gt=target,
                        resolved_at__isnull=True,
                    ).update(resolved_at=now)
                crossed = [t for t in sorted(budget.thresholds) if period.level < t <= target]
                _event(
                    now=now,
                    report=report,
                    emails=budget.emails,
                    webhooks=budget.webhooks,
                    kind=AlertEventKind.THRESHOLD,
                    budget=budget,
                    period=period,
                    team=budget.team,
                    from_state=period.state,
                    to_state=new_state,
                    level=target,
                    firing=rising,
                    title=title,
                    details=_budget_details(budget, status, threshold=target, thresholds_crossed=crossed),
                )
                if status.state == BudgetState.EXCEEDED:  # the overrun supersedes the forecast
                    AlertEvent.objects.filter(
                        period=period, kind=AlertEventKind.FORECAST, resolved_at__isnull=True
                    ).update(resolved_at=now)
        if budget.forecast_alert and status.forecast_exceeds and period.forecast_fired_at is None:
            claimed = BudgetPeriod.objects.filter(pk=period.pk, forecast_fired_at__isnull=True).update(
                forecast_fired_at=now
            )
            if claimed:
                when = timezone.localtime(status.projected_exceed_at).strftime("%Y-%m-%d %H:%M %Z")
                _event(
                    now=now,
                    report=report,
                    emails=budget.emails,
                    webhooks=budget.webhooks,
                    kind=AlertEventKind.FORECAST,
                    budget=budget,
                    period=period,
                    team=budget.team,
                    from_state=period.state,
                    to_state="forecast",
                    level=100,
                    firing=True,
                    title=f"Budget {budget.name} ({scope}): projected to exceed 100 % on {when}",
                    details=_budget_details(budget, status, threshold=100),
                )


# --- Rules -----------------------------------------------------------------------------------------
@dataclass
class Check:
    firing: bool
    value: object  # what was measured (JSON-serialisable)
    summary: str  # one line naming what crossed


def _rule_filters(rule: AlertRule):
    return budget_service.scope_filters(
        team_slug=rule.team.slug if rule.team_id else None, scope=rule.scope or {}
    )


def _window(rule: AlertRule, now: datetime) -> tuple[datetime, datetime]:
    return now - rule.window_hours * HOUR, now


def _totals(rule: AlertRule, start: datetime, end: datetime) -> dict:
    return cost_totals(
        user=budget_service.SYSTEM, query=CostQuery(start, end, (), "total", _rule_filters(rule))
    )


def _plain(value: Decimal) -> str:
    return f"{value.normalize():f}"


def _pct(value) -> Decimal:
    return (Decimal(value) * 100).quantize(Decimal("0.01"))


def _check_cost_per_task_above(rule, now) -> Check:
    totals = _totals(rule, *_window(rule, now))
    value = totals["cost_per_successful_task"]
    firing = value is not None and value > rule.threshold
    shown = "—" if value is None else f"{value:.6f}"
    return Check(firing, _money(value), f"cost per successful task {shown} > {_plain(rule.threshold)}")


def _check_cost_per_task_increase(rule, now) -> Check:
    start, end = _window(rule, now)
    current = _totals(rule, start, end)["cost_per_successful_task"]
    baseline = _totals(rule, start - timedelta(days=7), start)["cost_per_successful_task"]
    if current is None or not baseline:
        return Check(False, None, "no baseline")
    change = (current / baseline - 1) * 100
    return Check(
        change > rule.threshold,
        {
            "current": _money(current),
            "baseline": _money(baseline),
            "change_percent": str(change.quantize(Decimal("0.01"))),
        },
        f"cost per successful task up {change.quantize(Decimal('0.1'))} % on the trailing 7 days "
        f"({current:.6f} vs {baseline:.6f})",
    )


def _check_failure_rate(rule, now) -> Check:
    rate = _totals(rule, *_window(rule, now))["success_rate"]
    if rate is None:
        return Check(False, None, "no tasks")
    failure = _pct(1 - Decimal(rate))
    return Check(
        failure > rule.threshold, str(failure), f"task failure rate {failure} % > {_plain(rule.threshold)} %"
    )


def _check_retry_rate(rule, now) -> Check:
    rate = _totals(rule, *_window(rule, now))["retry_rate"]
    if rate is None:
        return Check(False, None, "no tasks")
    retry = _pct(rate)
    return Check(retry > rule.threshold, str(retry), f"retry rate {retry} % > {_plain(rule.threshold)} %")


def _check_gpu_idle(rule, now) -> Check:
    end = now.replace(minute=0, second=0, microsecond=0)
    start = end - rule.window_hours * HOUR
    rows = pool_cost_rows(
        user=budget_service.SYSTEM, start=start, end=end, granularity="hour", filters=_rule_filters(rule)
    )
    by_pool: dict[str, list] = {}
    for row in rows:
        by_pool.setdefault(row["pool"], []).append(row["mean_utilisation"])
    limit = rule.threshold / 100
    idle = {
        pool: str(_pct(sum(values) / len(values)))
        for pool, values in by_pool.items()
        if len(values) >= rule.window_hours and all(value is not None and value < limit for value in values)
    }
    names = ", ".join(f"{pool} ({mean} %)" for pool, mean in sorted(idle.items()))
    return Check(
        bool(idle),
        idle,
        f"GPU utilisation below {_plain(rule.threshold)} % for {rule.window_hours} h: {names}",
    )


def _check_unpriced(rule, now) -> Check:
    start, end = _window(rule, now)
    rows = cost_rows(
        user=budget_service.SYSTEM,
        query=CostQuery(start, end, ("model", "endpoint"), "total", _rule_filters(rule)),
    )
    unpriced = {
        f"{row['model']} @ {row['endpoint'] or '—'}": row["unpriced_attempts"]
        for row in rows
        if row["unpriced_attempts"]
    }
    total = sum(unpriced.values())
    names = ", ".join(f"{name} ({count})" for name, count in sorted(unpriced.items()))
    return Check(total > rule.threshold, unpriced, f"{total} unpriced attempt(s): {names}")


def _check_ingestion_lag(rule, now) -> Check:
    from ingest.models import Source

    sources = Source.objects.filter(last_success_at__isnull=False)
    names = (rule.scope or {}).get("source")
    if names:
        sources = sources.filter(name__in=names)
    latest = {source.name: source.last_success_at for source in sources}
    if not latest:
        return Check(False, None, "no source has ingested yet")
    newest = max(latest.values())
    minutes = Decimal(int((now - newest).total_seconds()) // 60)
    return Check(
        minutes > rule.threshold,
        {"minutes": int(minutes), "newest": newest.isoformat()},
        f"no usage ingested for {minutes} minutes (limit {_plain(rule.threshold)})",
    )


def _spend(rule, start, end) -> Decimal:
    return _totals(rule, start, end)["total_spend"] or Decimal(0)


def _check_spend_anomaly(rule, now) -> Check:
    end = now.replace(minute=0, second=0, microsecond=0)
    start = end - rule.window_hours * HOUR
    current = _spend(rule, start, end)
    week = timedelta(days=7)
    baselines = [_spend(rule, start - n * week, end - n * week) for n in range(1, 5)]
    with_spend = [value for value in baselines if value > 0]
    if len(with_spend) < 2:
        return Check(False, {"current": str(current)}, "not enough history")
    median = Decimal(statistics.median(baselines))
    mad = Decimal(statistics.median([abs(value - median) for value in baselines]))
    spread = max(Decimal("1.4826") * mad, median / 10)
    limit = (median + rule.threshold * spread).quantize(Decimal(1).scaleb(-12))
    return Check(
        current > limit,
        {"current": str(current), "median": str(median), "limit": str(limit)},
        f"spend {current:.2f} in the last {rule.window_hours} h against a usual {median:.2f} "
        f"(limit {limit:.2f})",
    )


CHECKS = {
    AlertRuleKind.COST_PER_TASK_ABOVE: _check_cost_per_task_above,
    AlertRuleKind.COST_PER_TASK_INCREASE: _check_cost_per_task_increase,
    AlertRuleKind.FAILURE_RATE_ABOVE: _check_failure_rate,
    AlertRuleKind.RETRY_RATE_ABOVE: _check_retry_rate,
    AlertRuleKind.GPU_IDLE: _check_gpu_idle,
    AlertRuleKind.UNPRICED_USAGE: _check_unpriced,
    AlertRuleKind.INGESTION_LAG: _check_ingestion_lag,
    AlertRuleKind.SPEND_ANOMALY: _check_spend_anomaly,
}


def rule_scope_text(rule: AlertRule) -> str:
    return budget_service.describe_scope(
        team_slug=rule.team.slug if rule.team_id else None, scope=rule.scope or {}
    )


def evaluate_rule(rule: AlertRule, *, now: datetime, report: EvaluationReport | None = None) -> None:
    report = report if report is not None else EvaluationReport()
    check = CHECKS[rule.kind](rule, now)
    new_state = AlertRuleState.FIRING if check.firing else AlertRuleState.OK
    scope = rule_scope_text(rule)
    with transaction.atomic():
        AlertRule.objects.filter(pk=rule.pk).update(last_value=check.value, last_evaluated_at=now)
        if new_state == rule.state:
            return
        claimed = AlertRule.objects.filter(pk=rule.pk, state=rule.state).update(
            state=new_state, state_since=now
        )
        if not claimed:
            return
        details = {
            "rule_id": rule.pk,
            "rule": rule.name,
            "kind": rule.kind,
            "scope": scope,
            "threshold": str(rule.threshold),
            "window_hours": rule.window_hours,
            "value": check.value,
            "summary": check.summary,
        }
        if check.firing:
            title = f"Alert {rule.name} ({scope}) firing: {check.summary}"
        else:
            AlertEvent.objects.filter(rule=rule, firing=True, resolved_at__isnull=True).update(
                resolved_at=now
            )
            title = f"Alert {rule.name} ({scope}) resolved"
        _event(
            now=now,
            report=report,
            emails=rule.emails,
            webhooks=rule.webhooks,
            kind=AlertEventKind.RULE,
            rule=rule,
            team=rule.team,
            from_state=rule.state,
            to_state=new_state,
            firing=check.firing,
            title=title[:300],
            details=details,
        )
