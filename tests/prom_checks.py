"""Assertions shared by the OpenMetrics import and the real-Prometheus tests: both paths must give
the hand-computed aggregates of ``tests.prom_data``."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from costcenter.catalog import catalog_load
from costcenter.models import Pool
from ingest.gpu_metrics import pool_hour_metrics
from ingest.models import DirtyHour, GpuInterval, InferenceInterval, UnmatchedSeries
from tests import prom_data as data

GPU_COLUMNS = (
    "utilisation",
    "memory_used_mib",
    "memory_free_mib",
    "memory_reserved_mib",
    "memory_total_mib",
    "power_w",
    "energy_j",
)


def load_pools() -> None:
    catalog_load(data.POOLS_YAML, source="prom-test")


def approx(value):
    return None if value is None else pytest.approx(value, rel=1e-9, abs=1e-9)


def assert_gpu_rows(step: int = 3600) -> None:
    rows = GpuInterval.objects.select_related("gpu").order_by("interval_start")
    seen = {}
    for row in rows:
        key = (row.gpu.vendor, row.gpu.hostname, row.gpu.device_key)
        seen.setdefault(key, []).append(row)
    assert set(seen) == set(data.EXPECTED_GPU), "GPUs found"
    for key, expected in data.EXPECTED_GPU.items():
        got = seen[key]
        assert [r.interval_start for r in got] == data.HOURS, f"{key}: one row per hour, none missing"
        assert all(r.step_seconds == step for r in got)
        for row, values in zip(got, expected, strict=True):
            actual = tuple(getattr(row, column) for column in GPU_COLUMNS)
            assert actual == tuple(approx(v) for v in values), f"{key} at {row.interval_start}"


def assert_pool_hours() -> None:
    metrics = pool_hour_metrics(pool_ids=None, start=data.HOURS[0], end=data.HOURS[-1] + timedelta(hours=1))
    for name, per_hour in data.EXPECTED_POOL_HOURS.items():
        pool = Pool.objects.get(name=name)
        for hour, (kwh, utilisation) in zip(data.HOURS, per_hour, strict=True):
            got = metrics[(pool.pk, hour)]
            assert got.gpus_reporting == 2
            assert abs(got.energy_kwh - Decimal(kwh)) < Decimal("1e-12"), (name, hour, got.energy_kwh)
            assert abs(got.mean_utilisation - Decimal(utilisation)) < Decimal("1e-12"), (name, hour)
            assert got.mean_power_w == Decimal(data.EXPECTED_POOL_POWER[name])
            used, total = data.EXPECTED_POOL_MEMORY[name]
            assert (got.memory_used_mib, got.memory_total_mib) == (Decimal(used), Decimal(total))
    assert len(metrics) == 6
    assert set(DirtyHour.objects.values_list("hour", flat=True)) >= set(data.HOURS)


def assert_inference_rows() -> None:
    vllm = list(InferenceInterval.objects.filter(series__server="vllm").order_by("interval_start"))
    assert [row.interval_start for row in vllm] == data.HOURS
    for row in vllm:
        assert row.series.model_name == "meta-llama/Llama-3.1-8B-Instruct"
        assert row.series.model is not None  # found in the catalog by name
        for column, expected in data.EXPECTED_VLLM.items():
            value = getattr(row, column)
            if isinstance(expected, dict):
                assert set(value) == set(expected) and all(
                    value[le] == approx(count) for le, count in expected.items()
                ), column
            else:
                assert value == approx(expected), column
    sglang = list(InferenceInterval.objects.filter(series__server="sglang").order_by("interval_start"))
    assert len(sglang) == 3
    for row in sglang:
        for column, expected in data.EXPECTED_SGLANG.items():
            assert getattr(row, column) == approx(expected), column
        assert row.generation_tokens is None and row.ttft_buckets is None  # not in the data: unknown


def assert_unmatched() -> None:
    (stray,) = UnmatchedSeries.objects.all()
    assert stray.vendor == "nvidia" and stray.labels["Hostname"] == data.UNMATCHED_HOST
    assert stray.intervals == 3
    assert (stray.first_interval, stray.last_interval) == (data.HOURS[0], data.HOURS[-1])
