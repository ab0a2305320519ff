"""python manage.py import_openmetrics FILE [--source NAME]"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from ingest.openmetrics_import import import_openmetrics, import_source


class Command(BaseCommand):
    help = (
        "Import GPU and inference-server metrics from a Prometheus text / OpenMetrics file with "
        "timestamps (seconds in OpenMetrics, milliseconds in the text format); gzip is read as such."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path)
        parser.add_argument("--source", default="openmetrics", help="source the data is recorded under")

    def handle(self, *args, file: Path, source: str, **options):
        if not file.is_file():
            raise CommandError(f"{file}: no such file")
        try:
            result = import_openmetrics(file, source=import_source(source))
        except (ValueError, UnicodeDecodeError) as error:
            raise CommandError(f"{file}: cannot parse: {error}") from error
        span = (
            f" from {result.first:%Y-%m-%d %H:%M} to {result.last:%Y-%m-%d %H:%M} UTC" if result.first else ""
        )
        self.stdout.write(
            f"{file}: {result.samples} sample(s) in {result.series} series, {result.rows} row(s) "
            f"in {result.windows} window(s){span}; {result.unmatched_gpus} GPU(s) matching no pool"
        )
        if result.without_timestamp:
            self.stdout.write(f"  skipped {result.without_timestamp} sample(s) without a timestamp")
        if result.out_of_order:
            self.stdout.write(f"  skipped {result.out_of_order} out-of-order or duplicate sample(s)")
        if result.sentinels:
            self.stdout.write(f"  skipped {result.sentinels} blank-field sentinel value(s)")
