"""Streaming writers for BI exports: CSV, JSON, NDJSON and Parquet, in constant memory.

A writer takes the export's columns (name and type) and an iterator of row dicts and yields
bytes chunks, so a ``StreamingHttpResponse`` sends rows as the database cursor produces them:
memory stays flat whatever the range. Types decide the text form of a value:

* ``decimal`` — money and quantities, as plain decimal text (never through a float); Parquet
  ``decimal128(38, 12)``, exact.
* ``datetime`` — UTC, ``YYYY-MM-DDTHH:MM:SSZ`` (FOCUS' form); Parquet ``timestamp[us, UTC]``.
* ``int``, ``float``, ``bool``, ``string``, ``json`` (a dict, written as JSON text).

CSV is spreadsheet-safe: a text cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a
carriage return (a formula or DDE payload to Excel, LibreOffice and Sheets) is prefixed with
``'``, which spreadsheets read as "this is text" (OWASP's CSV-injection advice). Only text
columns are touched: a negative number stays a number.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

FORMATS = ("csv", "json", "jsonl", "ndjson", "parquet")
CONTENT_TYPES = {
    "csv": "text/csv; charset=utf-8",
    "json": "application/json",
    "jsonl": "application/x-ndjson",
    "ndjson": "application/x-ndjson",
    "parquet": "application/vnd.apache.parquet",
}
EXTENSIONS = {"csv": "csv", "json": "json", "jsonl": "jsonl", "ndjson": "ndjson", "parquet": "parquet"}

# Rows per Parquet row group and per bytes chunk of the text formats: large enough for fast
# writes, small enough that a chunk is a few MB at most. A row group waits in Arrow form (~1 KB a
# FOCUS row) until it is written, and Arrow's writer keeps ~58 KB of metadata per row group for
# the footer until the end of the file (35 MB over 10 M rows at 16k rows a group). Measured on
# 10 M rows, 16k rows a group peaked lower than 24k or 32k (docs/benchmarks.md). Rows wait as
# Python objects only ``ARROW_BATCH`` at a time (~2 KB a FOCUS row).
PARQUET_ROW_GROUP = 16_384
ARROW_BATCH = 1_024
TEXT_CHUNK_ROWS = 2_000

_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # string, decimal, int, float, bool, datetime, json
    nullable: bool = True
    description: str = ""


def spreadsheet_safe(text: str) -> str:
    """Neutralise a text cell that a spreadsheet would run as a formula (prefix ``'``)."""
    return "'" + text if text.startswith(_FORMULA_STARTS) else text


def utc_text(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _text(value, kind: str) -> str | None:
    if value is None:
        return None
    if kind == "datetime":
        return utc_text(value)
    if kind == "decimal":
        return format(value, "f") if isinstance(value, Decimal) else str(value)
    if kind == "json":
        return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    if kind == "bool":
        return "true" if value else "false"
    return str(value)


def _json_value(value, kind: str):
    """A JSON value: money as decimal strings (exact, like the API), datetimes as UTC text."""
    if value is None:
        return None
    if kind in {"datetime", "decimal"}:
        return _text(value, kind)
    if kind == "float":
        return float(value)
    if kind == "int":
        return int(value)
    return value


class _Sink(io.RawIOBase):
    """A write-only file that keeps what was written until ``take`` empties it."""

    def __init__(self):
        self._buffer = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self._buffer += data
        return len(data)

    def take(self) -> bytes:
        data = bytes(self._buffer)
        self._buffer.clear()
        return data


def write_csv(columns: list[Column], rows: Iterable[dict]) -> Iterator[bytes]:
    sink = io.StringIO()
    writer = csv.writer(sink, lineterminator="\r\n")  # RFC 4180 line ends
    writer.writerow([column.name for column in columns])
    count = 0
    for row in rows:
        cells = []
        for column in columns:
            text = _text(row.get(column.name), column.type)
            if text is None:
                cells.append("")
            elif column.type in {"string", "json"}:
                cells.append(spreadsheet_safe(text))
            else:
                cells.append(text)
        writer.writerow(cells)
        count += 1
        if count % TEXT_CHUNK_ROWS == 0:
            yield sink.getvalue().encode()
            sink.seek(0)
            sink.truncate()
    yield sink.getvalue().encode()


def _json_object(columns: list[Column], row: dict) -> bytes:
    return json.dumps(
        {column.name: _json_value(row.get(column.name), column.type) for column in columns},
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode()


def write_jsonl(columns: list[Column], rows: Iterable[dict]) -> Iterator[bytes]:
    chunk = []
    for row in rows:
        chunk.append(_json_object(columns, row) + b"\n")
        if len(chunk) == TEXT_CHUNK_ROWS:
            yield b"".join(chunk)
            chunk = []
    yield b"".join(chunk)


def write_json(columns: list[Column], rows: Iterable[dict]) -> Iterator[bytes]:
    """One JSON array, written element by element (never built whole)."""
    yield b"["
    chunk: list[bytes] = []
    first = True
    for row in rows:
        chunk.append(_json_object(columns, row) if first else b"," + _json_object(columns, row))
        first = False
        if len(chunk) == TEXT_CHUNK_ROWS:
            yield b"".join(chunk)
            chunk = []
    chunk.append(b"]\n")
    yield b"".join(chunk)


def arrow_schema(columns: list[Column]):
    import pyarrow as pa

    types = {
        "string": pa.string(),
        "decimal": pa.decimal128(38, 12),
        "int": pa.int64(),
        "float": pa.float64(),
        "bool": pa.bool_(),
        "datetime": pa.timestamp("us", tz="UTC"),
        "json": pa.string(),
    }
    return pa.schema(
        [pa.field(column.name, types[column.type], nullable=column.nullable) for column in columns]
    )


def _arrow_value(value, kind: str):
    """A value in the form ``arrow_columns.column_array`` takes: JSON as its text, the rest as is."""
    return _text(value, kind) if kind == "json" else value


def write_parquet(columns: list[Column], rows: Iterable[dict]) -> Iterator[bytes]:
    """Parquet, one row group per ``PARQUET_ROW_GROUP`` rows, each sent as soon as it is written.

    Rows become Arrow record batches every ``ARROW_BATCH`` rows, so at most that many rows are
    held as Python objects; a row group waits in Arrow's compact columnar form.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from costcenter.arrow_columns import column_array

    schema = arrow_schema(columns)
    sink = _Sink()
    writer = pq.ParquetWriter(sink, schema, compression="zstd")
    names = [column.name for column in columns]
    kinds = [column.type for column in columns]
    batch: list[list] = [[] for _ in columns]
    batches: list = []
    pending = 0

    def to_arrow():
        batches.append(
            pa.RecordBatch.from_arrays(
                [column_array(values, field.type) for values, field in zip(batch, schema, strict=True)],
                schema=schema,
            )
        )
        for values in batch:
            values.clear()

    for row in rows:
        for index, name in enumerate(names):
            batch[index].append(_arrow_value(row.get(name), kinds[index]))
        pending += 1
        if pending % ARROW_BATCH == 0 or pending == PARQUET_ROW_GROUP:
            to_arrow()
        if pending == PARQUET_ROW_GROUP:
            writer.write_table(
                pa.Table.from_batches(batches, schema=schema), row_group_size=PARQUET_ROW_GROUP
            )
            batches.clear()
            pending = 0
            yield sink.take()
    if batch[0]:
        to_arrow()
    if batches:
        writer.write_table(pa.Table.from_batches(batches, schema=schema), row_group_size=PARQUET_ROW_GROUP)
        batches.clear()  # before close: writing the footer copies every row group's metadata once more
    writer.close()
    yield sink.take()


WRITERS = {
    "csv": write_csv,
    "json": write_json,
    "jsonl": write_jsonl,
    "ndjson": write_jsonl,
    "parquet": write_parquet,
}


# --- Cost rows, streamed --------------------------------------------------------------------------
# The same rows as ``selectors.cost_rows`` (tests/test_export.py pins them equal for every
# grouping), read with a server-side cursor instead of a list, so an export of any size streams.
# Rows fetched from the server-side cursor at a time (each a dict of ~22 values, ~2 KB).
CHUNK_SIZE = 2_000


def cost_row_queryset(*, user, query):
    """The grouped rollup rows of ``query`` (``selectors.grouped_cost_queryset``), for the size cap."""
    from costcenter import selectors

    return selectors.grouped_cost_queryset(user=user, query=query)


def cost_rows_stream(*, user, query) -> Iterator[dict]:
    """``selectors.cost_rows`` as an iterator over a server-side cursor (constant memory)."""
    from costcenter import selectors

    return selectors.iter_cost_rows(user=user, query=query, chunk_size=CHUNK_SIZE)


def stream(fmt: str, columns: list[Column], rows: Iterable[dict]) -> Iterator[bytes]:
    """The bytes of ``rows`` in ``fmt``; empty chunks are dropped (WSGI servers flush each one)."""
    for chunk in WRITERS[fmt](columns, rows):
        if chunk:
            yield chunk
