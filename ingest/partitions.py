"""Monthly partitions of ``ingest_attempt``: created on demand for the months a batch touches,
and ahead of time by a daily beat task so the first write of a month never waits on DDL."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from django.db import connection, transaction

# Any constant works; it only has to be the same in every process that creates partitions.
_PARTITION_LOCK = 7_301_001
_known: set[str] = set()


def month_start(moment: datetime) -> datetime:
    moment = moment.astimezone(UTC)
    return datetime(moment.year, moment.month, 1, tzinfo=UTC)


def next_month(start: datetime) -> datetime:
    return datetime(start.year + start.month // 12, start.month % 12 + 1, 1, tzinfo=UTC)


def partition_name(start: datetime) -> str:
    return f"ingest_attempt_y{start.year:04d}m{start.month:02d}"


def ensure_partitions(months: Iterable[datetime]) -> list[str]:
    """Create the partitions holding these moments' months if missing; returns those created."""
    wanted = {month_start(moment) for moment in months}
    missing = [start for start in sorted(wanted) if partition_name(start) not in _known]
    created: list[str] = []
    if not missing:
        return created
    with transaction.atomic(), connection.cursor() as cursor:
        # Serialise concurrent creators: CREATE TABLE IF NOT EXISTS alone can still race.
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_PARTITION_LOCK])
        for start in missing:
            name = partition_name(start)
            cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
            if not cursor.fetchone()[0]:
                cursor.execute(
                    f"CREATE TABLE {name} PARTITION OF ingest_attempt FOR VALUES FROM (%s) TO (%s)",  # noqa: S608
                    [start, next_month(start)],
                )
                created.append(name)
    # Remember only after commit: a rolled-back creation must be retried next time.
    transaction.on_commit(lambda: _known.update(partition_name(start) for start in missing))
    return created


def ensure_partitions_ahead(*, now: datetime, months_ahead: int = 2) -> list[str]:
    start = month_start(now)
    months = [start]
    for _ in range(months_ahead):
        months.append(next_month(months[-1]))
    return ensure_partitions(months)


def forget_known_partitions() -> None:
    """For tests that drop partitions behind this module's back."""
    _known.clear()


def months_before(start: datetime, months: int) -> datetime:
    year, month = divmod(start.year * 12 + start.month - 1 - months, 12)
    return datetime(year, month + 1, 1, tzinfo=UTC)


def drop_expired_partitions(*, now: datetime, keep_months: int) -> list[str]:
    """Drop the monthly partitions of raw attempts that ended more than ``keep_months`` ago.

    Dropping a whole partition is instant and leaves no bloat, unlike deleting rows. Costed
    rollups (hourly, daily, pool-hours) are kept, so history stays on every page; only drill-down
    to single attempts of those months goes. The current month counts as one of the months kept.
    """
    cutoff = months_before(month_start(now), keep_months - 1)
    dropped: list[str] = []
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_PARTITION_LOCK])
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'ingest_attempt'::regclass ORDER BY c.relname"
        )
        for (name,) in cursor.fetchall():
            try:
                start = datetime(int(name[-7:-3]), int(name[-2:]), 1, tzinfo=UTC)
            except ValueError:
                continue  # not one of ours
            if next_month(start) <= cutoff:
                cursor.execute(f"DROP TABLE {name}")  # noqa: S608 - a name read from the catalog
                dropped.append(name)
    transaction.on_commit(lambda: _known.difference_update(dropped))
    return dropped
