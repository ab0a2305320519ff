"""OpenAI Batch API output/error files and vLLM `run-batch` output (JSONL).

Two shapes are read (both real: `tests/data/vllm-run-batch*.output.jsonl`):
* envelope (OpenAI, current vLLM): `{"id", "custom_id", "response": {"status_code",
  "request_id", "body": {...API response incl. usage...}} | null, "error": {"code",
  "message"} | null}`;
* legacy vLLM: `{"id", "custom_id", "response": {...the completion itself...}, "error"}`
  (no `status_code`/`body`).

Mapping:
* task id = `custom_id`; attempt = 1 (a batch line is one request; a resubmitted line in a later
  batch is another attempt of the same task with its own key); idempotency key = request_id =
  `response.request_id`, else the line's `id` (`batch_req_...` / `vllm-...`), both unique.
* status = success when `error` is null, a response is present and its `status_code` is 2xx
  (legacy lines have no status code: success); otherwise failure. http_status = `status_code`.
  error_type = `error.code`, else `response.body.error.code`/`.type`.
* ts = `body.created` (or `created_at`, unix seconds). Error lines carry no time at all: they
  use `FileDefaults.ts` (pass the batch's `completed_at`) and are rejected without it.
* model = `body.model` (the served model, e.g. a dated snapshot), else the file default.
* team / workload / endpoint = file defaults only (the output file does not say them).
* tokens = `body.usage` (chat, Responses API or embeddings/score usage); a failed line without
  usage counts 0 tokens, a successful one without usage is rejected.
Output order is not input order and failures live in the separate error file; neither matters
here because every line is self-contained and keyed.
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
    pick,
    reject,
    ts_from_unix_seconds,
)


def iter_records(stream: BinaryIO, *, defaults: FileDefaults, now: datetime) -> Iterator[Item]:
    for item in iter_json_values(stream):
        if isinstance(item, Reject):
            yield item
            continue
        location, value = item
        try:
            yield record_from_line(value, defaults=defaults, now=now)
        except InvalidRecord as exc:
            yield reject(location, exc.reason, excerpt_of(value))


def record_from_line(obj: Any, *, defaults: FileDefaults, now: datetime) -> UsageRecord:
    if not isinstance(obj, Mapping):
        raise InvalidRecord("line: must be a JSON object")
    response = obj.get("response")
    if response is not None and not isinstance(response, Mapping):
        raise InvalidRecord("response: must be an object or null")
    error = obj.get("error")
    legacy = response is not None and "status_code" not in response and "body" not in response
    body = response if legacy else (response or {}).get("body")
    body_label = "response" if legacy else "response.body"
    if body is not None and not isinstance(body, Mapping):
        raise InvalidRecord(f"{body_label}: must be an object or null")
    body = body or {}
    status_code = None if legacy or response is None else response.get("status_code")
    ok = error is None and response is not None and (legacy or _is_2xx(status_code))

    usage = body.get("usage")
    if usage is None:
        if ok:
            raise InvalidRecord(f"{body_label}.usage: required for a successful response")
        tokens: dict[str, Any] = {"prompt_tokens": 0, "completion_tokens": 0}
        labels: dict[str, str] = {}
    else:
        tokens, labels = openai_usage(usage, f"{body_label}.usage")
    labels.update(task_id="custom_id", ts=f"{body_label}.created", model=f"{body_label}.model")
    labels["http_status"] = "response.status_code"

    return build_record(
        task_id=obj.get("custom_id"),
        attempt=1,
        request_id=pick(None if legacy or response is None else response.get("request_id"), obj.get("id")),
        ts=_timestamp(body, body_label, defaults),
        model=pick(body.get("model"), defaults.model),
        endpoint=defaults.endpoint,
        workload=defaults.workload,
        team=defaults.team,
        status="success" if ok else "failure",
        http_status=status_code,
        error_type=None if ok else _error_type(error, body),
        now=now,
        labels=labels,
        **tokens,
    )


def _is_2xx(status_code: Any) -> bool:
    return isinstance(status_code, int) and not isinstance(status_code, bool) and 200 <= status_code < 300


def _timestamp(body: Mapping[str, Any], body_label: str, defaults: FileDefaults) -> datetime:
    for key in ("created", "created_at"):
        if body.get(key) is not None:
            return ts_from_unix_seconds(body[key], f"{body_label}.{key}")
    if defaults.ts is not None:
        return defaults.ts
    raise InvalidRecord(
        f"{body_label}.created: missing (error lines carry no time; pass the batch's completed_at "
        "as the file's default timestamp)"
    )


def _error_type(error: Any, body: Mapping[str, Any]) -> Any:
    # Only the short code is kept: error messages can quote the request.
    if isinstance(error, Mapping) and error.get("code") is not None:
        return error["code"]
    body_error = body.get("error")
    if isinstance(body_error, Mapping):
        return pick(body_error.get("code"), body_error.get("type"))
    return None
