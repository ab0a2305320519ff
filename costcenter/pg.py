"""Small Postgres helpers shared by ingestion and costing."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection


def hash64(text: str) -> int:
    """A signed 64-bit hash, stable across processes and Python versions (unlike ``hash``)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big", signed=True)


@contextmanager
def session_lock(name: str) -> Iterator[bool]:
    """Try a Postgres advisory lock named ``name`` for the duration of the block; yields whether
    it was acquired. Session-level, so it spans transactions, and Postgres releases it if the
    process dies — a crashed worker never leaves work locked."""
    key = hash64(name)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
        acquired = cursor.fetchone()[0]
    try:
        yield acquired
    finally:
        if acquired:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
