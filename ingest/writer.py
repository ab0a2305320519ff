"""The write path: binary COPY into a staging table, then one INSERT … ON CONFLICT DO NOTHING.

COPY is the fastest way into Postgres; going through a staging table lets the idempotency key
(source, key hash, ts) drop duplicates — from earlier runs or within the batch — in the same
statement, and tells us exactly how many rows were new.

Rows arrive already encoded in Postgres's binary COPY format (``encode_row``, or the canonical
fast path in ``ingest.formats.canonical_fast`` which packs them straight from the parsed line), so
a batch goes to the server as one buffer. Letting psycopg format each row (``write_row``) cost
~2 µs of Python per row while holding the GIL, i.e. on the core that also parses.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta

from django.db import IntegrityError, connection, transaction
from psycopg.errors import UniqueViolation

from ingest.partitions import ensure_partitions

COLUMNS = (
    "ts",
    "key_hash",
    "task_hash",
    "source_id",
    "team_id",
    "workload_id",
    "model_id",
    "endpoint_id",
    "error_type_id",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "reasoning_tokens",
    "latency_ms",
    "ttft_ms",
    "queue_wait_ms",
    "attempt",
    "http_status",
    "succeeded",
    "task_id",
)
COPY_TYPES = (
    "timestamptz",
    "int8",
    "int8",
    *["int4"] * 13,
    "int2",
    "int2",
    "bool",
    "text",
)
_STAGING = "ingest_attempt_staging"
_COLUMN_LIST = ", ".join(COLUMNS)

# --- Postgres binary COPY format ----------------------------------------------------------------
# A stream is a header, then per row an int16 field count and per field an int32 byte length
# (-1 for NULL) followed by the value in network byte order, then an int16 -1 trailer.
COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)  # signature, flags, no extension
COPY_TRAILER = struct.pack(">h", -1)
PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)  # timestamptz is int64 microseconds since this
ONE_MICROSECOND = timedelta(microseconds=1)
MICROS_PER_HOUR = 3_600_000_000
NULL_FIELD = struct.pack(">i", -1)

# ts, key_hash and task_hash: the head of every row (hashes are the 8 digest bytes, big-endian).
ROW_HEAD = struct.Struct(">hiqi8si8s")
# source_id and the five dimension ids, the same for millions of rows: encoded once per combination.
_ID = struct.Struct(">ii")


def ts_micros(ts: datetime) -> int:
    """Microseconds since 2000-01-01 UTC, the value of a binary timestamptz."""
    return (ts - PG_EPOCH) // ONE_MICROSECOND


def encode_ids(source_id: int, ids: Sequence[int | None]) -> bytes:
    """source_id, team_id, workload_id, model_id, endpoint_id, error_type_id as binary fields."""
    return b"".join(NULL_FIELD if value is None else _ID.pack(4, value) for value in (source_id, *ids))


_TAIL_PACKERS: dict[tuple[bool, ...], object] = {}


def tail_packer(nulls: tuple[bool, bool, bool, bool, bool]):
    """The packer of the fields after the ids, for one pattern of NULLs among the nullable ones.

    Fields: prompt, completion, cached (int4), reasoning, latency, ttft, queue wait (int4 or
    NULL), attempt (int2), http_status (int2 or NULL), succeeded (bool), then the task id's byte
    length (its bytes follow). ``nulls`` says which of reasoning, latency, ttft, queue wait and
    http_status are NULL. One ``struct.pack`` per row is several times cheaper than a call per
    field; a NULL has no value bytes, so each pattern (at most 32; a file has one or two) gets its
    own format and function, generated once and kept in ``_TAIL_PACKERS``.
    """
    pack = _TAIL_PACKERS.get(nulls)
    if pack is not None:
        return pack
    reasoning, latency, ttft, queue, http = nulls
    fmt, args = [">iiiiii"], ["4, p, 4, c, 4, ca"]
    for name, is_null in (("r", reasoning), ("lat", latency), ("tt", ttft), ("q", queue)):
        fmt.append("i" if is_null else "ii")
        args.append("-1" if is_null else f"4, {name}")
    fmt.append("ih")
    args.append("2, a")
    fmt.append("i" if http else "ih")
    args.append("-1" if http else "2, h")
    fmt.append("ibi")
    args.append("1, s, n")
    packer = struct.Struct("".join(fmt))
    source = f"def pack(p, c, ca, r, lat, tt, q, a, h, s, n):\n    return _pack({', '.join(args)})\n"
    scope = {"_pack": packer.pack}
    exec(compile(source, f"<tail packer {nulls}>", "exec"), scope)  # noqa: S102 - our own fixed text
    pack = _TAIL_PACKERS[nulls] = scope["pack"]
    return pack


def encode_tail(
    prompt: int,
    completion: int,
    cached: int,
    reasoning: int | None,
    latency: int | None,
    ttft: int | None,
    queue_wait: int | None,
    attempt: int,
    http_status: int | None,
    succeeded: bool,
    task_id: bytes,
) -> bytes:
    """Everything after the ids: token counts, timings, attempt, status, then the task id text."""
    nulls = (reasoning is None, latency is None, ttft is None, queue_wait is None, http_status is None)
    pack = _TAIL_PACKERS.get(nulls) or tail_packer(nulls)
    fixed = pack(
        prompt,
        completion,
        cached,
        reasoning,
        latency,
        ttft,
        queue_wait,
        attempt,
        http_status,
        succeeded,
        len(task_id),
    )
    return fixed + task_id


def encode_row(row: Sequence) -> bytes:
    """One row given as values in ``COLUMNS`` order (hashes as signed ints), binary-encoded."""
    ts, key_hash, task_hash, source_id, *ids = row[:9]
    head = ROW_HEAD.pack(
        len(COLUMNS),
        8,
        ts_micros(ts),
        8,
        key_hash.to_bytes(8, "big", signed=True),
        8,
        task_hash.to_bytes(8, "big", signed=True),
    )
    return head + encode_ids(source_id, ids) + encode_tail(*row[9:19], row[19].encode())


def write_rows(
    rows: Sequence[bytes | tuple],
    *,
    months: Iterable[datetime],
    hours: Iterable[datetime] | None = None,
    direct: bool = False,
) -> int:
    """Insert rows that are not there yet; returns how many were new.

    A row is its binary COPY encoding (``encode_row`` or the fast path) or a tuple in ``COLUMNS``
    order. ``months``: moments in every month the rows fall in (their partitions are created).
    ``hours``: the starts of the hours the rows fall in (marked dirty for the cost engine when a
    row was new); without it they are read back from the staged rows.

    ``direct``: first try COPY straight into ``ingest_attempt``, in a savepoint. New data — the
    usual case — then costs the server what a raw COPY does, instead of a COPY into the staging
    table plus an ``INSERT … SELECT … ON CONFLICT`` (about twice the work). One duplicate key
    fails that COPY as a whole; the savepoint is rolled back and the batch goes through the
    staging table, which drops the duplicates. Either way the count is exact: a COPY that
    succeeds stored every row. Must run inside a transaction.
    """
    if not rows:
        return 0
    ensure_partitions(months)
    payload = b"".join(
        [COPY_HEADER, *(row if type(row) is bytes else encode_row(row) for row in rows), COPY_TRAILER]
    )
    if hours is not None:
        hours = sorted(hours)
    if direct and hours is not None and _copy_new_rows(payload):
        _mark_dirty_hours(hours)
        return len(rows)
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS {_STAGING} "
            "(LIKE ingest_attempt INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
        )
        with cursor.copy(f"COPY {_STAGING} ({_COLUMN_LIST}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.write(payload)
        cursor.execute(
            f"INSERT INTO ingest_attempt ({_COLUMN_LIST}) SELECT {_COLUMN_LIST} FROM {_STAGING} "  # noqa: S608
            "ON CONFLICT DO NOTHING"
        )
        inserted = cursor.rowcount
        if inserted and hours is None:
            # Hours whose attempts changed, for the cost engine. A superset is harmless: a
            # clean hour recomputed gives the same numbers.
            cursor.execute(
                f"INSERT INTO ingest_dirtyhour (hour, marked_at) SELECT DISTINCT date_trunc('hour', ts, 'UTC'), now() "  # noqa: S608
                f"FROM {_STAGING} ON CONFLICT (hour) DO UPDATE SET marked_at = excluded.marked_at"
            )
        cursor.execute(f"TRUNCATE {_STAGING}")
    if inserted and hours is not None:
        _mark_dirty_hours(hours)  # the batch's hours: a superset of the new rows' (harmless)
    return inserted


def _copy_new_rows(payload: bytes) -> bool:
    """COPY into ingest_attempt in a savepoint; False (and nothing written) if a key was there."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            with cursor.copy(f"COPY ingest_attempt ({_COLUMN_LIST}) FROM STDIN (FORMAT BINARY)") as copy:
                copy.write(payload)
    except (UniqueViolation, IntegrityError):
        return False
    return True


def _mark_dirty_hours(hours: list[datetime]) -> None:
    """Hours whose attempts changed, for the cost engine (``costing.recompute``)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO ingest_dirtyhour (hour, marked_at) SELECT unnest(%s::timestamptz[]), now() "
            "ON CONFLICT (hour) DO UPDATE SET marked_at = excluded.marked_at",
            [hours],
        )
