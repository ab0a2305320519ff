"""pool_hour_metrics, the cost engine's interface, on hand-written interval rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from costcenter.models import Pool
from ingest.gpu_metrics import PoolHourMetrics, pool_hour_metrics
from ingest.models import GpuDevice, GpuInterval

H = datetime(2026, 3, 1, 10, tzinfo=UTC)


@pytest.fixture
def pools(db):
    a = Pool.objects.create(name="a", vendor="nvidia", gpu_model="H100", gpu_count=2)
    b = Pool.objects.create(name="b", vendor="amd", gpu_model="MI300X", gpu_count=1)
    return a, b


def gpu(pool, key, vendor="nvidia"):
    return GpuDevice.objects.create(vendor=vendor, hostname="h", device_key=key, pool=pool)


def row(device, pool, start, step=3600, **values):
    return GpuInterval.objects.create(
        gpu=device, pool=pool, interval_start=start, step_seconds=step, **values
    )


def test_hourly_rows(pools):
    a, b = pools
    g1, g2, g3 = gpu(a, "g1"), gpu(a, "g2"), gpu(b, "g3", "amd")
    # g1 has an energy counter: 1,080,000 J; g2 only power: 250 W × 1 h = 900,000 J; 1,980,000 J = 0.55 kWh.
    row(g1, a, H, utilisation=0.9, power_w=300, energy_j=1_080_000, memory_used_mib=1000, memory_free_mib=500)
    row(g2, a, H, utilisation=0.3, power_w=250, memory_used_mib=10, memory_free_mib=20, memory_reserved_mib=5)
    row(g3, b, H, memory_used_mib=7, memory_total_mib=100)  # no utilisation, power or energy
    got = pool_hour_metrics(pool_ids=None, start=H, end=H + timedelta(hours=1))
    assert got[(a.pk, H)] == PoolHourMetrics(
        energy_kwh=Decimal("0.55"),
        mean_utilisation=Decimal("0.6"),
        mean_power_w=Decimal(550),
        memory_used_mib=Decimal(1010),
        memory_total_mib=Decimal(1500 + 35),
        gpus_reporting=2,
    )
    assert got[(b.pk, H)] == PoolHourMetrics(None, None, None, Decimal(7), Decimal(100), 1)
    assert set(pool_hour_metrics(pool_ids=[b.pk], start=H, end=H + timedelta(hours=1))) == {(b.pk, H)}


def test_five_minute_rows_add_up_to_the_hour(pools):
    a, _ = pools
    g1, g2 = gpu(a, "g1"), gpu(a, "g2")
    for i in range(12):
        start = H + timedelta(minutes=5 * i)
        # g1: 90,000 J per 5 min (300 W) → 1,080,000 J; utilisation 0.0, 0.1 … 1.1 clamped to 1 → mean 0.54…
        row(g1, a, start, step=300, energy_j=90_000, power_w=300, utilisation=min(i / 10, 1.0))
        # g2: power only, 100 W for the first 6 intervals and 300 W after: 6×30,000 + 6×90,000 = 720,000 J
        row(g2, a, start, step=300, power_w=100 if i < 6 else 300, utilisation=0.5)
    got = pool_hour_metrics(pool_ids=[a.pk], start=H, end=H + timedelta(hours=1))[(a.pk, H)]
    assert got.energy_kwh == Decimal(1_080_000 + 720_000) / Decimal(3_600_000)  # 0.5 kWh
    assert got.energy_kwh == Decimal("0.5")
    g1_util = (Decimal("0.0") + sum(Decimal(i) / 10 for i in range(1, 11)) + Decimal(1)) / 12  # 6.5 / 12
    assert got.mean_utilisation == (g1_util + Decimal("0.5")) / 2
    assert got.mean_power_w == Decimal(300) + Decimal(200)
    assert got.gpus_reporting == 2


def test_an_hour_pulled_at_two_steps_counts_once(pools):
    a, _ = pools
    g1 = gpu(a, "g1")
    row(g1, a, H, step=3600, energy_j=1_080_000, utilisation=0.5)
    for i in range(12):
        row(g1, a, H + timedelta(minutes=5 * i), step=300, energy_j=90_000, utilisation=0.5)
    row(g1, a, H + timedelta(hours=1), step=300, energy_j=90_000, utilisation=0.2)  # partial next hour
    got = pool_hour_metrics(pool_ids=None, start=H, end=H + timedelta(hours=2))
    assert got[(a.pk, H)].energy_kwh == Decimal("0.3")
    assert got[(a.pk, H + timedelta(hours=1))].energy_kwh == Decimal("0.025")
    assert got[(a.pk, H + timedelta(hours=1))].mean_utilisation == Decimal("0.2")


def test_hours_outside_the_range_and_unaligned_bounds(pools):
    a, _ = pools
    row(gpu(a, "g1"), a, H - timedelta(hours=1), utilisation=0.5)
    assert pool_hour_metrics(pool_ids=None, start=H, end=H + timedelta(hours=1)) == {}
    with pytest.raises(ValueError, match="hour in UTC"):
        pool_hour_metrics(pool_ids=None, start=H + timedelta(minutes=5), end=H + timedelta(hours=1))
