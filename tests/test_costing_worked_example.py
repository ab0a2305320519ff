"""docs/cost-model.md's worked example, number for number, plus energy from power and idle cost.

GPU metrics are written as GpuInterval rows, the form the Prometheus ingestor stores (its own
tests check Prometheus → GpuInterval against a real Prometheus).
"""

from __future__ import annotations

import importlib
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection

from costcenter.catalog import catalog_load
from costcenter.costing import recompute
from costcenter.models import DailyUsage, HourlyUsage, LlmModel, Pool, PoolHour, Team
from costcenter.selectors import CostQuery, cost_rows, cost_totals
from ingest.models import GpuDevice, GpuInterval
from tests.conftest import make_user
from tests.cost_world import CATALOG, H, attempt, load

pytestmark = pytest.mark.django_db


def gpu_hour(pool_name: str, index: int, **metrics) -> None:
    pool = Pool.objects.get(name=pool_name)
    device = GpuDevice.objects.create(
        vendor="nvidia", hostname="node-a", device_key=f"GPU-{index}", pool=pool
    )
    GpuInterval.objects.create(gpu=device, pool=pool, interval_start=H, step_seconds=3600, **metrics)


@pytest.fixture
def worked_example():
    catalog_load(CATALOG)
    # 1.2 kWh in the hour (0.6 kWh per GPU, from the energy counters), utilisation 50 % and 70 %.
    gpu_hour("h100", 0, energy_j=2_160_000.0, utilisation=0.5, power_w=999.0)
    gpu_hour("h100", 1, energy_j=2_160_000.0, utilisation=0.7, power_w=999.0)
    load(
        attempt(1, task="t1", status="failure", http_status=500, completion_tokens=0),
        attempt(2, task="t1", attempt_no=2, minute=6),
        attempt(3, task="t2", model="llama", endpoint="vllm-1", prompt_tokens=1000, completion_tokens=200),
        attempt(
            4, task="t3", model="llama", endpoint="vllm-2", team="b", prompt_tokens=600, completion_tokens=200
        ),
        attempt(
            5, task="t4", team="b", minute=40, prompt_tokens=2000, cached_tokens=1000, completion_tokens=500
        ),
    )
    recompute(now=H + timedelta(hours=1), since=H)


def test_the_worked_example_of_the_docs(worked_example):
    pool = PoolHour.objects.get(pool__name="h100", hour=H)
    assert pool.energy_kwh == Decimal("1.2")  # the counters, not the 999 W power readings
    assert pool.energy_cost == Decimal("0.12") and pool.pool_cost == Decimal("5.12")
    assert pool.mean_utilisation == Decimal("0.6") and pool.idle_cost == Decimal("2.048")
    assert pool.allocated_cost == Decimal("5.12") and pool.unallocated_cost == 0

    def row(team, model):
        return HourlyUsage.objects.get(hour=H, team__slug=team, model__name=model)

    assert row("a", "mini").cost == Decimal("0.00036")
    assert (row("a", "llama").cost, row("a", "llama").idle_cost) == (Decimal("3.072"), Decimal("1.2288"))
    assert (row("b", "llama").cost, row("b", "llama").idle_cost) == (Decimal("2.048"), Decimal("0.8192"))
    assert row("b", "mini").cost == Decimal("0.0008")
    a_mini = row("a", "mini")
    assert (a_mini.attempts, a_mini.tasks, a_mini.successful_tasks) == (2, 1, 1)

    carol = make_user("carol", org_role="viewer")
    totals = cost_totals(user=carol, query=CostQuery(H, H + timedelta(hours=1)))
    # The docs' hour has only the h100 pool; this test world also has mi300 (4 × 1.50), unused.
    assert totals["cost"] == Decimal("5.12116") and totals["unallocated_cost"] == Decimal("6")
    assert totals["total_spend"] == Decimal("11.12116")
    by_team = {
        r["team"]: r for r in cost_rows(user=carol, query=CostQuery(H, H + timedelta(hours=1), ("team",)))
    }
    assert by_team["a"]["cost_per_successful_task"] == (Decimal("0.00036") + Decimal("3.072")) / 2


def test_energy_from_mean_power_where_there_is_no_counter():
    catalog_load(CATALOG)
    gpu_hour("h100", 0, power_w=300.0, utilisation=1.0)
    gpu_hour("h100", 1, power_w=400.0)  # no utilisation from this GPU: the mean is over reporters
    recompute(now=H + timedelta(hours=1), since=H)
    pool = PoolHour.objects.get(pool__name="h100", hour=H)
    # (300 W + 400 W) × 1 h / 1000 = 0.7 kWh at $0.10 → 5.07; nobody used it: all unallocated.
    assert pool.energy_kwh == Decimal("0.7") and pool.pool_cost == Decimal("5.07")
    assert pool.unallocated_cost == Decimal("5.07") and pool.idle_cost == 0


def test_the_migration_fills_existing_daily_rows_as_rebuild_day_does(worked_example):
    """Migration 0005 backfills the daily rows of installations costed before it, with a frozen
    copy of ``rebuild_day``'s expressions: the same values."""
    extras = (
        "priced_attempts",
        "priced_successful_tasks",
        "priced_prompt_tokens",
        "priced_completion_tokens",
        "output_cost",
        "flat_cost",
        "utilisation_x_attempts",
        "utilisation_attempts",
        "memory_used_x_attempts",
        "memory_used_attempts",
        "memory_total_x_attempts",
        "memory_total_attempts",
    )
    order = ("team_id", "model_id", "endpoint_id")
    rebuilt = list(DailyUsage.objects.order_by(*order).values(*order, *extras))
    llama_a = next(
        row
        for row in rebuilt
        if (row["team_id"], row["model_id"])
        == (Team.objects.get(slug="a").pk, LlmModel.objects.get(name="llama").pk)
    )
    # 1 attempt at the hour's 60 % utilisation; its 3.072 split 1000:200 by the pool's 1:1 weights.
    assert (llama_a["utilisation_x_attempts"], llama_a["utilisation_attempts"]) == (0.6, 1)
    assert llama_a["output_cost"] == Decimal("3.072") * 200 / 1200
    DailyUsage.objects.update(
        **{name: 0 for name in extras if name.endswith("_attempts") and "_x_" not in name},
        output_cost=None,
        flat_cost=None,
        utilisation_x_attempts=None,
        memory_used_x_attempts=None,
        memory_total_x_attempts=None,
    )
    migration = importlib.import_module("costcenter.migrations.0005_daily_matrix_extras")
    with connection.cursor() as cursor:
        cursor.execute(migration.BACKFILL)
    assert list(DailyUsage.objects.order_by(*order).values(*order, *extras)) == rebuilt
