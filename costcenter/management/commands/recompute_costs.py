"""``python manage.py recompute_costs [--since ISO]``: bring the costed rollups up to date now.

The same service as the periodic Celery task. ``--since`` also recomputes every hour from then
on (after a manual data fix, say); without it only marked hours and new hours are done.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime

from django.core.management.base import BaseCommand

from costcenter.costing import recompute


def _moment(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 date or timestamp") from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


class Command(BaseCommand):
    help = "Recompute costed hourly and daily rollups (marked hours, new hours, or all since a time)."

    def add_arguments(self, parser):
        parser.add_argument("--since", type=_moment, help="also recompute every hour from this time (UTC)")

    def handle(self, *args, since, **options):
        started = time.monotonic()
        interactive = self.stderr._out.isatty()

        def progress(done: int, total: int, hour: datetime) -> None:
            if interactive:
                self.stderr._out.write(
                    f"\r  {done:,}/{total:,} hours with usage, at {hour:%Y-%m-%d %H}:00\x1b[K"
                )
                self.stderr._out.flush()

        hours = recompute(since=since, progress=progress)
        if interactive:
            sys.stderr.write("\r\x1b[K")
        self.stdout.write(f"recomputed {hours:,} hour(s) in {time.monotonic() - started:.1f}s")
