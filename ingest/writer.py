"""The write path: binary COPY into a staging table, then one INSERT … ON CONFLICT DO NOTHING.

COPY is the fastest way into Postgres; going through a staging table lets the idempotency key
(source, key hash, ts) drop duplicates — from earlier runs or within the batch — in the same
statement, and tells us exactly how many rows were new.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db import connection

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


def write_rows(rows: Sequence[tuple], *, months: set[datetime]) -> int:
    """Insert rows (in ``COLUMNS`` order) that are not there yet; returns how many were new.

    Must run inside a transaction: the staging table empties itself at commit.
    """
    if not rows:
        return 0
    ensure_partitions(months)
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS {_STAGING} "
            "(LIKE ingest_attempt INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
        )
        with cursor.copy(f"COPY {_STAGING} ({_COLUMN_LIST}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(COPY_TYPES)
            for row in rows:
                copy.write_row(row)
        cursor.execute(
            f"INSERT INTO ingest_attempt ({_COLUMN_LIST}) SELECT {_COLUMN_LIST} FROM {_STAGING} "  # noqa: S608
            "ON CONFLICT DO NOTHING"
        )
        inserted = cursor.rowcount
        if inserted:
            # Hours whose attempts changed, for the cost engine. A superset is harmless: a
            # clean hour recomputed gives the same numbers.
            cursor.execute(
                f"INSERT INTO ingest_dirtyhour (hour, marked_at) SELECT DISTINCT date_trunc('hour', ts, 'UTC'), now() "  # noqa: S608
                f"FROM {_STAGING} ON CONFLICT (hour) DO UPDATE SET marked_at = excluded.marked_at"
            )
        cursor.execute(f"TRUNCATE {_STAGING}")
    return inserted
