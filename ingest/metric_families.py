"""What we pull from Prometheus, as data: metric families, their PromQL, and series identity.

A *family* is one aggregate column (GPU utilisation, vLLM prompt tokens …) computed per window
by one PromQL function over one or more alternative metric names, in order of preference
(``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` before ``DCGM_FI_DEV_GPU_UTIL``/100; AMD with or without the
``amd_`` prefix, power with its fallbacks). The same definitions drive both the PromQL sent to
Prometheus (``family_promql``) and the offline evaluation of OpenMetrics files
(``ingest.openmetrics_import``), so both paths produce the same numbers.

Names, units and labels follow shared/reference/formats.md §1–3.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# Exporters disagree on label spelling (dcgm-exporter renamed Hostname → hostname in 2026; the
# old namespace uses uuid): a pool matcher on one spelling also matches the other.
LABEL_VARIANTS: tuple[tuple[str, ...], ...] = (
    ("Hostname", "hostname"),
    ("UUID", "uuid"),
    ("modelName", "model_name"),
)

# Identity labels per vendor: results are grouped by these, so unknown extra labels (driver
# version, pod, namespace … which may be empty or change when a pod is rescheduled) never split
# one GPU into several.
GPU_GROUP_LABELS: dict[str, tuple[str, ...]] = {
    "nvidia": ("Hostname", "hostname", "UUID", "uuid", "gpu", "GPU_I_ID", "modelName", "model_name"),
    "amd": (
        "hostname",
        "Hostname",
        "gpu_id",
        "gpu_partition_id",
        "serial_number",
        "gpu_uuid",
        "card_series",
        "card_model",
    ),
}
INFERENCE_GROUP_LABELS: tuple[str, ...] = ("model_name",)

AVG, MAX, INCREASE = "avg_over_time", "max_over_time", "increase"


@dataclass(frozen=True)
class Alternative:
    metric: str
    divisor: int = 1  # value ÷ divisor gives the column's unit


@dataclass(frozen=True)
class Family:
    key: str  # stable: part of checkpoint keys
    kind: str  # "gpu" or "inference"
    group: str  # vendor (nvidia, amd) or server (vllm, sglang)
    column: str  # GpuInterval / InferenceInterval field
    function: str  # AVG, MAX or INCREASE over the window
    combine: str  # how raw series of one GPU / model add up: avg, sum or max
    alternatives: tuple[Alternative, ...]
    histogram: bool = False  # *_bucket series: grouped by ``le`` as well


def _alts(*metrics: str, divisor: int = 1) -> tuple[Alternative, ...]:
    return tuple(Alternative(metric, divisor) for metric in metrics)


def _amd(*names: str, divisor: int = 1) -> tuple[Alternative, ...]:
    # The device-metrics-exporter's MetricsFieldPrefix is often "amd_"; both spellings, each name
    # before the next fallback.
    return tuple(Alternative(f"{prefix}{name}", divisor) for name in names for prefix in ("", "amd_"))


GPU_FAMILIES: tuple[Family, ...] = (
    # NVIDIA dcgm-exporter: the profiling ratio works per MIG instance and is the better measure;
    # GPU_UTIL (percent) where profiling fields are off.
    Family(
        "nvidia.utilisation",
        "gpu",
        "nvidia",
        "utilisation",
        AVG,
        "avg",
        (Alternative("DCGM_FI_PROF_GR_ENGINE_ACTIVE"), Alternative("DCGM_FI_DEV_GPU_UTIL", 100)),
    ),
    Family(
        "nvidia.memory_used", "gpu", "nvidia", "memory_used_mib", AVG, "avg", _alts("DCGM_FI_DEV_FB_USED")
    ),
    Family(
        "nvidia.memory_free", "gpu", "nvidia", "memory_free_mib", AVG, "avg", _alts("DCGM_FI_DEV_FB_FREE")
    ),
    Family(
        "nvidia.memory_reserved",
        "gpu",
        "nvidia",
        "memory_reserved_mib",
        AVG,
        "avg",
        _alts("DCGM_FI_DEV_FB_RESERVED"),
    ),
    Family(
        "nvidia.memory_total", "gpu", "nvidia", "memory_total_mib", AVG, "avg", _alts("DCGM_FI_DEV_FB_TOTAL")
    ),
    Family("nvidia.power", "gpu", "nvidia", "power_w", AVG, "avg", _alts("DCGM_FI_DEV_POWER_USAGE")),
    # mJ since driver load; increase() handles the reset on a driver reload.
    Family(
        "nvidia.energy",
        "gpu",
        "nvidia",
        "energy_j",
        INCREASE,
        "sum",
        _alts("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", divisor=1000),
    ),
    # AMD device-metrics-exporter: every metric is a gauge; VRAM "MB" values are MiB.
    Family("amd.utilisation", "gpu", "amd", "utilisation", AVG, "avg", _amd("gpu_gfx_activity", divisor=100)),
    Family("amd.memory_used", "gpu", "amd", "memory_used_mib", AVG, "avg", _amd("gpu_used_vram")),
    Family("amd.memory_free", "gpu", "amd", "memory_free_mib", AVG, "avg", _amd("gpu_free_vram")),
    Family("amd.memory_total", "gpu", "amd", "memory_total_mib", AVG, "avg", _amd("gpu_total_vram")),
    Family(
        "amd.power",
        "gpu",
        "amd",
        "power_w",
        AVG,
        "avg",
        _amd("gpu_power_usage", "gpu_package_power", "gpu_average_package_power"),
    ),
    # µJ, typed gauge but monotonic: increase() treats it as the counter it is.
    Family(
        "amd.energy",
        "gpu",
        "amd",
        "energy_j",
        INCREASE,
        "sum",
        _amd("gpu_energy_consumed", divisor=1_000_000),
    ),
)


def _inference(server: str, names: dict[str, tuple[str, ...]]) -> tuple[Family, ...]:
    p = f"{server}:"
    spec = (
        # column, function, combine (across engines and replicas of one model), concept
        ("prompt_tokens", INCREASE, "sum", "prompt_tokens"),
        ("generation_tokens", INCREASE, "sum", "generation_tokens"),
        ("running_mean", AVG, "sum", "running"),
        # The sum of per-replica maxima: the exact peak with one replica, an upper bound with more.
        ("running_max", MAX, "sum", "running"),
        ("waiting_mean", AVG, "sum", "waiting"),
        ("waiting_max", MAX, "sum", "waiting"),
        ("kv_cache_usage_mean", AVG, "avg", "kv_cache"),
        ("ttft_buckets", INCREASE, "sum", "ttft"),
        ("e2e_latency_buckets", INCREASE, "sum", "e2e"),
    )
    return tuple(
        Family(
            f"{server}.{column}",
            "inference",
            server,
            column,
            function,
            combine,
            _alts(*(p + name for name in names[concept])),
            histogram=column.endswith("_buckets"),
        )
        for column, function, combine, concept in spec
    )


INFERENCE_FAMILIES: tuple[Family, ...] = _inference(
    "vllm",
    {
        "prompt_tokens": ("prompt_tokens_total",),
        "generation_tokens": ("generation_tokens_total",),
        "running": ("num_requests_running",),
        "waiting": ("num_requests_waiting",),
        # gpu_cache_usage_perc was removed in vLLM 0.12; older servers still send it.
        "kv_cache": ("kv_cache_usage_perc", "gpu_cache_usage_perc"),
        "ttft": ("time_to_first_token_seconds_bucket",),
        "e2e": ("e2e_request_latency_seconds_bucket",),
    },
) + _inference(
    "sglang",
    {
        "prompt_tokens": ("prompt_tokens_total",),
        "generation_tokens": ("generation_tokens_total",),
        "running": ("num_running_reqs",),
        "waiting": ("num_queue_reqs",),
        "kv_cache": ("token_usage",),
        "ttft": ("time_to_first_token_seconds_bucket",),
        "e2e": ("e2e_request_latency_seconds_bucket",),
    },
)

FAMILIES: dict[str, Family] = {family.key: family for family in GPU_FAMILIES + INFERENCE_FAMILIES}

# Metrics whose presence says "a GPU is reporting": used to find GPUs that match no pool.
PRESENCE_METRICS: dict[str, tuple[str, ...]] = {
    "nvidia": ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE"),
    "amd": tuple(alt.metric for alt in _amd("gpu_gfx_activity", "gpu_power_usage", "gpu_package_power")),
}

# dcgm-exporter releases of 2021–22 printed blank fields as int64 sentinels (≈9.22e18).
SENTINEL_MIN = 9.2e18


def gpu_families(vendor: str) -> tuple[Family, ...]:
    """The GPU families a pool of ``vendor`` is queried for (both sets for ``other``)."""
    vendors = (vendor,) if vendor in GPU_GROUP_LABELS else tuple(GPU_GROUP_LABELS)
    return tuple(family for family in GPU_FAMILIES if family.group in vendors)


def pool_vendors(vendor: str) -> tuple[str, ...]:
    return (vendor,) if vendor in GPU_GROUP_LABELS else tuple(GPU_GROUP_LABELS)


# --- Label matchers ------------------------------------------------------------------------------


def _variants(label: str) -> tuple[str, ...]:
    for group in LABEL_VARIANTS:
        if label in group:
            return (label, *(other for other in group if other != label))
    return (label,)


def _quote(value: str) -> str:
    # JSON string escapes (\\, \", \n, \uXXXX) are valid PromQL (Go) string escapes.
    return json.dumps(value, ensure_ascii=False)


def selector_bodies(match: Mapping[str, str]) -> list[str]:
    """The label selectors of a pool, one per combination of label spellings.

    ``{"Hostname": "gpu-a.*"}`` → ``['Hostname=~"gpu-a.*"', 'hostname=~"gpu-a.*"']``: a series
    belongs to the pool if any of them selects it (see ``matches``).
    """
    if not match:
        return [""]
    choices = [[(variant, regex) for variant in _variants(label)] for label, regex in sorted(match.items())]
    return [
        ",".join(f"{label}=~{_quote(regex)}" for label, regex in combo)
        for combo in itertools.product(*choices)
    ]


def matches(match: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """Python twin of ``selector_bodies``: PromQL regexes are fully anchored; a missing label is ""."""
    return all(
        any(re.fullmatch(regex, labels.get(variant, "")) for variant in _variants(label))
        for label, regex in match.items()
    )


# --- PromQL ----------------------------------------------------------------------------------------


def _by(labels: Iterable[str]) -> str:
    return ", ".join(labels)


def _window(function: str, metric: str, body: str, step: int) -> str:
    selector = f"{metric}{{{body}}}" if body else metric
    return f"{function}({selector}[{step}s])"


def family_promql(family: Family, *, step: int, selectors: list[str], group_by: tuple[str, ...]) -> str:
    """PromQL for one family: per window of ``step`` seconds, one value per group.

    Each alternative is ``combine by (group) (f(m{sel1}[step]) or f(m{sel2}[step]) …) / divisor``;
    alternatives are joined with ``or``, which keeps the left-hand value wherever both exist, so the
    preferred metric wins per GPU and the fallback fills in only where it is missing.
    """
    by = _by((*group_by, "le") if family.histogram else group_by)
    parts = []
    for alternative in family.alternatives:
        inner = " or ".join(_window(family.function, alternative.metric, body, step) for body in selectors)
        expr = f"{family.combine} by ({by}) ({inner})"
        if alternative.divisor != 1:
            expr = f"{expr} / {alternative.divisor}"
        parts.append(f"({expr})")
    return " or ".join(parts)


def unmatched_promql(vendor: str, *, step: int, pool_selectors: list[str]) -> str:
    """GPUs of ``vendor`` reporting in the window whose series no pool's selectors pick."""
    by = _by(GPU_GROUP_LABELS[vendor])

    def present(body: str) -> str:
        return " or ".join(
            _window("present_over_time", metric, body, step) for metric in PRESENCE_METRICS[vendor]
        )

    everything = f"group by ({by}) ({present('')})"
    if not pool_selectors:
        return everything
    claimed = " or ".join(present(body) for body in pool_selectors)
    return f"{everything} unless (group by ({by}) ({claimed}))"


# --- Identity ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuIdentity:
    vendor: str
    hostname: str
    device_key: str
    partition: str
    gpu_index: str
    gpu_model: str


def gpu_identity(vendor: str, labels: Mapping[str, str]) -> GpuIdentity:
    get = labels.get
    if vendor == "nvidia":
        index = get("gpu", "")
        return GpuIdentity(
            vendor,
            hostname=get("Hostname") or get("hostname") or "",
            device_key=get("UUID") or get("uuid") or f"gpu{index}",
            partition=get("GPU_I_ID", ""),
            gpu_index=index,
            gpu_model=get("modelName") or get("model_name") or "",
        )
    index = get("gpu_id", "")
    partition = get("gpu_partition_id", "")
    return GpuIdentity(
        vendor,
        hostname=get("hostname") or get("Hostname") or "",
        device_key=get("serial_number") or get("gpu_uuid") or f"gpu{index}",
        # Older builds say "NA" when the GPU is not partitioned.
        partition="" if partition in ("NA", "0") else partition,
        gpu_index=index,
        gpu_model=get("card_series") or get("card_model") or "",
    )


def labels_key(labels: Mapping[str, str]) -> str:
    return json.dumps(dict(sorted(labels.items())), ensure_ascii=False, separators=(",", ":"))
