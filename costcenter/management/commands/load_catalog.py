"""``python manage.py load_catalog FILE``: load the YAML catalog (all or nothing)."""

from __future__ import annotations

import sys
from pathlib import Path

from django.core.management.base import BaseCommand

from costcenter.catalog import CatalogError, catalog_load


class Command(BaseCommand):
    help = "Load teams, pools, endpoints, models and prices from a YAML catalog file."

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path)

    def handle(self, *args, file: Path, **options):
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            self.stderr.write(f"{file}: cannot read the catalog: {exc}")
            sys.exit(1)
        try:
            report = catalog_load(text, source=str(file))
        except CatalogError as exc:
            for problem in exc.problems:
                self.stderr.write(problem)
            self.stderr.write(f"{file}: {len(exc.problems)} problem(s); nothing was changed")
            sys.exit(1)
        self.stdout.write(f"{file}: {report.summary()}")
