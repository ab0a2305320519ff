"""Sending reports exactly once, the way budget alerts are delivered (``costcenter.notify``).

1. ``plan`` inserts one ``ReportDelivery`` per due subscription and period with
   ``INSERT … ON CONFLICT DO NOTHING`` on (subscription, period_start): a second beat tick, an
   overlapping worker or a re-run of ``send_reports`` adds nothing.
2. ``deliver`` claims a due row with a conditional UPDATE that takes a short lease
   (``claimed_until``) — only one worker wins — renders the report, sends it and marks it sent.
   An SMTP failure marks it failed with ``next_attempt_at`` after a backoff (1, 2, 4 … minutes, at
   most an hour); the beat retries it, up to ``MAX_ATTEMPTS``, then gives up (``next_attempt_at``
   cleared). A refused recipient is not retried.

A worker dying between the SMTP server's "250 OK" and the UPDATE leaves the lease to expire and
the report is sent again (at most once more); the stable ``Message-ID`` lets clients fold it.
"""

from __future__ import annotations

import logging
import smtplib
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from django.db.models import F, Q
from django.utils import timezone

from costcenter.notify import backoff
from costcenter.reports import images
from costcenter.reports.content import build_report
from costcenter.reports.mail import build_message
from costcenter.reports.models import DeliveryStatus, ReportDelivery, Subscription
from costcenter.reports.periods import ReportPeriod, last_complete, latest_due, period_starting

log = logging.getLogger(__name__)

LEASE = timedelta(minutes=5)  # rendering charts takes a few seconds; a dead worker's lease expires
MAX_ATTEMPTS = 8  # with the backoff: about two hours of retries


def subscriptions(*, usernames=None):
    # A deactivated account receives nothing, whatever its subscriptions say.
    rows = Subscription.objects.filter(active=True, user__is_active=True).select_related("user")
    if usernames:
        rows = rows.filter(user__username__in=usernames)
    return rows.order_by("pk")


def period_of(
    subscription: Subscription, *, now: datetime, ignore_due_time: bool = False
) -> ReportPeriod | None:
    """The period whose report ``subscription`` should have by ``now``; None when nothing is due.

    A period due before the subscription existed is skipped: subscribing on a Wednesday brings the
    first report next Monday. ``ignore_due_time`` (``send_reports --now``) takes the last complete
    period whatever the clock says.
    """
    if ignore_due_time:
        return last_complete(subscription.frequency, subscription.time_zone, now)
    period, due = latest_due(
        subscription.frequency,
        subscription.time_zone,
        now,
        send_weekday=subscription.send_weekday,
        send_hour=subscription.send_hour,
    )
    return period if due >= subscription.created_at else None


def plan(*, now: datetime | None = None, usernames=None, ignore_due_time: bool = False) -> list[int]:
    """Create the delivery rows that are due (never twice) and return the ids of every due row."""
    now = now or timezone.now()
    rows = []
    for subscription in subscriptions(usernames=usernames):
        period = period_of(subscription, now=now, ignore_due_time=ignore_due_time)
        if period is None or not subscription.recipient:
            continue
        rows.append(
            ReportDelivery(
                subscription=subscription,
                period_start=period.start,
                period_end=period.end,
                frequency=period.frequency,
                time_zone=period.time_zone,
                recipient=subscription.recipient,
                created_at=now,
                next_attempt_at=now,
            )
        )
    # ON CONFLICT (subscription, period_start) DO NOTHING: the unique key is the exactly-once.
    ReportDelivery.objects.bulk_create(rows, ignore_conflicts=True)
    return due_ids(now=now, usernames=usernames)


def _due(now: datetime):
    return ReportDelivery.objects.filter(
        status__in=(DeliveryStatus.PENDING, DeliveryStatus.FAILED), next_attempt_at__lte=now
    ).filter(Q(claimed_until__isnull=True) | Q(claimed_until__lte=now))


def due_ids(*, now: datetime | None = None, usernames=None, limit: int = 500) -> list[int]:
    rows = _due(now or timezone.now())
    if usernames:
        rows = rows.filter(subscription__user__username__in=usernames)
    return list(rows.order_by("next_attempt_at", "pk").values_list("pk", flat=True)[:limit])


def claim(delivery_id: int, *, now: datetime) -> bool:
    """Take the lease on a due delivery; True for exactly one worker."""
    return bool(
        _due(now)
        .filter(pk=delivery_id, attempts__lt=MAX_ATTEMPTS)
        .update(claimed_until=now + LEASE, attempts=F("attempts") + 1)
    )


class PermanentFailure(Exception):
    pass


def send(delivery: ReportDelivery, *, now: datetime) -> None:
    subscription = delivery.subscription
    # The row's own period, in the zone it was planned in (the subscription may have moved since).
    first_day = delivery.period_start.astimezone(ZoneInfo(delivery.time_zone)).date()
    period = period_starting(delivery.frequency, delivery.time_zone, first_day)
    report = build_report(subscription, period, now=now)
    charts, note = images.render(report)
    message = build_message(report, subscription, charts=charts, charts_note=note, delivery_id=delivery.pk)
    message.to = [delivery.recipient]
    try:
        message.send()
    except smtplib.SMTPRecipientsRefused as exc:
        raise PermanentFailure(f"recipient refused: {exc.recipients}") from None


def deliver(delivery_id: int, *, now: datetime | None = None) -> str | None:
    """Send one due delivery if this worker claims it; returns its new status (None: not ours)."""
    now = now or timezone.now()
    if not claim(delivery_id, now=now):
        return None
    delivery = ReportDelivery.objects.select_related("subscription__user").get(pk=delivery_id)
    if not delivery.subscription.active:
        ReportDelivery.objects.filter(pk=delivery_id).update(
            status=DeliveryStatus.CANCELLED,
            claimed_until=None,
            next_attempt_at=None,
            last_error="unsubscribed",
        )
        return DeliveryStatus.CANCELLED
    error, permanent = "", False
    try:
        send(delivery, now=now)
    except PermanentFailure as exc:
        error, permanent = str(exc), True
    except (smtplib.SMTPException, OSError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001 - a bug or a database hiccup: recorded and retried, never lost
        log.exception("report delivery %s could not be built", delivery_id)
        error = f"{type(exc).__name__}: {exc}"
    if not error:
        ReportDelivery.objects.filter(pk=delivery_id).update(
            status=DeliveryStatus.SENT, sent_at=now, claimed_until=None, next_attempt_at=None, last_error=""
        )
        return DeliveryStatus.SENT
    retry = not permanent and delivery.attempts < MAX_ATTEMPTS
    if not retry:
        log.warning("report delivery %s failed for good: %s", delivery_id, error)
    ReportDelivery.objects.filter(pk=delivery_id).update(
        status=DeliveryStatus.FAILED,
        claimed_until=None,
        next_attempt_at=now + backoff(delivery.attempts) if retry else None,
        last_error=error[:2000],
    )
    return DeliveryStatus.FAILED


@dataclass
class Preview:
    subscription: Subscription
    period: ReportPeriod
    subject: str
    recipient: str
    parts: list[str]


def dry_run(*, now: datetime | None = None, usernames=None, ignore_due_time: bool = False) -> list[Preview]:
    """What ``plan`` + ``deliver`` would send now, rendered but neither sent nor recorded."""
    now = now or timezone.now()
    out = []
    for subscription in subscriptions(usernames=usernames):
        period = period_of(subscription, now=now, ignore_due_time=ignore_due_time)
        if period is None or not subscription.recipient:
            continue
        exists = ReportDelivery.objects.filter(
            subscription=subscription, period_start=period.start, status=DeliveryStatus.SENT
        ).exists()
        if exists:
            continue
        report = build_report(subscription, period, now=now)
        message = build_message(report, subscription, charts=[], charts_note="(dry run: no charts)")
        parts = [part.get_content_type() for part in message.message().walk()]
        out.append(Preview(subscription, period, message.subject, subscription.recipient, parts))
    return out
