"""Budget transitions notify exactly once per threshold and channel, over real loopback receivers:
an SMTP server (aiosmtpd) and an HTTP server. Time is frozen with time-machine."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.db import connection

from costcenter import alerts, budgets, notify
from costcenter.alerts import evaluate_all
from costcenter.models import (
    AlertEvent,
    AlertEventKind,
    Budget,
    BudgetPeriod,
    DeliveryAttempt,
    Notification,
    NotificationStatus,
    Team,
)
from costcenter.notify import deliver, deliver_due, verify_signature
from tests.test_budget_world import SmtpReceiver, WebhookReceiver, every_hour, spend

pytestmark = pytest.mark.django_db

NOV_1 = datetime(2026, 11, 1, tzinfo=UTC)
NOV_10_NOON = datetime(2026, 11, 10, 12, tzinfo=UTC)


def make_budget(receiver: WebhookReceiver | None = None, **kw) -> Budget:
    hooks = []
    if receiver is not None:
        hooks = [{"url": receiver.url, "format": "json"}, {"url": receiver.url + "/slack", "format": "slack"}]
    values = {
        "name": "netops-monthly-test",
        "team": Team.objects.get(slug="netops"),
        "period": "month",
        "amount": Decimal("100"),
        "thresholds": [50, 80, 100],
        "forecast_alert": False,
        "emails": ["lead@netops.test"],
        "webhooks": hooks,
        "signing_secret": "s3cret",
    } | kw
    return Budget.objects.create(**values)


def run(budget: Budget):
    return evaluate_all(budget_ids=[budget.pk])


def spend_until(total: str, *, now: datetime, already: Decimal = Decimal(0), hours: int = 1) -> None:
    """Add spend in the hour(s) just before ``now`` so the month's total goes from ``already`` to ``total``."""
    extra = (Decimal(total) - already) / hours
    spend({now - timedelta(hours=h + 1): extra for h in range(hours)})


@pytest.fixture
def smtp(settings):
    with SmtpReceiver() as receiver:
        receiver.use(settings)
        yield receiver


@pytest.fixture
def hooks():
    receiver = WebhookReceiver().start()
    yield receiver
    receiver.stop()


def test_it_notifies_each_threshold_once_per_channel_and_never_again(people, smtp, hooks):
    with time_machine.travel(NOV_10_NOON, tick=False) as clock:
        budget = make_budget(hooks)
        spend({NOV_1: Decimal("40")})
        report = run(budget)
        assert report.events == [] and report.notifications == []
        period = BudgetPeriod.objects.get(budget=budget)
        assert (period.level, period.state, period.spent) == (0, "ok", Decimal("40"))

        spend({NOV_1 + timedelta(hours=5): Decimal("15")})  # 55 %
        report = run(budget)
        assert len(report.events) == 1 and len(report.notifications) == 3  # e-mail, JSON hook, Slack hook
        assert deliver_due() == {"sent": 3}
        assert len(smtp.messages) == 1 and len(hooks.received) == 2

        # Evaluating again, and delivering again, sends nothing.
        for _ in range(3):
            assert run(budget).notifications == []
            assert deliver_due() == {}
        clock.shift(timedelta(minutes=30))
        assert run(budget).notifications == []

        spend({NOV_1 + timedelta(hours=6): Decimal("30")})  # 85 %
        report = run(budget)
        assert len(report.events) == 1
        assert deliver_due() == {"sent": 3}
        assert run(budget).notifications == [] and deliver_due() == {}

    assert len(smtp.messages) == 2 and len(hooks.received) == 4
    events = list(AlertEvent.objects.filter(budget=budget).order_by("created_at", "pk"))
    assert [(e.kind, e.from_state, e.to_state, e.level) for e in events] == [
        ("threshold", "ok", "warning", 50),
        ("threshold", "warning", "warning", 80),
    ]
    assert BudgetPeriod.objects.get(budget=budget).level == 80

    # The e-mail names the scope and the threshold, has both parts and links to the budget page.
    recipients, message = smtp.messages[1]
    assert recipients == ["lead@netops.test"]
    assert "team netops" in message["Subject"] and "80 %" in message["Subject"]
    assert "netops-monthly-test" in message["Subject"]
    text = message.get_body(("plain",)).get_content()
    html = message.get_body(("html",)).get_content()
    link = f"http://localhost:8000/budgets/{budget.pk}/"
    assert link in text and f'href="{link}"' in html
    assert "85.00 %" in text and "Threshold:  80 %" in text

    # Webhooks: the generic JSON and the Slack body, each signed with the budget's secret.
    generic = [r for r in hooks.received if r.path == "/hook"]
    slack = [r for r in hooks.received if r.path == "/hook/slack"]
    assert len(generic) == len(slack) == 2
    for received in hooks.received:
        assert verify_signature("s3cret", received.headers["X-CostCenter-Signature"], received.body)
        assert not verify_signature("wrong", received.headers["X-CostCenter-Signature"], received.body)
    body = generic[1].json
    assert body["type"] == "budget.threshold" and body["threshold"] == 80 and body["team"] == "netops"
    assert body["details"]["spent"] == "85.000000000000" and body["details"]["amount"] == "100.000000000000"
    assert body["url"] == link
    assert (
        slack[1].json["text"].startswith("Budget netops-monthly-test (team netops): 80 % threshold crossed")
    )
    assert slack[1].json["blocks"][0]["text"]["type"] == "mrkdwn"


def test_a_jump_over_two_thresholds_sends_one_message_naming_the_highest(people, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    from django.core import mail

    with time_machine.travel(NOV_10_NOON, tick=False):
        budget = make_budget()
        spend({NOV_1: Decimal("120")})
        report = run(budget)
        deliver_due()
    (event,) = AlertEvent.objects.filter(budget=budget)
    assert (event.to_state, event.level, event.details["thresholds_crossed"]) == (
        "exceeded",
        100,
        [50, 80, 100],
    )
    assert len(mail.outbox) == 1 and "100 %" in mail.outbox[0].subject
    assert report.notifications == [n.pk for n in Notification.objects.filter(event=event)]


@pytest.mark.django_db(transaction=True)
def test_a_second_worker_evaluating_at_the_same_moment_sends_nothing_more(people, monkeypatch):
    with time_machine.travel(NOV_10_NOON, tick=False):
        budget = make_budget(emails=["lead@netops.test", "cfo@org.test"])
        run(budget)  # the period exists at level 0
        spend({NOV_1: Decimal("60")})

        # Both workers read the period (level 0) before either claims the transition.
        barrier = threading.Barrier(2, timeout=10)
        real_start_period = alerts._start_period

        def start_period_then_wait(*args, **kwargs):
            period = real_start_period(*args, **kwargs)
            barrier.wait()
            return period

        monkeypatch.setattr(alerts, "_start_period", start_period_then_wait)
        reports, errors = [], []

        def worker():
            try:
                reports.append(evaluate_all(budget_ids=[budget.pk]))
            except Exception as exc:  # pragma: no cover - shown by the assertion below
                errors.append(exc)
            finally:
                connection.close()

        threads = [threading.Thread(target=worker) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert not errors and not any(r.errors for r in reports)
        assert sorted(len(r.events) for r in reports) == [0, 1]
        assert AlertEvent.objects.filter(budget=budget).count() == 1
        assert Notification.objects.filter(event__budget=budget).count() == 2

        # Two deliverers racing for the same notification: one sends.
        notification = Notification.objects.filter(event__budget=budget).first()
        outcomes = []

        def deliverer():
            try:
                barrier.wait()
                outcomes.append(deliver(notification.pk))
            finally:
                connection.close()

        barrier.reset()
        threads = [threading.Thread(target=deliverer) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert sorted(outcomes, key=str) == [None, "sent"]
        assert DeliveryAttempt.objects.filter(notification=notification).count() == 1


def test_the_webhook_receiver_down_then_up_gets_each_message_exactly_once(people):
    receiver = WebhookReceiver()  # not started: connection refused
    with time_machine.travel(NOV_10_NOON, tick=False) as clock:
        budget = make_budget(receiver, emails=[])
        spend({NOV_1: Decimal("55")})
        run(budget)
        assert deliver_due() == {"pending": 2}
        first = Notification.objects.filter(event__budget=budget).first()
        assert first.next_attempt_at == NOV_10_NOON + timedelta(minutes=1)
        assert "Connection refused" in first.last_error or "URLError" in first.last_error

        # Nothing is due before the backoff has passed.
        clock.shift(timedelta(seconds=30))
        assert deliver_due() == {}
        clock.shift(timedelta(seconds=30))
        assert deliver_due() == {"pending": 2}  # second try, next in 2 minutes
        clock.shift(timedelta(minutes=2))
        assert deliver_due() == {"pending": 2}  # third try, next in 4 minutes

        # A new threshold while the receiver is down queues its own messages.
        spend({NOV_1 + timedelta(hours=1): Decimal("30")})
        run(budget)
        receiver.start()
        try:
            clock.shift(timedelta(minutes=4))
            assert deliver_due() == {"sent": 4}
            for _ in range(3):
                clock.shift(timedelta(hours=1))
                run(budget)
                assert deliver_due() == {}
        finally:
            receiver.stop()

    assert len(receiver.received) == 4  # 2 events × (JSON + Slack), each exactly once
    ids = [r.headers["X-CostCenter-Delivery"] for r in receiver.received]
    assert len(set(ids)) == 4
    for received in receiver.received:
        assert verify_signature(
            budget.signing_secret, received.headers["X-CostCenter-Signature"], received.body
        )
    log = list(DeliveryAttempt.objects.filter(notification=first).order_by("at"))
    assert [attempt.ok for attempt in log] == [False, False, False, True]
    assert Notification.objects.get(pk=first.pk).attempts == 4


def test_it_retries_with_backoff_for_24_hours_then_gives_up(people):
    receiver = WebhookReceiver()  # never comes up
    with time_machine.travel(NOV_10_NOON, tick=False) as clock:
        budget = make_budget(emails=[], webhooks=[{"url": receiver.url, "format": "json"}])
        spend({NOV_1: Decimal("55")})
        run(budget)
        (notification,) = Notification.objects.filter(event__budget=budget)
        gaps = []
        for _ in range(100):  # bounded: the schedule ends well before
            deliver(notification.pk)
            notification.refresh_from_db()
            if notification.status != NotificationStatus.PENDING:
                break
            gaps.append(notification.next_attempt_at - datetime.now(UTC))
            clock.move_to(notification.next_attempt_at)
    assert notification.status == NotificationStatus.FAILED
    assert [gap.total_seconds() / 60 for gap in gaps[:8]] == [1, 2, 4, 8, 16, 32, 60, 60]
    last = notification.delivery_attempts.order_by("at").last()
    assert last.at <= NOV_10_NOON + timedelta(hours=24) < last.at + timedelta(hours=1)
    assert notification.attempts == len(gaps) + 1


def test_a_client_error_is_not_retried_and_reserved_domains_are_never_called(people):
    receiver = WebhookReceiver(status=410).start()
    try:
        with time_machine.travel(NOV_10_NOON, tick=False):
            hooks = [
                {"url": receiver.url, "format": "json"},
                {"url": "https://hooks.example.com/x", "format": "json"},
            ]
            budget = make_budget(emails=[], webhooks=hooks)
            spend({NOV_1: Decimal("55")})
            run(budget)
            assert deliver_due() == {"failed": 2}
    finally:
        receiver.stop()
    errors = sorted(Notification.objects.values_list("last_error", flat=True))
    assert errors[0].startswith("HTTP 410") and "reserved documentation domain" in errors[1]


def test_the_month_rolls_over_and_the_state_resets_visibly(people, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    from django.core import mail

    with time_machine.travel(datetime(2026, 11, 30, 20, tzinfo=UTC), tick=False) as clock:
        budget = make_budget()
        spend({NOV_1: Decimal("85")})
        run(budget)
        november = BudgetPeriod.objects.get(budget=budget)
        assert (november.level, november.state) == (80, "warning")

        clock.move_to(datetime(2026, 12, 1, 0, 1, tzinfo=UTC))
        report = run(budget)
        run(budget)  # and again: one reset only
        deliver_due()

    december = BudgetPeriod.objects.get(budget=budget, start=datetime(2026, 12, 1, tzinfo=UTC))
    assert (december.level, december.state, december.spent) == (0, "ok", Decimal(0))
    assert december.end == datetime(2027, 1, 1, tzinfo=UTC)
    (reset,) = AlertEvent.objects.filter(budget=budget, kind=AlertEventKind.RESET)
    assert report.events == [reset.pk]
    assert (reset.from_state, reset.to_state, reset.period_id) == ("warning", "ok", december.pk)
    assert reset.details["previous_spent"] == "85.000000000000"
    # November's warning is resolved by the reset, and the team hears that the period started anew.
    warning = AlertEvent.objects.get(budget=budget, kind=AlertEventKind.THRESHOLD)
    assert warning.resolved_at == datetime(2026, 12, 1, 0, 1, tzinfo=UTC)
    assert [m.subject for m in mail.outbox][-1].endswith("new month period, state reset to OK")


def test_periods_follow_the_budget_time_zone():
    at = datetime(2026, 11, 30, 23, 30, tzinfo=UTC)  # already December 1st in Berlin
    assert budgets.period_bounds("month", "Europe/Berlin", at) == (
        datetime(2026, 11, 30, 23, tzinfo=UTC),
        datetime(2026, 12, 31, 23, tzinfo=UTC),
    )
    assert budgets.period_bounds("month", "UTC", at) == (
        datetime(2026, 11, 1, tzinfo=UTC),
        datetime(2026, 12, 1, tzinfo=UTC),
    )
    assert budgets.period_bounds("week", "UTC", at) == (
        datetime(2026, 11, 30, tzinfo=UTC),
        datetime(2026, 12, 7, tzinfo=UTC),
    )
    assert budgets.period_bounds("day", "America/New_York", at) == (
        datetime(2026, 11, 30, 5, tzinfo=UTC),
        datetime(2026, 12, 1, 5, tzinfo=UTC),
    )
    assert budgets.period_bounds("quarter", "UTC", at) == (
        datetime(2026, 10, 1, tzinfo=UTC),
        datetime(2027, 1, 1, tzinfo=UTC),
    )


def test_the_forecast_alert_fires_once_with_the_projected_date(people, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    from django.core import mail

    with time_machine.travel(NOV_10_NOON, tick=False) as clock:
        budget = make_budget(forecast_alert=True, amount=Decimal("1000"))
        # $2 an hour since mid-October: 1,440 projected for November, 1,000 reached on Nov 21 20:00.
        spend(every_hour(datetime(2026, 10, 13, tzinfo=UTC), NOV_10_NOON, "2"))
        run(budget)
        clock.shift(timedelta(hours=5))
        run(budget)
        deliver_due()
    (event,) = AlertEvent.objects.filter(budget=budget, kind=AlertEventKind.FORECAST)
    assert event.details["projected_exceed_at"] == "2026-11-21T20:00:00+00:00"
    assert Decimal(event.details["projected"]) == Decimal("1440")
    assert len(mail.outbox) == 1 and "projected to exceed 100 % on 2026-11-21 20:00" in mail.outbox[0].subject


def test_the_check_budgets_command_evaluates_and_sends(people, settings):
    from io import StringIO

    from django.core.management import call_command

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    Budget.objects.all().delete()  # the example catalog's budget has example.com channels
    with time_machine.travel(NOV_10_NOON, tick=False):
        make_budget()
        spend({NOV_1: Decimal("55")})
        out = StringIO()
        call_command("check_budgets", stdout=out)
        call_command("check_budgets", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines == [
        "evaluated 1 budget(s) and 0 rule(s): 1 transition(s), 1 notification(s) queued",
        "delivery: 1 sent",
        "evaluated 1 budget(s) and 0 rule(s): 0 transition(s), 0 notification(s) queued",
        "delivery: nothing due",
    ]


def test_the_beat_schedule_evaluates_every_minute_and_after_rollups(monkeypatch):
    from costcenter import tasks
    from costcenter.celery import app

    entry = app.conf.beat_schedule["evaluate-alerts"]
    assert entry["task"] == "costcenter.evaluate_alerts" and entry["options"]["expires"] <= 60
    queued = []
    monkeypatch.setattr(tasks.evaluate_alerts, "apply_async", lambda *a, **k: queued.append(k))
    tasks._evaluate_after_rollups(sender=tasks.recompute_costs)
    tasks._evaluate_after_rollups(sender=tasks.deliver_notification)
    assert len(queued) == 1


def test_the_evaluate_task_fans_out_due_deliveries(people, monkeypatch):
    from costcenter import tasks

    Budget.objects.all().delete()
    with time_machine.travel(NOV_10_NOON, tick=False):
        make_budget(emails=["a@x.test", "b@x.test"])
        spend({NOV_1: Decimal("55")})
        queued = []
        monkeypatch.setattr(tasks.deliver_notification, "apply_async", lambda args: queued.append(args[0]))
        assert tasks.evaluate_alerts() == 2
    assert sorted(queued) == sorted(Notification.objects.values_list("pk", flat=True))


def test_signature_verification_rejects_tampering_and_stale_timestamps():
    body = b'{"a":1}'
    header = notify.sign("k", 1_700_000_000, body)
    assert verify_signature("k", header, body, now=1_700_000_100)
    assert not verify_signature("k", header, b'{"a":2}')
    assert not verify_signature("k", header, body, now=1_700_001_000)
    assert not verify_signature("k", "garbage", body)
