"""The demo fleet simulator (`ingest.demo`): its files are read back by the real parsers exactly as
planned, its numbers look like a real fleet, and it is deterministic.

The generator tests need no database; the end-to-end tests run `manage.py demo` on the test DB.
"""

from __future__ import annotations

import io
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command
from django.db import connection

from costcenter.models import Endpoint, LlmModel, Pool, Team, TokenPrice
from ingest import demo
from ingest.demo import CANONICAL, MALFORMED_KINDS, OTLP, SINKS, DemoAttempt, Plan
from ingest.formats import iter_path_records, sniff
from ingest.formats.detect import detect_format
from ingest.models import Attempt, RejectedRecord
from ingest.records import Reject, UsageRecord

NOW = datetime(2026, 11, 21, 12, tzinfo=UTC)  # spans the gpt-4.1 price change on 2026-11-20
DAYS = 3
PER_DAY = 300
SEED = 7
CATALOG = Path(__file__).resolve().parent.parent / "examples" / "catalog.yaml"


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> tuple[Plan, list[demo.ManifestEntry]]:
    plan = demo.simulate(now=NOW, days=DAYS, attempts_per_day=PER_DAY, seed=SEED)
    manifest = demo.write_plan(plan, tmp_path_factory.mktemp("demo"))
    return plan, manifest


def parse(entry: demo.ManifestEntry) -> list[UsageRecord | Reject]:
    return list(iter_path_records(entry.path, entry.format, defaults=entry.defaults, now=NOW))


def by_task(attempts: list[DemoAttempt]) -> dict[str, list[DemoAttempt]]:
    tasks: dict[str, list[DemoAttempt]] = defaultdict(list)
    for attempt in attempts:
        tasks[attempt.task_id].append(attempt)
    return tasks


# --- files and parsers -------------------------------------------------------------------------


def test_all_four_formats_are_written(small):
    plan, manifest = small
    assert {entry.format for entry in manifest} == set(SINKS)
    assert {a.sink for a in plan.attempts} == set(SINKS)
    # canonical: one file per UTC day of the window (3 days from 12:00 touch 4 dates)
    canonical = [e for e in manifest if e.format == CANONICAL]
    assert len(canonical) == DAYS + 1
    assert all(e.path.exists() and e.path.stat().st_size > 0 for e in manifest)


def test_every_file_parses_to_exactly_the_planned_records(small):
    plan, manifest = small
    planned = {a.key: a for a in plan.attempts}
    assert len(planned) == len(plan.attempts), "idempotency keys must be unique across all files"
    seen: Counter[str] = Counter()
    rejects: list[Reject] = []
    for entry in manifest:
        items = parse(entry)
        records = [i for i in items if isinstance(i, UsageRecord)]
        entry_rejects = [i for i in items if isinstance(i, Reject)]
        assert (len(records), len(entry_rejects)) == (entry.expected_records, entry.expected_rejects), entry
        rejects += entry_rejects
        for record in records:
            seen[record.idempotency_key] += 1
            assert_matches_plan(record, planned[record.idempotency_key])
    # Each attempt is in exactly one file, and every planned attempt is somewhere.
    assert set(seen) == set(planned)
    assert max(seen.values()) == 1
    assert sum(e.expected_records for e in manifest) == len(plan.attempts)
    # The deliberate malformed lines, and nothing else, are rejected.
    assert len(rejects) == len(MALFORMED_KINDS) == sum(e.expected_rejects for e in manifest)
    reasons = " | ".join(r.reason for r in rejects)
    assert "not valid JSON" in reasons
    assert "must be >= 0" in reasons
    assert "startTime" in reasons
    assert "gen_ai.usage.input_tokens" in reasons


def assert_matches_plan(record: UsageRecord, a: DemoAttempt) -> None:
    got = (record.task_id, record.attempt, record.ts, record.model, record.endpoint, record.team)
    assert got == (a.task_id, a.attempt, a.ts, a.model, a.endpoint, a.team)
    assert (record.workload, record.status) == (a.workload, a.status)
    tokens = (record.prompt_tokens, record.completion_tokens, record.cached_tokens)
    assert tokens == (a.prompt_tokens, a.completion_tokens, a.cached_tokens)
    if a.status == "failure":
        assert record.http_status == a.http_status
    if a.sink != demo.BATCH:  # batch output carries no timings
        assert (record.latency_ms, record.ttft_ms) == (a.latency_ms, a.ttft_ms)
    if a.sink in (CANONICAL, demo.BATCH):
        assert record.reasoning_tokens == a.reasoning_tokens
    if a.sink == CANONICAL:
        assert record.queue_wait_ms == a.queue_wait_ms


def test_format_detection_agrees_with_the_manifest(small):
    _, manifest = small
    for entry in manifest:
        assert detect_format(sniff(entry.path), str(entry.path)) == entry.format


def test_older_days_are_gzip_and_still_parse(tmp_path):
    manifest = demo.write_demo(tmp_path, now=NOW, days=10, attempts_per_day=40, seed=SEED)
    gz = [e for e in manifest if e.path.name.endswith(".gz")]
    plain = [e for e in manifest if e.format == CANONICAL and not e.path.name.endswith(".gz")]
    assert gz and plain
    assert all(e.path.read_bytes()[:2] == b"\x1f\x8b" for e in gz)
    for entry in gz:
        items = parse(entry)
        assert len([i for i in items if isinstance(i, UsageRecord)]) == entry.expected_records
    # One of each malformed kind in any window of --days.
    assert sum(e.expected_rejects for e in manifest) == len(MALFORMED_KINDS)


def test_batch_files_have_error_lines_and_defaults(tmp_path):
    # ~2% of batch lines fail: a bigger day than the other tests use, so there are some.
    plan = demo.simulate(now=NOW, days=2, attempts_per_day=2000, seed=SEED)
    manifest = demo.write_plan(plan, tmp_path)
    batch = [e for e in manifest if e.format == demo.BATCH]
    errors = [e for e in batch if e.path.name.endswith(".errors.jsonl")]
    assert errors, "a few error lines, per formats.md"
    for entry in batch:
        assert entry.defaults.team == "research" and entry.defaults.endpoint == "openai-gpt-4o-mini"
        assert entry.defaults.ts is not None
    # Error lines carry no timestamp of their own: they take the batch's completed_at.
    failed = [a for a in plan.attempts if a.sink == demo.BATCH and a.status == "failure"]
    assert failed and all(a.ts == plan.batch_completed[a.ts.date()] for a in failed)
    for entry in errors:
        items = parse(entry)
        assert len(items) == entry.expected_records
        assert all(isinstance(i, UsageRecord) and i.status == "failure" for i in items)
        assert {i.ts for i in items} == {entry.defaults.ts}


def test_no_prompt_or_output_text_beyond_placeholders(small):
    _, manifest = small
    for entry in manifest:
        if entry.path.name.endswith(".gz"):
            continue
        text = entry.path.read_text()
        assert '"content"' not in text or "[demo" in text
        if entry.format in (CANONICAL, OTLP):
            assert "content" not in text


# --- the simulated fleet -----------------------------------------------------------------------


def test_timings_and_token_subsets_are_consistent(small):
    plan, _ = small
    for a in plan.attempts:
        assert plan.start <= a.ts < NOW
        if a.ttft_ms is not None:
            assert a.latency_ms is not None and 0 < a.ttft_ms < a.latency_ms
        if a.queue_wait_ms is not None:  # only self-run servers report queueing
            assert a.gpu_pool
            assert a.ttft_ms is None or a.queue_wait_ms <= a.ttft_ms
        assert 0 <= a.cached_tokens <= a.prompt_tokens
        if a.reasoning_tokens is not None:
            assert 0 <= a.reasoning_tokens <= a.completion_tokens
        if a.status == "success":
            assert a.prompt_tokens > 0 and a.completion_tokens > 0 and a.http_status == 200
        else:
            assert a.error in (demo.TIMEOUT, demo.RATE_LIMIT, demo.SERVER_ERROR, demo.EXPIRED)
    assert any(a.cached_tokens > 0 and a.workload == "chat" for a in plan.attempts)
    assert any(a.reasoning_tokens and a.model == "gpt-4.1" for a in plan.attempts)


def test_failure_rate_and_error_mix_are_plausible(small):
    plan, _ = small
    failures = [a for a in plan.attempts if a.status == "failure"]
    assert 0.005 < len(failures) / len(plan.attempts) < 0.06
    kinds = Counter(a.error for a in failures)
    assert kinds[demo.TIMEOUT] and kinds[demo.SERVER_ERROR]
    statuses = {a.http_status for a in failures}
    assert 429 in statuses or kinds[demo.RATE_LIMIT] == 0


def test_retries_share_the_task_id_with_increasing_attempts(small):
    plan, _ = small
    tasks = by_task(plan.attempts)
    retried = [t for t in tasks.values() if len(t) > 1]
    assert retried
    for attempts in tasks.values():
        assert [a.attempt for a in attempts] == list(range(1, len(attempts) + 1))
        assert all(x.ts < y.ts for x, y in zip(attempts, attempts[1:], strict=False))
        # Only failed attempts are retried, and a task stops at its first success.
        assert all(a.status == "failure" for a in attempts[:-1])
        assert len({(a.team, a.workload) for a in attempts}) == 1


def test_a_gpu_pool_failure_falls_back_to_a_hosted_api(small):
    plan, _ = small
    fallbacks = [
        t
        for t in by_task(plan.attempts).values()
        if any(
            x.gpu_pool and x.status == "failure" and not y.gpu_pool for x, y in zip(t, t[1:], strict=False)
        )
    ]
    assert fallbacks
    # Fallback attempts of the support team's tasks leave the canonical log for LiteLLM.
    assert {a.sink for t in fallbacks for a in t} >= {CANONICAL}


def test_the_unpriced_model_is_present_and_not_in_the_catalog(small):
    plan, _ = small
    catalog = yaml.safe_load(CATALOG.read_text())
    endpoints = {e["name"] for e in catalog["endpoints"]}
    models = {m["name"] for m in catalog["models"]}
    used = {(a.model, a.endpoint) for a in plan.attempts}
    assert ("mistral-large-2411", "mistral-api") in used
    assert "mistral-api" not in endpoints and "mistral-large-2411" not in models
    # Everything else is in the catalog, on both GPU vendors' pools and the hosted APIs.
    others = {pair for pair in used if pair[1] != "mistral-api"}
    assert {endpoint for _, endpoint in others} == endpoints
    assert {model for model, _ in others} == models


def test_traffic_follows_business_hours(small):
    plan, _ = small
    weekday = [a for a in plan.attempts if a.ts.weekday() < 5 and a.workload != "eval-batch"]
    day = sum(1 for a in weekday if 9 <= a.ts.hour < 17)
    night = sum(1 for a in weekday if 0 <= a.ts.hour < 8 and a.ts.hour != demo.BATCH_HOUR)
    assert day > 2 * night


def test_default_scale_is_about_150k_attempts():
    # Only the expected count, not a full run: the weekly-normalised hourly means times the days.
    per_day = demo.DEFAULT_ATTEMPTS_PER_DAY * demo.RETRY_OVERHEAD
    assert 140_000 <= per_day * demo.DEFAULT_DAYS <= 160_000


# --- determinism and re-runs -------------------------------------------------------------------


def test_same_seed_gives_the_same_bytes(tmp_path, small):
    plan, manifest = small
    again = demo.write_demo(tmp_path, now=NOW, days=DAYS, attempts_per_day=PER_DAY, seed=SEED)
    assert [(e.path.parent.name, e.path.name) for e in again] == [
        (e.path.parent.name, e.path.name) for e in manifest
    ]
    for a, b in zip(manifest, again, strict=True):
        assert a.path.read_bytes() == b.path.read_bytes(), a.path.name
    other = demo.simulate(now=NOW, days=DAYS, attempts_per_day=PER_DAY, seed=SEED + 1)
    assert {a.key for a in other.attempts}.isdisjoint({a.key for a in plan.attempts})


def test_rewriting_leaves_unchanged_files_alone_and_removes_stale_ones(tmp_path):
    first = demo.write_demo(tmp_path, now=NOW, days=2, attempts_per_day=40)
    mtimes = {e.path: e.path.stat().st_mtime_ns for e in first}
    (tmp_path / "notes.txt").write_text("not ours")
    later = demo.write_demo(tmp_path, now=NOW + timedelta(days=1), days=2, attempts_per_day=40)
    kept = {e.path for e in later}
    assert not [e.path for e in first if e.path not in kept and e.path.exists()]
    assert (tmp_path / "notes.txt").exists()
    unchanged = [e.path for e in later if e.path in mtimes and e.path.stat().st_mtime_ns == mtimes[e.path]]
    assert unchanged  # e.g. the first night's batch files


def test_a_later_window_repeats_the_overlapping_hours(small):
    plan, _ = small
    later = demo.simulate(now=NOW + timedelta(hours=5), days=DAYS, attempts_per_day=PER_DAY, seed=SEED)
    overlap = {a.key for a in plan.attempts if a.ts >= later.start}
    assert overlap <= {a.key for a in later.attempts}
    assert any(a.ts >= NOW for a in later.attempts)


def test_a_task_cut_by_the_window_end_does_not_change_the_rest_of_its_hour():
    week = demo.simulate(now=NOW, days=7, attempts_per_day=3000, seed=SEED)
    hour = {a.task_id: a.ts.replace(minute=0, second=0, microsecond=0) for a in week.attempts[::-1]}
    crossing = next(
        a
        for a in week.attempts
        if a.attempt > 1 and a.ts.replace(minute=0, second=0, microsecond=0) != hour[a.task_id]
    )
    cut_at = crossing.ts.replace(minute=0, second=0, microsecond=0)  # this retry falls after the window
    started = hour[crossing.task_id]
    cut = demo.simulate(now=cut_at, days=1, attempts_per_day=3000, seed=SEED)

    def of_that_hour(plan: Plan) -> set[str]:
        return {a.key for a in plan.attempts if a.ts < cut_at and hour.get(a.task_id) == started}

    assert crossing.key not in {a.key for a in cut.attempts}
    assert of_that_hour(cut) == of_that_hour(week)


def test_unaligned_or_naive_now_is_handled(tmp_path):
    plan = demo.simulate(now=NOW + timedelta(minutes=17), days=1, attempts_per_day=50)
    assert plan.now == NOW
    with pytest.raises(ValueError):
        demo.simulate(now=datetime(2026, 11, 21, 12), days=1)  # noqa: DTZ001 - the point of the test


# --- manage.py demo, end to end on the test database ---------------------------------------------


@pytest.fixture
def no_attempts(django_db_setup, django_db_blocker):
    """``ingest_attempt`` is unmanaged, so transactional tests' flushes leave its rows behind."""

    def clear():
        with django_db_blocker.unblock(), connection.cursor() as cursor:
            cursor.execute("DELETE FROM ingest_attempt")

    clear()
    yield
    clear()


def run_demo(directory: Path, now: datetime = NOW, days: int = 2, per_day: int = 200, *extra: str) -> str:
    out = io.StringIO()
    args = ["--days", str(days), "--attempts-per-day", str(per_day), "--dir", str(directory)]
    call_command("demo", *args, "--seed", str(SEED), "--now", now.isoformat(), *extra, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_demo_command_loads_the_catalog_and_ingests_every_attempt_once(tmp_path, no_attempts):
    assert not Pool.objects.exists()
    plan = demo.simulate(now=NOW, days=2, attempts_per_day=200, seed=SEED)

    output = run_demo(tmp_path)

    assert "catalog was empty" in output
    assert Pool.objects.count() == 2
    assert Attempt.objects.count() == len(plan.attempts)
    assert RejectedRecord.objects.count() == len(MALFORMED_KINDS)
    assert f"added {len(plan.attempts):,} attempts" in output
    assert f"{len(MALFORMED_KINDS)} of the rejects are planned" in output
    assert "unplanned" not in output
    # The model the catalog does not know is registered on the fly, not rejected: unpriced.
    mistral = LlmModel.objects.get(name="mistral-large-2411")
    assert mistral.auto_registered and not TokenPrice.objects.filter(model=mistral).exists()
    assert Endpoint.objects.get(name="mistral-api").auto_registered
    # Every team and endpoint of the demo is the catalog's (apart from mistral-api).
    assert not Team.objects.filter(auto_registered=True).exists()
    assert set(Endpoint.objects.filter(auto_registered=True).values_list("name", flat=True)) == {
        "mistral-api"
    }

    again = run_demo(tmp_path)
    assert "catalog was empty" not in again
    assert "nothing new" in again
    assert Attempt.objects.count() == len(plan.attempts)


@pytest.mark.django_db
def test_a_later_run_adds_only_the_new_hours(tmp_path, no_attempts, example_catalog):
    first = demo.simulate(now=NOW, days=2, attempts_per_day=200, seed=SEED)
    later = demo.simulate(now=NOW + timedelta(hours=3), days=2, attempts_per_day=200, seed=SEED)
    run_demo(tmp_path)
    output = run_demo(tmp_path, NOW + timedelta(hours=3))
    union = {a.key for a in first.attempts} | {a.key for a in later.attempts}
    assert Attempt.objects.count() == len(union)
    assert f"added {len(union) - len(first.attempts):,} attempts" in output


@pytest.mark.django_db
def test_no_ingest_only_writes_files(tmp_path, no_attempts):
    output = run_demo(tmp_path, NOW, 1, 50, "--no-ingest")
    assert "not ingested" in output
    assert list((tmp_path / "canonical").glob("usage-*.jsonl"))
    assert Attempt.objects.count() == 0 and not Pool.objects.exists()


# --- GPU metrics ---------------------------------------------------------------------------------


def test_gpu_metrics_follow_the_traffic_and_parse_as_exporters_write_them(small, tmp_path):
    from ingest.openmetrics_import import ImportResult, _read_text, load_series

    plan, _ = small
    path = demo.write_gpu_metrics(plan, tmp_path)
    text = path.read_text()
    assert text.endswith("# EOF\n")
    assert 'Hostname="gpu-node-a1"' in text and 'hostname="gpu-node-b2"' in text
    wanted = {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "gpu_gfx_activity"}
    series = load_series(_read_text(path), wanted, ImportResult())
    # 8 H100 GPUs + the spare node's one; 8 MI300X GPUs; every hour of the window, 2 scrapes an hour.
    assert len(series["DCGM_FI_DEV_GPU_UTIL"]) == 9 and len(series["gpu_gfx_activity"]) == 8
    assert all(len(s.times) == DAYS * 24 * 2 for s in series["gpu_gfx_activity"])
    # Energy counters only grow.
    for counter in series["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]:
        assert counter.values == sorted(counter.values)
    # Utilisation follows the H100 pool's traffic: busy hours run hotter than quiet ones.
    load = demo.pool_load(plan)
    gpu0 = next(s for s in series["DCGM_FI_DEV_GPU_UTIL"] if s.labels["Hostname"] == "gpu-node-a1")
    by_hour = defaultdict(list)
    for stamp, value in zip(gpu0.times, gpu0.values, strict=True):
        by_hour[datetime.fromtimestamp(stamp, UTC).replace(minute=0, second=0)].append(value)
    ranked = sorted(by_hour, key=lambda hour: load.get(("vllm-h100-a", hour), 0))
    quiet = sum(sum(by_hour[h]) for h in ranked[:12]) / 24
    busy = sum(sum(by_hour[h]) for h in ranked[-12:]) / 24
    assert busy > quiet + 20  # percentage points
    # The same plan gives the same bytes.
    assert demo.gpu_metrics_text(plan) == text


@pytest.mark.django_db
def test_demo_command_imports_gpu_metrics_so_pools_have_utilisation_and_idle_cost(tmp_path, no_attempts):
    from costcenter.costing import recompute
    from costcenter.models import PoolHour
    from ingest.models import GpuInterval, PrometheusSource, UnmatchedSeries

    output = run_demo(tmp_path)
    assert "gpu metrics" in output and "1 GPU(s) matching no pool" in output
    source = PrometheusSource.objects.get(name="demo-metrics")
    assert not source.enabled  # an import, not a server to pull from
    assert GpuInterval.objects.filter(pool__name="h100-a").values("gpu").distinct().count() == 8
    assert GpuInterval.objects.filter(pool__name="mi300x-b").values("gpu").distinct().count() == 8
    assert UnmatchedSeries.objects.get().labels["Hostname"] == "gpu-node-c1"
    recompute(now=NOW)
    hours = PoolHour.objects.filter(hour__gte=NOW - timedelta(days=2), hour__lt=NOW)
    assert hours.count() == 2 * 48
    assert all(h.mean_utilisation is not None and h.energy_kwh > 0 and h.idle_cost > 0 for h in hours)
    h100 = [float(h.mean_utilisation) for h in hours if h.pool.name == "h100-a"]
    mi300 = [float(h.mean_utilisation) for h in hours if h.pool.name == "mi300x-b"]
    assert sum(mi300) / len(mi300) < 0.4 < sum(h100) / len(h100)  # the MI300X pool is under-used
    # Re-running writes the same file and rewrites the same intervals.
    rows = GpuInterval.objects.count()
    run_demo(tmp_path)
    assert GpuInterval.objects.count() == rows


@pytest.mark.django_db
def test_no_ingest_writes_the_gpu_metrics_file_too(tmp_path, no_attempts):
    output = run_demo(tmp_path, NOW, 1, 50, "--no-ingest")
    assert (tmp_path / "metrics" / "gpus.openmetrics.txt").exists()
    assert "import_openmetrics" in output
