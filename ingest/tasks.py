"""Celery tasks of ingestion: thin wrappers that take ids and paths and call the services."""

from __future__ import annotations

from pathlib import Path

from celery import shared_task
from django.utils import timezone

from costcenter.celery import CappedTask


class IngestFileTask(CappedTask):
    def on_refused(self, reason: str, args: tuple, kwargs: dict) -> None:
        """A refused file shows on the Ingestion page: a failed run naming it, and the source's error."""
        from ingest.models import IngestRun, Source

        call = dict(zip(("source_id", "path"), args, strict=False)) | kwargs
        source_id, path = call.get("source_id"), call.get("path")
        now = timezone.now()
        if Source.objects.filter(pk=source_id).update(last_run_at=now, last_error=reason[:2000]):
            IngestRun.objects.create(
                source_id=source_id, origin=str(path)[:1000], started_at=now, finished_at=now, error=reason
            )


@shared_task(name="ingest.scan_usage_directories", expires=55)
def scan_usage_directories() -> int:
    """Queue one ingest task per new or grown file of every directory source."""
    from ingest.models import Source, SourceKind
    from ingest.services import files_to_ingest

    queued = 0
    for source in Source.objects.filter(kind=SourceKind.DIRECTORY).exclude(path=""):
        for path in files_to_ingest(source):
            ingest_usage_file.delay(source.pk, str(path))
            queued += 1
    return queued


@shared_task(name="ingest.ingest_usage_file", acks_late=True, base=IngestFileTask)
def ingest_usage_file(source_id: int, path: str) -> dict:
    """Ingest one file; safe to run twice or concurrently (checkpoint + per-file lock + keys)."""
    from ingest.models import Source
    from ingest.records import FileDefaults
    from ingest.services import ingest_path

    source = Source.objects.get(pk=source_id)
    options = source.options or {}
    defaults = FileDefaults(
        team=options.get("team"), workload=options.get("workload"), endpoint=options.get("endpoint")
    )
    result = ingest_path(Path(path), source=source, fmt=options.get("format", "auto"), defaults=defaults)
    return {"accepted": result.accepted, "duplicate": result.duplicate, "rejected": result.rejected}


# Bounds of the daily partition maintenance (Postgres interval syntax).
MAINTENANCE_LOCK_TIMEOUT = "5s"
MAINTENANCE_STATEMENT_TIMEOUT = "60s"


@shared_task(name="ingest.create_partitions_ahead", expires=3600)
def create_partitions_ahead() -> list[str]:
    """Monthly partitions: the next ones created ahead, the expired ones dropped (retention).
    Also forgets the start counts of week-old tasks (nothing redelivers them any more)."""
    from django.conf import settings
    from django.db import connection, transaction

    from ingest.partitions import drop_expired_partitions, ensure_partitions_ahead
    from ingest.task_starts import prune

    now = timezone.now()
    prune(now=now)
    # DROP and CREATE … PARTITION OF lock the whole raw table. Waiting in the lock queue behind a
    # long transaction would stall every ingest batch queued behind us, so give up quickly
    # instead: the task runs again tomorrow, with two months of partitions still ahead.
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT set_config('lock_timeout', %s, true)", [MAINTENANCE_LOCK_TIMEOUT])
        cursor.execute("SELECT set_config('statement_timeout', %s, true)", [MAINTENANCE_STATEMENT_TIMEOUT])
        drop_expired_partitions(now=now, keep_months=settings.RAW_RETENTION_MONTHS)
        return ensure_partitions_ahead(now=now)


@shared_task(name="ingest.pull_prometheus_metrics", expires=290)
def pull_prometheus_metrics() -> list[dict]:
    """Pull every enabled Prometheus source up to now minus the lag (cheap when nothing is due)."""
    from ingest.prometheus import pull_all

    return [
        {"source": r.source, "requests": r.requests, "rows": r.rows, "errors": r.errors, "busy": r.busy}
        for r in pull_all()
    ]
