"""Server render time of every dashboard page, p50/p95 over many requests.

    python bench/pages.py [--days 30] [--attempts-per-day 5000] [--requests 100]
    python bench/pages.py --synthetic 20000000 [--requests 100]
    python bench/pages.py --reuse [--only "Models"] [--requests 100]

The default loads the demo fleet the quick start loads (``manage.py demo``: ~150,000 attempts
over 30 days, GPU metrics included) and costs it. ``--synthetic N`` instead fills N attempts over
30 days straight in SQL, as ``bench/costs_api.py`` does (no GPU metrics), to show that render time
does not grow with raw volume: pages read rollups only. ``--reuse`` measures the data already in
``COSTCENTER_HOME`` (after applying pending migrations) without loading anything, so two versions
of the code can be measured on the same data; ``--only`` picks pages by a part of their label.

Each page is requested ``--requests`` times (after 5 warm-up requests) by a signed-in org-wide
viewer through Django's test ``Client``: the full request stack (middleware, session, the page's
selectors, the charts, the template), no network and no browser. Time is wall-clock per request;
the machine's 1-minute load average is printed beside each page (the time is only comparable
between runs under similar load).
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from tempfile import TemporaryDirectory

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "costcenter.settings")
os.environ.setdefault("COSTCENTER_HOME", str(ROOT / ".costcenter-bench"))
# Production-like: DEBUG off (no query log, cached templates); a throwaway key for this process.
os.environ.setdefault("DEBUG", "false")
os.environ.setdefault("SECRET_KEY", "bench-only-secret-key-not-for-production-use-0123456789")
os.environ.setdefault("STATIC_MANIFEST", "false")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402

from costcenter.costing import recompute  # noqa: E402

PAGES = (
    ("Overview, last 30 days", "/"),
    ("Overview, stacked by team, 90 days", "/?period=90d&stack_by=team"),
    ("Explorer, model by day, 30 days", "/explorer/?period=30d"),
    (
        "Explorer, team × model, whole period",
        "/explorer/?period=30d&group_by=team&group_by=model&granularity=total",
    ),
    ("Explorer, CSV download", "/explorer/?period=30d&group_by=team&group_by=model&format=csv"),
    ("Models × hardware, 7 days (default)", "/models-hardware/"),
    ("Models × hardware, 30 days", "/models-hardware/?period=30d"),
    ("GPU fleet, 7 days", "/fleet/?period=7d"),
    ("GPU fleet, 30 days", "/fleet/?period=30d"),
    ("Cost change, this week vs last", "/cost-change/"),
    ("Ingestion, 7 days", "/ingestion/"),
)


def prepare(args) -> str:
    from costcenter.catalog import catalog_load

    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE ingest_attempt, ingest_dirtyhour, costcenter_hourlyusage, costcenter_dailyusage, "
            "costcenter_poolhour, costcenter_rollupstate, costcenter_repricehour, ingest_gpuinterval, "
            "ingest_ingestrun CASCADE"
        )
    catalog_load((ROOT / "examples" / "catalog.yaml").read_text())
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    started = time.perf_counter()
    if args.synthetic:
        sys.path.insert(0, str(ROOT / "bench"))
        import costs_api

        costs_api.START = now - timedelta(days=30)
        costs_api.END = now
        costs_api.setup()
        costs_api.fill(args.synthetic)
        what = f"{args.synthetic:,} synthetic attempts over 30 days"
    else:
        with TemporaryDirectory() as directory:
            call_command(
                "demo",
                days=args.days,
                attempts_per_day=args.attempts_per_day,
                now=now,
                dir=Path(directory),
                stdout=io.StringIO(),
            )
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM ingest_attempt")
            what = f"the demo: {cursor.fetchone()[0]:,} attempts over {args.days} days, with GPU metrics"
    loaded = time.perf_counter() - started
    started = time.perf_counter()
    hours = recompute(now=now)
    print(
        f"{what}; loaded in {loaded:.0f}s, {hours:,} hours costed in {time.perf_counter() - started:.0f}s",
        flush=True,
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (SELECT count(*) FROM costcenter_hourlyusage), (SELECT count(*) FROM costcenter_dailyusage)"
        )
        hourly, daily = cursor.fetchone()
    print(f"rollup rows: hourly {hourly:,}, daily {daily:,}")
    return what


def describe() -> None:
    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (SELECT count(*) FROM ingest_attempt), (SELECT count(*) FROM costcenter_hourlyusage), "
            "(SELECT count(*) FROM costcenter_dailyusage)"
        )
        attempts, hourly, daily = cursor.fetchone()
    print(f"reusing {attempts:,} attempts; rollup rows: hourly {hourly:,}, daily {daily:,}", flush=True)


def measure(requests: int, only: list[str] | None = None) -> list[tuple[str, float, float, float]]:
    user = get_user_model().objects.filter(
        username="bench"
    ).first() or get_user_model().objects.create_superuser(
        "bench", "bench@localhost", "bench-password-not-used"
    )
    client = Client()
    client.force_login(user)
    results = []
    for label, url in PAGES:
        if only and not any(part.lower() in label.lower() for part in only):
            continue
        timings = []
        for _ in range(requests + 5):
            started = time.perf_counter()
            response = client.get(url, HTTP_HOST="localhost")
            timings.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, (url, response.status_code)
        timings = timings[5:]  # the first requests warm caches and connections
        p50 = statistics.median(timings)
        p95 = statistics.quantiles(timings, n=20)[-1]
        results.append((label, p50, p95, max(timings)))
        load = os.getloadavg()[0]
        print(
            f"{label:<42} p50 {p50:7.1f} ms   p95 {p95:7.1f} ms   max {max(timings):7.1f} ms   load {load:.1f}",
            flush=True,
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--attempts-per-day", type=int, default=5000)
    parser.add_argument("--synthetic", type=int, default=0, help="fill N attempts in SQL instead of the demo")
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--reuse", action="store_true", help="measure the data already loaded; load nothing")
    parser.add_argument("--only", action="append", help="only pages whose label contains this (repeatable)")
    args = parser.parse_args()
    if args.reuse:
        describe()
    else:
        prepare(args)
    results = measure(args.requests, args.only)
    worst = max(results, key=lambda row: row[2])
    print(f"\nslowest p95: {worst[0]} {worst[2]:.1f} ms (target <= 150 ms)")


if __name__ == "__main__":
    main()
