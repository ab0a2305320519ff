"""``python manage.py ingest_usage FILE_OR_DIR... [--format …] [--source NAME]``."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg
from django.core.management.base import BaseCommand, CommandError
from django.db import InterfaceError, OperationalError

from ingest.formats import FORMAT_NAMES
from ingest.formats.detect import UnknownFormat
from ingest.records import FileDefaults
from ingest.services import IngestResult, ingest_path, source_for
from ingest.sources import usage_files


class Progress:
    """A one-line progress display on a terminal (records/s, rejects); silent otherwise."""

    def __init__(self, stream, label: str) -> None:
        self.stream = stream
        self.enabled = hasattr(stream, "isatty") and stream.isatty()
        self.label = label
        self.started = time.monotonic()
        self.last = 0.0

    def __call__(self, result: IngestResult) -> None:
        now = time.monotonic()
        if not self.enabled or now - self.last < 0.2:
            return
        self.last = now
        rate = result.records / max(now - self.started, 1e-6)
        self.stream.write(
            f"\r{self.label}: {result.records:,} records  {rate:,.0f}/s  "
            f"{result.accepted:,} new  {result.duplicate:,} duplicate  {result.rejected:,} rejected\x1b[K"
        )
        self.stream.flush()

    def done(self) -> None:
        if self.enabled:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


# The database went away (restarted, network cut, failover): not a bug to show as a traceback.
_CONNECTION_LOST = (OperationalError, InterfaceError, psycopg.OperationalError, psycopg.InterfaceError)


def _first_cause(exc: BaseException) -> BaseException:
    """The earliest connection error behind ``exc``: cleanup that ran after the connection was lost
    fails too, and its "connection is closed" would hide why."""
    while isinstance(exc.__context__, _CONNECTION_LOST):
        exc = exc.__context__
    return exc


def _moment(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 timestamp") from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


class Command(BaseCommand):
    help = "Ingest usage logs (canonical JSONL, OpenAI batch output, LiteLLM spend logs, OTLP/JSON), plain or gzip."

    def add_arguments(self, parser):
        parser.add_argument("paths", nargs="+", type=Path, metavar="FILE_OR_DIR")
        parser.add_argument("--format", default="auto", choices=["auto", *FORMAT_NAMES])
        parser.add_argument("--source", default="files", help="idempotency keys are unique within a source")
        parser.add_argument("--team", help="team of records that name none")
        parser.add_argument("--workload", help="workload of records that name none")
        parser.add_argument("--endpoint", help="endpoint of records that name none")
        parser.add_argument("--model", help="model of records that name none")
        parser.add_argument("--force", action="store_true", help="re-read files already ingested in full")
        parser.add_argument(
            "--default-ts",
            type=_moment,
            help="ISO timestamp for records that carry none (OpenAI batch error lines: the batch's completed_at)",
        )

    def handle(
        self, *args, paths, format, source, team, workload, endpoint, model, force, default_ts, **options
    ):
        missing = [str(path) for path in paths if not path.exists()]
        if missing:
            raise CommandError(f"no such file or directory: {', '.join(missing)}")
        files = usage_files(paths)
        if not files:
            raise CommandError("no usage files found in the given directories")
        defaults = FileDefaults(team=team, workload=workload, endpoint=endpoint, model=model, ts=default_ts)
        target = source_for(source)
        total = IngestResult()
        started = time.monotonic()
        failed = 0
        for path in files:
            progress = Progress(self.stderr._out, path.name)
            try:
                result = ingest_path(
                    path, source=target, fmt=format, defaults=defaults, progress=progress, force=force
                )
            except (UnknownFormat, OSError) as exc:
                progress.done()
                failed += 1
                self.stderr.write(f"{path}: not ingested: {exc}")
                continue
            except _CONNECTION_LOST as exc:
                progress.done()
                text = str(_first_cause(exc)).strip()
                cause = text.splitlines()[0] if text else type(_first_cause(exc)).__name__
                raise CommandError(
                    f"{path}: the database connection was lost while ingesting ({cause}). Every batch "
                    "committed before it is kept with its checkpoint: run the same command again to resume."
                ) from exc
            progress.done()
            total.add(result)
            if result.busy_files:
                self.stdout.write(f"{path}: skipped, another process is ingesting it right now")
            elif result.unchanged_files:
                self.stdout.write(f"{path}: unchanged since it was ingested in full (--force re-reads it)")
            else:
                self.stdout.write(
                    f"{path}: {result.accepted:,} accepted, {result.duplicate:,} duplicate, {result.rejected:,} rejected"
                )
        elapsed = time.monotonic() - started
        self.stdout.write(
            f"total: {total.accepted:,} accepted, {total.duplicate:,} duplicate, {total.rejected:,} rejected "
            f"from {len(files) - failed} file(s) in {elapsed:.1f}s"
            + (f" ({total.records / elapsed:,.0f} records/s)" if elapsed > 0 and total.records else "")
        )
        for reason, count in total.reasons.most_common():
            self.stdout.write(f"  rejected {count:,}× {reason}")
        if failed:
            self.stdout.write(f"{failed} file(s) could not be read; see the messages above")
        if failed == len(files):
            sys.exit(1)
