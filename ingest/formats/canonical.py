"""Canonical usage JSONL: our own stable contract, one JSON object per attempt.

    {"task_id":"t-1","attempt":1,"request_id":"r-1","ts":"2026-11-02T10:15:00Z",
     "model":"llama-3.1-70b-awq","model_version":"2026-10-01","endpoint":"vllm-h100-a",
     "workload":"summarize","team":"netops","status":"success","http_status":200,
     "error_type":null,"latency_ms":812,"ttft_ms":95,"queue_wait_ms":12,
     "usage":{"prompt_tokens":900,"completion_tokens":120,"total_tokens":1020,
              "prompt_tokens_details":{"cached_tokens":0}}}

Mapping (field names are the record's own):
* task id = `task_id` (required); attempt = `attempt` (integer >= 1; may be omitted only when
  `request_id` is given, then 1); idempotency key = `request_id`, else `task_id#attempt`.
* status = `status` (success/failure and aliases, see validate); if absent, derived from
  `http_status` (2xx = success, anything else = failure); neither present is a reject.
* team / workload / endpoint / model = the fields of the same name, else the file defaults.
* ts = `ts`, ISO 8601 with an offset (`Z`) or unix seconds; naive timestamps are refused.
* tokens = `usage`, an OpenAI Chat Completions or Responses API usage object. A failed attempt
  may omit `usage` (counted with 0 tokens); a successful one may not.
Unknown extra fields are ignored. A JSON array (one line or pretty-printed) is read as a list of
records, which is also the body shape of `POST /api/v1/usage/`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any, BinaryIO

from ingest.formats import Item, iter_json_values
from ingest.records import FileDefaults, Reject, UsageRecord
from ingest.validate import (
    InvalidRecord,
    build_record,
    excerpt_of,
    openai_usage,
    parse_ts,
    pick,
    reject,
    status_of,
)


def iter_records(
    stream: BinaryIO, *, defaults: FileDefaults, now: datetime, fast_rows: bool = False
) -> Iterator[Item]:
    """Records and rejects, one per JSON value; with `fast_rows`, plain lines come as fast rows
    (`canonical_fast`), the same attempt already packed for COPY."""
    fast = None
    if fast_rows:
        from ingest.formats.canonical_fast import plain_row_parser

        fast = plain_row_parser(defaults, now)
    for item in iter_json_values(stream, fast=fast):
        if type(item) is tuple and len(item) == 8:  # a fast row (canonical_fast.FastRow)
            yield item
            continue
        if isinstance(item, Reject):
            yield item
            continue
        location, value = item
        try:
            yield record_from_object(value, defaults=defaults, now=now)
        except InvalidRecord as exc:
            yield reject(location, exc.reason, excerpt_of(value))


def record_from_object(obj: Any, *, defaults: FileDefaults, now: datetime) -> UsageRecord:
    """One canonical object -> UsageRecord (raises InvalidRecord). Also used by the HTTP API."""
    if not isinstance(obj, Mapping):
        raise InvalidRecord("record: must be a JSON object")
    status = obj.get("status")
    status = _status_from_http(obj.get("http_status")) if status is None else status_of(status)
    usage = obj.get("usage")
    if usage is None:
        if status == "success":
            raise InvalidRecord("usage: required for a successful attempt")
        tokens: dict[str, Any] = {"prompt_tokens": 0, "completion_tokens": 0}
        labels: dict[str, str] = {}
    else:
        tokens, labels = openai_usage(usage, "usage")
    attempt = obj.get("attempt")
    if attempt is None and pick(obj.get("request_id")) is not None:
        attempt = 1  # the request id alone is a unique key, so the attempt number is optional
    elif attempt is None:
        raise InvalidRecord("attempt: required when request_id is absent")
    ts = obj.get("ts")
    return build_record(
        task_id=obj.get("task_id"),
        attempt=attempt,
        request_id=obj.get("request_id"),
        ts=parse_ts(ts, "ts") if ts is not None else None,
        model=pick(obj.get("model"), defaults.model),
        model_version=obj.get("model_version"),
        endpoint=pick(obj.get("endpoint"), defaults.endpoint),
        workload=pick(obj.get("workload"), defaults.workload),
        team=pick(obj.get("team"), defaults.team),
        status=status,
        http_status=obj.get("http_status"),
        error_type=obj.get("error_type"),
        latency_ms=obj.get("latency_ms"),
        ttft_ms=obj.get("ttft_ms"),
        queue_wait_ms=obj.get("queue_wait_ms"),
        now=now,
        labels=labels,
        **tokens,
    )


def _status_from_http(http_status: Any) -> str:
    if isinstance(http_status, int) and not isinstance(http_status, bool):
        return "success" if 200 <= http_status < 300 else "failure"
    raise InvalidRecord("status: required (and no http_status to derive it from)")
