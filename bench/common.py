"""Helpers shared by ``bench/run.py`` and ``bench/ingest_api_load.py``.

Importing this module does not set Django up: the caller decides the environment (which
``COSTCENTER_HOME``, DEBUG on or off) first, then calls ``django_setup()``.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def bench_environment(home: Path) -> None:
    """Production-like settings for a benchmark process and the children it starts.

    DEBUG off (no query log growing in memory, cached templates), a throwaway secret key that
    exists only for this run, no manifest for static files (not collected here) and no API
    throttle (a load test would otherwise measure the throttle's 429s).
    """
    os.environ["COSTCENTER_HOME"] = str(home)
    os.environ["DJANGO_SETTINGS_MODULE"] = "costcenter.settings"
    os.environ["DEBUG"] = "false"
    os.environ.setdefault("SECRET_KEY", "bench-only-secret-key-not-for-production-use-0123456789")
    os.environ["STATIC_MANIFEST"] = "false"
    os.environ["API_THROTTLE_RATE"] = "off"
    os.environ.pop("DATABASE_URL", None)  # always the embedded server under this home


def django_setup() -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def p50_p95_p99(timings: list[float]) -> tuple[float, float, float]:
    """Median, 95th and 99th percentile (inclusive method: defined from two samples up)."""
    if len(timings) == 1:
        return timings[0], timings[0], timings[0]
    cuts = statistics.quantiles(timings, n=100, method="inclusive")
    return statistics.median(timings), cuts[94], cuts[98]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def demo_lines(*, end: datetime, days: int, attempts_per_day: int, seed: int = 7) -> Iterator[bytes]:
    """Canonical JSONL lines of the demo simulator's attempts, ``days`` days up to ``end``.

    Simulated one day at a time (the simulator keeps a whole window in memory, and an hour's
    attempts do not depend on the window they are generated in), so memory stays at one day.
    Every attempt goes into canonical JSONL, whatever file format the demo would give it, so all
    methods of the ingestion benchmark load exactly the same rows from one file.
    """
    from ingest import demo

    end = demo.align_now(end)
    for back in range(days - 1, -1, -1):
        plan = demo.simulate(
            now=end - timedelta(days=back), days=1, attempts_per_day=attempts_per_day, seed=seed
        )
        for attempt in plan.attempts:
            yield json.dumps(demo.canonical_object(attempt), separators=(",", ":")).encode() + b"\n"


def write_demo_file(path: Path, *, end: datetime, days: int, records: int, seed: int = 7) -> int:
    """About ``records`` demo attempts over ``days`` days up to ``end`` in one file; returns the count.

    The simulator takes an average per day over a week, and its Poisson draws make the total
    land within a few per cent of ``records``: the exact count is returned and reported.
    """
    per_day = max(1, round(records / days))
    count = 0
    with path.open("wb") as out:
        for line in demo_lines(end=end, days=days, attempts_per_day=per_day, seed=seed):
            out.write(line)
            count += 1
    return count
