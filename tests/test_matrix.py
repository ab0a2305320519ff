"""The evaluation matrix against a small world whose every column is computed by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from costcenter import histograms
from costcenter.catalog import catalog_load
from costcenter.costing import recompute
from costcenter.matrix import evaluation_matrix
from costcenter.models import Pool, PoolHour, TeamRole
from ingest.metric_store import mark_dirty_hours
from ingest.models import GpuDevice, GpuInterval
from tests.conftest import make_user
from tests.cost_world import attempt, load

pytestmark = pytest.mark.django_db

H = datetime(2026, 11, 2, 10, tzinfo=UTC)
H1 = H + timedelta(hours=1)
START, END = H, H + timedelta(hours=2)

CATALOG = """
teams: [{slug: a, name: A}, {slug: b, name: B}]
pools:
  - {name: h100, vendor: nvidia, gpu_model: H100, gpu_count: 2, weights: {input: "1", output: "3"},
     prices: [{effective_from: 2026-01-01, gpu_hour: "2.50"}]}
  - {name: mi300, vendor: amd, gpu_model: MI300X, gpu_count: 4, prices: [{effective_from: 2026-01-01, gpu_hour: "1.50"}]}
endpoints:
  - {name: vllm, kind: gpu_pool, pool: h100}
  - {name: amd-1, kind: gpu_pool, pool: mi300}
  - {name: openai, kind: token_priced, provider: openai}
models:
  - {name: llama}
  - {name: mini, prices: [{effective_from: 2026-01-01, input: "0.15", cached_input: "0.075", output: "0.60"}]}
"""


def a(n, task, **kw):
    return attempt(n, task=task, workload=kw.pop("workload", "w"), **kw)


@pytest.fixture
def world():
    catalog_load(CATALOG)
    llama = {"model": "llama", "endpoint": "vllm"}
    amd = {"model": "llama", "endpoint": "amd-1"}
    fail = {"status": "failure", "http_status": 500}
    load(
        # llama on h100, hour H: t1 fails once then succeeds; t2 succeeds.
        a(1, "t1", **llama, **fail, prompt_tokens=1000, completion_tokens=0, latency_ms=2000, ttft_ms=200),
        a(2, "t1", **llama, attempt_no=2, minute=6, prompt_tokens=2000, completion_tokens=500),
        a(3, "t2", **llama, prompt_tokens=2000, completion_tokens=500),
        # llama on h100, hour H+1: t3.
        a(4, "t3", **llama, hour=H1, prompt_tokens=3000, completion_tokens=1000, latency_ms=1500),
        # llama on mi300: team a in hour H, team b in hour H+1 (the whole pool-hour each).
        a(5, "t6", **amd, prompt_tokens=1000, completion_tokens=1000),
        a(6, "t7", **amd, team="b", hour=H1, prompt_tokens=1000, completion_tokens=1000),
        # mini (token-priced): t4 with 1000 of 2000 prompt tokens cached; t5 fails, then succeeds.
        a(7, "t4", prompt_tokens=2000, cached_tokens=1000, completion_tokens=500),
        a(8, "t5", **fail, prompt_tokens=1000, completion_tokens=0),
        a(9, "t5", attempt_no=2, minute=7, prompt_tokens=1000, completion_tokens=100),
        # another workload: not in the matrix of "w".
        a(10, "t8", workload="other", prompt_tokens=5000, completion_tokens=5000),
        # nobody priced this model and endpoint.
        a(11, "t9", model="mystery", endpoint="mystery-api", prompt_tokens=300, completion_tokens=50),
    )
    recompute(now=H + timedelta(hours=3), since=H)
    # GPU metrics ingestion is being built separately; until it lands, write the pool-hours'
    # measured utilisation and memory directly (the engine copies them from that ingestor).
    PoolHour.objects.filter(pool__name="h100", hour=H).update(
        mean_utilisation=Decimal("0.5"), memory_used_mib=40000, memory_total_mib=80000
    )
    PoolHour.objects.filter(pool__name="h100", hour=H1).update(
        mean_utilisation=Decimal("0.8"), memory_used_mib=60000, memory_total_mib=80000
    )
    return {
        "carol": make_user("carol", org_role="viewer"),
        "alice": make_user("alice", teams={"a": TeamRole.VIEWER}),
    }


def matrix(user, workload="w"):
    return {(row.model, row.pool or row.endpoint): row for row in evaluation_matrix(
        user=user, workload=workload, start=START, end=END
    )}  # fmt: skip


def close(value: float | None, exact: float) -> bool:
    """Within the histograms' stated bound (±9.05 %) of the exact percentile."""
    return value is not None and abs(value / exact - 1) <= histograms.MAX_RELATIVE_ERROR


def test_a_pool_row_computed_by_hand(world):
    row = matrix(world["carol"])[("llama", "h100")]
    assert (row.vendor, row.endpoint, row.provider) == ("nvidia", None, None)
    # Hour H: attempts 3 (1 failed), tasks t1, t2; hour H+1: t3. Task counts are bucket sums.
    assert (row.attempts, row.successful_attempts, row.failed_attempts) == (4, 3, 1)
    assert (row.tasks, row.successful_tasks) == (3, 3)
    assert row.success_rate == 1.0 and row.attempt_failure_rate == 0.25 and row.retry_rate == 1 / 3
    # TTFT 200, 100, 100, 100 ms: p50 = 100, p95 = the 4th of 4 = 200. Latency 2000, 1000, 1000, 1500: p95 = 2000.
    assert close(row.ttft_p50_ms, 100) and close(row.ttft_p95_ms, 200) and close(row.latency_p95_ms, 2000)
    assert row.ttft_p50_ms == histograms.TTFT_MS.representative(histograms.TTFT_MS.bucket(100))
    # Output tokens/s of successful attempts: 500 / 0.9 s twice, 1000 / 1.4 s; p50 = 555.6.
    assert close(row.output_tokens_per_s_p50, 500 / 0.9)
    # Utilisation weighted by llama's attempts per hour: (3 × 0.5 + 1 × 0.8) / 4.
    assert row.mean_gpu_utilisation == pytest.approx(0.575)
    assert row.mean_memory_used_mib == pytest.approx(45000) and row.mean_memory_total_mib == 80000
    # h100 costs 2 × 2.50 = 5.00 an hour, all llama's. Weights input 1, output 3:
    # hour H: 5000 prompt + 3 × 1000 completion = 8000 → input 5 × 5000/8000 = 3.125, output 1.875;
    # hour H+1: 3000 + 3 × 1000 = 6000 → 2.50 and 2.50. Input 5.625 / 8000 tokens, output 4.375 / 2000.
    assert row.cost == Decimal(10)
    assert row.cost_per_1m_input_tokens == Decimal("703.125")
    assert row.cost_per_1m_output_tokens == Decimal("2187.5")
    assert row.cost_per_successful_task == Decimal(10) / 3
    assert row.cost_complete and row.unpriced_attempts == 0


def test_a_token_priced_row_shows_the_effective_price_paid(world):
    row = matrix(world["carol"])[("mini", "openai")]
    assert (row.pool, row.vendor, row.provider) == (None, None, "openai")
    assert (row.attempts, row.failed_attempts, row.tasks, row.successful_tasks) == (3, 1, 2, 2)
    assert row.attempt_failure_rate == 1 / 3 and row.retry_rate == 0.5 and row.success_rate == 1.0
    # t4: (1000 × 0.15 + 1000 × 0.075 + 500 × 0.60) / 1e6 = 0.000525; t5: 0.00015 + 0.00021.
    assert row.cost == Decimal("0.000885")
    # Input: (3000 × 0.15 + 1000 × 0.075) / 4000 tokens = 0.13125 per 1M (caching lowers it).
    assert row.cost_per_1m_input_tokens == Decimal("0.13125")
    assert row.cost_per_1m_output_tokens == Decimal("0.6")
    assert row.cost_per_successful_task == Decimal("0.0004425")
    assert row.mean_gpu_utilisation is None and row.mean_memory_used_mib is None  # no GPU of ours
    assert close(row.latency_p95_ms, 1000) and close(row.ttft_p95_ms, 100)


def test_one_model_on_two_pools_is_two_rows(world):
    rows = matrix(world["carol"])
    amd = rows[("llama", "mi300")]
    # mi300 costs 4 × 1.50 = 6.00 an hour; weights 1:1, 1000 + 1000 tokens in each of two hours.
    assert amd.vendor == "amd" and amd.cost == Decimal(12) and amd.successful_tasks == 2
    assert amd.cost_per_1m_input_tokens == Decimal(3000) and amd.cost_per_1m_output_tokens == Decimal(3000)
    assert amd.cost_per_successful_task == Decimal(6)
    assert amd.mean_gpu_utilisation is None  # no metric arrived for mi300
    assert sorted(rows) == [
        ("llama", "h100"),
        ("llama", "mi300"),
        ("mini", "openai"),
        ("mystery", "mystery-api"),
    ]


def test_unpriced_usage_is_shown_not_costed(world):
    row = matrix(world["carol"])[("mystery", "mystery-api")]
    assert row.cost is None and row.cost_per_successful_task is None and not row.cost_complete
    assert (row.unpriced_attempts, row.unpriced_tokens) == (1, 350)
    assert row.cost_per_1m_input_tokens is None and row.cost_per_1m_output_tokens is None


def test_the_workload_filter_and_all_workloads(world):
    assert matrix(world["carol"])[("mini", "openai")].attempts == 3
    everything = matrix(world["carol"], workload=None)[("mini", "openai")]
    assert everything.attempts == 4 and everything.completion_tokens == 5600


def test_team_members_see_only_their_teams_rows(world):
    amd = matrix(world["alice"])[("llama", "mi300")]
    assert amd.successful_tasks == 1 and amd.cost == Decimal(6)  # team b's hour is not hers


def test_the_queries_do_not_grow_with_attempts(world, django_assert_num_queries):
    user = world["carol"]
    matrix(user)  # warm caches (the user's profile)
    with django_assert_num_queries(2):  # facts + histograms, whatever the number of attempts
        matrix(user)


DAY = H.replace(hour=0)
NEXT_DAY = DAY + timedelta(days=1)
TICK = timedelta(microseconds=1)  # a range off whole days by 1 µs reads the hourly rows of the same hours


def gpu_metrics(hour, *, utilisation: float, used_mib: float) -> None:
    """One h100 GPU's hour as the GPU-metrics ingestor stores it (an interval row and a dirty mark)."""
    pool = Pool.objects.get(name="h100")
    device, _ = GpuDevice.objects.get_or_create(
        vendor="nvidia", hostname="node-a", device_key="GPU-0", pool=pool
    )
    GpuInterval.objects.create(
        gpu=device,
        pool=pool,
        interval_start=hour,
        step_seconds=3600,
        utilisation=utilisation,
        memory_used_mib=used_mib,
        memory_total_mib=80000.0,
    )
    mark_dirty_hours([hour])


def test_whole_days_read_the_daily_rollups_and_agree_with_the_hourly_rows(world):
    # The metrics arrive after the usage was costed: the marked hours are recomputed and their
    # day rebuilt, which is what carries the attempt-weighted utilisation into the daily rows.
    gpu_metrics(H, utilisation=0.5, used_mib=40000.0)
    gpu_metrics(H1, utilisation=0.8, used_mib=60000.0)
    recompute(now=H + timedelta(hours=3))
    for user in (world["carol"], world["alice"]):
        for workload in ("w", None):
            with CaptureQueriesContext(connection) as queries:
                daily = evaluation_matrix(user=user, workload=workload, start=DAY, end=NEXT_DAY)
            tables = " ".join(query["sql"] for query in queries.captured_queries)
            assert "costcenter_dailyusage" in tables and "costcenter_hourlyusage" not in tables
            assert "costcenter_poolhour" not in tables  # the weights were summed per day
            hourly = evaluation_matrix(user=user, workload=workload, start=DAY - TICK, end=NEXT_DAY - TICK)
            assert daily == hourly, (user.username, workload)
    # And the hand-computed values of the first test hold on the daily path.
    row = {(r.model, r.pool or r.endpoint): r for r in evaluation_matrix(
        user=world["carol"], workload="w", start=DAY, end=NEXT_DAY
    )}[("llama", "h100")]  # fmt: skip
    assert row.mean_gpu_utilisation == pytest.approx(0.575)
    assert row.mean_memory_used_mib == pytest.approx(45000) and row.mean_memory_total_mib == 80000
    assert row.cost_per_1m_input_tokens == Decimal("703.125")
    assert row.cost_per_1m_output_tokens == Decimal("2187.5")
