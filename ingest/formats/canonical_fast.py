"""The canonical format's fast path: one JSONL line straight to a binary COPY row.

Most lines of a canonical file are plain: every field of its JSON type, in range, no escapes.
For those, ``msgspec`` decodes the line into typed structs in C (a wrong type is a decode error,
not a value to check in Python), a few comparisons repeat the checks of
``validate._build_plain_record``, and the row is packed for COPY without building a dict, a
``UsageRecord`` or a row tuple first: about a third of the Python time per record of the full path.

Anything less plain returns None and the line takes the full path (orjson/json, the canonical
mapping, ``build_record``), which decides with its precise reason. So the fast path can only
accept what the full path accepts, and must build the very same row: a property test
(``tests/test_ingest_fast_path.py``) holds the two equal over generated lines.

A fast row is a plain tuple (cheaper than any object) laid out as ``FastRow`` names it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, NamedTuple

import msgspec

from ingest.records import FileDefaults
from ingest.validate import (
    _CONTROL,
    _STATUS_WORDS,
    EARLIEST_TS,
    FUTURE_SLACK,
    MAX_ATTEMPT,
    MAX_DIMENSION_CHARS,
    MAX_ID_CHARS,
    MAX_INT32,
    MAX_TOKENS_PER_ATTEMPT,
    pick,
)
from ingest.writer import COLUMNS, PG_EPOCH, ROW_HEAD, encode_tail
from ingest.writer import ONE_MICROSECOND as _US


class FastRow(NamedTuple):
    """The layout of a fast row (built as a plain tuple; this names the positions)."""

    names: tuple  # (team, workload, model, model_version, endpoint, error_type): ids looked up later
    head: bytes  # field count, ts, key hash, task hash
    tail: bytes  # tokens, timings, attempt, http status, succeeded, task id
    ts: datetime  # for the partition month, and the excerpt if the dimensions refuse it
    task_id: str
    attempt: int
    model: str


# Unknown fields are skipped; a field of the wrong JSON type fails the decode (-> full path).
class _PromptDetails(msgspec.Struct):
    cached_tokens: int | None = None


class _CompletionDetails(msgspec.Struct):
    reasoning_tokens: int | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_tokens_details: _PromptDetails | None = None
    completion_tokens_details: _CompletionDetails | None = None
    # Present at all (even null) may mean a Responses API usage object: the full path decides.
    input_tokens: Any = msgspec.UNSET


class _Canonical(msgspec.Struct):
    task_id: str | None = None
    attempt: int | None = None
    request_id: str | None = None
    ts: str | None = None
    model: str | None = None
    model_version: str | None = None
    endpoint: str | None = None
    workload: str | None = None
    team: str | None = None
    status: str | None = None
    http_status: int | None = None
    error_type: str | None = None
    latency_ms: int | None = None
    ttft_ms: int | None = None
    queue_wait_ms: int | None = None
    usage: _Usage | None = None


_FIELD_COUNT = len(COLUMNS)


def plain_row_parser(defaults: FileDefaults, now: datetime) -> Callable[[bytes], tuple | None] | None:
    """A function turning one JSONL line into a fast row (or None: take the full path).

    None instead of a function when a file default is itself unusual (a control character):
    such a run is rare and takes the full path throughout.
    """
    given = [
        value for value in (defaults.team, defaults.workload, defaults.endpoint, defaults.model) if value
    ]
    if any(type(value) is not str or _CONTROL.search(value) for value in given):
        return None
    default_model, default_endpoint = pick(defaults.model), pick(defaults.endpoint)
    default_workload, default_team = pick(defaults.workload), pick(defaults.team)
    latest = now + FUTURE_SLACK
    decode = msgspec.json.Decoder(_Canonical).decode
    decode_error = msgspec.DecodeError
    blake2b = hashlib.blake2b
    fromisoformat = datetime.fromisoformat
    pack_head = ROW_HEAD.pack

    def parse(line: bytes) -> tuple | None:  # noqa: C901 - one straight line of checks, on purpose
        try:
            record = decode(line)
        except decode_error:
            return None
        status = record.status
        http_status = record.http_status
        if status is None:  # canonical: derived from http_status
            if http_status is None:
                return None
            status = "success" if 200 <= http_status < 300 else "failure"
        else:
            status = _STATUS_WORDS.get(status)  # the exact lower-case words only; others: full path
            if status is None:
                return None
        usage = record.usage
        if usage is None:
            if status == "success":
                return None
            prompt = completion = cached = 0
            reasoning = None
        else:
            if usage.input_tokens is not msgspec.UNSET:
                return None
            prompt = usage.prompt_tokens
            completion = usage.completion_tokens
            if completion is None:
                completion = 0
            details = usage.prompt_tokens_details
            cached = details.cached_tokens if details is not None else None
            if cached is None:
                cached = 0
            details = usage.completion_tokens_details
            reasoning = details.reasoning_tokens if details is not None else None
        request_id = record.request_id
        attempt = record.attempt
        if attempt is None:
            if request_id is None or not request_id.strip():
                return None
            attempt = 1
        ts = record.ts
        task_id = record.task_id
        model = record.model
        if model is None or not model.strip():
            model = default_model
        model_version = record.model_version
        endpoint = record.endpoint
        if endpoint is None or not endpoint.strip():
            endpoint = default_endpoint
        workload = record.workload
        if workload is None or not workload.strip():
            workload = default_workload
        team = record.team
        if team is None or not team.strip():
            team = default_team
        error_type = record.error_type
        if ts is None or task_id is None or model is None:
            return None
        # JSON text cannot hold a raw control character: a decoded string has one only if the
        # line has an escape (or a raw DEL). Only such lines pay for the search.
        if b"\\" in line or b"\x7f" in line:
            texts = (task_id, request_id, model, model_version, endpoint, workload, team, error_type)
            if _CONTROL.search("\u241f".join(text for text in texts if text is not None)):
                return None
        task = task_id.strip()
        model = model.strip()
        if not task or len(task) > MAX_ID_CHARS or not model or len(model) > MAX_DIMENSION_CHARS:
            return None
        if request_id is not None:
            request_id = request_id.strip()
            if len(request_id) > MAX_ID_CHARS:
                return None
        model_version = model_version.strip() if model_version is not None else ""
        endpoint = endpoint.strip() if endpoint is not None else ""
        workload = workload.strip() if workload is not None else ""
        team = team.strip() if team is not None else ""
        if (
            len(model_version) > MAX_DIMENSION_CHARS
            or len(endpoint) > MAX_DIMENSION_CHARS
            or len(workload) > MAX_DIMENSION_CHARS
            or len(team) > MAX_DIMENSION_CHARS
            or not 1 <= attempt <= MAX_ATTEMPT
            or prompt is None
            or not 0 <= prompt <= MAX_TOKENS_PER_ATTEMPT
            or not 0 <= completion <= MAX_TOKENS_PER_ATTEMPT
            or prompt + completion > MAX_TOKENS_PER_ATTEMPT
            or not 0 <= cached <= prompt
            or (reasoning is not None and not 0 <= reasoning <= completion)
        ):
            return None
        latency, ttft, queue_wait = record.latency_ms, record.ttft_ms, record.queue_wait_ms
        if (
            (latency is not None and not 0 <= latency <= MAX_INT32)
            or (ttft is not None and not 0 <= ttft <= MAX_INT32)
            or (queue_wait is not None and not 0 <= queue_wait <= MAX_INT32)
            or (http_status is not None and not 100 <= http_status <= 599)
        ):
            return None
        try:
            parsed = fromisoformat(ts.strip())
            if parsed.tzinfo is None or parsed.utcoffset() is None:
                return None
            when = parsed.astimezone(UTC)
        except (ValueError, OverflowError):
            return None
        if when < EARLIEST_TS or when > latest:
            return None
        error_kind = error_type.strip()[:MAX_DIMENSION_CHARS] or None if error_type is not None else None
        key = request_id if request_id else f"{task}#{attempt}"
        task_bytes = task.encode()
        head = pack_head(
            _FIELD_COUNT,
            8,
            (when - PG_EPOCH) // _US,
            8,
            blake2b(key.encode(), digest_size=8).digest(),
            8,
            blake2b(task_bytes, digest_size=8).digest(),
        )
        tail = encode_tail(
            prompt,
            completion,
            cached,
            reasoning,
            latency,
            ttft,
            queue_wait,
            attempt,
            http_status,
            status == "success",
            task_bytes,
        )
        names = (team, workload, model, model_version, endpoint, error_kind)
        return (names, head, tail, when, task, attempt, model)

    return parse
