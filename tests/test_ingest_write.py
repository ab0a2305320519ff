"""The write path: exact counts, idempotency, dimensions, rejects, partitions, checkpoints."""

from __future__ import annotations

import io
from datetime import UTC, datetime

import pytest
from django.core.management import call_command
from django.db import connection, transaction

from costcenter.models import Endpoint, EndpointKind, LlmModel, Team, Workload
from costcenter.pg import hash64
from ingest.models import Attempt, DirtyHour, ErrorType, FileCheckpoint, IngestRun, RejectedRecord
from ingest.records import Reject
from ingest.services import ingest_items, ingest_path, source_for
from tests.ingest_helpers import canonical, write_jsonl

pytestmark = pytest.mark.django_db


def test_it_stores_each_attempt_once_with_its_dimensions(tmp_path, example_catalog):
    path = write_jsonl(tmp_path / "usage.jsonl", [canonical(i) for i in range(10)])
    result = ingest_path(path, source=source_for("files"))
    assert (result.accepted, result.duplicate, result.rejected) == (10, 0, 0)
    row = Attempt.objects.get(task_id="task-0", attempt=1)
    assert row.ts == datetime(2026, 10, 31, 22, 0, tzinfo=UTC)
    assert row.team_id == Team.objects.get(slug="netops").pk
    assert row.workload_id == Workload.objects.get(name="summarize").pk
    assert row.model_id == LlmModel.objects.get(name="llama-3.1-70b-instruct-awq").pk
    assert row.endpoint_id == Endpoint.objects.get(name="vllm-h100-a").pk
    assert (row.prompt_tokens, row.completion_tokens, row.cached_tokens) == (1000, 100, 0)
    assert row.succeeded is False and row.http_status == 500  # i % 10 == 0 fails
    assert row.key_hash == hash64("req-0") and row.task_hash == hash64("task-0")
    assert Attempt.objects.filter(succeeded=True).count() == 9


def test_re_ingesting_a_file_adds_nothing(tmp_path):
    path = write_jsonl(tmp_path / "usage.jsonl", [canonical(i) for i in range(50)])
    source = source_for("files")
    assert ingest_path(path, source=source).accepted == 50
    again = ingest_path(path, source=source)
    assert again.unchanged_files == 1 and again.records == 0
    forced = ingest_path(path, source=source, force=True)
    assert (forced.accepted, forced.duplicate) == (0, 50)
    # The same records under another name: still the same keys within the source.
    copy = write_jsonl(tmp_path / "copy.jsonl", [canonical(i) for i in range(50)])
    assert ingest_path(copy, source=source).duplicate == 50
    assert Attempt.objects.count() == 50
    # Another source has its own key space.
    assert ingest_path(copy, source=source_for("other")).accepted == 50


def test_duplicates_inside_one_batch_are_counted_once(tmp_path):
    lines = [canonical(1), canonical(1), canonical(2)]
    result = ingest_path(write_jsonl(tmp_path / "dup.jsonl", lines), source=source_for("files"))
    assert (result.accepted, result.duplicate) == (2, 1)


def test_a_grown_file_continues_after_what_was_committed(tmp_path):
    path = tmp_path / "growing.jsonl"
    write_jsonl(path, [canonical(i) for i in range(20)])
    source = source_for("files")
    assert ingest_path(path, source=source).accepted == 20
    write_jsonl(path, [canonical(i) for i in range(30)])  # same head, 10 more lines
    result = ingest_path(path, source=source)
    assert (result.accepted, result.duplicate) == (10, 0)
    assert FileCheckpoint.objects.get(path=str(path)).items_done == 30


def test_bad_records_are_rejected_with_a_reason_and_the_good_ones_kept(tmp_path):
    lines = [
        canonical(0),
        '{"task_id": "x", "attempt": 1, "ts": "2026-11-01T00:00:00Z", "model": "m", "status": "success", "usa',
        canonical(1, usage={"prompt_tokens": -5, "completion_tokens": 1}),
        canonical(2, status="maybe"),
        canonical(3, ts="1999-01-01T00:00:00Z"),
        canonical(4),
    ]
    path = write_jsonl(tmp_path / "mixed.jsonl", lines)
    result = ingest_path(path, source=source_for("files"))
    assert (result.accepted, result.rejected) == (2, 4)
    rejects = {r.location.rsplit(" ", 1)[-1]: r for r in RejectedRecord.objects.all()}
    assert set(rejects) == {"2", "3", "4", "5"}
    assert all(r.location.startswith(f"{path} line ") for r in rejects.values())
    assert "usage.prompt_tokens" in rejects["3"].reason
    assert "status" in rejects["4"].reason
    assert "ts" in rejects["5"].reason
    assert rejects["3"].excerpt  # a short excerpt helps the user find the record
    run = IngestRun.objects.get()
    assert (run.accepted, run.duplicate, run.rejected) == (2, 0, 4) and run.finished_at is not None


def test_unknown_names_are_registered_not_rejected(tmp_path, example_catalog):
    record = canonical(
        0, model="mistral-large-2411", endpoint="mistral-api", team="newteam", workload="triage"
    )
    ingest_path(write_jsonl(tmp_path / "new.jsonl", [record]), source=source_for("files"))
    assert Attempt.objects.count() == 1
    assert LlmModel.objects.get(name="mistral-large-2411").auto_registered
    endpoint = Endpoint.objects.get(name="mistral-api")
    assert endpoint.auto_registered and endpoint.kind == EndpointKind.UNKNOWN
    assert Team.objects.get(slug="newteam").auto_registered
    assert Workload.objects.filter(name="triage").exists()
    # The catalog's own objects are untouched.
    assert not LlmModel.objects.get(name="gpt-4o-mini").auto_registered


def test_the_cardinality_guard_rejects_an_exploding_dimension(tmp_path, settings):
    settings.INGEST_DIMENSION_LIMIT = 3
    lines = [canonical(i, workload=f"user-{i}") for i in range(6)]
    result = ingest_path(write_jsonl(tmp_path / "ids.jsonl", lines), source=source_for("files"))
    assert (result.accepted, result.rejected) == (3, 3)
    reason = RejectedRecord.objects.first().reason
    assert reason.startswith("workload: source 'files' already has 3 distinct workload values (limit 3)")
    # Known values still pass, and the limit is per source.
    again = [canonical(10, workload="user-0"), canonical(11, workload="user-9")]
    assert ingest_path(write_jsonl(tmp_path / "more.jsonl", again), source=source_for("files")).accepted == 1
    assert ingest_path(write_jsonl(tmp_path / "other.jsonl", again), source=source_for("b")).accepted == 2


def test_rows_go_into_monthly_partitions_created_on_demand(tmp_path):
    lines = [canonical(0, ts="2026-10-31T23:59:59Z"), canonical(1, ts="2026-11-01T00:00:00Z")]
    ingest_path(write_jsonl(tmp_path / "edge.jsonl", lines), source=source_for("files"))
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text, count(*) FROM ingest_attempt GROUP BY 1 ORDER BY 1")
        assert cursor.fetchall() == [("ingest_attempt_y2026m10", 1), ("ingest_attempt_y2026m11", 1)]
    hours = sorted(DirtyHour.objects.values_list("hour", flat=True))
    assert hours == [datetime(2026, 10, 31, 23, tzinfo=UTC), datetime(2026, 11, 1, 0, tzinfo=UTC)]


def test_an_interrupted_run_resumes_exactly_where_its_last_batch_committed(tmp_path):
    path = write_jsonl(tmp_path / "big.jsonl", [canonical(i) for i in range(95)])
    source = source_for("files")

    class Crash(Exception):
        pass

    from ingest import services

    real = services.iter_path_records

    def crashing(*args, **kwargs):
        for index, item in enumerate(real(*args, **kwargs)):
            if index == 47:
                raise Crash
            yield item

    services.iter_path_records = crashing
    try:
        with pytest.raises(Crash):
            ingest_path(path, source=source)
    finally:
        services.iter_path_records = real
    # Batches of 20 (set below) committed 40 items before the crash at item 48.
    assert Attempt.objects.count() == 40
    assert FileCheckpoint.objects.get().items_done == 40
    result = ingest_path(path, source=source)
    assert (result.accepted, result.duplicate) == (55, 0)
    assert Attempt.objects.count() == 95


@pytest.fixture(autouse=True)
def small_batches(settings):
    settings.INGEST_BATCH_SIZE = 20


def test_team_scoped_writers_cannot_write_other_teams():
    records = [canonical(0, team="netops"), canonical(1, team="support"), canonical(2, team="")]
    from ingest.formats.canonical import record_from_object
    from ingest.records import FileDefaults

    now = datetime(2026, 11, 29, tzinfo=UTC)
    items = [record_from_object(r, defaults=FileDefaults(), now=now) for r in records]
    result = ingest_items(items, source=source_for("api"), origin="request 1", allowed_teams={"netops"})
    assert (result.accepted, result.rejected) == (1, 2)
    assert (
        result.sample_rejects[0].reason == "team: this token may write usage of teams netops, not 'support'"
    )
    assert result.sample_rejects[1].location == "record 3"


def test_parser_rejects_pass_through_with_their_location():
    items = [Reject("line 7", "record: must be a JSON object", "[1, 2]")]
    result = ingest_items(items, source=source_for("api"), origin="request 9")
    assert result.rejected == 1 and result.reasons == {"record: must be a JSON object": 1}
    assert RejectedRecord.objects.get().location == "request 9 line 7"


def test_the_command_prints_counts_and_reasons(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [canonical(0), canonical(1, status="maybe")])
    out = io.StringIO()
    call_command("ingest_usage", str(tmp_path), stdout=out)
    text = out.getvalue()
    assert f"{path}: 1 accepted, 0 duplicate, 1 rejected" in text
    assert "total: 1 accepted, 0 duplicate, 1 rejected from 1 file(s)" in text
    assert "rejected 1× status: unknown status" in text


def test_binary_rows_read_back_as_the_values_they_encode():
    """encode_row against Postgres itself: every column, NULLs in each nullable one, extremes."""
    from ingest.writer import COLUMNS, write_rows

    ts = datetime(2026, 11, 2, 10, 15, 0, 123456, tzinfo=UTC)
    rows = [
        (ts, -(2**63), 2**63 - 1, 7, None, None, 3, None, None, 0, 0, 0, None, None, None, None, 1, None, False, "t-é"),
        (ts, 1, 2, 7, 1, 2, 3, 4, 5, 10_000_000, 9, 8, 7, 2**31 - 1, 6, 5, 32_767, 599, True, "x" * 256),
        (datetime(2015, 1, 1, tzinfo=UTC), 3, -4, 7, 1, None, 3, 4, None, 1, 2, 1, None, 0, None, 3, 2, 200, True, "t"),
    ]  # fmt: skip
    months = {row[0] for row in rows}
    with transaction.atomic():
        assert write_rows(rows, months=months) == 3
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {', '.join(COLUMNS)} FROM ingest_attempt ORDER BY key_hash")  # noqa: S608
        assert cursor.fetchall() == sorted(rows, key=lambda row: row[1])


def test_a_batch_with_one_stored_key_falls_back_and_counts_exactly(tmp_path):
    """New rows are COPied straight into the table; one duplicate sends the batch through staging."""
    source = source_for("files")
    first = write_jsonl(tmp_path / "a.jsonl", [canonical(i) for i in range(15)])
    assert ingest_path(first, source=source).accepted == 15
    # Batches of 20: the first holds 19 new rows and one stored key, the second 10 new rows.
    mixed = write_jsonl(tmp_path / "b.jsonl", [canonical(i) for i in range(14, 44)])
    result = ingest_path(mixed, source=source)
    assert (result.accepted, result.duplicate) == (29, 1)
    assert Attempt.objects.count() == 44
    assert DirtyHour.objects.count() == len(
        {row.replace(minute=0, second=0) for row in Attempt.objects.values_list("ts", flat=True)}
    )


def test_an_unpaired_surrogate_escape_is_a_reject_not_a_failed_run(tmp_path):
    # JSON may spell a lone UTF-16 half ("\ud800"); Python decodes it, but it has no UTF-8 form,
    # so it must be refused with a reason instead of failing the batch when Postgres sees it.
    lines = [
        canonical(0),
        canonical(1, team="ops\ud800x"),
        canonical(2, model="m\udfff"),
        canonical(3, error_type="boom\ud83d"),  # descriptive field: cleaned, the attempt kept
        canonical(4),
    ]
    path = write_jsonl(tmp_path / "surrogates.jsonl", lines)
    result = ingest_path(path, source=source_for("files"))
    assert (result.accepted, result.rejected) == (3, 2)
    reasons = {r.location.rsplit(" ", 1)[-1]: r.reason for r in RejectedRecord.objects.all()}
    assert set(reasons) == {"2", "3"}
    assert "team" in reasons["2"] and "surrogate" in reasons["2"]
    assert "model" in reasons["3"]
    kept_ids = set(Attempt.objects.exclude(error_type_id=None).values_list("error_type_id", flat=True))
    assert set(ErrorType.objects.filter(id__in=kept_ids).values_list("name", flat=True)) == {"boom"}
