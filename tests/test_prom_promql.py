"""Unit tests of the PromQL built per metric family, label matching, chunking and the lag."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ingest.metric_families import (
    FAMILIES,
    GPU_GROUP_LABELS,
    family_promql,
    gpu_families,
    gpu_identity,
    matches,
    selector_bodies,
    unmatched_promql,
)
from ingest.prometheus import MAX_POINTS_PER_SERIES, chunk_windows, retry_delays, target_end

NV_BY = "Hostname, hostname, UUID, uuid, gpu, GPU_I_ID, modelName, model_name"
AMD_BY = "hostname, Hostname, gpu_id, gpu_partition_id, serial_number, gpu_uuid, card_series, card_model"
POOL_A = selector_bodies({"Hostname": "gpu-node-a.*"})


def promql(key: str, selectors=None, group_by=None) -> str:
    family = FAMILIES[key]
    if group_by is None:
        group_by = GPU_GROUP_LABELS.get(family.group, ("model_name",))
    return family_promql(family, step=3600, selectors=selectors or [""], group_by=group_by)


def test_selectors_accept_both_spellings_of_a_label():
    assert POOL_A == ['Hostname=~"gpu-node-a.*"', 'hostname=~"gpu-node-a.*"']
    both = selector_bodies({"UUID": "GPU-1", "Hostname": "n1"})
    assert both == [
        'Hostname=~"n1",UUID=~"GPU-1"',
        'Hostname=~"n1",uuid=~"GPU-1"',
        'hostname=~"n1",UUID=~"GPU-1"',
        'hostname=~"n1",uuid=~"GPU-1"',
    ]
    # Quotes and backslashes are escaped as PromQL strings.
    assert selector_bodies({"job": 'a"b\\d'}) == ['job=~"a\\"b\\\\d"']


def test_python_matching_agrees_with_the_selectors():
    match = {"Hostname": "gpu-node-a.*"}
    assert matches(match, {"Hostname": "gpu-node-a1"})
    assert matches(match, {"hostname": "gpu-node-a2"})  # dcgm-exporter main spells it in lower case
    assert not matches(match, {"Hostname": "xgpu-node-a1"})  # anchored, like PromQL
    assert not matches(match, {"Hostname": "gpu-node-b1"})
    assert matches({"pod": ""}, {"pod": ""}) and matches({"pod": ""}, {})  # a missing label is ""


def test_nvidia_utilisation_prefers_the_profiling_ratio():
    assert promql("nvidia.utilisation", POOL_A) == (
        f'(avg by ({NV_BY}) (avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{{Hostname=~"gpu-node-a.*"}}[3600s])'
        f' or avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{{hostname=~"gpu-node-a.*"}}[3600s])))'
        f' or (avg by ({NV_BY}) (avg_over_time(DCGM_FI_DEV_GPU_UTIL{{Hostname=~"gpu-node-a.*"}}[3600s])'
        f' or avg_over_time(DCGM_FI_DEV_GPU_UTIL{{hostname=~"gpu-node-a.*"}}[3600s])) / 100)'
    )


def test_nvidia_memory_power_and_energy():
    assert promql("nvidia.memory_used") == f"(avg by ({NV_BY}) (avg_over_time(DCGM_FI_DEV_FB_USED[3600s])))"
    assert promql("nvidia.memory_free") == f"(avg by ({NV_BY}) (avg_over_time(DCGM_FI_DEV_FB_FREE[3600s])))"
    assert promql("nvidia.power") == f"(avg by ({NV_BY}) (avg_over_time(DCGM_FI_DEV_POWER_USAGE[3600s])))"
    # mJ → J; increase() copes with the counter's reset on a driver reload.
    assert promql("nvidia.energy") == (
        f"(sum by ({NV_BY}) (increase(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[3600s])) / 1000)"
    )


def test_amd_families_with_and_without_prefix_and_fallbacks():
    assert promql("amd.utilisation") == (
        f"(avg by ({AMD_BY}) (avg_over_time(gpu_gfx_activity[3600s])) / 100)"
        f" or (avg by ({AMD_BY}) (avg_over_time(amd_gpu_gfx_activity[3600s])) / 100)"
    )
    power = promql("amd.power")
    order = [
        "gpu_power_usage[",
        "amd_gpu_power_usage[",
        "gpu_package_power[",
        "amd_gpu_package_power[",
        "gpu_average_package_power[",
        "amd_gpu_average_package_power[",
    ]
    positions = [power.index(f"avg_over_time({name}") for name in order]
    assert positions == sorted(positions)
    assert promql("amd.energy") == (
        f"(sum by ({AMD_BY}) (increase(gpu_energy_consumed[3600s])) / 1000000)"
        f" or (sum by ({AMD_BY}) (increase(amd_gpu_energy_consumed[3600s])) / 1000000)"
    )
    assert "gpu_total_vram[" in promql("amd.memory_total") and "gpu_used_vram[" in promql("amd.memory_used")


def test_inference_families():
    assert promql("vllm.prompt_tokens") == "(sum by (model_name) (increase(vllm:prompt_tokens_total[3600s])))"
    assert promql("vllm.generation_tokens") == (
        "(sum by (model_name) (increase(vllm:generation_tokens_total[3600s])))"
    )
    assert (
        promql("vllm.running_mean")
        == "(sum by (model_name) (avg_over_time(vllm:num_requests_running[3600s])))"
    )
    assert (
        promql("vllm.waiting_max")
        == "(sum by (model_name) (max_over_time(vllm:num_requests_waiting[3600s])))"
    )
    assert promql("vllm.kv_cache_usage_mean") == (
        "(avg by (model_name) (avg_over_time(vllm:kv_cache_usage_perc[3600s])))"
        " or (avg by (model_name) (avg_over_time(vllm:gpu_cache_usage_perc[3600s])))"
    )
    assert promql("vllm.ttft_buckets") == (
        "(sum by (model_name, le) (increase(vllm:time_to_first_token_seconds_bucket[3600s])))"
    )
    assert promql("vllm.e2e_latency_buckets", group_by=("model_name", "service")) == (
        "(sum by (model_name, service, le) (increase(vllm:e2e_request_latency_seconds_bucket[3600s])))"
    )
    assert (
        promql("sglang.running_mean")
        == "(sum by (model_name) (avg_over_time(sglang:num_running_reqs[3600s])))"
    )
    assert (
        promql("sglang.waiting_mean") == "(sum by (model_name) (avg_over_time(sglang:num_queue_reqs[3600s])))"
    )
    assert (
        promql("sglang.kv_cache_usage_mean")
        == "(avg by (model_name) (avg_over_time(sglang:token_usage[3600s])))"
    )


def test_step_is_the_range():
    assert "[300s]" in family_promql(
        FAMILIES["nvidia.power"], step=300, selectors=[""], group_by=GPU_GROUP_LABELS["nvidia"]
    )


def test_unmatched_query_subtracts_every_claiming_pool():
    query = unmatched_promql("nvidia", step=3600, pool_selectors=POOL_A)
    left, right = query.split(" unless ")
    assert left.startswith(f"group by ({NV_BY}) (present_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE[3600s])")
    assert 'present_over_time(DCGM_FI_DEV_POWER_USAGE{hostname=~"gpu-node-a.*"}[3600s])' in right
    assert " unless " not in unmatched_promql("amd", step=3600, pool_selectors=[])


def test_vendor_other_gets_both_families():
    assert {family.group for family in gpu_families("other")} == {"nvidia", "amd"}
    assert {family.group for family in gpu_families("amd")} == {"amd"}


def test_gpu_identity_from_label_variants():
    old = gpu_identity("nvidia", {"uuid": "GPU-1", "hostname": "n1", "gpu": "3", "model_name": "T4"})
    new = gpu_identity("nvidia", {"UUID": "GPU-1", "Hostname": "n1", "gpu": "3", "modelName": "T4"})
    assert old == new
    amd = gpu_identity("amd", {"hostname": "h", "gpu_id": "2", "gpu_partition_id": "NA", "serial_number": ""})
    assert (amd.device_key, amd.partition) == ("gpu2", "")


T = datetime(2026, 1, 1, tzinfo=UTC)


def points(chunk, step):
    start, end = chunk
    return int((end - start).total_seconds()) // step


@pytest.mark.parametrize("step", [300, 3600])
def test_chunks_are_at_most_24_hours(step):
    chunks = chunk_windows(T, T + timedelta(days=3, hours=5), step)
    assert [c[1] - c[0] for c in chunks] == [timedelta(hours=24)] * 3 + [timedelta(hours=5)]
    assert chunks[0][0] == T and chunks[-1][1] == T + timedelta(days=3, hours=5)
    assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:], strict=False))  # no gap, no overlap


def test_chunks_stop_at_11000_points_per_series():
    step = 5  # 24 h would be 17,280 points: the point limit binds first
    chunks = chunk_windows(T, T + timedelta(days=1), step)
    assert [points(chunk, step) for chunk in chunks] == [MAX_POINTS_PER_SERIES, 17_280 - 11_000]
    # exactly 11,000 fits in one request, 11,001 does not
    assert len(chunk_windows(T, T + timedelta(seconds=11_000 * step), step)) == 1
    assert [points(c, step) for c in chunk_windows(T, T + timedelta(seconds=11_001 * step), step)] == [
        11_000,
        1,
    ]
    # a 15 s step: 24 h = 5,760 points, under the limit, so the 24 h cap decides
    assert points(chunk_windows(T, T + timedelta(days=2), 15)[0], 15) == 5_760


def test_nothing_to_do_gives_no_chunk():
    assert chunk_windows(T, T, 3600) == []


def test_retry_delays_double_from_30ms_to_5s():
    assert retry_delays(10) == [0.03, 0.06, 0.12, 0.24, 0.48, 0.96, 1.92, 3.84, 5.0, 5.0]


def test_lag_is_two_scrape_intervals_then_aligned(db):
    from ingest.models import PrometheusSource

    source = PrometheusSource(
        name="x", url="http://127.0.0.1:1", step_seconds=3600, scrape_interval_seconds=60
    )
    assert target_end(source, T + timedelta(hours=5, minutes=1, seconds=59)) == T + timedelta(hours=4)
    assert target_end(source, T + timedelta(hours=5, minutes=2)) == T + timedelta(hours=5)
    source.step_seconds = 300
    assert target_end(source, T + timedelta(hours=5, minutes=9)) == T + timedelta(hours=5, minutes=5)
