"""Fault drill: the SMTP server and the webhook receiver are both down when a budget alert fires.

Real receivers on loopback (aiosmtpd, an HTTP server) that refuse connections until they start;
time is frozen and moved with time-machine so the retry backoff is followed exactly. Every message
must arrive exactly once after recovery — no loss while down, no repeat after — and each failed
try is logged on the notification.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
import time_machine

from costcenter.models import DeliveryAttempt, Notification, NotificationStatus
from costcenter.notify import deliver_due, verify_signature
from tests.test_budget_alerts import NOV_1, NOV_10_NOON, make_budget, run
from tests.test_budget_world import SmtpReceiver, WebhookReceiver, spend

pytestmark = [pytest.mark.drill, pytest.mark.django_db]


def test_smtp_and_webhook_down_then_up_deliver_every_alert_exactly_once(people, settings):
    smtp = SmtpReceiver()  # created with its port, not started: connection refused
    smtp.use(settings)
    hooks = WebhookReceiver()
    with time_machine.travel(NOV_10_NOON, tick=False) as clock:
        budget = make_budget(hooks, emails=["lead@netops.test", "finance@netops.test"])
        spend({NOV_1: Decimal("55")})  # 55 %: the 50 % threshold
        run(budget)
        assert deliver_due() == {"pending": 4}  # 2 e-mails, JSON and Slack hooks
        errors = list(Notification.objects.values_list("channel", "last_error"))
        assert all("Connection refused" in error or "Errno 111" in error for _, error in errors), errors

        clock.shift(timedelta(minutes=1))
        assert deliver_due() == {"pending": 4}  # still down: second try, next in 2 minutes
        # The 80 % threshold is crossed while everything is down: its messages queue too.
        spend({NOV_1 + timedelta(hours=1): Decimal("30")})
        run(budget)

        with smtp:
            hooks.start()
            try:
                clock.shift(timedelta(minutes=2))
                assert deliver_due() == {"sent": 8}
                for _ in range(3):  # later ticks and evaluations send nothing more
                    clock.shift(timedelta(hours=1))
                    run(budget)
                    assert deliver_due() == {}
            finally:
                hooks.stop()

    # Each of 2 events × (2 addresses + 2 hooks) exactly once.
    assert sorted(tuple(recipients) for recipients, _ in smtp.messages) == sorted(
        [("lead@netops.test",), ("finance@netops.test",)] * 2
    )
    subjects = sorted(message["Subject"] for _, message in smtp.messages)
    assert sum("50 %" in s for s in subjects) == 2 and sum("80 %" in s for s in subjects) == 2
    assert len(hooks.received) == 4
    deliveries = [r.headers["X-CostCenter-Delivery"] for r in hooks.received]
    deliveries += [message["X-CostCenter-Delivery"] for _, message in smtp.messages]
    assert len(deliveries) == len(set(deliveries)) == 8
    for received in hooks.received:
        assert verify_signature(
            budget.signing_secret, received.headers["X-CostCenter-Signature"], received.body
        )
    assert set(Notification.objects.values_list("status", flat=True)) == {NotificationStatus.SENT}
    # The first event's messages: two refused tries, then the one that arrived.
    first = Notification.objects.filter(event__level=50)
    for notification in first:
        log = DeliveryAttempt.objects.filter(notification=notification).order_by("at")
        assert [attempt.ok for attempt in log] == [False, False, True]
