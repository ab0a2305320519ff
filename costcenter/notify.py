"""Delivery of notifications: e-mail and webhooks (generic JSON or Slack), signed, retried.

A ``Notification`` row is claimed with a conditional UPDATE that sets a short lease
(``claimed_until``), so two workers never send the same row at once; the one that holds the
lease sends, records a ``DeliveryAttempt`` (the delivery log) and marks the row sent, or
schedules the next try with exponential backoff (1, 2, 4 … minutes, at most an hour apart)
until 24 hours after the event, then gives up (failed). A 4xx answer other than 408/429 is a
permanent failure. A worker that dies mid-send leaves the lease to expire and the row is tried
again, so a receiver may (rarely) see a delivery twice: ``X-CostCenter-Delivery`` is stable
across retries for it to de-duplicate.

Webhook signature: ``X-CostCenter-Signature: t=<unix seconds>,v1=<hex>`` where ``<hex>`` is
HMAC-SHA256 of ``"<unix seconds>." + body`` keyed with the budget's (or rule's) signing secret.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import smtplib
import time
import urllib.error
import urllib.request
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.db.models import F, Q
from django.urls import reverse
from django.utils import timezone

from costcenter.emails import alert as alert_email
from costcenter.emails import site_url
from costcenter.models import DeliveryAttempt, Notification, NotificationChannel, NotificationStatus

log = logging.getLogger(__name__)

LEASE = timedelta(minutes=2)
RETRY_FOR = timedelta(hours=24)
FIRST_RETRY = timedelta(minutes=1)
MAX_RETRY_GAP = timedelta(hours=1)
USER_AGENT = "CostCenter-Webhook/1"
# Documentation-only domains (RFC 2606 / 6761): nothing real listens there, so the example
# catalog's hooks are refused at once instead of being retried for a day.
RESERVED_SUFFIXES = (".example", ".invalid", ".test", "example.com", "example.net", "example.org")


class DeliveryError(Exception):
    def __init__(self, message: str, *, status_code: int | None = None, permanent: bool = False):
        super().__init__(message)
        self.status_code = status_code
        self.permanent = permanent


def webhook_timeout() -> float:
    return float(getattr(settings, "WEBHOOK_TIMEOUT", 10))


def backoff(attempts: int) -> timedelta:
    """Wait before try ``attempts + 1``: 1, 2, 4 … minutes, at most an hour."""
    return min(FIRST_RETRY * (2 ** max(attempts - 1, 0)), MAX_RETRY_GAP)


def sign(secret: str, timestamp: int, body: bytes) -> str:
    digest = hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def verify_signature(
    secret: str, header: str, body: bytes, *, now: float | None = None, tolerance: int = 300
) -> bool:
    """What a receiver does (see the README): recompute the HMAC and compare in constant time."""
    try:
        parts = dict(item.split("=", 1) for item in header.split(","))
        timestamp = int(parts["t"])
    except (KeyError, ValueError):
        return False
    if now is not None and abs(now - timestamp) > tolerance:
        return False
    return hmac.compare_digest(sign(secret, timestamp, body), header)


# --- Bodies ----------------------------------------------------------------------------------------
def event_link(event) -> str:
    if event.budget_id:
        return site_url(reverse("cc-budget", kwargs={"pk": event.budget_id}))
    return site_url(reverse("cc-alerts") + f"#event-{event.pk}")


def event_type(event) -> str:
    if event.rule_id:
        return "alert.firing" if event.firing else "alert.resolved"
    return f"budget.{event.kind}"


def json_body(notification: Notification) -> dict:
    event = notification.event
    return {
        "type": event_type(event),
        "event_id": event.pk,
        "delivery_id": notification.pk,
        "created_at": event.created_at.isoformat(),
        "title": event.title,
        "firing": event.firing,
        "from_state": event.from_state,
        "to_state": event.to_state,
        "threshold": event.level,
        "team": event.team.slug if event.team_id else None,
        "details": event.details,
        "url": event_link(event),
    }


def slack_body(notification: Notification) -> dict:
    """Slack's incoming-webhook shape: ``text`` for notifications, ``blocks`` for the message."""
    event = notification.event
    details = event.details
    link = event_link(event)
    icon = ":rotating_light:" if event.firing else ":white_check_mark:"
    lines = [f"{icon} *{event.title}*"]
    if details.get("spent") is not None:
        lines.append(
            f"Spent {details['spent']} of {details['amount']} {settings.CURRENCY} ({details.get('percent')} %)"
        )
    if details.get("projected_exceed_at"):
        lines.append(f"Projected to exceed on {details['projected_exceed_at']}")
    if details.get("unpriced_attempts"):
        lines.append(f"{details['unpriced_attempts']} unpriced attempt(s): spend is a lower bound")
    if details.get("summary"):
        lines.append(details["summary"])
    lines.append(f"<{link}|Open in CostCenter>")
    return {
        "text": event.title,
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(lines)}}],
    }


# --- Sending ---------------------------------------------------------------------------------------
class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # a redirect is an answer, not a delivery
        return None


_opener = urllib.request.build_opener(_NoRedirect)


def _secret(notification: Notification) -> str:
    event = notification.event
    owner = event.budget if event.budget_id else event.rule
    return owner.signing_secret if owner is not None else ""


def post_webhook(notification: Notification) -> int:
    url = notification.target
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise DeliveryError(f"not an http(s) URL: {url}", permanent=True)
    host = parts.hostname.lower().rstrip(".")
    if host.endswith(RESERVED_SUFFIXES) or host in {"example", "invalid", "test"}:
        raise DeliveryError(f"{host} is a reserved documentation domain; not sent", permanent=True)
    payload = (
        slack_body(notification)
        if notification.channel == NotificationChannel.SLACK
        else json_body(notification)
    )
    body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    timestamp = int(timezone.now().timestamp())
    request = urllib.request.Request(  # noqa: S310 - the scheme is checked above
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "X-CostCenter-Event": event_type(notification.event),
            "X-CostCenter-Delivery": str(notification.pk),
            "X-CostCenter-Signature": sign(_secret(notification), timestamp, body),
        },
    )
    try:
        with _opener.open(request, timeout=webhook_timeout()) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        code = exc.code
        permanent = 400 <= code < 500 and code not in {408, 425, 429}
        raise DeliveryError(f"HTTP {code} {exc.reason}", status_code=code, permanent=permanent) from None
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        raise DeliveryError(f"{type(exc).__name__}: {reason}") from None


def send_email(notification: Notification) -> None:
    event = notification.event
    message = alert_email(
        notification.target,
        event=event,
        link=event_link(event),
        headers={"X-CostCenter-Event": event_type(event), "X-CostCenter-Delivery": str(notification.pk)},
    )
    try:
        message.send()
    except smtplib.SMTPRecipientsRefused as exc:
        raise DeliveryError(f"recipient refused: {exc.recipients}", permanent=True) from None
    except (smtplib.SMTPException, OSError) as exc:
        raise DeliveryError(f"{type(exc).__name__}: {exc}") from None


def claim(notification_id: int, *, now: datetime) -> bool:
    """Take the lease on a due, pending notification; True for exactly one worker."""
    return bool(
        Notification.objects.filter(
            pk=notification_id, status=NotificationStatus.PENDING, next_attempt_at__lte=now
        )
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lte=now))
        .update(claimed_until=now + LEASE, attempts=F("attempts") + 1)
    )


def deliver(notification_id: int, *, now: datetime | None = None) -> str | None:
    """Send one notification if it is due and this worker claims it; returns its new status."""
    now = now or timezone.now()
    if not claim(notification_id, now=now):
        return None
    notification = Notification.objects.select_related("event__budget", "event__rule", "event__team").get(
        pk=notification_id
    )
    started = time.monotonic()
    status_code, error, permanent = None, "", False
    try:
        if notification.channel == NotificationChannel.EMAIL:
            send_email(notification)
        else:
            status_code = post_webhook(notification)
    except DeliveryError as exc:
        error, status_code, permanent = str(exc), exc.status_code, exc.permanent
    duration = int((time.monotonic() - started) * 1000)
    DeliveryAttempt.objects.create(
        notification=notification,
        at=now,
        ok=not error,
        status_code=status_code,
        error=error,
        duration_ms=duration,
    )
    if not error:
        Notification.objects.filter(pk=notification.pk).update(
            status=NotificationStatus.SENT, sent_at=now, claimed_until=None, last_error=""
        )
        return NotificationStatus.SENT
    retry_at = now + backoff(notification.attempts)
    if permanent or retry_at > notification.created_at + RETRY_FOR:
        log.warning("notification %s failed for good: %s", notification.pk, error)
        Notification.objects.filter(pk=notification.pk).update(
            status=NotificationStatus.FAILED, claimed_until=None, last_error=error
        )
        return NotificationStatus.FAILED
    Notification.objects.filter(pk=notification.pk).update(
        next_attempt_at=retry_at, claimed_until=None, last_error=error
    )
    return NotificationStatus.PENDING


def due_ids(*, now: datetime | None = None, limit: int = 500) -> list[int]:
    now = now or timezone.now()
    return list(
        Notification.objects.filter(status=NotificationStatus.PENDING, next_attempt_at__lte=now)
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lte=now))
        .order_by("next_attempt_at", "pk")
        .values_list("pk", flat=True)[:limit]
    )


def deliver_due(*, now: datetime | None = None) -> dict[str, int]:
    """Send every due notification in this process (the command; the beat task fans out)."""
    counts: dict[str, int] = {}
    for notification_id in due_ids(now=now):
        outcome = deliver(notification_id, now=now)
        if outcome:
            counts[outcome] = counts.get(outcome, 0) + 1
    return counts
