"""The ingest HTTP API under concurrent load from a second process, on loopback.

    python bench/ingest_api_load.py [--batches 200] [--batch-size 1000] [--concurrency 4]
                                    [--max-seconds 60] [--workers 2] [--resend 5]

The real app is served by gunicorn (``--workers`` sync workers) on a free loopback port, against
the embedded Postgres under ``COSTCENTER_HOME`` (default ``.costcenter-bench``). A **separate
process** (this file with ``--client``: stdlib ``http.client`` only, one keep-alive connection
per thread) posts NDJSON batches of demo-simulator records to ``POST /api/v1/usage/?source=…``
with an ``ingest`` token, ``--concurrency`` requests in flight, and stops after ``--batches``
batches or ``--max-seconds``, whichever comes first. It reports sustained records/s (records in
answered batches / wall time), p50/p99 latency per request and the error count (any non-200
answer or connection failure).

Then the rows are checked exactly: the source's row count in ``ingest_attempt`` must equal the
records sent and accepted, and ``--resend`` batches sent again must come back all ``duplicate``
with the count unchanged.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
USAGE_PATH = "/api/v1/usage/"
# The token reaches the client through its environment, not argv. The name of a variable, not a secret:
TOKEN_ENV = "BENCH_INGEST_TOKEN"  # noqa: S105


# --- the client (second process): no Django, stdlib only -------------------------------------


def _batches(path: Path, size: int) -> list[bytes]:
    lines = path.read_bytes().splitlines(keepends=True)
    return [b"".join(lines[start : start + size]) for start in range(0, len(lines), size)]


def _post(conn: http.client.HTTPConnection, url: str, body: bytes, token: str) -> tuple[int, dict]:
    conn.request(
        "POST",
        url,
        body=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"},
    )
    response = conn.getresponse()
    data = response.read()
    try:
        return response.status, json.loads(data)
    except ValueError:
        return response.status, {"body": data[:200].decode(errors="replace")}


def run_client(args) -> dict:
    token = os.environ[TOKEN_ENV]
    batches = _batches(Path(args.data), args.batch_size)[: args.batches]
    url = f"{USAGE_PATH}?source={args.source}"
    lock = threading.Lock()
    queue = iter(range(len(batches)))
    latencies: list[float] = []
    totals = {"records": 0, "batches": 0, "accepted": 0, "duplicate": 0, "rejected": 0, "errors": 0}
    problems: list[str] = []
    deadline = time.monotonic() + args.max_seconds

    def worker() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=120)
        while time.monotonic() < deadline:
            with lock:
                index = next(queue, None)
            if index is None:
                break
            body = batches[index]
            started = time.perf_counter()
            try:
                status, answer = _post(conn, url, body, token)
            except (OSError, http.client.HTTPException) as exc:
                status, answer = 0, {"error": repr(exc)}
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=120)
            elapsed_ms = (time.perf_counter() - started) * 1000
            with lock:
                latencies.append(elapsed_ms)
                if status != 200:
                    totals["errors"] += 1
                    if len(problems) < 5:
                        problems.append(f"batch {index}: HTTP {status} {answer}")
                    continue
                totals["batches"] += 1
                totals["records"] += body.count(b"\n")
                for key in ("accepted", "duplicate", "rejected"):
                    totals[key] += answer[key]
        conn.close()

    started = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(args.concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started

    # Re-send the first batches once the load is over: every record must come back a duplicate.
    resent = {"records": 0, "accepted": 0, "duplicate": 0, "errors": 0}
    conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=120)
    for body in batches[: min(args.resend, totals["batches"])]:
        status, answer = _post(conn, url, body, token)
        if status != 200:
            resent["errors"] += 1
            continue
        resent["records"] += body.count(b"\n")
        resent["accepted"] += answer["accepted"]
        resent["duplicate"] += answer["duplicate"]
    conn.close()
    return {**totals, "seconds": wall, "latencies_ms": latencies, "problems": problems, "resent": resent}


# --- the server side (this process): Django, gunicorn, the checks ------------------------------


@dataclass
class LoadResult:
    records_sent: int
    batches: int
    errors: int
    seconds: float
    records_per_second: float
    p50_ms: float
    p99_ms: float
    accepted: int
    duplicate: int
    rejected: int
    rows_in_db: int
    resent_records: int
    resent_accepted: int
    resent_duplicate: int
    concurrency: int
    batch_size: int
    workers: int
    problems: list[str]

    @property
    def exact(self) -> bool:
        """Every sent record stored once, and re-sent ones added nothing (rows are counted after the re-send)."""
        return (
            self.rows_in_db == self.records_sent == self.accepted
            and self.rejected == 0
            and self.resent_accepted == 0
            and self.resent_duplicate == self.resent_records
        )


def _wait_until_serving(port: int, server: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {server.returncode} before serving")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", USAGE_PATH)  # any answer (401/405) means the app is up
            conn.getresponse().read()
            conn.close()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"gunicorn did not answer on port {port} within {timeout:.0f} s")


def _source_rows(name: str) -> int:
    from ingest.models import Attempt, Source

    source = Source.objects.filter(name=name).first()
    return Attempt.objects.filter(source_id=source.pk).count() if source else 0


def run_load(
    *,
    data: Path,
    batches: int,
    batch_size: int,
    concurrency: int,
    max_seconds: float,
    workers: int = 2,
    resend: int = 5,
    source: str = "bench-load",
) -> LoadResult:
    """Serve the app with gunicorn, load it from a client process, check the rows. Django must be set up."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from bench.common import free_port, p50_p95_p99
    from costcenter.tokens import api_token_create

    user = get_user_model().objects.filter(username="bench-loader").first()
    if user is None:  # a superuser is an org admin: it may write usage for any team
        user = get_user_model().objects.create_superuser("bench-loader", "bench-loader@localhost", None)
    _, token = api_token_create(user=user, scope="ingest", name="bench load")
    before = _source_rows(source)
    if before:
        raise RuntimeError(f"source {source!r} already holds {before:,} rows: use a fresh database")
    connection.close()  # the parent's idle connection is not part of the load

    port = free_port()
    env = {**os.environ, TOKEN_ENV: token}
    server = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("gunicorn")),
            "costcenter.wsgi",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(workers),
            "--timeout",
            "300",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
    )
    try:
        _wait_until_serving(port, server)
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--client",
                "--port",
                str(port),
                "--data",
                str(data),
                "--batches",
                str(batches),
                "--batch-size",
                str(batch_size),
                "--concurrency",
                str(concurrency),
                "--max-seconds",
                str(max_seconds),
                "--resend",
                str(resend),
                "--source",
                source,
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    rows = _source_rows(source)  # after the client's re-send: it must not have added any
    p50, _, p99 = p50_p95_p99(figures["latencies_ms"]) if figures["latencies_ms"] else (0.0, 0.0, 0.0)
    return LoadResult(
        records_sent=figures["records"],
        batches=figures["batches"],
        errors=figures["errors"],
        seconds=figures["seconds"],
        records_per_second=figures["records"] / figures["seconds"] if figures["seconds"] else 0.0,
        p50_ms=p50,
        p99_ms=p99,
        accepted=figures["accepted"],
        duplicate=figures["duplicate"],
        rejected=figures["rejected"],
        rows_in_db=rows,
        resent_records=figures["resent"]["records"],
        resent_accepted=figures["resent"]["accepted"],
        resent_duplicate=figures["resent"]["duplicate"],
        concurrency=concurrency,
        batch_size=batch_size,
        workers=workers,
        problems=figures["problems"],
    )


def report(result: LoadResult) -> str:
    return (
        f"{result.records_sent:,} records in {result.batches:,} batches of {result.batch_size:,}, "
        f"{result.concurrency} connections, {result.workers} gunicorn workers, {result.seconds:.1f} s: "
        f"{result.records_per_second:,.0f} records/s, p50 {result.p50_ms:.0f} ms, p99 {result.p99_ms:.0f} ms, "
        f"{result.errors} errors; rows in DB {result.rows_in_db:,}; "
        f"{result.resent_records:,} re-sent records: {result.resent_duplicate:,} duplicate, "
        f"{result.resent_accepted:,} added; exactly once: {'yes' if result.exact else 'NO'}"
        + "".join(f"\n  {problem}" for problem in result.problems)
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--max-seconds", type=float, default=60)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--resend", type=int, default=5)
    parser.add_argument("--source", help="source name (default: bench-load-<unix time>, new each run)")
    parser.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        figures = run_client(args)
        print(json.dumps(figures))
        return

    sys.path.insert(0, str(ROOT))
    from bench.common import bench_environment, django_setup, write_demo_file

    bench_environment(Path(os.environ.get("COSTCENTER_HOME", ROOT / ".costcenter-bench")))
    source = args.source or f"bench-load-{int(time.time())}"
    django_setup()
    from datetime import UTC, datetime

    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    work = Path(os.environ["COSTCENTER_HOME"]) / "bench"
    work.mkdir(parents=True, exist_ok=True)
    data = work / "api-load.jsonl"
    wanted = args.batches * args.batch_size
    # A little more than needed: the simulator's daily totals vary around the average asked for.
    made = write_demo_file(data, end=datetime.now(UTC), days=7, records=int(wanted * 1.1))
    print(f"{made:,} demo records in {data}", flush=True)
    result = run_load(
        data=data,
        batches=args.batches,
        batch_size=args.batch_size,
        concurrency=args.concurrency,
        max_seconds=args.max_seconds,
        workers=args.workers,
        resend=args.resend,
        source=source,
    )
    print(report(result))
    print(json.dumps(asdict(result)))
    data.unlink()
    if not result.exact or result.errors:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
