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

import io
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any, BinaryIO

from ingest.formats import (
    _UTF8_BOM,
    UNFINISHED,
    Item,
    iter_json_values,
    iter_lines,
    json_values_from_lines,
)
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

# Plain files are read this many bytes at a time and decoded a block of lines per call (see
# canonical_fast.plain_parsers): it saves the per-line reading and generator steps, a third of
# what is left of the Python time per record on the fast path. Far below the line limit, so every
# line of a block is within it.
BLOCK_BYTES = 256 * 1024


def iter_records(
    stream: BinaryIO, *, defaults: FileDefaults, now: datetime, fast_rows: bool = False
) -> Iterator[Item]:
    """Records and rejects, one per JSON value; with `fast_rows`, plain lines come as fast rows
    (`canonical_fast`), the same attempt already packed for COPY."""
    parsers = None
    if fast_rows:
        from ingest.formats.canonical_fast import plain_parsers

        parsers = plain_parsers(defaults, now)
    if parsers is None:
        yield from _records(iter_json_values(stream), defaults, now)
    else:
        yield from _fast_records(stream, *parsers, defaults=defaults, now=now)


def _records(values: Iterable, defaults: FileDefaults, now: datetime) -> Iterator[Item]:
    for item in values:
        if type(item) is tuple and len(item) == 8 or item is UNFINISHED:  # a fast row (FastRow), or the end
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


def _fast_records(stream: BinaryIO, parse_line, parse_block, *, defaults, now) -> Iterator[Item]:
    """The fast path over a file: block by block while blocks are plain, then line by line.

    Every block yields exactly what the line-by-line reader would: a block that is not plain is
    read line by line on its own, and if it ends inside a multi-line document, reading falls
    back to one line-by-line reader from that block's first line to the end of the file.
    """
    lines_read = 0
    # Block reads need a file that can go back (gzip streams and pipes are read line by line).
    while isinstance(stream, io.BufferedReader | io.BytesIO) and stream.seekable():
        start = stream.tell()
        try:
            block = stream.read(BLOCK_BYTES)
        except OSError:
            stream.seek(start)
            break  # the line reader reports the error where it occurs
        if not block:
            return
        if len(block) == BLOCK_BYTES:
            cut = block.rfind(b"\n")
            if cut < 0:  # a line longer than a block: the line reader applies the line limit
                stream.seek(start)
                break
            block = block[: cut + 1]
            stream.seek(start + cut + 1)
        if lines_read == 0 and block.startswith(_UTF8_BOM):
            stream.seek(start)
            break
        items = _block_items(block, lines_read, parse_line, parse_block, defaults, now)
        if items is None:
            stream.seek(start)
            break
        yield from items
        lines_read += block.count(b"\n") + (block[-1:] != b"\n")
    lines = iter_lines(stream, first_line_no=lines_read + 1)
    yield from _records(json_values_from_lines(lines, fast=parse_line), defaults, now)


def _block_items(block: bytes, lines_before: int, parse_line, parse_block, defaults, now) -> list | None:
    """A block's items, or None if it ends inside a document (read on line by line instead)."""
    rows = parse_block(block)
    if rows is not None and not any(row is None for row in rows):
        return rows
    if rows is None:  # not plain: this block's lines through the full reader, fast lines still fast
        lines = iter_lines(io.BytesIO(block), first_line_no=lines_before + 1)
        items = list(_records(json_values_from_lines(lines, fast=parse_line, partial=True), defaults, now))
        return None if items and items[-1] is UNFINISHED else items
    # Plain, but some objects are not plain records: the full path decides on each of those.
    split = block.split(b"\n")
    items = []
    for index, row in enumerate(rows):
        if row is not None:
            items.append(row)
            continue
        line = [(lines_before + index + 1, split[index], 0)]
        decided = list(_records(json_values_from_lines(line, partial=True), defaults, now))
        if decided and decided[-1] is UNFINISHED:
            return None
        items.extend(decided)
    return items


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
