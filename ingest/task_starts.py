"""The redelivery cap: every start of a Celery task is counted, and too many starts are refused.

Tasks acknowledge late (``acks_late``, ``reject_on_worker_lost``), so a worker that dies mid-task
leaves the message to another worker — which is what makes a killed worker harmless. It also
means a message that kills every worker that takes it (a file that exhausts memory, a bug that
segfaults) would be delivered forever. Celery counts nothing across deliveries, so we do: one
``TaskStart`` row per task id, incremented in its own commit *before* the task's work begins.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db import connection, transaction
from django.utils import timezone

from ingest.models import TaskStart

log = logging.getLogger(__name__)

KEEP_DAYS = 7  # long after any redelivery of the message could still happen

_CLAIM = """
INSERT INTO ingest_taskstart AS t (task_id, name, starts, first_started_at, last_started_at, worker, refused)
VALUES (%s, %s, 1, %s, %s, %s, '')
ON CONFLICT (task_id) DO UPDATE
   SET starts = t.starts + 1, last_started_at = EXCLUDED.last_started_at, worker = EXCLUDED.worker
RETURNING starts
"""


def count_start(task_id: str, name: str, worker: str) -> int:
    """Count one start of ``task_id`` and return how many starts it has had, this one included.

    Committed at once (outside any transaction of the task), so a process killed a moment later
    has still used up this start. One statement: two workers racing on a redelivery both count.
    """
    now = timezone.now()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_CLAIM, [task_id, name[:200], now, now, worker[:200]])
        return cursor.fetchone()[0]


def refuse(task_id: str, name: str, starts: int, max_starts: int) -> str:
    """Record and log why a task is not run again; returns the reason."""
    reason = (
        f"task {name} ({task_id}) refused at start {starts}: it was started {max_starts} times without "
        "finishing (its worker died each time), so it is not run again. Fix the cause, then re-queue it."
    )
    TaskStart.objects.filter(task_id=task_id).update(refused=reason)
    log.error(reason)
    return reason


def prune(*, now=None) -> int:
    """Delete the counts of tasks last started more than KEEP_DAYS ago."""
    cutoff = (now or timezone.now()) - timedelta(days=KEEP_DAYS)
    deleted, _ = TaskStart.objects.filter(last_started_at__lt=cutoff).delete()
    return deleted
