"""LiteLLM proxy spend logs (`LiteLLM_SpendLogs` rows) as CSV or as JSON/JSONL.

CSV is what `\\copy "LiteLLM_SpendLogs" TO ... CSV HEADER` writes: a header row with the exact
(case-sensitive, camelCase) column names, `metadata`/`request_tags` as JSON text, empty cells for
NULL. JSON is one row object per line, or a JSON array of them (the proxy's `/spend/logs`).
Column names are matched case-insensitively; unknown columns are ignored.

Mapping (`meta` = `metadata.spend_logs_metadata`, the dict a client sends as
`metadata={"spend_logs_metadata": {...}}` to have it logged with the row):
* idempotency key = request_id = `request_id` (the table's primary key).
* task id = `meta.task_id`, else `session_id`, else `request_id` (each call its own task);
  attempt = `meta.attempt`, else 1.
* status = `status` (`success`/`failure`); empty means success (older LiteLLM wrote only
  successful calls to this table). http_status / error_type =
  `metadata.error_information.error_code` / `.error_class`.
* team = `meta.team`, else `metadata.user_api_key_team_alias`, else the file default, else
  `team_id`. workload = `meta.workload`, else the file default.
  endpoint = `meta.endpoint`, else the file default, else `model_id` (the proxy deployment),
  else `api_base`, else `custom_llm_provider`.
* model = `model` (as sent to the provider), else `model_group`, else the file default.
* ts = `startTime` (naive values are UTC: Prisma stores UTC); latency = `request_duration_ms`,
  else `endTime - startTime`; ttft = `completionStartTime - startTime` when it is before
  `endTime` (LiteLLM sets it to endTime for non-streaming calls, which is not a TTFT).
* tokens = `prompt_tokens`, `completion_tokens`; cached and reasoning tokens from
  `metadata.usage_object` when present. `cache_hit = True` (a string column) means the proxy
  answered from its own cache without calling a model: the row is kept as an attempt with
  0 tokens, so it is neither charged nor lost. `spend` is ignored: we price tokens ourselves.
`messages`, `response` and `proxy_server_request` are never read.
"""

from __future__ import annotations

import csv
import itertools
import json
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any, BinaryIO

from ingest.formats import Item, Line, iter_lines, json_values_from_lines
from ingest.records import FileDefaults, Reject, UsageRecord
from ingest.validate import (
    InvalidRecord,
    as_int,
    build_record,
    excerpt_of,
    int_from_text,
    lenient_http_status,
    parse_ts,
    pick,
    reject,
)

# csv's default 128 KiB field limit would reject rows whose (unused) messages column is large.
# The limit is process-global; raising it is harmless because iter_lines caps each line anyway.
_FIELD_LIMIT = 16 * 1024 * 1024
if csv.field_size_limit() < _FIELD_LIMIT:
    csv.field_size_limit(_FIELD_LIMIT)

REQUIRED_COLUMNS = ("request_id", "startTime", "model", "prompt_tokens", "completion_tokens")
# Excerpts of rows drop these besides the generic content keys (see validate.redact).
_EXCERPT_DROP = frozenset({"response", "proxy_server_request", "traceback", "messages"})


def iter_records(stream: BinaryIO, *, defaults: FileDefaults, now: datetime) -> Iterator[Item]:
    lines = iter_lines(stream)
    head: list[Line] = []
    first: bytes | None = None
    for entry in lines:  # find the first non-blank line to tell CSV from JSON
        head.append(entry)
        payload = entry[1]
        if isinstance(payload, bytes) and payload.strip():
            first = payload.strip()
            break
    if first is None:
        yield from (p for _, p, _ in head if isinstance(p, Reject))
        return
    replay = itertools.chain(head, lines)
    if first[:1] in (b"{", b"["):
        yield from _iter_json(replay, defaults=defaults, now=now)
    else:
        yield from _iter_csv(replay, defaults=defaults, now=now)


# --- JSON / JSONL ------------------------------------------------------------------------------


def _iter_json(lines: Iterable[Line], *, defaults: FileDefaults, now: datetime) -> Iterator[Item]:
    for item in json_values_from_lines(lines):
        if isinstance(item, Reject):
            yield item
            continue
        location, value = item
        if not isinstance(value, Mapping):
            yield reject(location, "row: must be a JSON object", excerpt_of(value, _EXCERPT_DROP))
            continue
        yield _record_or_reject(location, value, defaults=defaults, now=now)


# --- CSV ---------------------------------------------------------------------------------------


class _CsvSource:
    """Feeds csv.reader decoded lines and remembers where it is, so rows get line numbers and
    unreadable lines become Rejects instead of silently vanishing."""

    def __init__(self, lines: Iterable[Line]) -> None:
        self._lines = lines
        self.line_no = 0
        self.pending: list[Reject] = []

    def __iter__(self) -> Iterator[str]:
        for line_no, payload, _ in self._lines:
            self.line_no = line_no
            if isinstance(payload, Reject):
                self.pending.append(payload)
                continue
            yield payload.decode("utf-8") + "\n"


def _iter_csv(lines: Iterable[Line], *, defaults: FileDefaults, now: datetime) -> Iterator[Item]:
    source = _CsvSource(lines)
    reader = csv.reader(source)
    columns: list[str] | None = None
    while True:
        start = source.line_no + 1
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            # No excerpt: a broken CSV row cannot be split safely, and its messages cell may be in it.
            yield from _flush(source)
            yield reject(_where(start, source.line_no), f"not valid CSV: {exc}")
            continue
        yield from _flush(source)
        if not row or all(not cell.strip() for cell in row):
            continue
        location = _where(start, source.line_no)
        if columns is None:
            columns = _canonical_columns(row)
            missing = [c for c in REQUIRED_COLUMNS if c not in columns]
            if missing:
                yield reject(location, f"header: missing column(s) {', '.join(missing)}", ",".join(row)[:200])
                return
            continue
        if len(row) != len(columns):
            yield reject(location, f"row has {len(row)} fields but the header has {len(columns)}")
            continue
        yield _record_or_reject(location, dict(zip(columns, row, strict=True)), defaults=defaults, now=now)
    yield from _flush(source)


def _flush(source: _CsvSource) -> Iterator[Reject]:
    yield from source.pending
    source.pending.clear()


def _where(start: int, end: int) -> str:
    return f"line {end}" if end <= start else f"lines {start}-{end}"


_KNOWN = {
    name.lower(): name
    for name in (
        *REQUIRED_COLUMNS,
        "endTime",
        "completionStartTime",
        "request_duration_ms",
        "model_group",
        "model_id",
        "api_base",
        "custom_llm_provider",
        "team_id",
        "session_id",
        "metadata",
        "cache_hit",
        "status",
    )
}


def _canonical_columns(header: list[str]) -> list[str]:
    # Exports differ in case (psql keeps "startTime", some tools lower-case it); normalise names.
    return [_KNOWN.get(name.strip().lower(), name.strip()) for name in header]


# --- one row -----------------------------------------------------------------------------------


def _record_or_reject(
    location: str, row: Mapping[str, Any], *, defaults: FileDefaults, now: datetime
) -> Item:
    row = {_KNOWN.get(str(k).lower(), str(k)): v for k, v in row.items()}
    try:
        return record_from_row(row, defaults=defaults, now=now)
    except InvalidRecord as exc:
        return reject(location, exc.reason, excerpt_of(row, _EXCERPT_DROP))


def record_from_row(row: Mapping[str, Any], *, defaults: FileDefaults, now: datetime) -> UsageRecord:
    metadata = _json_object(row.get("metadata"), "metadata")
    meta = _user_meta(metadata)
    error_info = metadata.get("error_information")
    error_info = error_info if isinstance(error_info, Mapping) else {}
    start = parse_ts(_blank_none(row.get("startTime")), "startTime", naive_is_utc=True)
    end = _opt_ts(row.get("endTime"), "endTime")
    first_token = _opt_ts(row.get("completionStartTime"), "completionStartTime")
    prompt = int_from_text(row.get("prompt_tokens"))
    completion = int_from_text(row.get("completion_tokens"))
    cached, reasoning = _usage_details(metadata)
    if _is_true(row.get("cache_hit")):
        prompt, completion, cached, reasoning = 0, 0, 0, None
    status = _blank_none(row.get("status")) or "success"
    if pick(row.get("request_id")) is None:
        raise InvalidRecord("request_id: required")
    task_label, task_id = next(
        (label, value)
        for label, value in (
            ("metadata.spend_logs_metadata.task_id", meta.get("task_id")),
            ("session_id", row.get("session_id")),
            ("request_id", row.get("request_id")),
        )
        if pick(value) is not None
    )
    return build_record(
        task_id=task_id,
        attempt=int_from_text(pick(meta.get("attempt"), 1)),
        request_id=row.get("request_id"),
        ts=start,
        model=pick(row.get("model"), row.get("model_group"), defaults.model),
        endpoint=pick(
            meta.get("endpoint"),
            defaults.endpoint,
            row.get("model_id"),
            row.get("api_base"),
            row.get("custom_llm_provider"),
        ),
        workload=pick(meta.get("workload"), defaults.workload),
        team=pick(
            meta.get("team"), metadata.get("user_api_key_team_alias"), defaults.team, row.get("team_id")
        ),
        status=status,
        http_status=lenient_http_status(error_info.get("error_code")),
        error_type=pick(error_info.get("error_class")),
        latency_ms=_latency(row.get("request_duration_ms"), start, end),
        ttft_ms=_ttft(start, first_token, end),
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached_tokens=cached,
        reasoning_tokens=reasoning,
        now=now,
        labels={
            "task_id": task_label,
            "attempt": "metadata.spend_logs_metadata.attempt",
            "cached_tokens": "metadata.usage_object.prompt_tokens_details.cached_tokens",
            "reasoning_tokens": "metadata.usage_object.completion_tokens_details.reasoning_tokens",
            "ts": "startTime",
        },
    )


def _blank_none(value: Any) -> Any:
    return None if isinstance(value, str) and not value.strip() else value


def _json_object(value: Any, label: str) -> Mapping[str, Any]:
    value = _blank_none(value)
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            raise InvalidRecord(f"{label}: not valid JSON") from None
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidRecord(f"{label}: must be a JSON object")
    return value


def _user_meta(metadata: Mapping[str, Any]) -> Mapping[str, Any]:
    # spend_logs_metadata is LiteLLM's "log these k,v pairs to spend logs" request parameter.
    part = metadata.get("spend_logs_metadata")
    return part if isinstance(part, Mapping) else {}


def _usage_details(metadata: Mapping[str, Any]) -> tuple[Any, Any]:
    usage = metadata.get("usage_object")
    if not isinstance(usage, Mapping):
        return 0, None
    prompt_details = usage.get("prompt_tokens_details")
    completion_details = usage.get("completion_tokens_details")
    cached = prompt_details.get("cached_tokens") if isinstance(prompt_details, Mapping) else None
    if cached is None:
        cached = usage.get("cache_read_input_tokens")  # Anthropic-style usage passed through
    reasoning = (
        completion_details.get("reasoning_tokens") if isinstance(completion_details, Mapping) else None
    )
    return (0 if cached is None else cached), reasoning


def _is_true(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def _opt_ts(value: Any, label: str) -> datetime | None:
    value = _blank_none(value)
    return None if value is None else parse_ts(value, label, naive_is_utc=True)


def _latency(duration: Any, start: datetime, end: datetime | None) -> int | None:
    value = int_from_text(_blank_none(duration))
    if value is not None:
        return as_int(value, "request_duration_ms")
    if end is None or end < start:
        return None
    return _ms(end - start)


def _ttft(start: datetime, first_token: datetime | None, end: datetime | None) -> int | None:
    if first_token is None or first_token < start or (end is not None and first_token >= end):
        return None
    return _ms(first_token - start)


def _ms(delta: timedelta) -> int:
    return delta // timedelta(milliseconds=1)
