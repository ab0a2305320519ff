"""Report periods in the recipient's time zone, and when each report is due.

A week runs from Monday 00:00 to the next Monday 00:00 *local* time, a month from the 1st
00:00 to the next 1st 00:00, both converted to UTC. Across a DST change a week is 167 or 169
hours long, so the comparison period is the previous local week, never "the same length before".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

WEEKLY, MONTHLY = "weekly", "monthly"


@dataclass(frozen=True)
class ReportPeriod:
    frequency: str
    time_zone: str
    first_day: date  # local, inclusive
    next_first_day: date  # local, exclusive

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.time_zone)

    @property
    def start(self) -> datetime:
        return local_midnight(self.first_day, self.zone)

    @property
    def end(self) -> datetime:
        return local_midnight(self.next_first_day, self.zone)

    @property
    def last_day(self) -> date:
        return self.next_first_day - timedelta(days=1)

    @property
    def days(self) -> list[date]:
        return [
            self.first_day + timedelta(days=n) for n in range((self.next_first_day - self.first_day).days)
        ]

    @property
    def label(self) -> str:
        if self.frequency == MONTHLY:
            return f"{self.first_day:%B %Y}"
        return f"{self.first_day:%d %b} – {self.last_day:%d %b %Y}"

    @property
    def noun(self) -> str:
        return "month" if self.frequency == MONTHLY else "week"

    def previous(self) -> ReportPeriod:
        return period_starting(self.frequency, self.time_zone, _step(self.frequency, self.first_day, -1))

    def following(self) -> ReportPeriod:
        return period_starting(self.frequency, self.time_zone, self.next_first_day)


def local_midnight(day: date, zone: ZoneInfo) -> datetime:
    """Midnight of ``day`` in ``zone``, as UTC (a midnight skipped by DST resolves forwards)."""
    return datetime.combine(day, time(0), tzinfo=zone).astimezone(UTC)


def _step(frequency: str, first_day: date, count: int) -> date:
    if frequency == WEEKLY:
        return first_day + timedelta(weeks=count)
    months = first_day.year * 12 + first_day.month - 1 + count
    return date(months // 12, months % 12 + 1, 1)


def period_starting(frequency: str, time_zone: str, first_day: date) -> ReportPeriod:
    return ReportPeriod(frequency, time_zone, first_day, _step(frequency, first_day, 1))


def period_containing(frequency: str, time_zone: str, at: datetime) -> ReportPeriod:
    """The (running) period that contains the moment ``at``."""
    today = at.astimezone(ZoneInfo(time_zone)).date()
    if frequency == WEEKLY:
        first = today - timedelta(days=today.weekday())
    elif frequency == MONTHLY:
        first = today.replace(day=1)
    else:
        raise ValueError(f"unknown frequency {frequency!r}")
    return period_starting(frequency, time_zone, first)


def last_complete(frequency: str, time_zone: str, at: datetime) -> ReportPeriod:
    """The latest period that has ended by ``at``."""
    return period_containing(frequency, time_zone, at).previous()


def due_at(period: ReportPeriod, *, send_weekday: int = 0, send_hour: int = 9) -> datetime:
    """When the report of ``period`` goes out: weekly on the first ``send_weekday`` on or after the
    period's end, monthly on the 1st after it, at ``send_hour`` local time (UTC returned)."""
    day = period.next_first_day
    if period.frequency == WEEKLY:
        day += timedelta(days=(send_weekday - day.weekday()) % 7)
    return datetime.combine(day, time(send_hour), tzinfo=period.zone).astimezone(UTC)


def latest_due(
    frequency: str, time_zone: str, at: datetime, *, send_weekday: int = 0, send_hour: int = 9
) -> tuple[ReportPeriod, datetime]:
    """The latest period whose report is due at ``at``, and its due time.

    The send time falls less than a period after the period ends, so it is either the last
    complete period or, before its send time, the one before.
    """
    period = last_complete(frequency, time_zone, at)
    due = due_at(period, send_weekday=send_weekday, send_hour=send_hour)
    if due > at:
        period = period.previous()
        due = due_at(period, send_weekday=send_weekday, send_hour=send_hour)
    return period, due
