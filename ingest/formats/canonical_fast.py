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
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, NamedTuple

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
from ingest.writer import _TAIL_PACKERS, COLUMNS, MICROS_PER_HOUR, PG_EPOCH, ROW_HEAD, tail_packer
from ingest.writer import ONE_MICROSECOND as _US


class FastRow(NamedTuple):
    """The layout of a fast row (built as a plain tuple; this names the positions)."""

    names: tuple  # (team, workload, model, model_version, endpoint, error_type): ids looked up later
    head: bytes  # field count, ts, key hash, task hash
    tail: bytes  # tokens, timings, attempt, http status, succeeded, task id
    hour: int  # hours since writer.PG_EPOCH: the partition to create, the hour to mark dirty
    ts: datetime  # for the excerpt, should the dimensions refuse the record
    task_id: str
    attempt: int
    model: str


# Unknown fields are skipped. A field of the wrong JSON type, or out of the range a plain record
# has, fails the decode in C (-> full path). Text lengths are bounded before stripping, which
# only sends a few more lines (padded ones) to the full path, never fewer.
_Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_INT32)]
_Tokens = Annotated[int, msgspec.Meta(ge=0, le=MAX_TOKENS_PER_ATTEMPT)]
_Attempt = Annotated[int, msgspec.Meta(ge=1, le=MAX_ATTEMPT)]
_HttpStatus = Annotated[int, msgspec.Meta(ge=100, le=599)]
_Id = Annotated[str, msgspec.Meta(max_length=MAX_ID_CHARS)]
_Name = Annotated[str, msgspec.Meta(max_length=MAX_DIMENSION_CHARS)]


class _PromptDetails(msgspec.Struct, gc=False):
    cached_tokens: _Count | None = None


class _CompletionDetails(msgspec.Struct, gc=False):
    reasoning_tokens: _Count | None = None


class _Usage(msgspec.Struct, gc=False):
    prompt_tokens: _Tokens | None = None
    completion_tokens: _Tokens | None = None
    prompt_tokens_details: _PromptDetails | None = None
    completion_tokens_details: _CompletionDetails | None = None
    # Present at all (even null) may mean a Responses API usage object: the full path decides.
    input_tokens: Any = msgspec.UNSET


class _Canonical(msgspec.Struct, gc=False):
    task_id: _Id | None = None
    attempt: _Attempt | None = None
    request_id: _Id | None = None
    ts: str | None = None
    model: _Name | None = None
    model_version: _Name | None = None
    endpoint: _Name | None = None
    workload: _Name | None = None
    team: _Name | None = None
    status: str | None = None
    http_status: _HttpStatus | None = None
    error_type: str | None = None
    latency_ms: _Count | None = None
    ttft_ms: _Count | None = None
    queue_wait_ms: _Count | None = None
    usage: _Usage | None = None


_FIELD_COUNT = len(COLUMNS)


def plain_row_parser(defaults: FileDefaults, now: datetime) -> Callable[[bytes], tuple | None] | None:
    """A function turning one JSONL line into a fast row (or None: take the full path).

    None instead of a function when a file default is itself unusual (a control character, more
    than the length a name may have): such a run is rare and takes the full path throughout.
    """
    parsers = plain_parsers(defaults, now)
    return parsers[0] if parsers else None


# Two JSON values on one line: decode_lines splits on any whitespace, JSONL on newlines only.
_TWO_ON_A_LINE = re.compile(rb"\}[ \t]*\{")


def plain_parsers(defaults: FileDefaults, now: datetime):
    """``(parse_line, parse_block)`` for a file, or None (see ``plain_row_parser``).

    ``parse_block(block)`` takes whole lines (at most a few hundred KiB, the first one not the
    file's first) and decodes them in one call; it returns one fast row or None per line, or
    None for the whole block when it is not plain JSONL that way: a blank or whitespace-only
    line, a carriage return, a line not decoding as a canonical object, invalid UTF-8. A None
    line is a standalone JSON object that the full path must decide on its own.
    """
    given = [
        value for value in (defaults.team, defaults.workload, defaults.endpoint, defaults.model) if value
    ]
    if any(
        type(value) is not str or _CONTROL.search(value) or len(value) > MAX_DIMENSION_CHARS
        for value in given
    ):
        return None
    default_model, default_endpoint = pick(defaults.model), pick(defaults.endpoint)
    default_workload, default_team = pick(defaults.workload), pick(defaults.team)
    latest = now + FUTURE_SLACK
    decoder = msgspec.json.Decoder(_Canonical)
    decode, decode_lines = decoder.decode, decoder.decode_lines
    decode_error = msgspec.DecodeError
    unset = msgspec.UNSET
    blake2b = hashlib.blake2b
    fromisoformat = datetime.fromisoformat
    pack_head = ROW_HEAD.pack
    packers = _TAIL_PACKERS
    status_words = _STATUS_WORDS

    def parse_line(line: bytes) -> tuple | None:
        try:
            record = decode(line)
        except (decode_error, RecursionError):  # deep nesting raises RecursionError, not DecodeError
            return None
        return check(record, b"\\" in line or b"\x7f" in line)

    def parse_block(block: bytes) -> list[tuple | None] | None:
        if b"\r" in block or b"\n\n" in block or block[:1] == b"\n" or _TWO_ON_A_LINE.search(block):
            return None
        if not block.isascii():
            try:
                block.decode("utf-8")  # decode_lines does not check the strings it skips
            except UnicodeDecodeError:
                return None
        try:
            records = decode_lines(block)
        except (decode_error, RecursionError):
            return None
        # One object per line, no line without one (a whitespace-only line decodes to nothing).
        if len(records) != block.count(b"\n") + (block[-1:] != b"\n"):
            return None
        escaped = b"\\" in block or b"\x7f" in block
        return [check(record, escaped) for record in records]

    def check(record: _Canonical, escaped: bool) -> tuple | None:
        status = record.status
        http_status = record.http_status
        if status is None:  # canonical: derived from http_status
            if http_status is None:
                return None
            status = "success" if 200 <= http_status < 300 else "failure"
        else:
            status = status_words.get(status)  # the exact lower-case words only; others: full path
            if status is None:
                return None
        usage = record.usage
        if usage is None:
            if status == "success":
                return None
            prompt = completion = cached = 0
            reasoning = None
        else:
            prompt = usage.prompt_tokens
            if prompt is None or usage.input_tokens is not unset:
                return None
            completion = usage.completion_tokens
            if completion is None:
                completion = 0
            details = usage.prompt_tokens_details
            cached = details.cached_tokens if details is not None else None
            if cached is None:
                cached = 0
            details = usage.completion_tokens_details
            reasoning = details.reasoning_tokens if details is not None else None
            if (
                prompt + completion > MAX_TOKENS_PER_ATTEMPT
                or cached > prompt
                or (reasoning is not None and reasoning > completion)
            ):
                return None
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
        endpoint = record.endpoint
        if endpoint is None or not endpoint.strip():
            endpoint = default_endpoint
        workload = record.workload
        if workload is None or not workload.strip():
            workload = default_workload
        team = record.team
        if team is None or not team.strip():
            team = default_team
        model_version = record.model_version
        error_type = record.error_type
        if ts is None or task_id is None or model is None:
            return None
        # JSON text cannot hold a raw control character: a decoded string has one only if the
        # line has an escape (or a raw DEL). Only such lines pay for the search.
        if escaped:
            texts = (task_id, request_id, model, model_version, endpoint, workload, team, error_type)
            if _CONTROL.search("\u241f".join(text for text in texts if text is not None)):
                return None
        task = task_id.strip()
        if not task:
            return None
        model = model.strip()
        if request_id is not None:
            request_id = request_id.strip()
        try:
            parsed = fromisoformat(ts.strip())
            if parsed.tzinfo is None or parsed.utcoffset() is None:
                return None
            when = parsed.astimezone(UTC)
        except (ValueError, OverflowError):
            return None
        if when < EARLIEST_TS or when > latest:
            return None
        key = request_id if request_id else f"{task}#{attempt}"
        task_bytes = task.encode()
        micros = (when - PG_EPOCH) // _US
        head = pack_head(
            _FIELD_COUNT,
            8,
            micros,
            8,
            blake2b(key.encode(), digest_size=8).digest(),
            8,
            blake2b(task_bytes, digest_size=8).digest(),
        )
        latency, ttft, queue_wait = record.latency_ms, record.ttft_ms, record.queue_wait_ms
        nulls = (reasoning is None, latency is None, ttft is None, queue_wait is None, http_status is None)
        pack = packers.get(nulls) or tail_packer(nulls)
        tail = pack(
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
            len(task_bytes),
        )
        names = (
            team.strip() if team is not None else "",
            workload.strip() if workload is not None else "",
            model,
            model_version.strip() if model_version is not None else "",
            endpoint.strip() if endpoint is not None else "",
            error_type.strip()[:MAX_DIMENSION_CHARS] or None if error_type is not None else None,
        )
        return (names, head, tail + task_bytes, micros // MICROS_PER_HOUR, when, task, attempt, model)

    return parse_line, parse_block
