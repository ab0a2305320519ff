"""Read time of the costs API over rollups, at two raw volumes, side by side in one run.

    python bench/costs_api.py [--scales 2000000,20000000] [--requests 200]

For each scale the script fills ``ingest_attempt`` with N attempts spread over 30 days (made
directly in SQL: this benchmark is about reading, not ingesting), costs them with the real
engine (``costing.recompute``, timed: the rollup time per day of data), then requests the 30-day
``/api/v1/costs/?group_by=team,model`` through Django's full request stack (token auth, selectors,
serializers) ``--requests`` times and reports p50/p95 server time. Rollups keep the read time
independent of raw volume: the figure is the 20M / 2M ratio of p95.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "costcenter.settings")
os.environ.setdefault("COSTCENTER_HOME", str(ROOT / ".costcenter-bench"))
os.environ.setdefault("DEBUG", "true")
os.environ.setdefault("API_THROTTLE_RATE", "off")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402

from costcenter.catalog import catalog_load  # noqa: E402
from costcenter.costing import recompute  # noqa: E402
from costcenter.models import Endpoint, LlmModel, Team, Workload  # noqa: E402
from costcenter.tokens import api_token_create  # noqa: E402
from ingest.partitions import ensure_partitions  # noqa: E402

END = datetime(2026, 11, 29, tzinfo=UTC)
START = END - timedelta(days=30)
COMBOS = [
    ("llama-3.1-70b-instruct-awq", "vllm-h100-a"),
    ("qwen2.5-72b-instruct", "vllm-mi300x-b"),
    ("gpt-4o-mini", "openai-gpt-4o-mini"),
    ("gpt-4.1", "openai-gpt-4.1"),
    ("claude-sonnet-4", "anthropic-claude-sonnet"),
]


def setup() -> None:
    call_command("migrate", verbosity=0)
    catalog_load((ROOT / "examples" / "catalog.yaml").read_text())
    for slug in ("netops", "support", "search", "research", "platform", "growth"):
        Team.objects.get_or_create(slug=slug, defaults={"name": slug})
    for name in ("summarize", "classify", "extract", "chat", "rerank", "code-review", "translate", "qa"):
        Workload.objects.get_or_create(name=name)


def reset() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE ingest_attempt, ingest_dirtyhour, costcenter_hourlyusage, costcenter_dailyusage, "
            "costcenter_poolhour, costcenter_rollupstate, costcenter_repricehour"
        )


def fill(n: int) -> float:
    """N attempts over 30 days, ~4 % failed, ~1.3 attempts per task; returns seconds taken."""
    teams = list(Team.objects.order_by("pk").values_list("pk", flat=True))[:6]
    workloads = list(Workload.objects.order_by("pk").values_list("pk", flat=True))[:8]
    models = [LlmModel.objects.get(name=name, version="").pk for name, _ in COMBOS]
    endpoints = [Endpoint.objects.get(name=endpoint).pk for _, endpoint in COMBOS]
    ensure_partitions([START, END - timedelta(seconds=1)])
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO ingest_attempt (ts, key_hash, task_hash, source_id, team_id, workload_id, model_id,
                endpoint_id, prompt_tokens, completion_tokens, cached_tokens, latency_ms, ttft_ms, attempt,
                http_status, succeeded, task_id)
            SELECT %(start)s + (g * %(span)s / %(n)s) * interval '1 second',
                   g, g / 4 * 3 + (g %% 4 / 3), 1,
                   (%(teams)s::int[])[1 + (hashint4(g::int) & 1023) %% 6],
                   (%(workloads)s::int[])[1 + (hashint4((g + 7)::int) & 1023) %% 8],
                   (%(models)s::int[])[1 + c], (%(endpoints)s::int[])[1 + c],
                   200 + (hashint4((g + 1)::int) & 4095), 20 + (hashint4((g + 2)::int) & 1023), (hashint4((g + 3)::int) & 127),
                   300 + (hashint4((g + 4)::int) & 8191), 30 + (hashint4((g + 5)::int) & 511), 1 + g %% 4 / 3,
                   CASE WHEN (hashint4((g + 6)::int) & 1023) < 41 THEN 500 ELSE 200 END,
                   (hashint4((g + 6)::int) & 1023) >= 41, 'task-' || (g / 4 * 3 + (g %% 4 / 3))
            FROM generate_series(1, %(n)s::bigint) AS g, LATERAL (SELECT (hashint4((g / 4)::int) & 1023) %% 5 AS c) AS combo
            """,
            {
                "start": START,
                "span": int((END - START).total_seconds()),
                "n": n,
                "teams": teams,
                "workloads": workloads,
                "models": models,
                "endpoints": endpoints,
            },
        )
        cursor.execute(
            "INSERT INTO ingest_dirtyhour (hour, marked_at) SELECT h, now() FROM "
            "generate_series(%s::timestamptz, %s::timestamptz - interval '1 hour', interval '1 hour') h",
            [START, END],
        )
        cursor.execute("ANALYZE ingest_attempt")
    return time.perf_counter() - started


def measure(requests: int, *, start: datetime | None = None, end: datetime | None = None) -> list[float]:
    """Server times (ms) of ``requests`` requests for the costs of ``start``…``end`` (default START…END)."""
    start, end = start or START, end or END
    user = get_user_model().objects.filter(
        username="bench"
    ).first() or get_user_model().objects.create_superuser(
        "bench", "bench@localhost", "bench-password-not-used"
    )
    _, token = api_token_create(user=user, scope="read")
    client = Client()
    params = {"start": start.date().isoformat(), "end": end.date().isoformat(), "group_by": "team,model"}
    timings = []
    for _ in range(requests + 5):
        started = time.perf_counter()
        response = client.get(
            "/api/v1/costs/", params, HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_HOST="localhost"
        )
        timings.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.content[:300]
    return timings[5:]  # the first requests warm caches and connections


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scales", default="2000000,20000000")
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    setup()
    results = []
    for n in [int(scale) for scale in args.scales.split(",")]:
        reset()
        made = fill(n)
        started = time.perf_counter()
        hours = recompute(now=END)
        rollup = time.perf_counter() - started
        timings = measure(args.requests)
        p50 = statistics.median(timings)
        p95 = statistics.quantiles(timings, n=20)[-1]
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM costcenter_hourlyusage")
            hourly = cursor.fetchone()[0]
            cursor.execute("SELECT count(*) FROM costcenter_dailyusage")
            daily = cursor.fetchone()[0]
        results.append((n, p50, p95))
        print(
            f"{n:>12,} attempts: filled in {made:.0f}s; recompute {hours:,} hours in {rollup:.0f}s "
            f"({rollup / 30:.1f}s per day of data); rollup rows hourly {hourly:,} daily {daily:,}; "
            f"/api/v1/costs/ 30 days by team×model: p50 {p50:.1f} ms, p95 {p95:.1f} ms",
            flush=True,
        )
    if len(results) >= 2:
        (n1, _, p95_1), (n2, _, p95_2) = results[0], results[-1]
        print(
            f"\np95 growth {n2 / n1:.0f}× the attempts: {p95_2 / p95_1:.2f} (target <= 1.5); p95 at the largest "
            f"scale {p95_2:.1f} ms (target <= 150 ms)"
        )


if __name__ == "__main__":
    main()
