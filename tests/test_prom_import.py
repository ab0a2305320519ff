"""import_openmetrics: the same aggregates without Prometheus, on synthetic and on the real samples."""

from __future__ import annotations

import gzip
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.management import call_command

from costcenter.catalog import catalog_load
from costcenter.models import Pool
from ingest.gpu_metrics import pool_hour_metrics
from ingest.metrics_health import prometheus_health
from ingest.models import GpuInterval, InferenceInterval, PrometheusSource, UnmatchedSeries
from ingest.openmetrics_import import extrapolated_increase, import_openmetrics, import_source
from tests import prom_checks, prom_data

# Real exporter output (copies of shared/samples/, provenance in each file's header).
SAMPLES = Path(__file__).resolve().parent / "data"


def test_extrapolated_increase_matches_prometheus_rules():
    # Linear counter, samples 15 s inside both edges of the window: extrapolated to the edges.
    times = [15 + 30 * k for k in range(120)]
    assert extrapolated_increase(times, [1000 + 10 * k for k in range(120)], 0, 3600) == pytest.approx(1200)
    # A reset: 100 → 200 is +100, then the counter restarted from 0 and reads 50: +50. Samples sit
    # on both edges of the 60 s window, so nothing is extrapolated.
    assert extrapolated_increase([0, 30, 60], [100, 200, 50], 0, 60) == pytest.approx(150)
    # Far from the edges (more than 1.1 gaps): extrapolate half a gap on each side only.
    assert extrapolated_increase([1000, 1030], [500, 530], 0, 3600) == pytest.approx(30 * 60 / 30)
    # Never extrapolated to before the counter was zero.
    assert extrapolated_increase([20, 50], [0, 30], 0, 60) == pytest.approx(30 * (30 + 0 + 10) / 30)
    assert extrapolated_increase([5], [1], 0, 60) is None


@pytest.mark.django_db
def test_import_gives_the_hand_computed_aggregates(tmp_path):
    prom_checks.load_pools()
    path = tmp_path / "fleet.om"
    path.write_text(prom_data.openmetrics_text())
    result = import_openmetrics(path, source=import_source("offline"))
    assert result.windows == 3 and result.without_timestamp == 0
    prom_checks.assert_gpu_rows()
    prom_checks.assert_pool_hours()
    prom_checks.assert_inference_rows()
    prom_checks.assert_unmatched()
    vllm = InferenceInterval.objects.filter(series__server="vllm").first()
    assert vllm.series.endpoint is None  # no endpoint mapping configured on this source

    # Importing again (or an overlapping file) changes nothing and counts nothing twice.
    before = list(GpuInterval.objects.order_by("pk").values())
    import_openmetrics(path, source=import_source("offline"))
    after = list(GpuInterval.objects.order_by("pk").values())
    strip = lambda rows: [{k: v for k, v in row.items() if k != "updated_at"} for row in rows]  # noqa: E731
    assert strip(before) == strip(after)
    prom_checks.assert_unmatched()


@pytest.mark.django_db
def test_import_with_five_minute_steps_adds_up_to_the_same_hour(tmp_path):
    prom_checks.load_pools()
    path = tmp_path / "fleet.om.gz"
    path.write_bytes(gzip.compress(prom_data.openmetrics_text().encode()))  # gzip is read as such
    source = import_source("offline-5m")
    source.step_seconds = 300
    source.save()
    import_openmetrics(path, source=source)
    assert GpuInterval.objects.filter(step_seconds=300).count() == 4 * 36
    # 12 five-minute windows per hour: increases add up, means average. In hour 1 the reset falls
    # inside one window; each window extrapolates over its own 10 samples (9 gaps → ×300/270).
    metrics = pool_hour_metrics(pool_ids=None, start=prom_data.HOURS[0], end=prom_data.HOURS[2])
    pool = Pool.objects.get(name="h100-a")
    for hour, utilisation in zip(prom_data.HOURS[:2], ("0.625", "0.375"), strict=True):
        got = metrics[(pool.pk, hour)]
        assert abs(got.energy_kwh - Decimal("0.5")) < Decimal("1e-12")
        assert abs(got.mean_utilisation - Decimal(utilisation)) < Decimal("1e-12")


@pytest.mark.django_db
def test_endpoint_mapping_by_label(tmp_path):
    prom_checks.load_pools()
    source = import_source("offline")
    source.endpoint_match = {"vllm-h100-a": {"model_name": "meta-llama/.*"}}
    source.save()
    path = tmp_path / "fleet.om"
    path.write_text(prom_data.openmetrics_text())
    import_openmetrics(path, source=source)
    vllm = InferenceInterval.objects.filter(series__server="vllm").first()
    assert vllm.series.endpoint.name == "vllm-h100-a"


# --- The real exporter samples, with timestamps added ----------------------------------------------

T0 = datetime(2026, 2, 2, tzinfo=UTC)
SCRAPES = 4  # at +15 s, +915 s, +1815 s, +2715 s: one 15-minute scrape interval apart
COUNTERS = (
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "_total{",
    "_bucket{",
    "_count{",
    "_sum{",
    "gpu_energy_consumed",
)

REAL_CATALOG = """
currency: USD
pools:
  - {name: t4, vendor: nvidia, gpu_model: T4, gpu_count: 2, prometheus: {match: {Hostname: "424773df46e0|551bdf382151"}}}
  - {name: a10g, vendor: nvidia, gpu_model: A10G, gpu_count: 1, prometheus: {match: {Hostname: "ip-.*"}}}
  - {name: amd-dev, vendor: amd, gpu_model: W7900, gpu_count: 1, prometheus: {match: {hostname: "cb76105c40d0"}}}
"""


def with_timestamps(text: str) -> str:
    """Each sample line becomes SCRAPES lines in the text format (timestamps in milliseconds).

    Gauges keep their value; counters read value × (k + 1) at scrape k, so over the hour
    increase() = 3v × (3600 / 2700) = 4v (the first sample is 15 s in, the last 885 s before the end,
    both under 1.1 gaps, so Prometheus extrapolates to both edges).
    """
    out = []
    start_ms = int(T0.timestamp() * 1000)
    for line in text.splitlines():
        if not line or line.startswith("#"):
            out.append(line)
            continue
        series, value = line.rsplit(" ", 1)
        counter = any(marker in series for marker in COUNTERS)
        for k in range(SCRAPES):
            v = float(value) * (k + 1) if counter else float(value)
            out.append(f"{series} {v!r} {start_ms + 15_000 + k * 900_000}")
    return "\n".join(out) + "\n"


@pytest.mark.django_db
def test_import_of_the_real_exporter_samples(tmp_path):
    catalog_load(REAL_CATALOG, source="real")
    names = ("dcgm-exporter", "amd-device-metrics-exporter", "vllm", "sglang")
    text = "\n".join(with_timestamps((SAMPLES / f"{name}.metrics.txt").read_text()) for name in names)
    path = tmp_path / "real.prom"
    path.write_text(text)
    out = call_command_output("import_openmetrics", str(path), "--source", "real-samples")
    assert "GPU(s) matching no pool" in out
    t4 = Pool.objects.get(name="t4")

    first = GpuInterval.objects.get(gpu__hostname="424773df46e0")
    assert first.gpu.device_key == "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e"
    assert first.gpu.gpu_model == "Tesla T4"
    assert first.interval_start == T0 and first.pool == t4
    assert first.utilisation == 0.0  # DCGM_FI_DEV_GPU_UTIL 0 %
    assert first.power_w == pytest.approx(8.969)
    assert first.memory_used_mib == 0 and first.memory_free_mib == 15109
    assert first.energy_j == pytest.approx(4 * 128996013 / 1000)  # mJ → J
    second = GpuInterval.objects.get(gpu__hostname="551bdf382151")
    assert second.memory_total_mib == 15109 and second.utilisation is None and second.power_w is None

    metrics = pool_hour_metrics(pool_ids=[t4.pk], start=T0, end=T0.replace(hour=1))
    got = metrics[(t4.pk, T0)]
    assert got.gpus_reporting == 2
    assert got.mean_utilisation == 0  # only one T4 reports a utilisation
    assert got.energy_kwh == Decimal("515984.052") / Decimal(3_600_000)
    assert got.memory_total_mib == Decimal(15109 + 15109)
    assert got.mean_power_w == Decimal("8.969")

    amd = GpuInterval.objects.get(gpu__hostname="cb76105c40d0")
    assert (amd.gpu.device_key, amd.gpu.partition) == ("gpu0", "")  # empty serial, partition "NA"
    assert amd.energy_j == 0 and amd.memory_used_mib == 26 and amd.memory_free_mib == 24534
    assert amd.utilisation is None

    vllm = InferenceInterval.objects.get(series__server="vllm")
    assert vllm.series.model_name == "facebook/opt-125m"
    assert (vllm.prompt_tokens, vllm.generation_tokens) == (pytest.approx(20), pytest.approx(28))
    assert vllm.kv_cache_usage_mean == 0.0  # V0's gpu_cache_usage_perc, the fallback
    assert vllm.running_mean == 0 and vllm.waiting_max == 0
    assert vllm.ttft_buckets["0.25"] == 0 and vllm.ttft_buckets["0.5"] == pytest.approx(4)
    assert vllm.ttft_buckets["+Inf"] == pytest.approx(4)
    assert len(vllm.ttft_buckets) == 17  # 0.001 … 10.0 and +Inf
    assert vllm.e2e_latency_buckets["1.0"] == pytest.approx(4)

    sglang = InferenceInterval.objects.get(series__server="sglang")
    assert sglang.prompt_tokens == pytest.approx(4 * 8.128902e06)
    assert sglang.generation_tokens == pytest.approx(4 * 7.557572e06)
    assert (sglang.running_mean, sglang.running_max, sglang.waiting_mean) == (162, 162, 2826)
    assert sglang.kv_cache_usage_mean == pytest.approx(0.28)
    assert sglang.ttft_buckets["1.0"] == pytest.approx(4 * 27)
    assert sglang.ttft_buckets["+Inf"] == pytest.approx(4 * 11008)
    assert sglang.e2e_latency_buckets["+Inf"] == pytest.approx(4 * 11228)

    assert not UnmatchedSeries.objects.exists()
    (health,) = [h for h in prometheus_health(now=T0) if h.name == "real-samples"]
    # The A10G exports only DCGM_FI_PROF_DRAM_ACTIVE: nothing we aggregate, so its pool has no data.
    assert health.pools_without_data == ["a10g"]
    assert PrometheusSource.objects.get(name="real-samples").enabled is False


def test_samples_without_timestamp_are_counted_not_stored(tmp_path, db):
    path = tmp_path / "plain.prom"
    path.write_text((SAMPLES / "vllm.metrics.txt").read_text())
    result = import_openmetrics(path, source=import_source("plain"))
    assert result.without_timestamp > 0 and result.rows == 0


def call_command_output(*args) -> str:
    from io import StringIO

    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


BACKFILL_CATALOG = """
currency: USD
pools:
  - {name: h100, vendor: nvidia, gpu_model: H100, gpu_count: 1, prometheus: {match: {Hostname: "gpu-node-1"}}}
  - {name: mi300x, vendor: amd, gpu_model: MI300X, gpu_count: 1, prometheus: {match: {hostname: "mi-node-.*"}}}
"""


@pytest.mark.django_db
def test_import_of_the_promtool_backfill_sample():
    """shared/samples/prometheus-backfill.openmetrics.txt, as verified with promtool: OpenMetrics
    seconds, a dcgm counter without _total (the strict OpenMetrics parser refuses it, the fallback
    reads it), 5-minute windows."""
    catalog_load(BACKFILL_CATALOG, source="backfill")
    source = import_source("backfill")
    source.step_seconds = 300
    source.save()
    result = import_openmetrics(SAMPLES / "prometheus-backfill.openmetrics.txt", source=source)
    assert result.samples == 12 and result.without_timestamp == 0  # request_success_total is not used
    # 1735689600 is a window boundary: that sample closes the window (…5300, …5600]; the samples at
    # +30 s and +60 s fall in (…5600, …5900].
    first, second = (datetime.fromtimestamp(t, tz=UTC) for t in (1735689300, 1735689600))
    h100 = {row.interval_start: row for row in GpuInterval.objects.filter(pool__name="h100")}
    assert h100[first].utilisation == 0.0 and h100[first].energy_j is None  # one sample: no increase
    assert h100[second].utilisation == pytest.approx(0.89)  # (87 + 91) / 2 %
    # 21,000,000 mJ over 30 s; 30 s to the window start (< 1.1 gaps: extrapolated fully), 240 s to
    # its end (half a gap only): × (30 + 30 + 15) / 30 → 52,500,000 mJ = 52,500 J.
    assert h100[second].energy_j == pytest.approx(52_500)
    amd = {row.interval_start: row.utilisation for row in GpuInterval.objects.filter(pool__name="mi300x")}
    assert amd == {first: pytest.approx(0.12), second: pytest.approx(0.64)}
