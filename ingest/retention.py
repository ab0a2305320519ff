"""What raw-attempt retention keeps right now, for the ingestion health page.

The policy itself lives in ``ingest.partitions.drop_expired_partitions`` (run daily by beat): a
monthly partition of ``ingest_attempt`` is dropped once it ended more than
``RAW_RETENTION_MONTHS`` months ago, the current month counting as one. Rollups are never
dropped, so costs outlive the raw attempts they came from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import connection

from costcenter.models import DailyUsage
from ingest.partitions import month_start

# ingest.partitions.partition_name's pattern; any other child table is not a month of ours.
_MONTH_PARTITION = re.compile(r"^ingest_attempt_y(\d{4})m(\d{2})$")


def months_after(start: datetime, months: int) -> datetime:
    """The first day of the month ``months`` after ``start``'s month (UTC)."""
    year, month = divmod(start.year * 12 + start.month - 1 + months, 12)
    return datetime(year, month + 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class RetentionStatus:
    keep_months: int
    partitions: int  # monthly partitions of raw attempts, including months created ahead
    raw_bytes: int  # on disk: heap, indexes and TOAST of every partition
    oldest_raw_month: datetime | None  # first day of the oldest month whose partition exists
    next_drop: datetime | None  # the day the oldest month's partition is due to be dropped
    oldest_rollup_day: datetime | None  # the oldest day with costs (daily rollups)
    now: datetime

    @property
    def drop_overdue(self) -> bool:
        """Due already: the daily task drops it at its next run (or beat is not running)."""
        return self.next_drop is not None and self.next_drop <= self.now

    @property
    def costs_without_raw(self) -> bool:
        """Costs exist for days whose raw attempts are gone: no drill-down there."""
        if self.oldest_rollup_day is None:
            return False
        return self.oldest_raw_month is None or self.oldest_rollup_day < self.oldest_raw_month


def retention_status(*, now: datetime, keep_months: int) -> RetentionStatus:
    """One query: the partitions with their sizes and the oldest daily rollup.

    The oldest month stored is the oldest partition: partitions are only created for months that
    receive rows (or ahead of the current month), so an old partition always held attempts.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT (SELECT min(day) FROM {DailyUsage._meta.db_table}), "  # noqa: S608 - a model's table name
            "(SELECT json_agg(json_build_array(c.relname, pg_total_relation_size(c.oid))) "
            "FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'ingest_attempt'::regclass)"
        )
        oldest_day, partitions = cursor.fetchone()
    months: list[datetime] = []
    total = 0
    for name, size in partitions or []:
        match = _MONTH_PARTITION.match(name)
        if match is None:
            continue
        months.append(datetime(int(match[1]), int(match[2]), 1, tzinfo=UTC))
        total += int(size)
    oldest = min(months) if months else None
    return RetentionStatus(
        keep_months=keep_months,
        partitions=len(months),
        raw_bytes=total,
        oldest_raw_month=oldest,
        # drop_expired_partitions drops month M once month_start(now) >= M + keep_months.
        next_drop=months_after(month_start(oldest), keep_months) if oldest else None,
        oldest_rollup_day=oldest_day.astimezone(UTC) if oldest_day else None,
        now=now,
    )
