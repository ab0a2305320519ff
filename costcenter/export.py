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

from costcenter.parquet import ParquetColumn, rows_to_parquet

FORMATS = ("csv", "json", "jsonl", "ndjson", "parquet")
CONTENT_TYPES = {
    "csv": "text/csv; charset=utf-8",
    "json": "application/json",
    "jsonl": "application/x-ndjson",
    "ndjson": "application/x-ndjson",
    "parquet": "application/vnd.apache.parquet",
}
EXTENSIONS = {"csv": "csv", "json": "json", "jsonl": "jsonl", "ndjson": "ndjson", "parquet": "parquet"}

# Rows per Parquet row group, rows held as Python objects before they are encoded, and rows per
# bytes chunk of the text formats. A row group waits encoded (~330 bytes a FOCUS row, so ~11 MB)
# until it is written; the footer keeps a few integers per column chunk.
PARQUET_ROW_GROUP = 32_768
PARQUET_BATCH = 1_024
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


def parquet_columns(columns: list[Column]) -> list[ParquetColumn]:
    """The Parquet form of ``columns``: JSON is stored as its text (a string column)."""
    return [
        ParquetColumn(
            column.name,
            "string" if column.type == "json" else column.type,
            column.nullable,
            convert=_json_text if column.type == "json" else None,
        )
        for column in columns
    ]


def _json_text(value) -> str:
    return _text(value, "json")


def write_parquet(columns: list[Column], rows: Iterable[dict]) -> Iterator[bytes]:
    """Parquet, one row group per ``PARQUET_ROW_GROUP`` rows, each sent as soon as it is written
    (``costcenter.parquet``: constant memory whatever the number of rows)."""
    return rows_to_parquet(
        parquet_columns(columns), rows, row_group_size=PARQUET_ROW_GROUP, batch_size=PARQUET_BATCH
    )


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
