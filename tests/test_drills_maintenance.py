"""Fault drill: partition maintenance meets a long transaction on the raw table.

``ingest.create_partitions_ahead`` creates and drops partitions of ``ingest_attempt``, which needs
a lock on the whole table. Queued behind a long transaction it would make every ingest batch
queue behind *it*; instead it gives up after its lock_timeout with a clear error, and the next
run (the task is daily) does the work once the table is free.
"""

from __future__ import annotations

import psycopg
import pytest
from django.db import OperationalError, connection
from django.utils import timezone

from ingest import tasks
from ingest.partitions import (
    ensure_partitions_ahead,
    forget_known_partitions,
    month_start,
    next_month,
    partition_name,
)
from tests.ingest_helpers import subprocess_database_url

pytestmark = [pytest.mark.drill, pytest.mark.django_db(transaction=True)]


def table_exists(name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
        return cursor.fetchone()[0]


def test_partition_maintenance_gives_up_behind_a_long_transaction_then_succeeds(monkeypatch):
    monkeypatch.setattr(tasks, "MAINTENANCE_LOCK_TIMEOUT", "300ms")
    ensure_partitions_ahead(now=timezone.now())
    furthest = partition_name(next_month(next_month(month_start(timezone.now()))))
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE {furthest}")  # noqa: S608 - our own partition name
    forget_known_partitions()

    # Another session holds what an ingest batch holds on the raw table, and does not commit.
    with psycopg.connect(subprocess_database_url().replace("postgres://", "postgresql://", 1)) as blocker:
        blocker.execute("LOCK TABLE ingest_attempt IN ROW EXCLUSIVE MODE")
        with pytest.raises(OperationalError, match="lock timeout"):
            tasks.create_partitions_ahead()
        assert not table_exists(furthest)
        blocker.rollback()

    assert furthest in tasks.create_partitions_ahead()
    assert table_exists(furthest)
    with connection.cursor() as cursor:  # the timeouts were local to the task's transaction
        cursor.execute("SHOW lock_timeout")
        assert cursor.fetchone()[0] == "0"
