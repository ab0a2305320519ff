"""``python manage.py send_reports [--now] [--dry-run] [--user U]``: what the beat does, by hand."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from costcenter.reports import delivery


class Command(BaseCommand):
    help = (
        "Send the e-mailed reports that are due (each subscription's send time in its time zone), "
        "retries included. Exactly once: a report already sent for a period is never sent again."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--now",
            action="store_true",
            help="send the last complete period's report now, whatever its send time",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="render and list the reports; send and record nothing"
        )
        parser.add_argument(
            "--user",
            action="append",
            dest="users",
            metavar="U",
            help="only this user's subscriptions (repeatable)",
        )

    def handle(self, *args, now: bool, dry_run: bool, users, **options):
        from django.contrib.auth import get_user_model

        if users:
            known = set(
                get_user_model().objects.filter(username__in=users).values_list("username", flat=True)
            )
            if missing := sorted(set(users) - known):
                raise CommandError(f"unknown user(s): {', '.join(missing)}")
        moment = timezone.now()
        if dry_run:
            previews = delivery.dry_run(now=moment, usernames=users, ignore_due_time=now)
            for item in previews:
                self.stdout.write(
                    f"would send to {item.recipient}: {item.subject} [{item.period.start:%Y-%m-%d %H:%M}Z – "
                    f"{item.period.end:%Y-%m-%d %H:%M}Z] parts: {', '.join(item.parts)}"
                )
            self.stdout.write(f"{len(previews)} report(s) due; dry run: nothing sent or recorded")
            return
        due = delivery.plan(now=moment, usernames=users, ignore_due_time=now)
        counts: dict[str, int] = {}
        for delivery_id in due:
            outcome = delivery.deliver(delivery_id, now=moment) or "taken by another worker"
            counts[outcome] = counts.get(outcome, 0) + 1
        summary = ", ".join(f"{count} {status}" for status, count in sorted(counts.items())) or "nothing due"
        self.stdout.write(f"reports: {summary}")
        if counts.get("failed"):
            from costcenter.reports.models import ReportDelivery

            for row in ReportDelivery.objects.filter(pk__in=due, status="failed"):
                self.stderr.write(f"{row.recipient}: {row.last_error}")
