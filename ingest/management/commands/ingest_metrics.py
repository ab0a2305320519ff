"""python manage.py ingest_metrics [--source NAME] [--start ISO] [--end ISO]"""

from __future__ import annotations

from datetime import datetime

from django.core.management.base import BaseCommand, CommandError

from ingest.models import PrometheusSource
from ingest.prometheus import pull_all


def parse_iso(value: str) -> datetime:
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as error:
        raise CommandError(f"not an ISO 8601 time: {value!r}") from error
    if moment.tzinfo is None:
        raise CommandError(f"{value!r} has no offset: write Z for UTC")
    return moment


class Command(BaseCommand):
    help = (
        "Pull GPU and inference-server aggregates from Prometheus (every due window since the checkpoints)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--source", help="only this Prometheus source (default: every enabled one)")
        parser.add_argument("--start", type=parse_iso, help="re-pull from this time (ISO 8601 with offset)")
        parser.add_argument("--end", type=parse_iso, help="pull up to this time (default: now minus the lag)")

    def handle(self, *args, source=None, start=None, end=None, **options):
        try:
            results = pull_all(source_name=source, start=start, end=end)
        except PrometheusSource.DoesNotExist as error:
            raise CommandError(str(error)) from error
        if not results:
            self.stdout.write("no Prometheus source: set PROMETHEUS_URL or add one in the admin")
            return
        failed = False
        for result in results:
            if result.busy:
                self.stdout.write(f"{result.source}: skipped, another pull of this source is running")
                continue
            lag = f", lag {result.lag_seconds}s" if result.lag_seconds is not None else ""
            self.stdout.write(
                f"{result.source}: {result.requests} request(s), {result.windows} window(s), "
                f"{result.rows} row(s){lag}"
            )
            for error in result.errors:
                failed = True
                self.stderr.write(f"  error: {error}")
        if failed:
            raise CommandError("some queries failed (see the errors above; they are on the source too)")
