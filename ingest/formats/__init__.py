"""Usage-log formats and the reading layer they share.

Reading is streaming and constant-memory: `open_stream` opens plain or gzip files (by magic
bytes, not by name), `iter_lines` yields one line at a time with a hard per-line limit, and
`iter_json_values` turns lines into parsed JSON values. Unreadable input (oversized line,
invalid UTF-8, truncated/corrupt gzip, malformed JSON) becomes a `Reject` with its location;
the good lines around it are still yielded. Nothing here raises on bad input.

Each format module (`canonical`, `openai_batch`, `litellm`, `otlp`) exposes
`iter_records(stream, *, defaults, now) -> Iterator[UsageRecord | Reject]`; `detect.detect_format`
chooses one from the first bytes. `iter_path_records` glues the three together for a file path.
"""

from __future__ import annotations

import gzip
import importlib
import json
import os
import zlib
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any, BinaryIO

import orjson

from ingest.records import FileDefaults, Reject, UsageRecord
from ingest.validate import excerpt_of_raw, reject

FORMAT_NAMES = ("canonical", "openai-batch", "litellm", "otlp-json")
_MODULES = {
    "canonical": "ingest.formats.canonical",
    "openai-batch": "ingest.formats.openai_batch",
    "litellm": "ingest.formats.litellm",
    "otlp-json": "ingest.formats.otlp",
}

DEFAULT_MAX_LINE_BYTES = 1_000_000
# A pretty-printed document (OTLP example files, a LiteLLM /spend/logs JSON array) has to be held
# whole to be parsed; this caps that memory. JSONL has no such limit beyond one line.
DEFAULT_MAX_DOCUMENT_BYTES = 64 * 1024 * 1024
SNIFF_BYTES = 64 * 1024
_GZIP_MAGIC = b"\x1f\x8b"
_UTF8_BOM = b"\xef\xbb\xbf"
_DRAIN_CHUNK = 64 * 1024

Item = UsageRecord | Reject
Line = tuple[int, bytes | Reject, int]


def open_stream(path: str | os.PathLike[str]) -> BinaryIO:
    """Open a usage file for binary reading, decompressing gzip transparently.

    Detection is by the gzip magic bytes, so `usage.jsonl` that is really gzip (or `.gz` that
    is not) still reads correctly."""
    with open(path, "rb") as probe:
        magic = probe.read(2)
    if magic == _GZIP_MAGIC:
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")  # noqa: SIM115 - the caller owns and closes the stream


def iter_lines(
    stream: BinaryIO, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, *, first_line_no: int = 1
) -> Iterator[Line]:
    """Yield `(line_no, payload, byte_offset_after_line)` for every line, in constant memory.

    `payload` is the line's bytes without the line ending (valid UTF-8, possibly empty) or a
    `Reject` for an oversized line, invalid UTF-8 or a truncated/corrupt compressed stream.
    The offset counts bytes of the (decompressed) stream consumed so far, so a caller can
    checkpoint it. After a corrupt gzip stream nothing more can be read: that Reject is last.
    `first_line_no`: the number of the stream's first line when reading resumes mid-file (only
    line 1 may start with a byte order mark); offsets then count from the resume point.
    """
    line_no = first_line_no - 1
    offset = 0
    while True:
        line_no += 1
        try:
            chunk = stream.readline(max_line_bytes + 1)
        except (EOFError, OSError, zlib.error) as exc:
            yield line_no, _stream_error(line_no, exc), offset
            return
        if not chunk:
            return
        offset += len(chunk)
        if len(chunk) > max_line_bytes and not chunk.endswith(b"\n"):
            # Drain the rest of the oversized line in bounded chunks instead of holding it.
            try:
                offset += _drain_line(stream)
            except (EOFError, OSError, zlib.error) as exc:
                yield line_no, _stream_error(line_no, exc), offset
                return
            reason = f"line is longer than {max_line_bytes:,} bytes"
            yield line_no, reject(f"line {line_no}", reason, excerpt_of_raw(chunk[:400])), offset
            continue
        line = chunk[:-1] if chunk.endswith(b"\n") else chunk
        if line.endswith(b"\r"):
            line = line[:-1]
        if line_no == 1 and line.startswith(_UTF8_BOM):
            line = line[len(_UTF8_BOM) :]
        try:
            if not line.isascii():  # ASCII is valid UTF-8; isascii() is much cheaper than decode()
                line.decode("utf-8")
        except UnicodeDecodeError as exc:
            reason = f"line is not valid UTF-8 (bad byte at column {exc.start + 1})"
            yield line_no, reject(f"line {line_no}", reason, excerpt_of_raw(line[:400])), offset
            continue
        yield line_no, line, offset


def _drain_line(stream: BinaryIO) -> int:
    drained = 0
    while True:
        more = stream.readline(_DRAIN_CHUNK)
        drained += len(more)
        if not more or more.endswith(b"\n"):
            return drained


def _stream_error(line_no: int, exc: BaseException) -> Reject:
    reason = (
        f"file: compressed stream is truncated or corrupt ({type(exc).__name__}: {exc}); "
        "nothing after this point could be read"
    )
    return reject(f"line {line_no}", reason)


# --- JSON on top of lines ----------------------------------------------------------------------

_FAIL = object()
_NOT_FAST = object()
UNFINISHED = object()  # see json_values_from_lines(partial=True)
# 19 digits in a row may be an integer beyond 64 bits, which only json reads exactly. Mapping
# digits to "9" and everything else to a space, then searching, is several times faster than a regex.
_DIGIT_MAP = bytes(57 if 48 <= byte <= 57 else 32 for byte in range(256))
_DIGITS_19 = b"9" * 19


def iter_json_values(
    stream: BinaryIO,
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
    fast: Callable[[bytes], Any] | None = None,
) -> Iterator[tuple[str, Any] | Reject]:
    """Yield `(location, value)` for each JSON value, or a Reject for unreadable input.

    JSONL is the normal case: one value per line, location "line N". A JSON array is unwrapped
    into its elements ("item 2 of line N"). A document that spans lines (pretty-printed; the
    first line opens with `{` or `[` and does not close) is collected up to `max_document_bytes`
    and parsed when a line at column 0 closes it ("document at line N"). Blank lines are skipped.

    `fast`: a format's shortcut for a line that stands alone (no document is being collected);
    whatever it returns other than None is yielded as is, in place of that line's one value.
    """
    lines = iter_lines(stream, max_line_bytes)
    return json_values_from_lines(lines, max_document_bytes=max_document_bytes, fast=fast)


def json_values_from_lines(
    lines: Iterable[Line],
    *,
    max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
    fast: Callable[[bytes], Any] | None = None,
    partial: bool = False,
) -> Iterator[tuple[str, Any] | Reject]:
    """`iter_json_values` over lines already produced by `iter_lines` (lets a caller peek first).

    `partial`: the lines are only part of the input. If they end inside a document, nothing is
    said about it; `UNFINISHED` is yielded last instead, and the caller must read on from the
    first of these lines with a single reader.
    """
    doc: list[bytes] = []
    doc_start = 0
    doc_size = 0
    # Size the buffer must reach before the next parse attempt: doubling after each failure keeps
    # garbage with many column-0 "}" lines linear instead of re-parsing the buffer every line.
    next_try = 0
    skipping = False
    for line_no, line, _ in lines:
        if isinstance(line, Reject):
            if doc:
                yield _doc_reject(doc_start, doc, "a line inside it could not be read")
                # Resync only inside a real multi-line document; after one cut-short JSONL line the
                # next lines are independent records.
                doc, skipping = [], len(doc) > 1
            yield line
            continue
        if skipping:
            # Resync after a broken document at the next line that closes one at column 0.
            skipping = line[:1] not in (b"}", b"]")
            continue
        if doc:
            if doc[0][:1] == b"{" and line[:1] == b"{":
                # An object line at column 0 that parses alone means this is JSONL whose
                # previous line was cut short, not a pretty-printed document: keep the good line.
                value = _loads(line)
                if value is not _FAIL:
                    yield _doc_reject(doc_start, doc, "it is not complete JSON")
                    doc = []
                    yield from _unwrap(f"line {line_no}", value)
                    continue
            doc.append(line)
            doc_size += len(line) + 1
            if doc_size > max_document_bytes:
                yield _doc_reject(doc_start, doc, f"it is larger than {max_document_bytes:,} bytes")
                doc, skipping = [], True
                continue
            if line[:1] in (b"}", b"]") and doc_size >= next_try:
                value = _loads(b"\n".join(doc))
                if value is _FAIL:
                    next_try = doc_size * 2
                else:
                    yield from _unwrap(f"document at line {doc_start}", value)
                    doc = []
            continue
        if fast is not None:
            row = fast(line)
            if row is not None:
                yield row
                continue
        stripped = line.strip()
        if not stripped:
            continue
        value = _fast_loads(line)
        if value is not _NOT_FAST:
            yield from _unwrap(f"line {line_no}", value)
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            if stripped[:1] in (b"{", b"[") and exc.pos >= len(line.decode("utf-8").rstrip()):
                doc, doc_start, doc_size, next_try = [line], line_no, len(line) + 1, 0
            else:
                reason = f"not valid JSON: {exc.msg} (column {exc.colno})"
                yield reject(f"line {line_no}", reason, excerpt_of_raw(line))
            continue
        except (ValueError, RecursionError) as exc:  # e.g. 5000-digit integers, deep nesting
            yield reject(f"line {line_no}", f"not valid JSON: {_short(exc)}", excerpt_of_raw(line))
            continue
        yield from _unwrap(f"line {line_no}", value)
    if partial and (doc or skipping):
        yield UNFINISHED
        return
    if doc:
        value = _loads(b"\n".join(doc))
        if value is _FAIL:
            yield _doc_reject(doc_start, doc, "the file ended before it was complete")
        else:
            yield from _unwrap(f"document at line {doc_start}", value)


def _fast_loads(data: bytes) -> Any:
    """orjson's parse (several times faster than json's), or _NOT_FAST where json must decide.

    Whatever orjson refuses is parsed again by json, and so are integers beyond 64 bits (orjson
    turns them into floats): what is accepted, and the reason given when not, stay json's.
    """
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return _NOT_FAST
    return _NOT_FAST if _DIGITS_19 in data.translate(_DIGIT_MAP) else value


def _loads(data: bytes) -> Any:
    value = _fast_loads(data)
    if value is not _NOT_FAST:
        return value
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return _FAIL


def _unwrap(location: str, value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, list):
        for index, item in enumerate(value, start=1):
            yield f"item {index} of {location}", item
    else:
        yield location, value


def _doc_reject(start: int, doc: list[bytes], why: str) -> Reject:
    # A one-line "document" is almost always a JSONL line that was cut short: say so plainly.
    if len(doc) == 1:
        return reject(f"line {start}", "not valid JSON: the line is incomplete", excerpt_of_raw(doc[0]))
    return reject(f"document at line {start}", f"not valid JSON: {why}", excerpt_of_raw(b"\n".join(doc[:5])))


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 120 else text[:117] + "..."


# --- dispatch ----------------------------------------------------------------------------------

Parser = Callable[..., Iterator[Item]]


def parser_for(fmt: str) -> Parser:
    """The `iter_records` function of a format; imported lazily (format modules import this one)."""
    if fmt not in _MODULES:
        raise ValueError(f"unknown usage format {fmt!r}; expected one of {', '.join(FORMAT_NAMES)}")
    return importlib.import_module(_MODULES[fmt]).iter_records


def sniff(path: str | os.PathLike[str], size: int = SNIFF_BYTES) -> bytes:
    """The first (decompressed) bytes of a file, for `detect_format`. Never raises on bad gzip."""
    chunks: list[bytes] = []
    total = 0
    with open_stream(path) as stream:
        try:
            # Small reads so that a truncated gzip still yields what precedes the damage.
            while total < size and (chunk := stream.read(min(8192, size - total))):
                chunks.append(chunk)
                total += len(chunk)
        except (EOFError, OSError, zlib.error):
            pass
    return b"".join(chunks)


def iter_path_records(
    path: str | os.PathLike[str],
    fmt: str = "auto",
    *,
    defaults: FileDefaults,
    now: datetime,
    fast_rows: bool = False,
) -> Iterator[Item]:
    """Records and rejects of one file; `fmt="auto"` detects the format (raises if unknown).

    `fast_rows`: plain canonical lines come as ready-to-write rows (a tuple laid out as
    `canonical_fast.FastRow`) instead of `UsageRecord`s; the write path takes both.
    """
    if fmt == "auto":
        from ingest.formats.detect import detect_format

        fmt = detect_format(sniff(path), os.fspath(path))
    parse = parser_for(fmt)
    options = {"fast_rows": True} if fast_rows and fmt == "canonical" else {}
    with open_stream(path) as stream:
        yield from parse(stream, defaults=defaults, now=now, **options)
