"""Where ingestion's time goes: CPU µs per record of each reading stage, and the CPU split of one
ingest between this process and the Postgres server.

    python bench/ingest_profile.py [--records 100000]

CPU time (``time.process_time``, best of 3) rather than wall time, so the figures hold up on a
shared machine better than rates do. The split sums utime+stime of the embedded server's
processes from ``/proc`` (Linux), before and after ``ingest_path`` of the same file into a fresh
source (new rows, COPY straight into the table), then again with ``force`` (all duplicates).
Uses ``bench/ingest.py``'s generator and its database under ``.costcenter-bench/``.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from bench.ingest import generate  # noqa: E402 - also sets Django up, as bench/ingest.py does
from ingest.formats import canonical  # noqa: E402
from ingest.records import FileDefaults, UsageRecord  # noqa: E402
from ingest.services import _encode_record, ingest_path, source_for  # noqa: E402

_IDS = b"\0" * 54  # stands for the encoded source and dimension ids


class _Pipe(io.RawIOBase):
    """A stream that cannot seek, so the fast path reads it line by line (as it does gzip)."""

    def __init__(self, data: bytes) -> None:
        self.data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        return self.data.readinto(buffer)


def _consume(items) -> None:
    for item in items:  # what the write loop does with each item, minus the database
        if type(item) is tuple:
            item[1] + _IDS + item[2]
        elif isinstance(item, UsageRecord):
            _encode_record(item, _IDS)


def reading_stages(data: bytes) -> dict[str, float]:
    records = data.count(b"\n")
    now = datetime.now(UTC)
    stages = {
        "full path (orjson, canonical mapping, build_record, row encoding)": lambda: canonical.iter_records(
            io.BytesIO(data), defaults=FileDefaults(), now=now
        ),
        "fast path, line by line (gzip, pipes)": lambda: canonical.iter_records(
            io.BufferedReader(_Pipe(data)), defaults=FileDefaults(), now=now, fast_rows=True
        ),
        "fast path, 256 KiB blocks (plain files)": lambda: canonical.iter_records(
            io.BytesIO(data), defaults=FileDefaults(), now=now, fast_rows=True
        ),
    }
    figures = {}
    for label, make in stages.items():
        best = float("inf")
        for _ in range(3):
            started = time.process_time()
            _consume(make())
            best = min(best, time.process_time() - started)
        figures[label] = best / records * 1e6
    return figures


def _server_cpu_seconds() -> float:
    """utime+stime (with reaped children) of the postmaster and its children."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('data_directory')")
        pgdata = Path(cursor.fetchone()[0])
    master = int((pgdata / "postmaster.pid").read_text().split()[0])
    ticks = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry) == master or int(fields[1]) == master:
            ticks += sum(int(value) for value in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def cpu_split(path: Path, records: int) -> dict[str, tuple[float, float, float]]:
    source = source_for(f"profile-{datetime.now(UTC):%Y%m%d%H%M%S}")
    figures = {}
    for label, force in (("new rows", False), ("all duplicates", True)):
        server, python, wall = _server_cpu_seconds(), time.process_time(), time.perf_counter()
        ingest_path(path, source=source, force=force)
        figures[label] = tuple(
            spent / records * 1e6
            for spent in (
                time.process_time() - python,
                _server_cpu_seconds() - server,
                time.perf_counter() - wall,
            )
        )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=100_000)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    work = Path(os.environ["COSTCENTER_HOME"]) / "bench"
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"profile-{args.records}.jsonl"
    if not path.exists():
        generate(path, args.records)
    print(f"load average: {' '.join(f'{value:.2f}' for value in os.getloadavg())}")
    print("\nreading, CPU µs per record:")
    for label, micros in reading_stages(path.read_bytes()).items():
        print(f"  {label:<68}{micros:6.2f}")
    print("\none ingest_path, µs per record:      python CPU   server CPU   wall")
    for label, (python, server, wall) in cpu_split(path, args.records).items():
        print(f"  {label:<34}{python:10.1f}{server:13.1f}{wall:8.1f}")


if __name__ == "__main__":
    main()
