"""One benchmark run: every figure of issue #10 side by side, with its target, on one fresh database.

    python bench/run.py --scale 2m            # ~2 M demo attempts (7 minutes on a quiet 2-core machine)
    python bench/run.py --scale 20m           # 2 M, then 20 M: read times at both, their ratio (44 minutes quiet)
    python bench/run.py --scale 2m --quick    # small sizes, under two minutes: the command still works

What it does (the method is written up in docs/benchmarks.md, "One full run"):

1. A fresh embedded Postgres in a new folder under ``.costcenter-bench/`` (``--home`` to choose),
   migrated, with the example catalog. The run happens in a child process, so that the database
   server, which stops with its last user, is gone before the folder is removed.
2. For each size (2 M; 2 M and 20 M for ``--scale 20m``): the demo simulator (``ingest.demo``)
   generates that many attempts over 30 days up to now, all written as canonical JSONL in one
   file; ``bench/ingest.py`` loads the same rows four ways (``ingest_usage`` end-to-end, re-ingest
   of duplicates, raw binary COPY, Django ``bulk_create``) and measures bytes per row and the
   ingest process's peak RSS; the cost engine recomputes the 30 days (rollup time per day of
   data); ``bench/pages.py`` times every dashboard page and ``bench/costs_api.py`` the
   ``/api/v1/costs/`` request, p50/p95 over ``--requests`` requests each.
3. ``bench/ingest_api_load.py``: gunicorn on a loopback port, a second process posting batches
   with 4 connections; sustained records/s, p99, errors, exactly-once check.
4. ``bench/export.py`` (its own CLI, in a subprocess: that file is another engineer's, and it
   truncates the rollups, so it runs last): FOCUS export streaming rows/s and peak RSS.

The simulator writes no GPU metrics here (only usage), so the GPU fleet page shows pools without
utilisation and pool costs are not split by utilisation. Everything else is the real path.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import bench_environment, django_setup, p50_p95_p99, write_demo_file  # noqa: E402

DAYS = 30
BULK_SAMPLE = 2_000_000

# Target values from issue #10.
INGEST_VS_COPY = 0.6
INGEST_VS_BULK = 5.0
PAGE_P95_MS = 150.0
GROWTH = 1.5
PEAK_RSS_BYTES = 300e6
EXPORT_PEAK_RSS_BYTES = 200e6  # issue #8: a 10 M-row export streams in at most 200 MB
BYTES_PER_ROW = 200.0
API_ERRORS = 0


@dataclass(frozen=True)
class Plan:
    sizes: tuple[int, ...]  # attempts asked of the simulator, smallest first
    days: int
    requests: int  # per page and for the costs API
    export_rows: int
    load_batches: int
    load_batch_size: int
    load_concurrency: int
    load_seconds: float


PLANS = {
    ("2m", False): Plan((2_000_000,), DAYS, 100, 1_000_000, 200, 1000, 4, 120),
    ("20m", False): Plan((2_000_000, 20_000_000), DAYS, 100, 10_000_000, 400, 1000, 4, 180),
    # Small enough to finish in well under two minutes; proves the command, not the targets.
    ("2m", True): Plan((5_000,), 2, 3, 2_000, 4, 250, 4, 30),
    ("20m", True): Plan((5_000, 15_000), 2, 3, 2_000, 4, 250, 4, 30),
}


@dataclass
class SizeFigures:
    asked: int
    records: int
    generate_seconds: float
    ingest: object  # bench.ingest.IngestFigures
    recompute_seconds: float
    hours: int
    pages: list[tuple[str, float, float]]  # label, p50, p95 (ms)
    costs_api: tuple[float, float]  # p50, p95 (ms)


@dataclass
class Loads:
    """The machine's 1-minute load average, sampled at each phase: the run shares 2 cores."""

    samples: list[tuple[str, float]] = field(default_factory=list)

    def sample(self, phase: str) -> None:
        self.samples.append((phase, os.getloadavg()[0]))

    def summary(self) -> str:
        values = [value for _, value in self.samples]
        return f"1-min load average {min(values):.2f}–{max(values):.2f} during the run (2 cores)"


def log(message: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {message}", file=sys.stderr, flush=True)


# --- the phases --------------------------------------------------------------------------------


def load_code_now() -> None:
    """Import every view and bench module now, at the start.

    The working tree is shared with engineers editing it during a run: importing lazily, a page
    first requested half an hour in could load newer code than the models it was migrated with.
    """
    from django.urls import get_resolver

    from bench import costs_api, ingest, ingest_api_load, pages  # noqa: F401

    get_resolver().url_patterns  # noqa: B018 - resolving the URLconf imports every view module


def prepare_database() -> None:
    from django.core.management import call_command

    from costcenter.catalog import catalog_load

    call_command("migrate", verbosity=0)
    catalog_load((ROOT / "examples" / "catalog.yaml").read_text(), source="examples/catalog.yaml")


def reset_usage() -> None:
    """An empty raw table and no rollups: each size starts from the same state."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE ingest_attempt, ingest_dirtyhour, costcenter_hourlyusage, costcenter_dailyusage, "
            "costcenter_poolhour, costcenter_rollupstate, costcenter_repricehour"
        )


def recompute_window(start: datetime, end: datetime) -> tuple[float, int]:
    """Cost every hour of the window from scratch; seconds taken and hours recomputed.

    ``bench/ingest.py`` leaves the rows of its last method (``bulk_create``) without dirty-hour
    marks, so every hour of the window is marked, as an ingest would have.
    """
    from django.db import connection

    from costcenter.costing import recompute

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE ingest_dirtyhour")
        cursor.execute(
            "INSERT INTO ingest_dirtyhour (hour, marked_at) SELECT h, now() FROM "
            "generate_series(%s::timestamptz, %s::timestamptz - interval '1 hour', interval '1 hour') h",
            [start, end],
        )
        cursor.execute("ANALYZE ingest_attempt")
    started = time.perf_counter()
    hours = recompute(now=end, since=start)
    return time.perf_counter() - started, hours


def measure_size(asked: int, plan: Plan, work: Path, end: datetime, loads: Loads) -> SizeFigures:
    from bench import costs_api as bench_costs_api
    from bench import ingest as bench_ingest
    from bench import pages as bench_pages

    reset_usage()
    start = end - timedelta(days=plan.days)
    data = work / f"demo-{asked}.jsonl"
    loads.sample(f"generate {asked:,}")
    log(f"generating ~{asked:,} demo attempts over {plan.days} days …")
    started = time.perf_counter()
    records = write_demo_file(data, end=end, days=plan.days, records=asked)
    generated = time.perf_counter() - started
    log(f"{records:,} records, {data.stat().st_size / records:.0f} bytes each, in {generated:.0f} s")

    loads.sample(f"ingest {records:,}")
    log("ingestion: end-to-end, re-ingest, raw COPY, bulk_create …")
    # bulk_create is the slow reference (~20k rows/s): above 2 M rows its rate is taken on the
    # file's first 2 M rows, which gives the same figure a quarter of an hour sooner at 20 M.
    ingest = bench_ingest.measure(data, work, records=records, progress=log, bulk_sample=BULK_SAMPLE)
    data.unlink()

    loads.sample(f"recompute {records:,}")
    log("recomputing the rollups of the window …")
    recompute_seconds, hours = recompute_window(start, end)
    log(f"{hours:,} hours recomputed in {recompute_seconds:.0f} s")

    loads.sample(f"pages {records:,}")
    log(f"pages, {plan.requests} requests each …")
    try:
        pages = [(label, p50, p95) for label, p50, p95, _ in bench_pages.measure(plan.requests)]
    except Exception as exc:  # one broken page must not cost the rest of a long run
        log(f"page measurement failed: {exc!r}")
        pages = [
            (f"{label} — FAILED: {type(exc).__name__}", float("nan"), float("nan"))
            for label, _ in bench_pages.PAGES
        ]
    loads.sample(f"costs API {records:,}")
    timings = bench_costs_api.measure(plan.requests, start=start, end=end)
    p50, p95, _ = p50_p95_p99(timings)
    return SizeFigures(asked, records, generated, ingest, recompute_seconds, hours, pages, (p50, p95))


def measure_api_load(plan: Plan, work: Path, end: datetime, loads: Loads):
    from bench.ingest_api_load import run_load

    loads.sample("ingest API load")
    wanted = plan.load_batches * plan.load_batch_size
    data = work / "api-load.jsonl"
    # A week before the dataset's window, into its own source: nothing collides with the dataset.
    write_demo_file(data, end=end - timedelta(days=plan.days), days=7, records=int(wanted * 1.1))
    log(
        f"ingest API: {plan.load_batches} batches of {plan.load_batch_size} over {plan.load_concurrency} connections …"
    )
    result = run_load(
        data=data,
        batches=plan.load_batches,
        batch_size=plan.load_batch_size,
        concurrency=plan.load_concurrency,
        max_seconds=plan.load_seconds,
    )
    data.unlink()
    return result


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _number(text: str) -> float:
    return float(text.split()[0].replace(",", ""))


def parse_export_table(stdout: str) -> dict[str, tuple[int, float, float]]:
    """format -> (rows, rows/s, peak RSS in MB) from bench/export.py's markdown table.

    Columns are found by their header (``rows``, the first starting with ``rows/s``, ``peak RSS``),
    not their position: that script is another engineer's and its table gains columns."""
    lines = [line for line in stdout.splitlines() if line.strip().startswith("|")]
    header = next((_cells(line) for line in lines if _cells(line)[0].lower() == "format"), None)
    if header is None:
        return {}
    names = [name.lower() for name in header]
    rows_at = names.index("rows")
    rate_at = next(i for i, name in enumerate(names) if name.startswith("rows/s"))
    rss_at = names.index("peak rss")
    figures = {}
    for line in lines:
        cells = _cells(line)
        if len(cells) == len(names) and cells[0] in ("csv", "parquet", "ndjson"):
            figures[cells[0]] = (
                int(_number(cells[rows_at])),
                _number(cells[rate_at]),
                _number(cells[rss_at]),
            )
    return figures


def measure_export(plan: Plan, loads: Loads) -> dict[str, tuple[int, float, float]]:
    """bench/export.py's own CLI in a subprocess (its file is not ours to refactor); parses its table.

    Returns format -> (rows, rows/s, peak RSS in MB)."""
    loads.sample("export")
    log(f"export: {plan.export_rows:,} hourly rows as CSV and Parquet …")
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "export.py"),
            "--rows",
            str(plan.export_rows),
            "--formats",
            "csv,parquet",
        ],
        cwd=ROOT,
        env=os.environ,
        capture_output=True,
        text=True,
        check=True,
    )
    figures = parse_export_table(out.stdout)
    if not {"csv", "parquet"} <= set(figures):
        raise RuntimeError(f"bench/export.py printed no figures for every format:\n{out.stdout}")
    return figures


# --- the machine -------------------------------------------------------------------------------


def machine() -> list[str]:
    from django.db import connection

    cpu = "unknown CPU"
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout.splitlines():
            if line.startswith("Model name:"):
                cpu = line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    try:
        debian = "Debian " + Path("/etc/debian_version").read_text().strip()
    except OSError:
        debian = platform.platform()
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        postgres = cursor.fetchone()[0]
    import django

    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
        ).stdout.count("\n")
        code = f"code at {head}" + (f" with {changed} uncommitted changed files" if changed else "")
    except (OSError, subprocess.CalledProcessError):
        code = "code outside git"
    return [
        code,
        f"{os.cpu_count()} CPUs ({cpu}), {memory:.0f} GiB RAM, {debian}, kernel {platform.release()}",
        f"Python {platform.python_version()}, Django {django.get_version()}, "
        f"PostgreSQL {postgres} (embedded pgserver, default configuration)",
    ]


# --- the table ---------------------------------------------------------------------------------


def verdict(ok: bool | None) -> str:
    return "—" if ok is None else ("MET" if ok else "MISSED")


def table(sizes: list[SizeFigures], load, export: dict) -> list[str]:
    """One markdown table: a column per size, the target, MET/MISSED (judged at the largest size)."""
    mb = 1e6
    head = [f"at {size.records / 1e6:.2f} M" for size in sizes]
    rows: list[tuple[str, list[str], str, bool | None]] = []

    def add(label: str, values: list[str], target: str = "", ok: bool | None = None) -> None:
        rows.append((label, values, target, ok))

    def per_size(fn) -> list[str]:
        return [fn(size) for size in sizes]

    big = sizes[-1]
    ing = big.ingest
    add("demo attempts generated (records/s)", per_size(lambda s: f"{s.records / s.generate_seconds:,.0f}"))
    add(
        "ingest `ingest_usage` end-to-end, rows/s",
        per_size(lambda s: f"{s.ingest.rate(s.ingest.e2e_seconds):,.0f}"),
    )
    add(
        "raw binary COPY of the same rows (the limit), rows/s",
        per_size(lambda s: f"{s.ingest.rate(s.ingest.copy_seconds):,.0f}"),
    )
    add(
        "Django `bulk_create` of the same rows, rows/s",
        per_size(lambda s: f"{s.ingest.bulk_rate:,.0f}" + (" (sample)" if s.ingest.bulk_rows else "")),
    )
    e2e_vs_copy = ing.copy_seconds / ing.e2e_seconds
    add(
        "end-to-end / raw COPY",
        per_size(lambda s: f"{s.ingest.copy_seconds / s.ingest.e2e_seconds:.2f}"),
        f"≥ {INGEST_VS_COPY}",
        e2e_vs_copy >= INGEST_VS_COPY,
    )
    e2e_vs_bulk = ing.rate(ing.e2e_seconds) / ing.bulk_rate
    add(
        "end-to-end / `bulk_create`",
        per_size(lambda s: f"{s.ingest.rate(s.ingest.e2e_seconds) / s.ingest.bulk_rate:.2f}"),
        f"≥ {INGEST_VS_BULK:g}",
        e2e_vs_bulk >= INGEST_VS_BULK,
    )
    add("re-ingest, all duplicates, records/s", per_size(lambda s: f"{s.ingest.reingest_rate:,.0f}"))
    add(
        "bytes per raw row on disk (heap + indexes)",
        per_size(lambda s: f"{s.ingest.bytes_per_row:.0f}"),
        f"≤ {BYTES_PER_ROW:.0f}",
        ing.bytes_per_row <= BYTES_PER_ROW,
    )
    add(
        "peak RSS of `ingest_usage` (re-ingest)",
        per_size(lambda s: f"{s.ingest.peak_rss / mb:.0f} MB ({s.ingest.reingest_peak_rss / mb:.0f})"),
        f"≤ {PEAK_RSS_BYTES / mb:.0f} MB",
        max(s.ingest.peak_rss for s in sizes) <= PEAK_RSS_BYTES,
    )
    add(
        "rollup recompute, seconds per day of data",
        per_size(
            lambda s: (
                f"{s.recompute_seconds / (s.hours / 24):.2f} ({s.hours:,} h in {s.recompute_seconds:.0f} s)"
            )
        ),
    )
    labels = [label for label, _, _ in big.pages] + ["`/api/v1/costs/` 30 days, team × model"]

    def reads(size: SizeFigures) -> list[tuple[float, float]]:
        return [(p50, p95) for _, p50, p95 in size.pages] + [size.costs_api]

    for index, label in enumerate(labels):
        p95_big = reads(big)[index][1]
        add(
            f"{label}: p50 / p95 ms",
            per_size(lambda s, i=index: "{:.1f} / {:.1f}".format(*reads(s)[i])),
            f"p95 ≤ {PAGE_P95_MS:.0f}",
            p95_big <= PAGE_P95_MS,
        )
        if len(sizes) > 1:
            growth = p95_big / reads(sizes[0])[index][1]
            add(
                f"{label}: p95 growth {sizes[0].records / 1e6:.1f} M → {big.records / 1e6:.1f} M",
                [""] * (len(sizes) - 1) + [f"{growth:.2f}"],
                f"≤ {GROWTH}",
                growth <= GROWTH,
            )
    for fmt, name in (("csv", "CSV"), ("parquet", "Parquet")):
        rows_out, rate, rss = export[fmt]
        add(
            f"FOCUS export {name}, {rows_out:,} hourly rows: rows/s, peak RSS",
            [""] * (len(sizes) - 1) + [f"{rate:,.0f}, {rss:.0f} MB"],
            f"RSS ≤ {EXPORT_PEAK_RSS_BYTES / mb:.0f} MB",
            rss * mb <= EXPORT_PEAK_RSS_BYTES,
        )
    last = [""] * (len(sizes) - 1)
    add(
        f"ingest API, {load.concurrency} connections × {load.batch_size:,}-record batches: records/s",
        [*last, f"{load.records_per_second:,.0f} ({load.records_sent:,} in {load.seconds:.0f} s)"],
    )
    add("ingest API p50 / p99 latency per batch, ms", [*last, f"{load.p50_ms:.0f} / {load.p99_ms:.0f}"])
    add("ingest API errors", [*last, f"{load.errors}"], f"= {API_ERRORS}", load.errors == API_ERRORS)
    add(
        "ingest API rows stored exactly once (count = sent; re-sent batches all duplicate)",
        [*last, "yes" if load.exact else "NO"],
        "yes",
        load.exact,
    )
    lines = [
        "| figure | " + " | ".join(head) + " | target | |",
        "|---|" + "---:|" * len(head) + "---|---|",
    ]
    for label, values, target, ok in rows:
        lines.append(f"| {label} | " + " | ".join(values) + f" | {target or '—'} | {verdict(ok)} |")
    return lines


# --- entry points --------------------------------------------------------------------------------


def inner(args) -> int:
    """The run itself, in the child process whose COSTCENTER_HOME is the fresh folder."""
    plan = PLANS[(args.scale, args.quick)]
    home = Path(os.environ["COSTCENTER_HOME"])
    work = home / "bench"
    work.mkdir(parents=True, exist_ok=True)
    django_setup()
    loads = Loads()
    loads.sample("start")
    began = time.perf_counter()
    load_code_now()
    prepare_database()
    described = machine()
    # Up to the start of the current hour: the pages' default periods end now.
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    sizes = [measure_size(asked, plan, work, end, loads) for asked in plan.sizes]
    load = measure_api_load(plan, work, end, loads)
    export = measure_export(plan, loads)
    loads.sample("end")
    minutes = (time.perf_counter() - began) / 60
    lines = [
        f"bench/run.py --scale {args.scale}{' --quick' if args.quick else ''}, "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {minutes:.1f} min",
        *described,
        loads.summary() + ": " + ", ".join(f"{phase} {value:.2f}" for phase, value in loads.samples),
        f"dataset: the demo simulator's attempts over {plan.days} days up to {end:%Y-%m-%d %H:00} UTC, all as "
        "canonical JSONL (no GPU metrics); reads measured as a signed-in org-wide viewer "
        f"({plan.requests} requests per page after 5 warm-up requests)",
        "",
        *table(sizes, load, export),
    ]
    print("\n".join(lines), flush=True)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "sizes": [
                        {
                            "records": size.records,
                            "stored": size.ingest.stored,
                            "hours": size.hours,
                            "pages": size.pages,
                            "costs_api": size.costs_api,
                        }
                        for size in sizes
                    ],
                    "api_load": {
                        "records_sent": load.records_sent,
                        "rows_in_db": load.rows_in_db,
                        "errors": load.errors,
                        "exact": load.exact,
                    },
                    "export": export,
                    "table": lines,
                }
            )
        )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", choices=["2m", "20m"], default="2m")
    parser.add_argument("--quick", action="store_true", help="small sizes: proves the command in < 2 minutes")
    parser.add_argument(
        "--home",
        type=Path,
        help="a new, empty folder for the run's database (default: a new one under .costcenter-bench/)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the run's folder (database included)")
    parser.add_argument("--json", help="also write the figures as JSON to this file")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        return inner(args)

    if args.home:
        if args.home.exists() and any(args.home.iterdir()):
            parser.error(f"--home {args.home} is not empty: the run needs a fresh database")
        args.home.mkdir(parents=True, exist_ok=True)
        home = args.home
    else:
        base = ROOT / ".costcenter-bench"
        base.mkdir(exist_ok=True)
        home = Path(tempfile.mkdtemp(prefix=f"run-{args.scale}-", dir=base))
    bench_environment(home)
    command = [sys.executable, __file__, "--inner", "--scale", args.scale]
    if args.quick:
        command.append("--quick")
    if args.json:
        command += ["--json", str(Path(args.json).resolve())]
    try:
        # The child holds the embedded server; it stops the server when it exits.
        return subprocess.run(command, cwd=ROOT, env=os.environ).returncode
    finally:
        if not args.keep:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
