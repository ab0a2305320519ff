"""Budgets: periods in a time zone, status (spent, remaining, percent, state) and the forecast.

Spend is read only through ``costcenter.selectors`` (``cost_totals``, ``cost_rows``,
``pool_cost_rows``), so a budget shows the same number as the Explorer and the costs API for
the same scope and range. Periods are half-open ``[start, end)``, computed in the budget's time
zone and stored in UTC.

Forecast method (weekday-seasonal run rate), in the budget's time zone:

1. history = the complete local days of the last 28 before today (from the first day with spend);
2. level = mean daily spend of the last 7 of those days (fewer when there is less history);
3. with at least 14 days of history, each weekday gets a factor = its mean spend over the whole
   weeks of history / the mean daily spend of those weeks (so weekends can be cheaper);
   otherwise every factor is 1;
4. expected spend of a future local day = level × factor of its weekday, spread evenly over its
   hours; today contributes the expected spend of its remaining hours;
5. projected = spent so far + expected spend until the period ends; the projected exceed date is
   where the cumulative expected spend first reaches the amount (linear within a day);
6. band = projected ± 1.645 × σ × √(remaining days), σ = standard deviation of the history
   days' spend around level × factor (a ~90 % band if daily errors are independent).

With no complete day of history the run rate of today so far is used (no band).
"""

from __future__ import annotations

import math
import secrets
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

from costcenter.models import SCOPE_DIMENSIONS, Budget, BudgetPeriodKind, BudgetState
from costcenter.selectors import CostQuery, cost_rows, cost_totals, pool_cost_rows

HOUR = timedelta(hours=1)
HISTORY_DAYS = 28
BAND_Z = Decimal("1.645")
USAGE_DIMENSIONS = {"team", "model", "workload", "endpoint"}


class _System:
    """The evaluator's principal: sees every team, as an org admin would (selectors scope by user)."""

    is_authenticated = True
    is_superuser = True
    is_staff = False
    pk = None
    id = None


SYSTEM = _System()


def new_signing_secret() -> str:
    return secrets.token_hex(32)


# --- Periods ------------------------------------------------------------------------------------
def _local_midnight(day: date, zone: ZoneInfo) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=zone).astimezone(UTC)


def period_bounds(kind: str, time_zone: str, at: datetime) -> tuple[datetime, datetime]:
    """The period of ``kind`` containing ``at``, as UTC [start, end), boundaries at local midnight."""
    zone = ZoneInfo(time_zone)
    today = at.astimezone(zone).date()
    if kind == BudgetPeriodKind.DAY:
        first, following = today, today + timedelta(days=1)
    elif kind == BudgetPeriodKind.WEEK:
        first = today - timedelta(days=today.weekday())
        following = first + timedelta(days=7)
    elif kind == BudgetPeriodKind.MONTH:
        first = today.replace(day=1)
        following = (first + timedelta(days=32)).replace(day=1)
    elif kind == BudgetPeriodKind.QUARTER:
        first = today.replace(month=(today.month - 1) // 3 * 3 + 1, day=1)
        following = (first + timedelta(days=95)).replace(day=1)
    else:
        raise ValueError(f"unknown budget period {kind!r}")
    return _local_midnight(first, zone), _local_midnight(following, zone)


# --- Scope --------------------------------------------------------------------------------------
def scope_filters(*, team_slug: str | None, scope: dict) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The selectors' filters for a budget's or rule's scope."""
    filters = []
    if team_slug:
        filters.append(("team", (team_slug,)))
    for dimension in SCOPE_DIMENSIONS:
        values = scope.get(dimension) or []
        if values:
            filters.append((dimension, tuple(str(value) for value in values)))
    return tuple(filters)


def budget_filters(budget: Budget):
    return scope_filters(team_slug=budget.team.slug if budget.team_id else None, scope=budget.scope or {})


def includes_unallocated(filters) -> bool:
    """Unallocated pool cost belongs to no team: only budgets not narrowed to usage carry it
    (the same rule as ``selectors.cost_totals``)."""
    return not any(dimension in USAGE_DIMENSIONS for dimension, _ in filters)


def describe_scope(*, team_slug: str | None, scope: dict) -> str:
    """``team netops · model gpt-4o-mini`` or ``all teams``: what subjects and pages name."""
    parts = [f"team {team_slug}"] if team_slug else ["all teams"]
    for dimension in SCOPE_DIMENSIONS:
        values = scope.get(dimension) or []
        if values:
            parts.append(f"{dimension} {', '.join(map(str, values))}")
    return " · ".join(parts)


def budget_scope_text(budget: Budget) -> str:
    return describe_scope(team_slug=budget.team.slug if budget.team_id else None, scope=budget.scope or {})


# --- Spend --------------------------------------------------------------------------------------
def hourly_spend(*, filters, start: datetime, end: datetime) -> dict[datetime, Decimal]:
    """Spend per UTC hour in [start, end) for a scope (known cost, plus unallocated pool cost
    when the scope is not narrowed to usage). Hours without rows are absent (zero)."""
    spend: dict[datetime, Decimal] = defaultdict(Decimal)
    query = CostQuery(start, end, (), "hour", filters)
    for row in cost_rows(user=SYSTEM, query=query):
        if row["cost"] is not None:
            spend[row["period"]] += row["cost"]
    if includes_unallocated(filters):
        for row in pool_cost_rows(user=SYSTEM, start=start, end=end, granularity="hour", filters=filters):
            if row["unallocated_cost"] is not None:
                spend[row["period"]] += row["unallocated_cost"]
    return dict(spend)


# --- Forecast -----------------------------------------------------------------------------------
@dataclass
class Forecast:
    projected: Decimal
    low: Decimal | None
    high: Decimal | None
    exceed_at: datetime | None  # when the projection reaches the amount (None: not in this period)
    level: Decimal  # expected spend of an average day
    factors: dict[int, Decimal]  # weekday (0 = Monday) → factor
    history_days: int
    # (UTC moment, cumulative projected spend) from now to the period end, for the chart.
    path: list[tuple[datetime, Decimal]] = field(default_factory=list)
    band_path: list[tuple[datetime, Decimal, Decimal]] = field(default_factory=list)


def _seconds(span: timedelta) -> Decimal:
    return Decimal(span.days * 86400 + span.seconds) + Decimal(span.microseconds) / 1_000_000


def _daily_totals(hourly: dict[datetime, Decimal], zone: ZoneInfo) -> dict[date, Decimal]:
    days: dict[date, Decimal] = defaultdict(Decimal)
    for hour, amount in hourly.items():
        days[hour.astimezone(zone).date()] += amount
    return days


def forecast(
    *,
    hourly: dict[datetime, Decimal],
    now: datetime,
    period_start: datetime,
    period_end: datetime,
    amount: Decimal,
    time_zone: str = "UTC",
) -> Forecast | None:
    """Project the period's spend from ``hourly`` spend (history before now; see the module doc).

    Returns None when there is no spend at all to project from.
    """
    zone = ZoneInfo(time_zone)
    today = now.astimezone(zone).date()
    today_start = _local_midnight(today, zone)
    daily = _daily_totals(hourly, zone)
    spent = sum((value for hour, value in hourly.items() if period_start <= hour < now), Decimal(0))
    if not hourly:
        return None
    first_hour = min(hourly)
    first_day = first_hour.astimezone(zone).date()
    if _local_midnight(first_day, zone) != first_hour:
        first_day += timedelta(days=1)  # a partial first day would understate the level
    history = [
        today - timedelta(days=back)
        for back in range(HISTORY_DAYS, 0, -1)
        if today - timedelta(days=back) >= first_day
    ]
    factors = {weekday: Decimal(1) for weekday in range(7)}
    sigma: Decimal | None = None
    if history:
        recent = history[-7:]
        level = sum((daily.get(day, Decimal(0)) for day in recent), Decimal(0)) / len(recent)
        if len(history) >= 14:
            weeks = history[-(len(history) // 7) * 7 :]
            overall = sum((daily.get(day, Decimal(0)) for day in weeks), Decimal(0)) / len(weeks)
            if overall > 0:
                for weekday in range(7):
                    same = [daily.get(day, Decimal(0)) for day in weeks if day.weekday() == weekday]
                    factors[weekday] = (sum(same, Decimal(0)) / len(same)) / overall
        if len(history) >= 2:
            residuals = [daily.get(day, Decimal(0)) - level * factors[day.weekday()] for day in history]
            sigma = Decimal(math.sqrt(sum(float(r) ** 2 for r in residuals) / (len(residuals) - 1)))
    else:
        elapsed = (now - today_start) / HOUR
        if elapsed < 1:
            return None
        so_far = sum((value for hour, value in hourly.items() if today_start <= hour < now), Decimal(0))
        hours_today = _local_midnight(today + timedelta(days=1), zone) - today_start
        level = so_far / _seconds(now - today_start) * _seconds(hours_today)

    # Walk the rest of the period a local day at a time: (segment start, end, expected spend).
    segments = []
    day, cursor = today, now
    while cursor < period_end:
        day_start, day_end = _local_midnight(day, zone), _local_midnight(day + timedelta(days=1), zone)
        end = min(day_end, period_end)
        if end > cursor:
            fraction = _seconds(end - cursor) / _seconds(day_end - day_start)
            segments.append((cursor, end, level * factors[day.weekday()] * fraction))
        cursor, day = end, day + timedelta(days=1)

    cumulative, exceed_at, path, band_path = spent, None, [(now, spent)], [(now, spent, spent)]
    remaining_days = Decimal(0)
    for seg_start, seg_end, expected in segments:
        if exceed_at is None and spent < amount and cumulative + expected >= amount and expected > 0:
            share = (amount - cumulative) / expected
            exceed_at = seg_start + (seg_end - seg_start) * float(share)
        cumulative += expected
        remaining_days += _seconds(seg_end - seg_start) / 86400
        path.append((seg_end, cumulative))
        if sigma is not None:
            half = BAND_Z * sigma * remaining_days.sqrt()
            band_path.append((seg_end, max(spent, cumulative - half), cumulative + half))
    low = high = None
    if sigma is not None:
        half = BAND_Z * sigma * remaining_days.sqrt()
        low, high = max(spent, cumulative - half), cumulative + half
    return Forecast(
        projected=cumulative,
        low=low,
        high=high,
        exceed_at=exceed_at,
        level=level,
        factors=factors,
        history_days=len(history),
        path=path,
        band_path=band_path if sigma is not None else [],
    )


# --- Status -------------------------------------------------------------------------------------
@dataclass
class BudgetStatus:
    budget_id: int
    period_start: datetime
    period_end: datetime
    amount: Decimal
    spent: Decimal
    remaining: Decimal
    percent: Decimal
    state: str
    level: int  # highest threshold reached by the spend
    unpriced_attempts: int
    unpriced_tokens: int
    cost_complete: bool
    forecast: Forecast | None
    as_of: datetime

    @property
    def projected(self) -> Decimal | None:
        return self.forecast.projected if self.forecast else None

    @property
    def projected_exceed_at(self) -> datetime | None:
        return self.forecast.exceed_at if self.forecast else None

    @property
    def forecast_exceeds(self) -> bool:
        """The projection says the amount will be exceeded before the period ends."""
        return (
            self.forecast is not None
            and self.spent < self.amount
            and self.forecast.exceed_at is not None
            and self.forecast.exceed_at < self.period_end
        )


def state_for(percent: Decimal, thresholds: list[int]) -> str:
    if percent >= 100:
        return BudgetState.EXCEEDED
    if thresholds and percent >= min(thresholds):
        return BudgetState.WARNING
    return BudgetState.OK


def level_for(percent: Decimal, thresholds: list[int]) -> int:
    return max((threshold for threshold in thresholds if percent >= threshold), default=0)


def budget_status(budget: Budget, *, now: datetime, with_forecast: bool = True) -> BudgetStatus:
    """Spent, remaining, percent, state and forecast of the budget's current period at ``now``.

    Unpriced usage in the scope is counted (``unpriced_attempts``) and makes the spend a lower
    bound (``cost_complete`` false): an unpriced model is never silently free.
    """
    start, end = period_bounds(budget.period, budget.time_zone, now)
    filters = budget_filters(budget)
    totals = cost_totals(user=SYSTEM, query=CostQuery(start, end, (), "total", filters))
    spent = totals["total_spend"] or Decimal(0)
    amount = budget.amount
    percent = spent / amount * 100
    fc = None
    if with_forecast:
        history_start = min(start, now - timedelta(days=HISTORY_DAYS + 1))
        hourly = hourly_spend(filters=filters, start=history_start, end=end)
        fc = forecast(
            hourly={hour: value for hour, value in hourly.items() if hour < now},
            now=now,
            period_start=start,
            period_end=end,
            amount=amount,
            time_zone=budget.time_zone,
        )
    return BudgetStatus(
        budget_id=budget.pk,
        period_start=start,
        period_end=end,
        amount=amount,
        spent=spent,
        remaining=amount - spent,
        percent=percent,
        state=state_for(percent, budget.thresholds),
        level=level_for(percent, budget.thresholds),
        unpriced_attempts=totals["unpriced_attempts"] or 0,
        unpriced_tokens=totals["unpriced_tokens"] or 0,
        cost_complete=(totals["unpriced_attempts"] or 0) == 0,
        forecast=fc,
        as_of=now,
    )


def burn_series(
    budget: Budget, *, start: datetime, end: datetime, now: datetime
) -> list[tuple[datetime, Decimal]]:
    """Cumulative spend per hour of a period up to ``now`` (the burn-down chart)."""
    hourly = hourly_spend(filters=budget_filters(budget), start=start, end=min(end, now + HOUR))
    points, total, moment = [(start, Decimal(0))], Decimal(0), start
    while moment < min(end, now):
        total += hourly.get(moment, Decimal(0))
        moment += HOUR
        points.append((min(moment, now), total))
    return points


def period_spend(budget: Budget, *, start: datetime, end: datetime) -> dict:
    """Totals of a (past) period for the history table."""
    return cost_totals(user=SYSTEM, query=CostQuery(start, end, (), "total", budget_filters(budget)))


# --- Validation shared by the form, the API and the catalog -------------------------------------------
def clean_thresholds(values) -> list[int]:
    if values is None or values == []:
        return [50, 80, 100]
    if not isinstance(values, list | tuple):
        raise ValueError("must be a list of percentages")
    out = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).strip().isdigit():
            raise ValueError(f"{value!r} is not a whole percentage")
        number = int(str(value).strip())
        if not 1 <= number <= 1000:
            raise ValueError(f"{number} must be between 1 and 1000")
        out.append(number)
    if len(set(out)) != len(out):
        raise ValueError("a threshold appears twice")
    return sorted(out)


def clean_time_zone(name) -> str:
    from zoneinfo import available_timezones

    if not isinstance(name, str) or name not in available_timezones():
        raise ValueError(f"unknown time zone {name!r}")
    return name


def clean_emails(values) -> list[str]:
    from django.core.exceptions import ValidationError
    from django.core.validators import validate_email

    if values is None:
        return []
    if not isinstance(values, list | tuple):
        raise ValueError("must be a list of e-mail addresses")
    out = []
    for value in values:
        try:
            validate_email(value)
        except (ValidationError, TypeError):
            raise ValueError(f"{value!r} is not an e-mail address") from None
        out.append(value.strip())
    return list(dict.fromkeys(out))


def clean_webhooks(values) -> list[dict]:
    """``[URL | {url: URL, format: json|slack}]`` → ``[{"url", "format"}]``."""
    from urllib.parse import urlsplit

    if values is None:
        return []
    if not isinstance(values, list | tuple):
        raise ValueError("must be a list of URLs")
    out = []
    for value in values:
        if isinstance(value, str):
            value = {"url": value, "format": "json"}
        if not isinstance(value, dict) or set(value) - {"url", "format"} or "url" not in value:
            raise ValueError("each webhook is a URL or {url: URL, format: json|slack}")
        url, fmt = str(value["url"]).strip(), value.get("format") or "json"
        try:
            parts = urlsplit(url)
            scheme, hostname = parts.scheme, parts.hostname
        except ValueError:
            scheme = hostname = None
        if scheme not in ("http", "https") or not hostname or len(url) > 2000 or not url.isprintable():
            raise ValueError(f"{url!r} is not an http(s) URL")
        if fmt not in ("json", "slack"):
            raise ValueError(f"format {fmt!r}: must be json or slack")
        out.append({"url": url, "format": fmt})
    return out


def clean_scope(scope, *, extra: tuple[str, ...] = ()) -> dict:
    """``{dimension: value or [values]}`` → ``{dimension: [values]}`` for SCOPE_DIMENSIONS."""
    if scope is None:
        return {}
    if not isinstance(scope, dict):
        raise ValueError("must map dimensions to values")
    out = {}
    for dimension, values in scope.items():
        if dimension not in SCOPE_DIMENSIONS + extra:
            raise ValueError(
                f"unknown dimension {dimension!r} (expected one of: {', '.join(SCOPE_DIMENSIONS + extra)})"
            )
        if isinstance(values, str | int) and not isinstance(values, bool):
            values = [values]
        if not isinstance(values, list | tuple) or not all(isinstance(v, str | int) for v in values):
            raise ValueError(f"{dimension}: must be a value or a list of values")
        cleaned = [str(value).strip() for value in values if str(value).strip()]
        if any("\x00" in value or len(value) > 200 for value in cleaned):
            raise ValueError(f"{dimension}: values are names of at most 200 characters")
        if cleaned:
            out[dimension] = cleaned
    return out


# --- Who may see and manage budgets, rules and alerts ----------------------------------------------
def visible_owned(user, queryset):
    """Rows owned by a team (``team``) the user sees; org-wide rows (no team) only for org-wide viewers."""
    from costcenter.access import sees_all_teams, visible_teams

    if sees_all_teams(user):
        return queryset
    return queryset.filter(team__in=visible_teams(user))


def can_manage(user, team) -> bool:
    """Team editors and admins manage their team's budgets and rules; org admins manage all,
    including org-wide ones (no team)."""
    from costcenter.access import org_role, team_role
    from costcenter.models import OrgRole, TeamRole

    if team is None:
        return org_role(user) == OrgRole.ADMIN
    return team_role(user, team) in {TeamRole.EDITOR, TeamRole.ADMIN}


def manageable_teams(user):
    from costcenter.access import org_role
    from costcenter.models import OrgRole, Team, TeamRole

    if org_role(user) == OrgRole.ADMIN:
        return Team.objects.all()
    return Team.objects.filter(
        memberships__user=user, memberships__role__in=[TeamRole.EDITOR, TeamRole.ADMIN]
    ).distinct()


def can_acknowledge(user, event) -> bool:
    """A member of the event's team (any role), or an org admin."""
    from costcenter.access import org_role
    from costcenter.models import Membership, OrgRole

    if org_role(user) == OrgRole.ADMIN:
        return True
    return event.team_id is not None and Membership.objects.filter(user=user, team_id=event.team_id).exists()
