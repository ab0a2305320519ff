"""Three hours of synthetic exporter data with the real samples' label sets, and its expected
aggregates, worked out by hand (in the comments) rather than by the code under test.

Samples every 30 s at hh:00:15, hh:00:45 … hh:59:45, so no sample sits on a window boundary
(Prometheus 2.x ranges include both ends, 3.x only the right one: the data reads the same).
Counters grow linearly, so Prometheus' extrapolating increase() gives exact numbers:
119 gaps × d, extrapolated by 3600/3570 → 120 × d per hour.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

T0 = datetime(2026, 1, 5, tzinfo=UTC)  # a Monday, well in the past
HOURS = [T0 + timedelta(hours=h) for h in range(3)]
SAMPLES_PER_HOUR = 120

# Label sets as the real exporters emit them (shared/samples/, formats.md).
A0 = {  # current dcgm-exporter, in Kubernetes, no pod on the GPU (empty pod labels)
    "gpu": "0",
    "UUID": "GPU-00000000-0000-0000-0000-0000000000a0",
    "pci_bus_id": "00000000:18:00.0",
    "device": "nvidia0",
    "modelName": "NVIDIA H100 80GB HBM3",
    "Hostname": "gpu-node-a1",
    "DCGM_FI_DRIVER_VERSION": "550.90.07",
    "container": "",
    "namespace": "",
    "pod": "",
}
A1 = {  # dcgm-exporter main (2026-05): hostname in lower case
    "gpu": "1",
    "UUID": "GPU-00000000-0000-0000-0000-0000000000a1",
    "device": "nvidia1",
    "modelName": "NVIDIA H100 80GB HBM3",
    "hostname": "gpu-node-a2",
    "DCGM_FI_DRIVER_VERSION": "595.58.03",
}
X0 = {  # a GPU no pool claims
    "gpu": "0",
    "UUID": "GPU-00000000-0000-0000-0000-0000000000ff",
    "device": "nvidia0",
    "modelName": "Tesla T4",
    "Hostname": "stray-node-1",
}
B0 = {  # MI300X with optional labels on (device-metrics-exporter PR #16), exporter prefix amd_
    "card_model": "102-G30211-0C",
    "card_series": "AMD Instinct MI300X OAM",
    "card_vendor": "AMD",
    "cluster_name": "localcluster",
    "driver_version": "6.10.5",
    "gpu_id": "0",
    "gpu_uuid": "44ff74a1-0000-1000-8005-4617353a63d0",
    "hostname": "gpu-node-b1",
    "job_id": "5",
    "job_partition": "LocalQ",
    "job_user": "ubuntu",
    "serial_number": "692407004347",
    "vbios_version": "022.040.003.042.000001",
}
B1 = {  # the mandatory label set, empty strings and all (device-metrics-exporter issue #259)
    "card_model": "",
    "container": "",
    "gpu_compute_partition_type": "none",
    "gpu_id": "1",
    "gpu_memory_partition_type": "none",
    "gpu_partition_id": "NA",
    "hostname": "gpu-node-b1",
    "job_id": "",
    "job_partition": "",
    "job_user": "",
    "namespace": "",
    "pod": "",
    "serial_number": "",
}
VLLM = {"engine": "0", "model_name": "meta-llama/Llama-3.1-8B-Instruct"}
SGLANG = {"model_name": "meta-llama/Llama-3.1-8B-Instruct"}

POOLS_YAML = """
currency: USD
pools:
  - {name: h100-a, vendor: nvidia, gpu_model: H100, gpu_count: 2, kwh_price: "0.10",
     prometheus: {match: {Hostname: "gpu-node-a.*"}}, prices: [{effective_from: 2025-01-01, gpu_hour: "2.00"}]}
  - {name: mi300x-b, vendor: amd, gpu_model: MI300X, gpu_count: 2,
     prometheus: {match: {hostname: "gpu-node-b.*"}}, prices: [{effective_from: 2025-01-01, gpu_hour: "1.50"}]}
endpoints:
  - {name: vllm-h100-a, kind: gpu_pool, pool: h100-a}
models:
  - {name: meta-llama/Llama-3.1-8B-Instruct}
"""


def _labels(labels: dict[str, str]) -> str:
    return ",".join(f'{key}="{value}"' for key, value in labels.items())


def _stamps() -> list[float]:
    start = T0.timestamp()
    return [start + 15 + 30 * k for k in range(3 * SAMPLES_PER_HOUR)]


def _a0_util(i: int) -> float:
    hour, k = divmod(i, SAMPLES_PER_HOUR)
    return (0.5 if k % 2 == 0 else 1.0) if hour == 0 else (0.25 if hour == 1 else 0.0)


def _a0_energy(i: int) -> float:
    # 300 W = 300,000 mJ/s = 9,000,000 mJ per 30 s. The driver reloads in hour 1 between samples
    # 179 and 180: the counter restarts from 0 and reads 9,000,000 at sample 180.
    if i < 180:
        return 5_551_899_580 + 9_000_000 * i
    return 9_000_000 * (i - 179)


def _series() -> list[tuple[str, str, str, list[float]]]:
    """(metric, TYPE, labels, values per sample)."""
    n = 3 * SAMPLES_PER_HOUR
    const = lambda v: [v] * n  # noqa: E731
    ramp = lambda first, per_sample: [first + per_sample * i for i in range(n)]  # noqa: E731
    series = [
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", _labels(A0), [_a0_util(i) for i in range(n)]),
        # Present but ignored for A0: the profiling ratio is preferred.
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", _labels(A0), const(10)),
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", _labels(A1), const(50)),
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", _labels(X0), const(99)),
        ("DCGM_FI_DEV_FB_USED", "gauge", _labels(A0), const(60000)),
        ("DCGM_FI_DEV_FB_USED", "gauge", _labels(A1), const(1000)),
        ("DCGM_FI_DEV_FB_FREE", "gauge", _labels(A0), const(20959)),
        ("DCGM_FI_DEV_FB_FREE", "gauge", _labels(A1), const(79000)),
        ("DCGM_FI_DEV_FB_RESERVED", "gauge", _labels(A0), const(600)),
        ("DCGM_FI_DEV_POWER_USAGE", "gauge", _labels(A0), const(300)),
        ("DCGM_FI_DEV_POWER_USAGE", "gauge", _labels(A1), const(200)),
        ("DCGM_FI_DEV_POWER_USAGE", "gauge", _labels(X0), const(70)),
        # No _total, as dcgm-exporter writes it.
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", _labels(A0), [_a0_energy(i) for i in range(n)]),
        ("amd_gpu_gfx_activity", "gauge", _labels(B0), const(80)),
        ("gpu_gfx_activity", "gauge", _labels(B1), const(20)),
        ("amd_gpu_used_vram", "gauge", _labels(B0), const(100000)),
        ("amd_gpu_total_vram", "gauge", _labels(B0), const(196592)),
        ("gpu_used_vram", "gauge", _labels(B1), const(26)),
        ("gpu_free_vram", "gauge", _labels(B1), const(24534)),
        ("amd_gpu_power_usage", "gauge", _labels(B0), const(600)),
        # B1 has no gpu_power_usage: the socket power is the fallback.
        ("gpu_package_power", "gauge", _labels(B1), const(500)),
        # µJ, a gauge that accumulates: 600 W = 1.8e10 µJ per 30 s.
        ("amd_gpu_energy_consumed", "gauge", _labels(B0), ramp(9_000_000_000, 18_000_000_000)),
        ("vllm:prompt_tokens_total", "counter", _labels(VLLM), ramp(1000, 300)),
        ("vllm:generation_tokens_total", "counter", _labels(VLLM), ramp(4600, 60)),
        ("vllm:num_requests_running", "gauge", _labels(VLLM), [2 + 2 * (i % 4) for i in range(n)]),
        (
            "vllm:num_requests_waiting",
            "gauge",
            _labels(VLLM),
            [12 if i % SAMPLES_PER_HOUR == 30 else 0 for i in range(n)],
        ),
        ("vllm:kv_cache_usage_perc", "gauge", _labels(VLLM), const(0.25)),
        ("sglang:prompt_tokens_total", "counter", _labels(SGLANG), ramp(8.128902e06, 100)),
        ("sglang:num_running_reqs", "gauge", _labels(SGLANG), const(162)),
        ("sglang:token_usage", "gauge", _labels(SGLANG), const(0.28)),
    ]
    for le, per_sample in (("0.1", 1), ("0.5", 3), ("+Inf", 4)):
        series.append(
            (
                "vllm:time_to_first_token_seconds_bucket",
                "histogram",
                _labels({**VLLM, "le": le}),
                ramp(10 * per_sample, per_sample),
            )
        )
    for le, per_sample in (("1.0", 2), ("5.0", 3), ("+Inf", 4)):
        series.append(
            (
                "vllm:e2e_request_latency_seconds_bucket",
                "histogram",
                _labels({**VLLM, "le": le}),
                ramp(10 * per_sample, per_sample),
            )
        )
    return series


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def openmetrics_text() -> str:
    """As promtool wants it: timestamps in seconds, one series after another, a final # EOF."""
    stamps = _stamps()
    lines = []
    typed = set()
    for metric, kind, labels, values in _series():
        family = metric.removesuffix("_bucket").removesuffix("_total") if kind != "gauge" else metric
        if family not in typed and kind == "gauge":
            lines.append(f"# TYPE {family} {kind}")
            typed.add(family)
        for stamp, value in zip(stamps, values, strict=True):
            lines.append(f"{metric}{{{labels}}} {_number(value)} {stamp:.0f}")
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


# --- Expected aggregates, by hand -------------------------------------------------------------
# GPU rows per hour: (utilisation, used MiB, free MiB, reserved MiB, total MiB, power W, energy J)
EXPECTED_GPU = {
    # A0: mean of 0.5/1.0 alternating = 0.75, then 0.25, then 0; energy 300 W × 3600 s = 1,080,000 J
    # every hour, the driver reload in hour 1 included (increase() corrects the reset).
    ("nvidia", "gpu-node-a1", "GPU-00000000-0000-0000-0000-0000000000a0"): [
        (0.75, 60000, 20959, 600, None, 300, 1_080_000),
        (0.25, 60000, 20959, 600, None, 300, 1_080_000),
        (0.0, 60000, 20959, 600, None, 300, 1_080_000),
    ],
    # A1: GPU_UTIL 50 % → 0.5; no energy counter.
    ("nvidia", "gpu-node-a2", "GPU-00000000-0000-0000-0000-0000000000a1"): [
        (0.5, 1000, 79000, None, None, 200, None)
    ]
    * 3,
    # B0: 80 % → 0.8; 600 W; 1.8e10 µJ per 30 s → 120 × 1.8e10 µJ = 2.16e12 µJ = 2,160,000 J.
    ("amd", "gpu-node-b1", "692407004347"): [(0.8, 100000, None, None, 196592, 600, 2_160_000)] * 3,
    # B1: 20 % → 0.2; package power 500 W (fallback); no energy metric; key "gpu1" (no serial).
    ("amd", "gpu-node-b1", "gpu1"): [(0.2, 26, 24534, None, None, 500, None)] * 3,
}

# Pool-hours for the cost engine:
#   h100-a: energy 1,080,000 J (A0 counter) + 200 W × 3600 s = 720,000 J (A1 power) = 1,800,000 J
#           = 0.5 kWh; utilisation (0.75 + 0.5)/2 = 0.625, (0.25 + 0.5)/2 = 0.375, (0 + 0.5)/2 = 0.25;
#           power 500 W; used 61,000 MiB; total (60000+20959+600) + (1000+79000) = 161,559 MiB.
#   mi300x-b: 2,160,000 J + 500 W × 3600 s = 1,800,000 J → 3,960,000 J = 1.1 kWh; (0.8 + 0.2)/2 = 0.5;
#           1,100 W; used 100,026 MiB; total 196,592 + (26 + 24534) = 221,152 MiB.
EXPECTED_POOL_HOURS = {
    "h100-a": [("0.5", "0.625"), ("0.5", "0.375"), ("0.5", "0.25")],
    "mi300x-b": [("1.1", "0.5")] * 3,
}
EXPECTED_POOL_POWER = {"h100-a": "500", "mi300x-b": "1100"}
EXPECTED_POOL_MEMORY = {"h100-a": ("61000", "161559"), "mi300x-b": ("100026", "221152")}

# vLLM per hour: tokens 300 and 60 per 30 s → 36,000 and 7,200; running 2,4,6,8,… → mean 5, max 8;
# waiting 12 once in 120 samples → mean 0.1, max 12; KV 0.25; buckets (1, 3, 4) and (2, 3, 4) per 30 s.
EXPECTED_VLLM = {
    "prompt_tokens": 36_000,
    "generation_tokens": 7_200,
    "running_mean": 5,
    "running_max": 8,
    "waiting_mean": 0.1,
    "waiting_max": 12,
    "kv_cache_usage_mean": 0.25,
    "ttft_buckets": {"0.1": 120, "0.5": 360, "+Inf": 480},
    "e2e_latency_buckets": {"1.0": 240, "5.0": 360, "+Inf": 480},
}
# SGLang: 100 prompt tokens per 30 s → 12,000; 162 running; KV (token_usage) 0.28.
EXPECTED_SGLANG = {
    "prompt_tokens": 12_000,
    "running_mean": 162,
    "running_max": 162,
    "kv_cache_usage_mean": 0.28,
}
UNMATCHED_HOST = "stray-node-1"
