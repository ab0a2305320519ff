"""``python manage.py check_budgets``: evaluate budgets and alert rules now, then send.

The same services as the ``costcenter.evaluate_alerts`` beat task; notifications are sent in
this process (``--no-send`` leaves them to the workers).
"""

from __future__ import annotations

from django.core.management.base import BaseCommand

from costcenter.alerts import evaluate_all
from costcenter.notify import deliver_due


class Command(BaseCommand):
    help = "Evaluate budgets and alert rules now and send the notifications of any transition."

    def add_arguments(self, parser):
        parser.add_argument("--no-send", action="store_true", help="record transitions but do not send")

    def handle(self, *args, no_send: bool, **options):
        report = evaluate_all()
        self.stdout.write(
            f"evaluated {report.budgets} budget(s) and {report.rules} rule(s): "
            f"{len(report.events)} transition(s), {len(report.notifications)} notification(s) queued"
        )
        for error in report.errors:
            self.stderr.write(error)
        if not no_send:
            counts = deliver_due()
            sent = ", ".join(f"{count} {status}" for status, count in sorted(counts.items())) or "nothing due"
            self.stdout.write(f"delivery: {sent}")
