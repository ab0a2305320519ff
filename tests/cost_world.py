"""A small priced world for cost tests: two teams, two GPU pools, a token-priced model whose
price changes at 10:30, and builders for attempts in the hour starting 2026-11-02 10:00 UTC."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ingest.records import UsageRecord
from ingest.services import ingest_items, source_for

CATALOG = """
teams: [{slug: a, name: A}, {slug: b, name: B}]
pools:
  - {name: h100, vendor: nvidia, gpu_model: H100, gpu_count: 2, kwh_price: "0.10",
     prices: [{effective_from: 2026-01-01, gpu_hour: "2.50"}]}
  - {name: mi300, vendor: amd, gpu_model: MI300X, gpu_count: 4, weights: {input: "1", output: "3"},
     prices: [{effective_from: 2026-01-01, gpu_hour: "1.50"}]}
endpoints:
  - {name: vllm-1, kind: gpu_pool, pool: h100}
  - {name: vllm-2, kind: gpu_pool, pool: h100}
  - {name: amd-1, kind: gpu_pool, pool: mi300}
  - {name: openai, kind: token_priced, provider: openai}
models:
  - {name: llama}
  - name: mini
    prices:
      - {effective_from: 2026-01-01, input: "0.15", cached_input: "0.075", output: "0.60"}
      - {effective_from: "2026-11-02T10:30:00Z", input: "0.20", output: "0.80"}
"""

H = datetime(2026, 11, 2, 10, tzinfo=UTC)


def attempt(
    n: int, *, minute: int = 5, hour: datetime = H, task: str | None = None, attempt_no: int = 1, **kw
):
    values = {
        "idempotency_key": f"r-{n}",
        "task_id": task or f"t-{n}",
        "attempt": attempt_no,
        "request_id": f"r-{n}",
        "ts": hour + timedelta(minutes=minute),
        "model": "mini",
        "model_version": "",
        "endpoint": "openai",
        "workload": "w",
        "team": "a",
        "status": "success",
        "http_status": 200,
        "error_type": None,
        "latency_ms": 1000,
        "ttft_ms": 100,
        "queue_wait_ms": None,
        "prompt_tokens": 1000,
        "completion_tokens": 100,
        "cached_tokens": 0,
        "reasoning_tokens": None,
    }
    values.update(kw)
    return UsageRecord(**values)


def load(*records):
    result = ingest_items(list(records), source=source_for("t"), origin="test")
    assert result.rejected == 0, result.sample_rejects
    return result
