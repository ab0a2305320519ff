"""Directory sources on the beat schedule, the per-file lock, partitions made ahead of time."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime

import psycopg
import pytest
from django.db import connection

from costcenter.pg import hash64
from ingest.models import Attempt, Source, SourceKind
from ingest.partitions import ensure_partitions_ahead
from ingest.services import file_lock, files_to_ingest, ingest_path, source_for
from ingest.tasks import ingest_usage_file
from tests.ingest_helpers import canonical, write_jsonl

pytestmark = pytest.mark.django_db


def settled(path):
    past = time.time() - 600
    os.utime(path, (past, past))
    return path


def test_a_directory_source_picks_up_new_and_grown_files_once_they_settle(tmp_path):
    source = Source.objects.create(name="logs", kind=SourceKind.DIRECTORY, path=str(tmp_path))
    first = settled(write_jsonl(tmp_path / "a.jsonl", [canonical(i) for i in range(5)]))
    fresh = write_jsonl(tmp_path / "b.jsonl", [canonical(i) for i in range(5, 8)])  # still being written
    (tmp_path / ".hidden.jsonl").write_text("")
    assert files_to_ingest(source) == [first]

    assert ingest_usage_file(source.pk, str(first)) == {"accepted": 5, "duplicate": 0, "rejected": 0}
    settled(fresh)
    assert files_to_ingest(source) == [fresh]
    ingest_usage_file(source.pk, str(fresh))
    assert files_to_ingest(source) == []

    settled(write_jsonl(first, [canonical(i) for i in range(5)] + [canonical(20)]))  # grown
    assert files_to_ingest(source) == [first]
    assert ingest_usage_file(source.pk, str(first))["accepted"] == 1
    assert Attempt.objects.count() == 9


def test_the_source_options_give_file_level_defaults(tmp_path):
    source = Source.objects.create(
        name="team-logs", kind=SourceKind.DIRECTORY, path=str(tmp_path), options={"team": "research"}
    )
    path = settled(write_jsonl(tmp_path / "x.jsonl", [canonical(0, team=None), canonical(1)]))
    ingest_usage_file(source.pk, str(path))
    teams = sorted(Attempt.objects.values_list("team_id", flat=True))
    from costcenter.models import Team

    assert teams == sorted([Team.objects.get(slug="research").pk, Team.objects.get(slug="support").pk])


@pytest.mark.django_db(transaction=True)
def test_a_file_being_ingested_elsewhere_is_skipped(tmp_path):
    source = source_for("files")
    path = write_jsonl(tmp_path / "busy.jsonl", [canonical(0)])
    params = connection.get_connection_params()
    wanted = {"host", "port", "user", "password", "dbname"}
    other = psycopg.connect(**{k: v for k, v in params.items() if k in wanted}, autocommit=True)
    key = hash64(f"ingest-file:{source.pk}:{path}")
    try:
        other.execute("SELECT pg_advisory_lock(%s)", [key])  # another process is reading the file
        result = ingest_path(path, source=source)
        assert result.busy_files == 1 and Attempt.objects.count() == 0
    finally:
        other.execute("SELECT pg_advisory_unlock(%s)", [key])
        other.close()
    assert ingest_path(path, source=source).accepted == 1
    with file_lock(source, path) as acquired:
        assert acquired  # released after the run


def test_partitions_are_created_ahead(db):
    created = ensure_partitions_ahead(now=datetime(2031, 12, 15, tzinfo=UTC), months_ahead=2)
    assert created == ["ingest_attempt_y2031m12", "ingest_attempt_y2032m01", "ingest_attempt_y2032m02"]
    assert ensure_partitions_ahead(now=datetime(2031, 12, 20, tzinfo=UTC), months_ahead=2) == []


@pytest.mark.django_db(transaction=True)
def test_a_failed_background_commit_stops_the_run_and_keeps_what_was_committed(
    tmp_path, monkeypatch, settings
):
    from ingest import services
    from ingest.models import FileCheckpoint

    settings.INGEST_BATCH_SIZE = 10
    path = write_jsonl(tmp_path / "f.jsonl", [canonical(i) for i in range(35)])
    real, calls = services.write_rows, []

    def failing(rows, **kwargs):
        calls.append(len(rows))
        if len(calls) == 2:
            raise RuntimeError("disk full")
        return real(rows, **kwargs)

    monkeypatch.setattr(services, "write_rows", failing)
    with pytest.raises(RuntimeError, match="disk full"):
        ingest_path(path, source=source_for("files"))
    assert Attempt.objects.count() == 10 and FileCheckpoint.objects.get().items_done == 10
    monkeypatch.setattr(services, "write_rows", real)
    assert ingest_path(path, source=source_for("files")).accepted == 25


def test_retention_drops_whole_expired_partitions_and_keeps_rollups(tmp_path):
    from ingest.partitions import drop_expired_partitions

    old = canonical(0, ts="2025-09-30T23:00:00Z")
    kept = canonical(1, ts="2025-10-01T00:00:00Z")
    ingest_path(write_jsonl(tmp_path / "old.jsonl", [old, kept]), source=source_for("files"))
    from costcenter.costing import recompute_hour
    from costcenter.models import HourlyUsage

    september_hour = datetime(2025, 9, 30, 23, tzinfo=UTC)
    recompute_hour(september_hour)
    assert HourlyUsage.objects.filter(hour=september_hour).count() == 1
    # Keeping 13 months on 2026-10-15 keeps 2025-10 … 2026-10: September 2025 goes.
    dropped = drop_expired_partitions(now=datetime(2026, 10, 15, tzinfo=UTC), keep_months=13)
    assert dropped == ["ingest_attempt_y2025m09"]
    assert list(Attempt.objects.values_list("task_id", flat=True)) == ["task-0"]  # canonical(1)'s task
    assert drop_expired_partitions(now=datetime(2026, 10, 15, tzinfo=UTC), keep_months=13) == []
    assert HourlyUsage.objects.filter(hour=september_hour).count() == 1  # costs stay
