"""Scale-out on real engines: a Redis broker and two Celery worker processes ingest a directory.

The beat task ``ingest.scan_usage_directories`` queues one task per file, and each file is queued a
second time as an overlapping tick would; two ``celery worker --concurrency 1`` processes share the
queue. The per-file advisory lock keeps two workers off the same file at the same moment and the
checkpoints keep a finished file from being read again, so: exactly one ingest run per file, totals
exact, no duplicate — and both workers did part of the work (from their own logs).

Skipped locally without redis-server (with the install hint); on CI (CI=true) that fails instead.
"""

from __future__ import annotations

import ast
import os
import re
import time

import pytest
from django.db.models import Sum

from ingest.models import Attempt, FileCheckpoint, IngestRun, Source, SourceKind, TaskStart
from tests.drill_helpers import RedisServer, Worker, require_redis, sender, wait_for
from tests.ingest_helpers import canonical, write_jsonl

pytestmark = [pytest.mark.drill, pytest.mark.django_db(transaction=True)]

FILES = 6
PER_FILE = 5_000
SUCCEEDED = re.compile(r"Task ingest\.ingest_usage_file\[[0-9a-f-]+\] succeeded in [0-9.]+s: (\{.*\})")


def accepted_by(worker: Worker) -> int:
    """Rows this worker's ingest tasks accepted, from its own log of task results."""
    results = [ast.literal_eval(match) for match in SUCCEEDED.findall(worker.log.read_text())]
    return sum(result["accepted"] for result in results)


def test_two_workers_ingest_a_directory_concurrently_with_exact_totals(tmp_path):
    redis_server = RedisServer(require_redis(), tmp_path / "redis").start()
    folder = tmp_path / "usage"
    folder.mkdir()
    paths = []
    for n in range(FILES):
        records = [canonical(i) for i in range(n * PER_FILE, (n + 1) * PER_FILE)]
        paths.append(write_jsonl(folder / f"usage-{n}.jsonl", records))
        settled = time.time() - 60  # older than ingest.sources.SETTLE_SECONDS: not still being written
        os.utime(paths[-1], (settled, settled))
    source = Source.objects.create(name="drill-scaleout", kind=SourceKind.DIRECTORY, path=str(folder))

    workers = [Worker(name, redis_server.url, tmp_path) for name in ("left", "right")]
    try:
        for worker in workers:
            worker.start()
        client = sender(redis_server.url)
        client.send_task("ingest.scan_usage_directories")
        for path in paths:  # an overlapping tick queues every file again
            client.send_task("ingest.ingest_usage_file", args=[source.pk, str(path.resolve())])
        wait_for(
            lambda: (
                FileCheckpoint.objects.filter(source=source, complete=True).count() == FILES
                and TaskStart.objects.filter(name="ingest.ingest_usage_file").count() == 2 * FILES
            ),
            timeout=120,
            what="every file ingested and every queued task started",
            log=workers[0].log,
        )
    finally:
        for worker in workers:
            worker.stop()  # a warm shutdown: a task still running finishes first
        redis_server.stop()

    assert Attempt.objects.count() == FILES * PER_FILE
    runs = IngestRun.objects.filter(source=source)
    assert runs.count() == FILES  # each file read once, by one worker, though queued twice
    assert sorted(runs.values_list("origin", flat=True)) == sorted(str(p.resolve()) for p in paths)
    totals = runs.aggregate(accepted=Sum("accepted"), duplicate=Sum("duplicate"), rejected=Sum("rejected"))
    assert totals == {"accepted": FILES * PER_FILE, "duplicate": 0, "rejected": 0}
    assert not runs.exclude(error="").exists()
    expected_prompt = sum(1000 + i % 500 for i in range(FILES * PER_FILE))
    assert Attempt.objects.aggregate(total=Sum("prompt_tokens"))["total"] == expected_prompt

    # Both workers did part of it, and their shares add up to the whole.
    shares = {worker.node: accepted_by(worker) for worker in workers}
    assert all(share > 0 for share in shares.values()), shares
    assert sum(shares.values()) == FILES * PER_FILE, shares
    assert {start.worker for start in TaskStart.objects.filter(name="ingest.ingest_usage_file")} == {
        worker.node for worker in workers
    }
