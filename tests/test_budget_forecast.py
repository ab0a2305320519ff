"""The forecast (weekday-seasonal run rate) on synthetic spend with a known slope."""

from __future__ import annotations

import math
import statistics
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from costcenter.budgets import budget_status, forecast
from costcenter.models import Budget, Team
from tests.test_budget_world import every_hour, spend

HOUR = timedelta(hours=1)
NOV_1, DEC_1 = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)
NOW = datetime(2026, 11, 10, 12, tzinfo=UTC)  # a Tuesday


def project(hourly, *, now=NOW, start=NOV_1, end=DEC_1, amount="1000", tz="UTC"):
    return forecast(
        hourly={h: v for h, v in hourly.items() if h < now},
        now=now,
        period_start=start,
        period_end=end,
        amount=Decimal(amount),
        time_zone=tz,
    )


def test_a_constant_slope_projects_exactly_and_says_when_it_crosses():
    # $2 an hour since October 13: cumulative spend is a line of slope 2/h.
    fc = project(every_hour(datetime(2026, 10, 13, tzinfo=UTC), NOW, "2"))
    assert fc.level == Decimal(48) and set(fc.factors.values()) == {Decimal(1)}
    assert fc.history_days == 28
    # 9.5 days spent (456) + 12 h today (24) + 20 days (960) = 1,440 = 2 × 720 hours.
    assert fc.projected == Decimal(1440)
    # 1,000 is reached after 500 hours: November 21, 20:00.
    assert fc.exceed_at == datetime(2026, 11, 21, 20, tzinfo=UTC)
    assert fc.low == fc.high == fc.projected  # no scatter, no band
    assert fc.path[0] == (NOW, Decimal(456)) and fc.path[-1] == (DEC_1, Decimal(1440))


def test_a_slope_that_never_reaches_the_amount_has_no_exceed_date():
    fc = project(every_hour(datetime(2026, 10, 13, tzinfo=UTC), NOW, "1"), amount="1000")
    assert fc.projected == Decimal(720) and fc.exceed_at is None


def test_weekday_seasonality_is_projected_per_weekday():
    # $4 an hour on weekdays, $1 an hour at weekends, for five weeks.
    def rate(hour):
        return "1" if hour.weekday() >= 5 else "4"

    fc = project(every_hour(datetime(2026, 10, 5, tzinfo=UTC), NOW, rate))
    weekly_mean = Decimal(5 * 96 + 2 * 24) / 7
    assert fc.level == weekly_mean
    assert abs(fc.factors[0] - Decimal(96) / weekly_mean) < Decimal("1e-20")
    assert abs(fc.factors[6] - Decimal(24) / weekly_mean) < Decimal("1e-20")
    spent = sum(Decimal(24 if d.weekday() >= 5 else 96) for d in _days(date(2026, 11, 1), date(2026, 11, 10)))
    spent += 12 * 4  # Tuesday morning
    rest = 12 * 4 + sum(
        Decimal(24 if d.weekday() >= 5 else 96) for d in _days(date(2026, 11, 11), date(2026, 12, 1))
    )
    assert abs(fc.projected - (spent + rest)) < Decimal("1e-15")
    # A flat run rate would have said spent + 20.5 × 75.43; the weekends make it less.
    flat = spent + Decimal("20.5") * weekly_mean
    assert fc.projected < flat - 10
    assert fc.low == fc.high == fc.projected  # the pattern explains every day exactly


def _days(first: date, stop: date):
    while first < stop:
        yield first
        first += timedelta(days=1)


def test_the_band_is_1_645_sigma_root_remaining_days():
    # Ten days alternating 48 and 72 a day (under 14 days: no weekday factors).
    history = {}
    for n in range(10):
        day = datetime(2026, 10, 31, tzinfo=UTC) + timedelta(days=n)
        history.update(every_hour(day, day + timedelta(days=1), 2 if n % 2 == 0 else 3))
    now = datetime(2026, 11, 10, tzinfo=UTC)
    fc = project(history, now=now)
    daily = [48 if n % 2 == 0 else 72 for n in range(10)]
    level = Decimal(sum(daily[-7:])) / 7
    assert fc.level == level
    sigma = math.sqrt(sum((d - float(level)) ** 2 for d in daily) / 9)
    half = 1.645 * sigma * math.sqrt(21)  # 21 whole days left
    assert float(fc.high - fc.projected) == pytest.approx(half, rel=1e-9)
    assert float(fc.projected - fc.low) == pytest.approx(half, rel=1e-9)
    assert statistics.mean(daily) == 60


def test_without_a_complete_day_it_uses_todays_run_rate_and_without_spend_nothing():
    today = every_hour(datetime(2026, 11, 10, 6, tzinfo=UTC), NOW, "3")  # started at 06:00
    fc = project(today)
    # 18 spent in 12 h today: 36 a day expected; 12 h left today + 20 days.
    assert fc.level == Decimal(36) and fc.history_days == 0
    assert fc.projected == Decimal(18) + Decimal(18) + 20 * Decimal(36)
    assert fc.low is None and fc.high is None
    assert project({}) is None


def test_days_and_periods_are_local_to_the_budget_time_zone():
    # $1 an hour since the clocks went back; a Berlin month starts at 23:00 UTC the day before.
    hourly = every_hour(datetime(2026, 10, 25, 23, tzinfo=UTC), NOW, "1")
    start, end = datetime(2026, 10, 31, 23, tzinfo=UTC), datetime(2026, 11, 30, 23, tzinfo=UTC)
    fc = project(hourly, start=start, end=end, tz="Europe/Berlin")
    assert fc.projected == Decimal(720)  # 30 days × 24 h, whatever the zone


@pytest.mark.django_db
def test_budget_status_reads_the_selectors_and_forecasts(people):
    budget = Budget.objects.create(
        name="b", team=Team.objects.get(slug="netops"), amount=Decimal("1000"), signing_secret="x"
    )
    spend(every_hour(datetime(2026, 10, 13, tzinfo=UTC), NOW, "2"))
    spend(every_hour(datetime(2026, 10, 13, tzinfo=UTC), NOW, "5"), team="support")  # not in scope
    status = budget_status(budget, now=NOW)
    assert (status.spent, status.remaining, status.percent) == (Decimal(456), Decimal(544), Decimal("45.6"))
    assert (status.state, status.level) == ("ok", 0)
    assert status.projected == Decimal(1440) and status.forecast_exceeds
    assert status.projected_exceed_at == datetime(2026, 11, 21, 20, tzinfo=UTC)
