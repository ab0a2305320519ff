"""Streaming a 10M-row FOCUS export: rows per second and peak memory of the serving process.

    python bench/export.py [--rows 10000000] [--formats csv,ndjson,json,parquet]

Fills ``costcenter_hourlyusage`` with ``--rows`` rollup rows in SQL (30 days × 720 hours × as
many team/workload/model/endpoint groups as needed; this benchmark is about exporting, not
costing), then, for each format, starts a **fresh process** that requests
``GET /api/v1/export/focus/?granularity=hour`` over the 30 days through Django's whole request
stack (token authentication, throttling, the size-cap count, the selectors' scoped queryset, a
server-side cursor, the FOCUS row builder and the streaming writer) and reads the streamed
response chunk by chunk, keeping nothing. The child reports rows (counted from the output),
bytes, wall seconds, its own CPU seconds (user + system: the web worker's work, whatever else
the machine is doing; Postgres runs in its own processes) and its peak RSS (``VmHWM``),
which is what a web worker would need.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
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

from django.db import connection  # noqa: E402

END = datetime(2026, 11, 29, tzinfo=UTC)
START = END - timedelta(days=30)
HOURS = 30 * 24
JSON_ROW_START = b'{"BilledCost":'  # every FOCUS row object of format=json starts so
COMBOS = [
    ("llama-3.1-70b-instruct-awq", "vllm-h100-a"),
    ("qwen2.5-72b-instruct", "vllm-mi300x-b"),
    ("gpt-4o-mini", "openai-gpt-4o-mini"),
    ("gpt-4.1", "openai-gpt-4.1"),
    ("claude-sonnet-4", "anthropic-claude-sonnet"),
]


def setup(rows: int) -> None:
    """The example catalog, enough teams and workloads for ``rows`` rows, and the rollup rows."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from costcenter.catalog import catalog_load
    from costcenter.models import Endpoint, HourlyUsage, LlmModel, Team, UserProfile, Workload

    call_command("migrate", verbosity=0)
    catalog_load((ROOT / "examples" / "catalog.yaml").read_text())
    groups_per_hour = -(-rows // HOURS)
    workloads = 20
    teams = -(-groups_per_hour // (workloads * len(COMBOS)))
    Team.objects.bulk_create(
        [Team(slug=f"bench-team-{n:04d}", name=f"Bench team {n}") for n in range(teams)],
        ignore_conflicts=True,
    )
    Workload.objects.bulk_create(
        [Workload(name=f"bench-{n:02d}") for n in range(workloads)], ignore_conflicts=True
    )
    team_ids = list(
        Team.objects.filter(slug__startswith="bench-team-").order_by("pk").values_list("pk", flat=True)
    )
    workload_ids = list(
        Workload.objects.filter(name__startswith="bench-").order_by("pk").values_list("pk", flat=True)
    )
    pairs = [
        (LlmModel.objects.get(name=m, version="").pk, Endpoint.objects.get(name=e).pk) for m, e in COMBOS
    ]
    user, _ = get_user_model().objects.get_or_create(username="bench-viewer")
    UserProfile.objects.update_or_create(user=user, defaults={"org_role": "viewer"})

    existing = HourlyUsage.objects.filter(hour__gte=START, hour__lt=END).count()
    if existing == rows:
        print(f"reusing {existing:,} hourly rollup rows")
        return
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE costcenter_hourlyusage, costcenter_dailyusage, costcenter_poolhour")
        columns = [field.column for field in HourlyUsage._meta.concrete_fields if field.column != "id"]
        # Values per column, in SQL over (h = hour number, g = group number); unknown columns fail loudly.
        values = {
            "hour": "%(start)s::timestamptz + h * interval '1 hour'",
            "team_id": "(%(teams)s::int[])[1 + (g / %(per_team)s) %% %(team_count)s]",
            "workload_id": "(%(workloads)s::int[])[1 + (g / %(pairs)s) %% %(workload_count)s]",
            "model_id": "(%(models)s::int[])[1 + g %% %(pairs)s]",
            "endpoint_id": "(%(endpoints)s::int[])[1 + g %% %(pairs)s]",
            "attempts": "130 + g %% 7",
            "successful_attempts": "125 + g %% 5",
            "tasks": "100",
            "successful_tasks": "96",
            "prompt_tokens": "120000 + g",
            "completion_tokens": "20000 + h",
            "cached_tokens": "1000",
            "reasoning_tokens": "0",
            "cost": "round((0.01 + (g %% 100) * 0.000173 + h * 0.0000001)::numeric, 12)",
            "idle_cost": "NULL",
            "unpriced_attempts": "0",
            "unpriced_tokens": "0",
            "latency_histogram": "'{}'::bigint[]",
            "ttft_histogram": "'{}'::bigint[]",
            "output_tps_histogram": "'{}'::bigint[]",
            "token_price_ids": "'{}'::int[]",
            "gpu_hour_price_id": "NULL",
            "weighted_tokens": "0",
        }
        unknown = [column for column in columns if column not in values]
        if unknown:
            raise SystemExit(f"bench/export.py does not know how to fill {unknown}")
        cursor.execute(
            f"INSERT INTO costcenter_hourlyusage ({', '.join(columns)}) "  # noqa: S608 - constants
            f"SELECT {', '.join(values[c] for c in columns)} "
            "FROM generate_series(0, %(hours)s - 1) h CROSS JOIN generate_series(0, %(groups)s - 1) g "
            "WHERE h * %(groups)s + g < %(rows)s",
            {
                "start": START,
                "teams": team_ids,
                "team_count": len(team_ids),
                "per_team": workloads * len(pairs),
                "workloads": workload_ids,
                "workload_count": len(workload_ids),
                "models": [m for m, _ in pairs],
                "endpoints": [e for _, e in pairs],
                "pairs": len(pairs),
                "hours": HOURS,
                "groups": groups_per_hour,
                "rows": rows,
            },
        )
        cursor.execute("ANALYZE costcenter_hourlyusage")
    print(f"filled {rows:,} hourly rollup rows in {time.perf_counter() - started:.0f} s")


def _peak_rss_kib() -> int:
    """This process's own peak resident memory (VmHWM). Not ``ru_maxrss``: Linux counts in it the
    peak of the image the process was started from, i.e. of the parent (see bench/peak_rss.py)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def export_child(fmt: str, row_group: int | None = None) -> None:
    """In a fresh process: request the export and read it chunk by chunk; print the figures as JSON."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    from costcenter import export

    if row_group:  # --parquet-row-group: try another row-group size without editing the code
        export.PARQUET_ROW_GROUP = row_group

    from costcenter.tokens import api_token_create

    user = get_user_model().objects.get(username="bench-viewer")
    _, token = api_token_create(user=user, scope="read", name="bench")
    rss_before = _peak_rss_kib()
    usage_before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    response = Client(HTTP_HOST="localhost").get(
        "/api/v1/export/focus/",
        {"start": START.isoformat(), "end": END.isoformat(), "granularity": "hour", "format": fmt},
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 200, response.content[:500]
    size = lines = json_rows = 0
    carry = b""  # the end of the previous chunk, so a row start split between chunks is counted
    first_byte = None
    last = b""  # Parquet: the last chunk holds the whole footer (the writer sends it on close)
    for chunk in response.streaming_content:
        if first_byte is None:
            first_byte = time.perf_counter() - started
        size += len(chunk)
        if fmt == "json":
            json_rows += (carry + chunk).count(JSON_ROW_START)
            carry = chunk[-(len(JSON_ROW_START) - 1) :]
        elif fmt != "parquet":
            lines += chunk.count(b"\n")
        if fmt == "parquet":
            last = chunk
    seconds = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_SELF)
    # The serving process's peak, taken before this script parses anything of the output.
    peak_rss_kb = _peak_rss_kib()
    cpu_seconds = (usage.ru_utime + usage.ru_stime) - (usage_before.ru_utime + usage_before.ru_stime)
    if fmt == "csv":
        rows = lines - 1  # the header; no cell holds a line break here
    elif fmt == "parquet":
        import io

        import pyarrow.parquet as pq

        # The footer (its length is in the 4 bytes before the closing "PAR1") counts every row group.
        footer_length = int.from_bytes(last[-8:-4], "little")
        assert len(last) >= footer_length + 8, "the last chunk should hold the whole footer"
        rows = pq.read_metadata(io.BytesIO(last)).num_rows
    elif fmt == "json":
        rows = json_rows
    else:
        rows = lines
    print(
        json.dumps(
            {
                "format": fmt,
                "parquet_row_group": export.PARQUET_ROW_GROUP if fmt == "parquet" else None,
                "rows": rows,
                "bytes": size,
                "seconds": seconds,
                "cpu_seconds": cpu_seconds,
                "first_byte_seconds": first_byte,
                "rss_before_mb": rss_before / 1024,
                "peak_rss_mb": peak_rss_kb / 1024,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--formats", default="csv,ndjson,json,parquet")
    parser.add_argument(
        "--parquet-row-group", type=int, help="rows per Parquet row group (default: the app's)"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        export_child(args.child, args.parquet_row_group)
        return
    setup(args.rows)
    print("| format | rows | MB | wall s | rows/s (wall) | CPU s | rows/CPU s | first byte | peak RSS |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for fmt in args.formats.split(","):
        out = subprocess.run(
            [sys.executable, __file__, "--child", fmt]
            + ([f"--parquet-row-group={args.parquet_row_group}"] if args.parquet_row_group else []),
            check=True,
            capture_output=True,
            text=True,
            env=os.environ,
        )
        result = json.loads(out.stdout.strip().splitlines()[-1])
        rows = result["rows"]
        print(
            f"| {fmt} | {rows:,} | {result['bytes'] / 1e6:,.0f} | {result['seconds']:.0f} | "
            f"{rows / result['seconds']:,.0f} | {result['cpu_seconds']:.0f} | "
            f"{rows / result['cpu_seconds']:,.0f} | {result['first_byte_seconds']:.1f} s | "
            f"{result['peak_rss_mb']:.0f} MB |",
            flush=True,
        )


if __name__ == "__main__":
    main()
