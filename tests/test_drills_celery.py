"""Fault drills for Celery: a worker SIGKILLed mid-task, and a poison message that kills every worker.

Real processes throughout: redis-server on a loopback port as the broker, ``celery -A costcenter
worker`` subprocesses (prefork, one pool process each) writing to the test database. The tasks
acknowledge late, so a killed worker's message goes to the next worker; our start counter
(``ingest.TaskStart``) refuses a message after CELERY_TASK_MAX_STARTS starts instead of letting it
kill workers forever.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models import Sum

from ingest.models import Attempt, FileCheckpoint, IngestRun, Source, TaskStart
from tests.drill_helpers import (
    RedisServer,
    Worker,
    no_advisory_locks_held_by_others,
    require_redis,
    sender,
    wait_for,
)
from tests.ingest_helpers import canonical, write_jsonl

pytestmark = [pytest.mark.drill, pytest.mark.django_db(transaction=True)]

RECORDS = 40_000


@pytest.fixture(scope="module")
def redis_broker(tmp_path_factory):
    server = RedisServer(require_redis(), tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


def committed_attempts() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM ingest_attempt")
        return cursor.fetchone()[0]


def task_start(task_id: str) -> TaskStart | None:
    return TaskStart.objects.filter(task_id=task_id).first()


def test_a_worker_killed_mid_ingest_is_redelivered_to_another_and_counts_nothing_twice(
    redis_broker, tmp_path
):
    path = write_jsonl(tmp_path / "usage.jsonl", [canonical(i) for i in range(RECORDS)])
    source = Source.objects.create(name="drill-celery")
    # Batches of 1,000 commit often, so the kill lands mid-file; a 5 s visibility timeout lets the
    # broker hand the unacknowledged message on quickly (the default is an hour).
    env = {"INGEST_BATCH_SIZE": "1000", "CELERY_VISIBILITY_TIMEOUT": "5"}
    first = Worker("first", redis_broker.url, tmp_path, extra_env=env).start()
    second = Worker("second", redis_broker.url, tmp_path, extra_env=env)
    try:
        task_id = (
            sender(redis_broker.url).send_task("ingest.ingest_usage_file", args=[source.pk, str(path)]).id
        )
        wait_for(lambda: committed_attempts() >= 5_000, timeout=60, what="the first rows", log=first.log)
        first.kill()
        at_kill = committed_attempts()
        assert at_kill < RECORDS, "the file was done before the kill; raise RECORDS"
        assert (task_start(task_id).starts, task_start(task_id).worker) == (1, first.node)
        # Its database session (holding the file's lock) ends a moment after it; a redelivery
        # arriving before would find the file busy and leave it to the next scan.
        wait_for(no_advisory_locks_held_by_others, timeout=60, what="the killed worker's session to end")

        second.start()
        done = wait_for(
            lambda: FileCheckpoint.objects.filter(source=source, complete=True).exists(),
            timeout=60,
            what="the redelivered task to finish the file",
            log=second.log,
        )
        assert done
    finally:
        first.kill()
        second.stop()

    start = task_start(task_id)
    assert (start.starts, start.worker, start.refused) == (2, second.node, "")
    assert committed_attempts() == RECORDS
    runs = IngestRun.objects.filter(source=source).order_by("started_at")
    assert runs.count() == 2  # the killed one (its committed batches) and the resumed one
    totals = runs.aggregate(accepted=Sum("accepted"), duplicate=Sum("duplicate"), rejected=Sum("rejected"))
    assert totals == {"accepted": RECORDS, "duplicate": 0, "rejected": 0}
    assert runs[0].accepted == at_kill  # the killed worker's run counts exactly what it committed
    expected_prompt = sum(1000 + i % 500 for i in range(RECORDS))
    assert Attempt.objects.aggregate(total=Sum("prompt_tokens"))["total"] == expected_prompt


def test_a_poison_message_is_refused_after_the_start_cap_with_a_visible_reason(redis_broker, tmp_path):
    # tests/drill_tasks.py makes the worker's pool process die on any file named poison*.
    path = write_jsonl(tmp_path / "poison.jsonl", [canonical(i) for i in range(10)])
    healthy = write_jsonl(tmp_path / "healthy.jsonl", [canonical(i) for i in range(10, 20)])
    source = Source.objects.create(name="drill-poison")
    worker = Worker("poisoned", redis_broker.url, tmp_path, extra_env={"CELERY_TASK_MAX_STARTS": "3"}).start()
    try:
        client = sender(redis_broker.url)
        task_id = client.send_task("ingest.ingest_usage_file", args=[source.pk, str(path)]).id
        refused = wait_for(
            lambda: TaskStart.objects.filter(task_id=task_id).exclude(refused="").first(),
            timeout=90,
            what="the poison task to be refused",
            log=worker.log,
        )
        # The worker is still serving: the next message is ingested normally.
        client.send_task("ingest.ingest_usage_file", args=[source.pk, str(healthy)])
        wait_for(
            lambda: FileCheckpoint.objects.filter(path=str(healthy), complete=True).exists(),
            timeout=60,
            what="the healthy file after the poison one",
            log=worker.log,
        )
    finally:
        worker.stop()

    assert refused.starts == 4  # three starts that died, the fourth refused
    assert "started 3 times without finishing" in refused.refused
    assert TaskStart.objects.get(task_id=task_id).starts == 4  # and never delivered again
    log = worker.log.read_text()
    assert log.count("WorkerLostError") >= 3 and "refused at start 4" in log
    # Where users look: the Ingestion page's failed run and the source's last error.
    (failed,) = IngestRun.objects.filter(source=source, origin=str(path))
    assert "refused at start 4" in failed.error
    source.refresh_from_db()
    assert source.last_success_at is not None  # the healthy file, after the refusal
    assert committed_attempts() == 10
