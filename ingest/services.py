"""Writing usage: records in, rows out, exactly once.

``ingest_items`` is the one write path for files, the HTTP batch API and OTLP: it maps names to
dimension ids (with the cardinality guard), writes batches with COPY (``ingest.writer``), keeps
every reject with its reason, and commits each batch together with the caller's checkpoint.
``ingest_path`` adds per-file checkpoints, so a killed run resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import queue
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from costcenter.pg import session_lock
from ingest.dimensions import DimensionIds, DimensionRejected
from ingest.formats import iter_path_records, sniff
from ingest.formats.detect import detect_format
from ingest.models import FileCheckpoint, IngestRun, RejectedRecord, Source, SourceKind
from ingest.records import FileDefaults, Reject, UsageRecord
from ingest.writer import (
    COLUMNS,
    MICROS_PER_HOUR,
    PG_EPOCH,
    ROW_HEAD,
    encode_ids,
    encode_tail,
    ts_micros,
    write_rows,
)

log = logging.getLogger(__name__)

SAMPLE_REJECTS = 100
HEAD_BYTES = 64 * 1024  # a file whose first 64 KiB changed is a different file


@dataclass
class IngestResult:
    accepted: int = 0
    duplicate: int = 0
    rejected: int = 0
    reasons: Counter = field(default_factory=Counter)
    sample_rejects: list[Reject] = field(default_factory=list)
    files: int = 0
    unchanged_files: int = 0
    busy_files: int = 0  # being read by another process right now

    @property
    def records(self) -> int:
        return self.accepted + self.duplicate + self.rejected

    def add(self, other: IngestResult) -> None:
        self.accepted += other.accepted
        self.duplicate += other.duplicate
        self.rejected += other.rejected
        self.reasons.update(other.reasons)
        room = SAMPLE_REJECTS - len(self.sample_rejects)
        self.sample_rejects.extend(other.sample_rejects[: max(room, 0)])
        self.files += other.files
        self.unchanged_files += other.unchanged_files
        self.busy_files += other.busy_files


def source_for(name: str, *, kind: str = SourceKind.FILES) -> Source:
    return Source.objects.get_or_create(name=name, defaults={"kind": kind})[0]


def _reason_key(reason: str) -> str:
    """Group reasons by their field and rule, not by the value quoted in them."""
    head, _, tail = reason.partition(":")
    return f"{head}: {tail.split('(')[0].split(chr(39))[0].strip()}" if tail else head


def _record_excerpt(record: UsageRecord) -> str:
    return f"task_id={record.task_id!r} attempt={record.attempt} model={record.model!r} ts={record.ts.isoformat()}"


def _encode_record(record: UsageRecord, ids: bytes) -> bytes:
    """A record's row in binary COPY form; ``ids`` holds its encoded source and dimension ids.

    The hashes are ``costcenter.pg.hash64``'s: its 8 digest bytes are the big-endian int8.
    """
    task = record.task_id.encode()
    head = ROW_HEAD.pack(
        len(COLUMNS),
        8,
        ts_micros(record.ts),
        8,
        hashlib.blake2b(record.idempotency_key.encode(), digest_size=8).digest(),
        8,
        hashlib.blake2b(task, digest_size=8).digest(),
    )
    tail = encode_tail(
        record.prompt_tokens,
        record.completion_tokens,
        record.cached_tokens,
        record.reasoning_tokens,
        record.latency_ms,
        record.ttft_ms,
        record.queue_wait_ms,
        record.attempt,
        record.http_status,
        record.status == "success",
        task,
    )
    return head + ids + tail


class _Batch:
    """Rows (binary COPY encoded) and rejects collected until the next commit."""

    def __init__(self) -> None:
        self.rows: list[bytes] = []
        self.hours: set[int] = set()  # of the rows' ts, as hours since PG_EPOCH
        self.rejects: list[RejectedRecord] = []
        self.items = 0


class _Committer:
    """Commits batches in order, each in its own transaction.

    For a file outside a transaction (the command, a task) the commits run on a second thread with
    its own connection, so parsing the next batch overlaps Postgres writing this one: parsing is
    Python on one core, the COPY and de-duplication are the server's work on the other. Inside a
    caller's transaction (a test) they run inline, in that transaction.
    """

    def __init__(self, result: IngestResult, run: IngestRun, checkpoint: FileCheckpoint | None) -> None:
        self.result, self.run, self.checkpoint = result, run, checkpoint
        self.direct = _DirectCopy()
        self.error: BaseException | None = None
        # Files only (they are large); an HTTP batch is small and commits inline in its request.
        self.threaded = checkpoint is not None and not connection.in_atomic_block
        if self.threaded:
            self.jobs: queue.Queue = queue.Queue(maxsize=1)  # at most one batch waits: memory stays flat
            self.thread = threading.Thread(target=self._work, name="ingest-commit", daemon=True)
            self.thread.start()

    def submit(self, batch: _Batch, *, final: bool = False) -> None:
        if not self.threaded:
            _commit(batch, self.result, self.run, self.checkpoint, final=final, direct=self.direct)
            return
        self._raise_failure()
        self.jobs.put((batch, final))

    def close(self) -> None:
        """Wait until every submitted batch is committed (or failed); re-raise a failure."""
        if self.threaded:
            self.jobs.put(None)
            self.thread.join()
            self._raise_failure()

    def close_quietly(self) -> None:
        """On the caller's own failure: let the batches already handed over finish, then stop."""
        try:
            self.close()
        except BaseException:  # noqa: BLE001, S110 - the caller's exception is the one to raise
            pass

    def _raise_failure(self) -> None:
        if self.error is not None:
            raise self.error

    def _work(self) -> None:
        try:
            while (job := self.jobs.get()) is not None:
                if self.error is not None:
                    continue  # after a failure, only drain: the caller re-raises it
                try:
                    _commit(job[0], self.result, self.run, self.checkpoint, final=job[1], direct=self.direct)
                except BaseException as exc:  # noqa: BLE001 - handed to the calling thread
                    self.error = exc
        finally:
            connection.close()


def ingest_items(
    items: Iterable[UsageRecord | Reject],
    *,
    source: Source,
    origin: str,
    allowed_teams: set[str] | None = None,
    progress: Callable[[IngestResult], None] | None = None,
    checkpoint: FileCheckpoint | None = None,
    batch_size: int | None = None,
    first_index: int = 1,
) -> IngestResult:
    """Write usage items; every item ends up accepted, duplicate or rejected (with a reason).

    ``allowed_teams``: team slugs the caller may write (None: any); other records are rejected.
    ``checkpoint``: advanced by the items of each batch in that batch's transaction.
    """
    batch_size = batch_size or settings.INGEST_BATCH_SIZE
    result = IngestResult()
    run = IngestRun.objects.create(source=source, origin=origin[:1000], started_at=timezone.now())
    dims = DimensionIds(source)
    # (team, workload, model, version, endpoint, error type) -> the row's encoded source and
    # dimension ids. Few distinct combinations repeat millions of times: resolve each once.
    known_ids: dict[tuple, bytes] = {}
    source_id = source.pk

    def ids_of(names: tuple) -> bytes:
        team, workload, model, model_version, endpoint, error_type = names
        if allowed_teams is not None and team not in allowed_teams:
            raise DimensionRejected(
                f"team: this token may write usage of teams {', '.join(sorted(allowed_teams)) or '(none)'}"
                f", not {team or '(no team)'!r}"
            )
        ids = (
            dims.team(team),
            dims.workload(workload),
            dims.model(model, model_version),
            dims.endpoint(endpoint),
            dims.error_type(error_type),
        )
        encoded = encode_ids(source_id, ids)
        if allowed_teams is None:  # with a team check, every record goes through it: no cache
            known_ids[names] = encoded
        return encoded

    batch = _Batch()
    committer = _Committer(result, run, checkpoint)
    try:
        for index, item in enumerate(items, start=first_index):
            batch.items += 1
            if type(item) is tuple:  # a fast row (canonical_fast.FastRow): already packed
                ids = known_ids.get(item[0])
                if ids is None:
                    try:
                        ids = ids_of(item[0])
                    except DimensionRejected as exc:
                        excerpt = f"task_id={item[5]!r} attempt={item[6]} model={item[7]!r} ts={item[4].isoformat()}"
                        _reject(
                            batch, result, source, run, origin, Reject(f"record {index}", exc.reason, excerpt)
                        )
                if ids is not None:
                    batch.rows.append(item[1] + ids + item[2])
                    batch.hours.add(item[3])
            elif isinstance(item, Reject):
                _reject(batch, result, source, run, origin, item)
            else:
                try:
                    names = (
                        item.team,
                        item.workload,
                        item.model,
                        item.model_version,
                        item.endpoint,
                        item.error_type,
                    )
                    ids = known_ids.get(names) or ids_of(names)
                except DimensionRejected as exc:
                    _reject(
                        batch,
                        result,
                        source,
                        run,
                        origin,
                        Reject(f"record {index}", exc.reason, _record_excerpt(item)),
                    )
                else:
                    batch.rows.append(_encode_record(item, ids))
                    batch.hours.add(ts_micros(item.ts) // MICROS_PER_HOUR)
            if batch.items >= batch_size:
                committer.submit(batch)
                batch = _Batch()
                if progress:
                    progress(result)
        committer.submit(batch, final=True)
        committer.close()
    except BaseException as exc:
        committer.close_quietly()
        IngestRun.objects.filter(pk=run.pk).update(error=str(exc)[:2000], finished_at=timezone.now())
        Source.objects.filter(pk=source.pk).update(last_run_at=timezone.now(), last_error=str(exc)[:2000])
        raise
    now = timezone.now()
    Source.objects.filter(pk=source.pk).update(last_run_at=now, last_success_at=now, last_error="")
    if progress:
        progress(result)
    return result


def _reject(batch: _Batch, result: IngestResult, source, run, origin: str, reject: Reject) -> None:
    batch.rejects.append(
        RejectedRecord(
            source=source,
            run=run,
            location=f"{origin} {reject.location}"[:1000],
            reason=reject.reason[:500],
            excerpt=reject.excerpt[:400],
        )
    )
    result.reasons[_reason_key(reject.reason)] += 1
    if len(result.sample_rejects) < SAMPLE_REJECTS:
        result.sample_rejects.append(reject)


class _DirectCopy:
    """Whether a run still tries COPY straight into the table (see ``writer.write_rows``)."""

    enabled = True


def _commit(
    batch: _Batch,
    result: IngestResult,
    run: IngestRun,
    checkpoint: FileCheckpoint | None,
    final=False,
    direct: _DirectCopy | None = None,
):
    """One transaction: new rows, rejects, the run's counts and the checkpoint move together."""
    direct = direct or _DirectCopy()
    with transaction.atomic():
        hours = {PG_EPOCH + timedelta(hours=hour) for hour in batch.hours}
        inserted = write_rows(batch.rows, months=hours, hours=hours, direct=direct.enabled)
        if inserted < len(batch.rows):
            # A run that met a duplicate (a re-read file) likely meets more: from now on the
            # staging table is the cheaper way.
            direct.enabled = False
        RejectedRecord.objects.bulk_create(batch.rejects)
        # Counted here, at commit, so the run's figures always match what is stored.
        result.accepted += inserted
        result.duplicate += len(batch.rows) - inserted
        result.rejected += len(batch.rejects)
        IngestRun.objects.filter(pk=run.pk).update(
            accepted=result.accepted,
            duplicate=result.duplicate,
            rejected=result.rejected,
            finished_at=timezone.now() if final else None,
        )
        if checkpoint is not None:
            checkpoint.items_done += batch.items
            checkpoint.complete = final
            checkpoint.save(update_fields=["items_done", "complete", "size", "head_hash", "updated_at"])


def _head_hash(path: Path, length: int) -> str:
    with path.open("rb") as handle:
        return hashlib.sha256(handle.read(min(length, HEAD_BYTES))).hexdigest()


def ingest_path(
    path: Path,
    *,
    source: Source,
    fmt: str = "auto",
    defaults: FileDefaults | None = None,
    progress: Callable[[IngestResult], None] | None = None,
    force: bool = False,
) -> IngestResult:
    """Ingest one file, resuming from its checkpoint; an unchanged, finished file is skipped.

    ``force`` re-reads a finished file anyway (its rows come back as duplicates).
    """
    path = Path(os.path.abspath(path))
    # One reader per (source, file) at a time, across processes and machines: a second one
    # (an overlapping beat tick, a user re-running the command) skips the file.
    with file_lock(source, path) as acquired:
        if not acquired:
            return IngestResult(files=1, busy_files=1)
        return _ingest_locked(path, source=source, fmt=fmt, defaults=defaults, progress=progress, force=force)


def file_lock(source: Source, path: Path):
    return session_lock(f"ingest-file:{source.pk}:{path}")


def _ingest_locked(
    path: Path,
    *,
    source: Source,
    fmt: str,
    defaults: FileDefaults | None,
    progress: Callable[[IngestResult], None] | None,
    force: bool,
) -> IngestResult:
    size = path.stat().st_size
    head_hash = _head_hash(path, size)
    checkpoint, created = FileCheckpoint.objects.get_or_create(
        source=source, path=str(path), defaults={"size": size, "head_hash": head_hash}
    )
    # The same file, possibly grown: its first bytes (as many as we hashed last time) are unchanged.
    same_file = size >= checkpoint.size and (
        created or _head_hash(path, checkpoint.size) == checkpoint.head_hash
    )
    if same_file and checkpoint.complete and size == checkpoint.size and not force:
        return IngestResult(files=1, unchanged_files=1)
    if not same_file or force:
        checkpoint.items_done = 0  # a different (or re-read) file: start over; keys stop repeats
    checkpoint.size, checkpoint.head_hash = size, head_hash
    if fmt == "auto":
        fmt = detect_format(sniff(path), str(path))
    items: Iterator = iter_path_records(
        path, fmt, defaults=defaults or FileDefaults(), now=timezone.now(), fast_rows=True
    )
    # The parse is deterministic: skipping the committed items lands exactly where the last run
    # stopped, without writing them again.
    skipped = checkpoint.items_done
    items = itertools.islice(items, skipped, None)
    result = ingest_items(
        items,
        source=source,
        origin=str(path),
        progress=progress,
        checkpoint=checkpoint,
        first_index=skipped + 1,
    )
    result.files = 1
    return result


def files_to_ingest(source: Source) -> list[Path]:
    """Files of a directory source that are new, grown or changed since their checkpoint."""
    from ingest.sources import SETTLE_SECONDS, usage_files

    done = {
        path: (size, complete)
        for path, size, complete in FileCheckpoint.objects.filter(source=source).values_list(
            "path", "size", "complete"
        )
    }
    wanted = []
    for path in usage_files([Path(source.path)], settle_seconds=SETTLE_SECONDS):
        known = done.get(str(path.resolve()))
        if known is None or not known[1] or path.stat().st_size != known[0]:
            wanted.append(path)
    return wanted
