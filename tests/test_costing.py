"""The cost engine against hand-computed numbers, rule by rule (PRODUCT.md, "Cost model")."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import pytest

from costcenter.catalog import catalog_load
from costcenter.costing import allocate, recompute, recompute_hour
from costcenter.models import GpuHourPrice, HourlyUsage, LlmModel, PoolHour, RepriceHour, TokenPrice
from tests import cost_world

pytestmark = pytest.mark.django_db

CATALOG, H = cost_world.CATALOG, cost_world.H
attempt, load = cost_world.attempt, cost_world.load


@pytest.fixture(autouse=True)
def catalog():
    catalog_load(CATALOG)


def rows(hour: datetime = H, **filters) -> list[HourlyUsage]:
    return list(HourlyUsage.objects.filter(hour=hour, **filters).order_by("id"))


def test_cached_tokens_are_charged_at_the_cached_price_and_never_twice():
    # 2000 prompt tokens of which 1000 cached, 500 completion (incl. 200 reasoning), before 10:30.
    load(attempt(1, prompt_tokens=2000, cached_tokens=1000, completion_tokens=500, reasoning_tokens=200))
    recompute_hour(H)
    (row,) = rows()
    # (1000 × 0.15 + 1000 × 0.075 + 500 × 0.60) / 1e6 = 525 / 1e6
    assert row.cost == Decimal("0.000525")
    assert (row.prompt_tokens, row.cached_tokens, row.completion_tokens, row.reasoning_tokens) == (
        2000,
        1000,
        500,
        200,
    )
    assert row.token_price_ids == [TokenPrice.objects.get(input_per_mtok=Decimal("0.15")).pk]


def test_a_price_change_mid_hour_splits_the_hour():
    # 10:29:59 uses the old price, 10:30:00 the new one (cached price then defaults to input).
    load(
        attempt(1, minute=29, prompt_tokens=1000, cached_tokens=500, completion_tokens=100),
        attempt(2, minute=30, prompt_tokens=1000, cached_tokens=500, completion_tokens=100),
    )
    recompute_hour(H)
    (row,) = rows()
    old = (500 * Decimal("0.15") + 500 * Decimal("0.075") + 100 * Decimal("0.60")) / 1_000_000
    new = (500 * Decimal("0.20") + 500 * Decimal("0.20") + 100 * Decimal("0.80")) / 1_000_000
    assert row.cost == old + new == Decimal("0.0004525")
    assert len(row.token_price_ids) == 2


def test_a_backdated_price_change_is_applied_by_recompute():
    load(attempt(1, prompt_tokens=1_000_000, completion_tokens=0))
    recompute(now=H + timedelta(hours=2))
    assert rows()[0].cost == Decimal("0.15")
    # A negotiated rate, effective from 2026-11-01, entered afterwards.
    catalog_load(
        CATALOG.replace(
            '- {effective_from: 2026-01-01, input: "0.15", cached_input: "0.075", output: "0.60"}',
            '- {effective_from: 2026-01-01, input: "0.15", cached_input: "0.075", output: "0.60"}\n'
            '      - {effective_from: 2026-11-01, effective_to: "2026-11-02T10:30:00Z", input: "0.12", output: "0.50"}',
        )
    )
    assert RepriceHour.objects.filter(hour=H).exists(), "the price change must mark the affected hour"
    recompute(now=H + timedelta(hours=2))
    assert rows()[0].cost == Decimal("0.12")


def test_a_pool_hour_is_allocated_by_weighted_tokens_across_endpoints_and_teams():
    load(
        attempt(1, model="llama", endpoint="vllm-1", team="a", prompt_tokens=1000, completion_tokens=200),
        attempt(2, model="llama", endpoint="vllm-2", team="b", prompt_tokens=600, completion_tokens=200),
        attempt(
            3, model="llama", endpoint="vllm-2", team="b", prompt_tokens=0, completion_tokens=0, minute=9
        ),
    )
    recompute_hour(H)
    # h100: 2 GPUs × 2.50 = 5.00 (no energy metrics arrived). Weights 1/1: a = 1200, b = 800.
    a, b = rows(team__slug="a"), rows(team__slug="b")
    assert a[0].cost == Decimal("3.000000000000") and b[0].cost == Decimal("2.000000000000")
    pool = PoolHour.objects.get(pool__name="h100", hour=H)
    assert (
        pool.pool_cost == Decimal("5") and pool.allocated_cost == Decimal("5") and pool.unallocated_cost == 0
    )
    assert pool.energy_kwh is None and pool.idle_cost is None  # no metrics: unknown, not zero
    assert a[0].gpu_hour_price_id == GpuHourPrice.objects.get(pool__name="h100").pk


def test_pool_weights_favour_output_tokens_where_configured():
    # mi300: 4 × 1.50 = 6.00; weights input 1, output 3: a = 100 + 3×300 = 1000, b = 500 + 3×0 = 500.
    load(
        attempt(1, model="llama", endpoint="amd-1", team="a", prompt_tokens=100, completion_tokens=300),
        attempt(2, model="llama", endpoint="amd-1", team="b", prompt_tokens=500, completion_tokens=0),
    )
    recompute_hour(H)
    assert rows(team__slug="a")[0].cost == Decimal("4") and rows(team__slug="b")[0].cost == Decimal("2")


def test_an_hour_without_attempts_is_unallocated():
    recompute(now=H + timedelta(hours=1), since=H)
    facts = {fact.pool.name: fact for fact in PoolHour.objects.filter(hour=H)}
    assert facts["h100"].pool_cost == Decimal("5") and facts["h100"].unallocated_cost == Decimal("5")
    assert facts["mi300"].unallocated_cost == Decimal("6") and facts["mi300"].allocated_cost == 0
    assert not rows()


def test_a_retry_is_one_task_with_two_attempts():
    load(
        attempt(1, task="t", attempt_no=1, status="failure", http_status=500, completion_tokens=0),
        attempt(2, task="t", attempt_no=2, minute=6),
    )
    recompute_hour(H)
    (row,) = rows()
    assert (row.attempts, row.successful_attempts, row.tasks, row.successful_tasks) == (2, 1, 1, 1)
    # The failed attempt reported usage, so it is charged: 1000 × 0.15 / 1e6 + the success.
    assert row.cost == Decimal("0.00015") + Decimal("0.00021")


def test_a_fallback_charges_the_failed_pool_attempt_to_the_pool_model():
    load(
        attempt(1, task="t", model="llama", endpoint="vllm-1", status="failure", completion_tokens=0),
        attempt(2, task="t", attempt_no=2, minute=7),
    )
    recompute_hour(H)
    llama = rows(model__name="llama")[0]
    mini = rows(model__name="mini")[0]
    assert (llama.tasks, llama.successful_tasks) == (1, 0)
    assert (mini.tasks, mini.successful_tasks) == (1, 1)
    assert llama.cost == Decimal("5")  # the whole h100 hour: it served only this attempt


def test_unpriced_usage_is_counted_with_unknown_cost_until_a_price_arrives():
    load(attempt(1, model="mistral", endpoint="mistral-api", prompt_tokens=300, completion_tokens=50))
    recompute(now=H + timedelta(hours=1))
    (row,) = rows()
    assert row.cost is None and (row.unpriced_attempts, row.unpriced_tokens) == (1, 350)
    model = LlmModel.objects.get(name="mistral")
    TokenPrice.objects.create(
        model=model,
        effective_from=H - timedelta(days=1),
        input_per_mtok=Decimal(2),
        output_per_mtok=Decimal(6),
    )
    recompute(now=H + timedelta(hours=1))
    (row,) = rows()
    assert row.cost == Decimal("0.0009") and row.unpriced_attempts == 0  # (300×2 + 50×6)/1e6


def test_recompute_twice_gives_identical_rows():
    load(
        attempt(1, model="llama", endpoint="vllm-1", prompt_tokens=333, completion_tokens=77),
        attempt(2, model="llama", endpoint="vllm-2", team="b", prompt_tokens=1, completion_tokens=1),
        attempt(3),
    )
    recompute(now=H + timedelta(hours=3), since=H)

    def snapshot():
        fields = ("hour", "team_id", "model_id", "endpoint_id", "cost", "idle_cost", "attempts", "tasks")
        return sorted(HourlyUsage.objects.values_list(*fields)), sorted(
            PoolHour.objects.values_list("pool_id", "hour", "pool_cost", "allocated_cost", "unallocated_cost")
        )

    first = snapshot()
    recompute(now=H + timedelta(hours=3), since=H)
    assert snapshot() == first


def test_allocation_parts_add_up_exactly():
    shares = allocate(Decimal("5.000000000000"), [Decimal(1), Decimal(1), Decimal(1)])
    assert sum(shares) == Decimal("5") and shares[0] == Decimal("1.666666666667")
    assert allocate(Decimal("1"), [Decimal(0), Decimal(0)]) == [Decimal("0.5"), Decimal("0.5")]


def test_a_pool_hour_of_token_less_attempts_is_shared_by_attempts():
    load(
        attempt(1, model="llama", endpoint="vllm-1", status="failure", prompt_tokens=0, completion_tokens=0),
        attempt(
            2,
            model="llama",
            endpoint="vllm-1",
            team="b",
            status="failure",
            prompt_tokens=0,
            completion_tokens=0,
        ),
        attempt(
            3,
            model="llama",
            endpoint="vllm-2",
            team="b",
            status="failure",
            prompt_tokens=0,
            completion_tokens=0,
        ),
    )
    recompute_hour(H)
    # 5.00 in three equal shares: 1.666666666666 each, and the two leftover 1e-12 go to two of them.
    assert sorted(row.cost for row in rows()) == [Decimal("1.666666666666")] + [Decimal("1.666666666667")] * 2
    assert sum(row.cost for row in rows()) == Decimal("5")


def test_a_price_change_marks_only_the_hours_it_can_affect():
    from costcenter.models import RepriceHour

    for day in range(5):  # usage of mini on five days, 10:00 each
        load(attempt(100 + day, hour=H + timedelta(days=day)))
    recompute(now=H + timedelta(days=6), since=H)
    assert not RepriceHour.objects.exists()
    model = LlmModel.objects.get(name="mini")
    # A temporary price for 2026-11-03 only: only that day's hour with usage is affected.
    price = TokenPrice.objects.create(
        model=model,
        effective_from=H + timedelta(days=1) - timedelta(hours=10),
        effective_to=H + timedelta(days=2) - timedelta(hours=10),
        input_per_mtok=Decimal("0.01"),
        output_per_mtok=Decimal("0.01"),
    )
    assert list(RepriceHour.objects.values_list("hour", flat=True)) == [H + timedelta(days=1)]
    recompute(now=H + timedelta(days=6))
    assert rows(H + timedelta(days=1))[0].cost == Decimal("0.000011")  # (1000 + 100) × 0.01 / 1e6
    assert rows(H + timedelta(days=2))[0].cost == Decimal("0.00028")  # the list price again
    # Moving it a day later marks both the day it left and the day it covers now.
    price.effective_from += timedelta(days=1)
    price.effective_to += timedelta(days=1)
    price.save()
    assert sorted(RepriceHour.objects.values_list("hour", flat=True)) == [
        H + timedelta(days=1),
        H + timedelta(days=2),
    ]


def test_a_run_that_dies_before_the_daily_rollups_keeps_its_marks(monkeypatch):
    from costcenter import costing
    from costcenter.models import DailyUsage
    from ingest.models import DirtyHour

    load(attempt(1))
    real = costing.rebuild_day

    def dying(day):
        raise RuntimeError("killed")

    monkeypatch.setattr(costing, "rebuild_day", dying)  # a crash between the hours and the days
    with pytest.raises(RuntimeError):
        recompute(now=H + timedelta(hours=1))
    assert DirtyHour.objects.filter(hour=H).exists() and not DailyUsage.objects.exists()
    monkeypatch.setattr(costing, "rebuild_day", real)
    recompute(now=H + timedelta(hours=1))
    assert not DirtyHour.objects.exists()
    assert DailyUsage.objects.get(model__name="mini").cost == rows()[0].cost


def test_attempts_without_a_timing_stay_out_of_the_histograms():
    from costcenter import histograms

    # A failure without TTFT or latency, and a success at 812 ms latency / 95 ms TTFT.
    load(
        attempt(1, status="failure", latency_ms=None, ttft_ms=None, completion_tokens=0),
        attempt(2, latency_ms=812, ttft_ms=95),
    )
    recompute_hour(H)
    (row,) = rows()
    assert sum(row.latency_histogram) == 1 and sum(row.ttft_histogram) == 1
    assert row.latency_histogram[histograms.LATENCY_MS.bucket(812)] == 1
    p95 = histograms.percentile(row.ttft_histogram, 0.95, histograms.TTFT_MS)
    assert abs(p95 - 95) / 95 <= histograms.MAX_RELATIVE_ERROR
