"""``python manage.py demo [--days 30] [--attempts-per-day N] [--dir PATH] [--seed 7] [--no-ingest]``.

Fills the installation with a month of realistic usage (see ``ingest.demo``): loads the example
catalog when the catalog is empty, writes the usage files in the real formats, and ingests each
with the ordinary writer under the source ``demo``. It also writes the GPU pools' metrics as an
OpenMetrics file (dcgm-exporter and AMD exporter series, utilisation following the traffic) and
imports it like ``import_openmetrics`` does, under the Prometheus source ``demo-metrics``, so the
GPU fleet page and idle cost have data.

Re-running is safe. Every hour's traffic is generated from (seed, hour), so a re-run in the same
hour writes identical files (nothing is added), and a later re-run adds only the hours since the
last one; the writer's idempotency keys drop everything it has already stored.
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from ingest import demo
from ingest.services import IngestResult, ingest_path, source_for

EXAMPLE_CATALOG = Path(settings.BASE_DIR) / "examples" / "catalog.yaml"
SOURCE_NAME = "demo"
METRICS_SOURCE_NAME = "demo-metrics"


def _moment(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 timestamp") from None
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} needs a UTC offset such as Z")
    return moment.astimezone(UTC)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


class Command(BaseCommand):
    help = (
        "Generate a realistic month of LLM usage (canonical JSONL, OpenAI batch, LiteLLM spend logs, "
        "OTLP spans) and ingest it. Safe to re-run."
    )

    def add_arguments(self, parser):
        parser.add_argument("--days", type=_positive, default=demo.DEFAULT_DAYS, help="days of history")
        parser.add_argument(
            "--attempts-per-day",
            type=_positive,
            default=demo.DEFAULT_ATTEMPTS_PER_DAY,
            help="average attempts per day over a week (default: ~150,000 attempts in 30 days)",
        )
        parser.add_argument("--dir", type=Path, help="where the files go (default: COSTCENTER_HOME/demo)")
        parser.add_argument("--seed", type=int, default=demo.DEFAULT_SEED)
        parser.add_argument("--no-ingest", action="store_true", help="only write the files")
        parser.add_argument(
            "--now",
            type=_moment,
            help="end of the window, ISO 8601 with offset (default: the start of the current UTC hour)",
        )

    def handle(self, *args, days, attempts_per_day, dir, seed, no_ingest, now, **options):
        directory = Path(dir) if dir else Path(settings.COSTCENTER_HOME) / "demo"
        now = demo.align_now(now or datetime.now(UTC))
        if not no_ingest:
            self._ensure_catalog()

        started = time.monotonic()
        plan = demo.simulate(now=now, days=days, attempts_per_day=attempts_per_day, seed=seed)
        try:
            manifest = demo.write_plan(plan, directory)
        except OSError as exc:
            raise CommandError(f"{directory}: cannot write the demo files: {exc}") from None
        tasks = len({a.task_id for a in plan.attempts})
        self.stdout.write(
            f"demo: {days} day(s) up to {now:%Y-%m-%d %H:%M} UTC, seed {seed}: {len(plan.attempts):,} attempts "
            f"of {tasks:,} tasks in {len(manifest)} files under {directory} "
            f"({time.monotonic() - started:.1f}s)"
        )
        try:
            metrics = demo.write_gpu_metrics(plan, directory)
        except OSError as exc:
            raise CommandError(f"{directory}: cannot write the demo GPU metrics: {exc}") from None
        if no_ingest:
            self.stdout.write(
                "not ingested (--no-ingest). The OpenAI batch files need their defaults "
                "(--team research --workload eval-batch --endpoint openai-gpt-4o-mini --default-ts "
                "<completed_at>), which `manage.py demo` passes itself. GPU metrics: "
                f"python manage.py import_openmetrics {metrics} --source {METRICS_SOURCE_NAME}"
            )
            return
        self._ingest(manifest, directory)
        self._import_metrics(metrics, directory)

    def _ensure_catalog(self) -> None:
        from costcenter.catalog import CatalogError, catalog_load
        from costcenter.models import Endpoint, Pool

        # "Empty" ignores what ingestion auto-registered: that is usage, not a catalog.
        if Pool.objects.exists() or Endpoint.objects.filter(auto_registered=False).exists():
            return
        try:
            report = catalog_load(EXAMPLE_CATALOG.read_text(encoding="utf-8"), source=str(EXAMPLE_CATALOG))
        except CatalogError as exc:  # the shipped example is tested; this would be a broken checkout
            raise CommandError(f"{EXAMPLE_CATALOG}: {'; '.join(exc.problems)}") from None
        self.stdout.write(f"catalog was empty: loaded {EXAMPLE_CATALOG.name} ({report.summary()})")

    def _ingest(self, manifest: list[demo.ManifestEntry], directory: Path) -> None:
        source = source_for(SOURCE_NAME)
        total = IngestResult()
        planned_rejects = 0
        started = time.monotonic()
        width = max(len(str(e.path.relative_to(directory))) for e in manifest)
        for entry in manifest:
            result = ingest_path(entry.path, source=source, fmt=entry.format, defaults=entry.defaults)
            total.add(result)
            name = str(entry.path.relative_to(directory)).ljust(width)
            if result.unchanged_files:
                self.stdout.write(f"  {entry.format:<12} {name}  unchanged, already ingested")
                continue
            if result.busy_files:
                self.stdout.write(f"  {entry.format:<12} {name}  skipped: another process is ingesting it")
                continue
            planned_rejects += entry.expected_rejects
            self.stdout.write(
                f"  {entry.format:<12} {name}  {result.accepted:>7,} accepted  {result.duplicate:>7,} duplicate"
                f"  {result.rejected:>3,} rejected"
            )
        elapsed = time.monotonic() - started
        self.stdout.write(
            f"total: {total.accepted:,} accepted, {total.duplicate:,} duplicate, {total.rejected:,} rejected "
            f"in {elapsed:.1f}s (source {SOURCE_NAME!r})"
        )
        if total.rejected:
            self.stdout.write(
                f"  {planned_rejects} of the rejects are planned: malformed lines the demo writes on purpose "
                "so that ingestion health has something to show"
            )
            for reason, count in total.reasons.most_common():
                self.stdout.write(f"  rejected {count:,}× {reason}")
        if total.rejected > planned_rejects:
            self.stderr.write(
                self.style.WARNING(
                    f"{total.rejected - planned_rejects} unplanned reject(s): see the reasons above"
                )
            )
        if total.accepted == 0:
            self.stdout.write("nothing new: every demo attempt was already ingested")
        else:
            self.stdout.write(f"added {total.accepted:,} attempts")

    def _import_metrics(self, path: Path, directory: Path) -> None:
        from ingest.openmetrics_import import import_openmetrics, import_source

        started = time.monotonic()
        result = import_openmetrics(path, source=import_source(METRICS_SOURCE_NAME))
        self.stdout.write(
            f"  gpu metrics  {path.relative_to(directory)}  {result.samples:,} samples, {result.rows:,} GPU-intervals "
            f"in {result.windows:,} hour(s), {result.unmatched_gpus} GPU(s) matching no pool "
            f"({time.monotonic() - started:.1f}s, source {METRICS_SOURCE_NAME!r})"
        )
