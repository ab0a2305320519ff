"""Ingestion benchmark: our end-to-end ``ingest_usage`` beside raw binary COPY and ``bulk_create``.

    python bench/ingest.py [--records 2000000] [--keep]

Runs against an embedded Postgres under ``.costcenter-bench/`` (or DATABASE_URL), on the real
``ingest_attempt`` table (monthly partitions, primary key, BRIN). Each method loads the same
rows into the empty table, measured side by side in one run:

1. end-to-end: ``manage.py ingest_usage FILE`` in a child process (parse, validate, dimension ids,
   binary COPY to staging, INSERT … ON CONFLICT DO NOTHING, checkpoints); its peak RSS is read
   from the child's rusage, through ``bench/peak_rss.py`` (which says why);
2. re-ingest of the same file with ``--force`` (every row a duplicate, 0 added);
3. raw binary COPY of the very rows step 1 stored (dumped with COPY TO, then loaded back into the
   emptied table): the physical limit for this layout;
4. Django ``bulk_create`` (batches of 1,000, ``ignore_conflicts``) of the same rows, timing only
   the ``bulk_create`` calls: what a typical Django app does.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "costcenter.settings")
os.environ.setdefault("COSTCENTER_HOME", str(ROOT / ".costcenter-bench"))
os.environ.setdefault("DEBUG", "true")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from ingest.formats import iter_path_records  # noqa: E402
from ingest.models import Attempt  # noqa: E402
from ingest.records import FileDefaults, UsageRecord  # noqa: E402
from ingest.services import source_for  # noqa: E402

TEAMS = ["netops", "support", "search", "research", "platform", "growth"]
WORKLOADS = ["summarize", "classify", "extract", "chat", "rerank", "code-review", "translate", "qa"]
MODELS = [
    ("llama-3.1-70b-instruct-awq", "vllm-h100-a"),
    ("qwen2.5-72b-instruct", "vllm-mi300x-b"),
    ("gpt-4o-mini", "openai-gpt-4o-mini"),
    ("gpt-4.1", "openai-gpt-4.1"),
    ("claude-sonnet-4", "anthropic-claude-sonnet"),
]


def generate(path: Path, records: int, seed: int = 1) -> None:
    """Realistic canonical JSONL: ~30 days, retries, failures, log-normal token lengths."""
    rng = random.Random(seed)
    start = datetime(2026, 10, 30, tzinfo=UTC)
    step = timedelta(days=30) / records
    with path.open("w") as out:
        task = 0
        i = 0
        while i < records:
            task += 1
            model, endpoint = rng.choice(MODELS)
            team, workload = rng.choice(TEAMS), rng.choice(WORKLOADS)
            for attempt in range(1, 4):
                failed = rng.random() < 0.04
                prompt = int(rng.lognormvariate(6.5, 0.8))
                completion = 0 if failed else int(rng.lognormvariate(5, 0.9))
                latency = int(200 + completion * rng.uniform(8, 25))
                record = {
                    "task_id": f"task-{task}",
                    "attempt": attempt,
                    "request_id": f"req-{task}-{attempt}-{rng.getrandbits(48):012x}",
                    "ts": (start + step * i).isoformat().replace("+00:00", "Z"),
                    "model": model,
                    "endpoint": endpoint,
                    "workload": workload,
                    "team": team,
                    "status": "failure" if failed else "success",
                    "http_status": rng.choice([429, 500, 503]) if failed else 200,
                    "error_type": "upstream_error" if failed else None,
                    "latency_ms": latency,
                    "ttft_ms": int(latency * rng.uniform(0.05, 0.3)),
                    "queue_wait_ms": rng.randint(0, 50),
                    "usage": {
                        "prompt_tokens": prompt,
                        "completion_tokens": completion,
                        "total_tokens": prompt + completion,
                        "prompt_tokens_details": {"cached_tokens": rng.randint(0, prompt // 2)},
                    },
                }
                out.write(json.dumps(record, separators=(",", ":")) + "\n")
                i += 1
                if not failed or i >= records:
                    break


def table_bytes() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0) FROM pg_inherits "
            "WHERE inhparent = 'ingest_attempt'::regclass"
        )
        return int(cursor.fetchone()[0])


def row_count() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM ingest_attempt")
        return cursor.fetchone()[0]


def truncate() -> None:
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE ingest_attempt")
        cursor.execute("TRUNCATE ingest_filecheckpoint, ingest_rejectedrecord, ingest_dirtyhour CASCADE")


def run_child(args: list[str]) -> tuple[float, int, str]:
    """Wall seconds, peak RSS (bytes) and stdout of ``manage.py ARGS`` in a child process.

    The child is started through ``bench/peak_rss.py``: read directly from this process, its
    ``ru_maxrss`` would include this process's own peak (see that file), which in
    ``bench/run.py`` is the demo simulator's, not the ingest's.
    """
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as report:
        started = time.perf_counter()
        child = subprocess.run(
            [
                sys.executable,
                str(ROOT / "bench" / "peak_rss.py"),
                report.name,
                sys.executable,
                "manage.py",
                *args,
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        elapsed = time.perf_counter() - started
        if child.returncode != 0:
            raise SystemExit(f"manage.py {' '.join(args)} failed:\n{child.stdout}")
        return elapsed, int(report.read()), child.stdout


def raw_copy(dump: Path) -> float:
    with connection.cursor() as cursor, dump.open("wb") as out:
        with cursor.copy("COPY (SELECT * FROM ingest_attempt) TO STDOUT (FORMAT BINARY)") as copy:
            for block in copy:
                out.write(block)
    truncate()
    started = time.perf_counter()
    with connection.cursor() as cursor, dump.open("rb") as data:
        with cursor.copy("COPY ingest_attempt FROM STDIN (FORMAT BINARY)") as copy:
            while block := data.read(1 << 20):
                copy.write(block)
    return time.perf_counter() - started


def bulk_create(path: Path, limit: int | None = None) -> tuple[float, int]:
    """Seconds spent in the bulk_create calls (parsing and id lookups are not timed) and rows
    given to them: all of the file's, or its first ``limit`` (a sample, for very large files)."""
    from costcenter.pg import hash64
    from ingest.dimensions import DimensionIds

    dims = DimensionIds(source_for("bench-bulk"))
    batch: list[Attempt] = []
    spent = 0.0

    def flush() -> float:
        started = time.perf_counter()
        Attempt.objects.bulk_create(batch, batch_size=1000, ignore_conflicts=True)
        return time.perf_counter() - started

    rows = 0
    for item in iter_path_records(path, "canonical", defaults=FileDefaults(), now=datetime.now(UTC)):
        if not isinstance(item, UsageRecord):
            continue
        if limit is not None and rows >= limit:
            break
        rows += 1
        batch.append(
            Attempt(
                ts=item.ts,
                key_hash=hash64(item.idempotency_key),
                task_hash=hash64(item.task_id),
                source_id=dims.source.pk,
                team_id=dims.team(item.team),
                workload_id=dims.workload(item.workload),
                model_id=dims.model(item.model, item.model_version),
                endpoint_id=dims.endpoint(item.endpoint),
                error_type_id=dims.error_type(item.error_type),
                prompt_tokens=item.prompt_tokens,
                completion_tokens=item.completion_tokens,
                cached_tokens=item.cached_tokens,
                reasoning_tokens=item.reasoning_tokens,
                latency_ms=item.latency_ms,
                ttft_ms=item.ttft_ms,
                queue_wait_ms=item.queue_wait_ms,
                attempt=item.attempt,
                http_status=item.http_status,
                succeeded=item.status == "success",
                task_id=item.task_id,
            )
        )
        if len(batch) >= 10_000:
            spent += flush()
            batch = []
    if batch:
        spent += flush()
    return spent, rows


@dataclass
class IngestFigures:
    records: int  # lines in the input file
    stored: int  # rows stored (the same rows for every method)
    e2e_seconds: float
    reingest_seconds: float
    copy_seconds: float
    bulk_seconds: float
    bytes_per_row: float
    peak_rss: int  # bytes, of the end-to-end ingest_usage process
    reingest_peak_rss: int
    bulk_rows: int | None = None  # rows timed with bulk_create when only a sample was (else stored)

    def rate(self, seconds: float) -> float:
        return self.stored / seconds

    @property
    def bulk_rate(self) -> float:
        return (self.bulk_rows or self.stored) / self.bulk_seconds

    @property
    def reingest_rate(self) -> float:
        return self.records / self.reingest_seconds


def measure(
    data: Path, work: Path, *, records: int, progress=None, bulk_sample: int | None = None
) -> IngestFigures:
    """The four methods on the same rows, one after the other; the table ends up holding them.

    ``progress(text)``, when given, hears each method's time as soon as it is known.
    ``bulk_sample``: time ``bulk_create`` on the file's first N rows only (its rate is what is
    compared; at 20 M rows the full run would take a quarter of an hour for the same figure)."""
    say = progress or (lambda text: None)
    sampled_bulk = None
    if bulk_sample is not None and bulk_sample < records:
        truncate()
        sampled_bulk = bulk_create(data, limit=bulk_sample)
        say(f"bulk_create: {sampled_bulk[1]:,} rows (a sample) in {sampled_bulk[0]:.1f} s")
    truncate()
    e2e, rss, _ = run_child(["ingest_usage", str(data), "--source", "bench", "--force"])
    stored = row_count()
    say(f"end-to-end: {stored:,} rows in {e2e:.1f} s")
    bytes_per_row = table_bytes() / stored
    again, again_rss, _ = run_child(["ingest_usage", str(data), "--source", "bench", "--force"])
    assert row_count() == stored, "re-ingest added rows"
    say(f"re-ingest: {again:.1f} s")
    dump = work / "rows.copy"
    copy_s = raw_copy(dump)
    dump.unlink()
    assert row_count() == stored
    say(f"raw COPY: {copy_s:.1f} s")
    if sampled_bulk is not None:  # the table keeps the COPY's rows: every row, for what follows
        bulk_s, bulk_rows = sampled_bulk
        return IngestFigures(
            records, stored, e2e, again, copy_s, bulk_s, bytes_per_row, rss, again_rss, bulk_rows
        )
    truncate()
    bulk_s, _ = bulk_create(data)
    assert row_count() == stored
    say(f"bulk_create: {bulk_s:.1f} s")
    return IngestFigures(records, stored, e2e, again, copy_s, bulk_s, bytes_per_row, rss, again_rss)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    args = parser.parse_args()
    n = args.records

    call_command("migrate", verbosity=0)
    work = Path(os.environ["COSTCENTER_HOME"]) / "bench"
    work.mkdir(parents=True, exist_ok=True)
    data = work / f"usage-{n}.jsonl"
    if not data.exists():
        print(f"generating {n:,} canonical records …", flush=True)
        generate(data, n)
    print(f"input: {data} ({data.stat().st_size / 1e6:,.0f} MB, {data.stat().st_size / n:.0f} bytes/record)")
    figures = measure(data, work, records=n)
    stored = figures.stored
    e2e, copy_s, bulk_s, again = (
        figures.e2e_seconds,
        figures.copy_seconds,
        figures.bulk_seconds,
        figures.reingest_seconds,
    )
    rss, again_rss, bytes_per_row = figures.peak_rss, figures.reingest_peak_rss, figures.bytes_per_row

    rate = {name: stored / seconds for name, seconds in [("e2e", e2e), ("copy", copy_s), ("bulk", bulk_s)]}
    print(f"\nrows stored: {stored:,} of {n:,} records (same rows for every method)")
    print(f"{'method':<34}{'seconds':>10}{'rows/s':>12}")
    print(f"{'ingest_usage end-to-end':<34}{e2e:>10.1f}{rate['e2e']:>12,.0f}")
    print(f"{'raw binary COPY (limit)':<34}{copy_s:>10.1f}{rate['copy']:>12,.0f}")
    print(f"{'Django bulk_create':<34}{bulk_s:>10.1f}{rate['bulk']:>12,.0f}")
    print(f"{'re-ingest, all duplicates':<34}{again:>10.1f}{n / again:>12,.0f}")
    print(f"\nend-to-end / raw COPY     {rate['e2e'] / rate['copy']:.2f}   (target >= 0.6)")
    print(f"end-to-end / bulk_create  {rate['e2e'] / rate['bulk']:.2f}   (target >= 5)")
    print(f"bytes per row on disk     {bytes_per_row:.0f}   (heap + primary key + BRIN; target <= 200)")
    print(
        f"peak RSS of ingest_usage  {rss / 2**20:.0f} MiB (re-ingest {again_rss / 2**20:.0f} MiB; target <= 300)"
    )
    if not args.keep:
        data.unlink()


if __name__ == "__main__":
    main()
