"""E-mailed reports: local-time weeks (across a DST change), exactly-once delivery over a real
SMTP server on loopback (aiosmtpd), figures equal to the API's, unsubscribe, scoping.

Spend is written as hourly rollup rows (``tests.test_budget_world.spend``) and read back through
the same selectors as every page. Time is frozen with time-machine. Only one test renders PNG
charts (a headless Chromium, a few seconds); the others set ``BROWSER_PATH`` to None, which is
also what a machine without a browser gets.
"""

from __future__ import annotations

import struct
import zlib
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from io import StringIO

import pytest
import time_machine
from django.core.management import call_command
from django.db import IntegrityError, transaction
from django.urls import reverse

from costcenter.models import AlertEvent, AlertEventKind, Budget, Pool, PoolHour, Team
from costcenter.reports import delivery
from costcenter.reports.mail import unsubscribe_token
from costcenter.reports.models import DeliveryStatus, ReportDelivery, Subscription
from costcenter.reports.periods import due_at, last_complete, latest_due, period_containing
from costcenter.templatetags.cc import money, money_precise
from tests.conftest import PASSWORD
from tests.test_budget_world import SmtpReceiver, spend

pytestmark = pytest.mark.django_db

BERLIN = "Europe/Berlin"
UTC_ = "UTC"
# Berlin leaves summer time on Sunday 25 Oct 2026 (03:00 CEST → 02:00 CET): the local week of
# Monday 19 Oct runs from 18 Oct 22:00 UTC to 25 Oct 23:00 UTC, 169 hours.
WEEK_START = datetime(2026, 10, 18, 22, tzinfo=UTC)
WEEK_END = datetime(2026, 10, 25, 23, tzinfo=UTC)
PREVIOUS_START = datetime(2026, 10, 11, 22, tzinfo=UTC)
MONDAY_0905_BERLIN = datetime(2026, 10, 26, 8, 5, tzinfo=UTC)  # 09:05 CET


# --- Periods ---------------------------------------------------------------------------------------
def test_a_week_is_monday_to_monday_in_the_recipient_zone_across_the_dst_change():
    week = period_containing("weekly", BERLIN, datetime(2026, 10, 21, 12, tzinfo=UTC))
    assert (week.start, week.end) == (WEEK_START, WEEK_END)
    assert week.end - week.start == timedelta(hours=169)
    previous = week.previous()
    assert (previous.start, previous.end) == (PREVIOUS_START, WEEK_START)
    assert previous.end - previous.start == timedelta(hours=168)
    # Due Monday 09:00 local: 08:00 UTC in winter time.
    assert due_at(week) == datetime(2026, 10, 26, 8, tzinfo=UTC)
    # Spring forward (29 Mar 2026): a 167-hour week.
    spring = period_containing("weekly", BERLIN, datetime(2026, 3, 25, tzinfo=UTC))
    assert spring.end - spring.start == timedelta(hours=167)
    # New York's week ending with its own change (1 Nov 2026) is 169 hours, a week later than Berlin's.
    ny = period_containing("weekly", "America/New_York", datetime(2026, 10, 28, tzinfo=UTC))
    assert (ny.start, ny.end) == (datetime(2026, 10, 26, 4, tzinfo=UTC), datetime(2026, 11, 2, 5, tzinfo=UTC))


def test_the_latest_due_period_waits_for_the_send_time():
    before = datetime(2026, 10, 26, 7, 59, tzinfo=UTC)  # 08:59 Berlin
    period, due = latest_due("weekly", BERLIN, before)
    assert period.start == PREVIOUS_START and due == datetime(2026, 10, 19, 7, tzinfo=UTC)  # 09:00 CEST
    period, due = latest_due("weekly", BERLIN, datetime(2026, 10, 26, 8, tzinfo=UTC))
    assert period.start == WEEK_START
    # A Friday 17:00 sender gets the week on the Friday after it.
    period, due = latest_due(
        "weekly", UTC_, datetime(2026, 10, 30, 17, tzinfo=UTC), send_weekday=4, send_hour=17
    )
    assert period.first_day.isoformat() == "2026-10-19" and due == datetime(2026, 10, 30, 17, tzinfo=UTC)
    month = last_complete(
        "monthly", "Asia/Tokyo", datetime(2026, 11, 1, 0, tzinfo=UTC)
    )  # 09:00 on 1 Nov in Tokyo
    assert (month.start, month.end) == (
        datetime(2026, 9, 30, 15, tzinfo=UTC),
        datetime(2026, 10, 31, 15, tzinfo=UTC),
    )
    assert due_at(month) == datetime(2026, 11, 1, 0, tzinfo=UTC)


# --- A world with known spend ----------------------------------------------------------------------
def seed_netops_weeks() -> None:
    """netops spend by hand, chosen so a UTC week would give different totals than Berlin's.

    This Berlin week: 5.00 (Sun 18 Oct 22:00 UTC = Mon 00:00 CEST) + 10.00 + 3.00 (Sun 25 Oct
    23:00 CET) = 18.00 over 3 × 10 successful tasks → 0.60 per successful task; plus 10 unpriced
    attempts of mystery-llm. Previous Berlin week: 4.00 + 7.00 (Sun 18 Oct 21:00 UTC = 23:00
    CEST) = 11.00 over 20 successful tasks → 0.55. 100.00 at 25 Oct 23:00 UTC is next week's.
    """
    spend(
        {
            datetime(2026, 10, 14, 12, tzinfo=UTC): "4.00",
            datetime(2026, 10, 18, 21, tzinfo=UTC): "7.00",
            datetime(2026, 10, 18, 22, tzinfo=UTC): "5.00",
            datetime(2026, 10, 21, 12, tzinfo=UTC): "10.00",
            datetime(2026, 10, 25, 22, tzinfo=UTC): "3.00",
            datetime(2026, 10, 25, 23, tzinfo=UTC): "100.00",
        }
    )
    spend(
        {datetime(2026, 10, 22, 10, tzinfo=UTC): None},
        model="mystery-llm",
        unpriced=10,
        successes=0,
        successful_tasks=0,
    )
    spend({datetime(2026, 10, 21, 12, tzinfo=UTC): "50.00"}, team="support")  # not alice's


def subscribe(user, *, at=datetime(2026, 10, 20, tzinfo=UTC), **fields) -> Subscription:
    with time_machine.travel(at, tick=False):
        return Subscription.objects.create(user=user, **({"time_zone": BERLIN} | fields))


@pytest.fixture
def smtp(settings):
    with SmtpReceiver() as receiver:
        receiver.use(settings)
        yield receiver


@pytest.fixture
def no_browser(settings):
    settings.BROWSER_PATH = None


def send_reports(*args) -> str:
    out = StringIO()
    call_command("send_reports", *args, stdout=out, stderr=out)
    return out.getvalue()


def parts_of(message) -> dict[str, list]:
    found: dict[str, list] = {}
    for part in message.walk():
        found.setdefault(part.get_content_type(), []).append(part)
    return found


def decode_png(data: bytes) -> tuple[int, int]:
    """Width and height of a PNG, after checking every chunk's CRC and inflating the pixels."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    offset, idat, header = 8, b"", None
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind = data[offset + 4 : offset + 8]
        body = data[offset + 8 : offset + 8 + length]
        (crc,) = struct.unpack(">I", data[offset + 8 + length : offset + 12 + length])
        assert zlib.crc32(kind + body) == crc, kind
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        offset += 12 + length
    width, height, depth, colour = header[:4]
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[colour]
    raw = zlib.decompress(idat)
    assert len(raw) == height * (1 + (width * channels * depth + 7) // 8)
    return width, height


# --- The mail over real SMTP ------------------------------------------------------------------------
def test_the_weekly_mail_has_text_html_and_pngs_with_the_api_figures_for_the_local_week(people, smtp, client):
    alice = people["alice"]
    seed_netops_weeks()
    subscription = subscribe(alice)
    budget = Budget.objects.create(
        name="netops-tight",
        team=Team.objects.get(slug="netops"),
        period="month",
        amount=Decimal("150"),
        thresholds=[50, 80, 100],
        signing_secret="x",
    )
    AlertEvent.objects.create(
        kind=AlertEventKind.THRESHOLD, budget=budget, team=budget.team, from_state="ok", to_state="warning",
        level=50, firing=True, title="netops-tight passed 50 %", created_at=datetime(2026, 10, 21, 13, tzinfo=UTC),
    )  # fmt: skip
    with time_machine.travel(MONDAY_0905_BERLIN, tick=False):
        assert "1 sent" in send_reports()

    assert len(smtp.messages) == 1
    recipients, message = smtp.messages[0]
    assert recipients == ["alice@example.com"]
    parts = parts_of(message)
    assert message.get_content_type() == "multipart/related"
    assert {"text/plain", "text/html", "image/png"} <= set(parts)
    text = parts["text/plain"][0].get_content()
    html = parts["text/html"][0].get_content()
    pngs = parts["image/png"]
    assert len(pngs) == 2
    for png in pngs:
        width, height = decode_png(png.get_content())
        assert (width, height) == (640, 320)
        assert f'src="cid:{png["Content-ID"].strip("<>")}"' in html
    assert 'alt="Bar chart of spend per day' in html and 'alt="Line chart of cost per successful task' in html

    # The API's figures for the same local week, same scope.
    login = client.login(username="alice", password=PASSWORD)
    assert login
    api = client.get(
        "/api/v1/costs/",
        {"start": WEEK_START.isoformat(), "end": WEEK_END.isoformat(), "team": "netops"},
    ).json()[0]
    before = client.get(
        "/api/v1/costs/",
        {"start": PREVIOUS_START.isoformat(), "end": WEEK_START.isoformat(), "team": "netops"},
    ).json()[0]
    # … which are the hand-computed ones.
    assert Decimal(api["cost"]) == Decimal("18.00") and api["successful_tasks"] == 30
    assert Decimal(api["cost_per_successful_task"]) == Decimal("0.6")
    assert Decimal(before["cost"]) == Decimal("11.00") and before["successful_tasks"] == 20
    tokens_shown = api["prompt_tokens"] + api["completion_tokens"]
    assert tokens_shown == 4 * 1100
    spend_line = f"Spend: {money(Decimal(api['cost']))} / {money(Decimal(before['cost']))} / +63.6%"
    assert spend_line == "Spend: $18.00 / $11.00 / +63.6%"
    assert spend_line + " (incomplete: some usage has no price)" in text
    per_task = Decimal(api["cost_per_successful_task"])
    assert f"Cost per successful task: {money_precise(per_task)} / $0.5500 / +9.1%" in text
    assert "Successful tasks: 30 / 20 / +50.0%" in text
    assert "Tokens: 4.4k tokens / 2.2k tokens / +100.0%" in text
    assert "Compared with the week of 12 Oct – 18 Oct 2026." in text  # UTF-8 survives the trip
    assert "$18.00" in html and "$0.60" in html
    # Subject, explanation, movers, budget, alert, unpriced model, links.
    assert (
        message["Subject"]
        .strip()
        .startswith("[CostCenter] Week of 19 Oct – 25 Oct 2026: $18.00 spent (+63.6%)")
    )
    assert "Spend rose $7.00 (+64%)" in text
    assert "Team: netops +$7.00 ($11.00 → $18.00)" in text
    assert "support" not in text.split("== Unpriced")[0]  # bob's team is not alice's to see
    # Tightest first: the example catalog's 5,000 budget comes second.
    assert "- netops-tight (team netops): $129.00 of $150.00 (86 %), warning" in text  # October so far
    assert text.index("- netops-tight") < text.index(
        "- netops-monthly (team netops): $129.00 of $5,000.00 (3 %), ok"
    )
    assert "netops-tight passed 50 %" in text and "Alerts fired this week (1)" in text
    assert "mystery-llm: 10 attempt(s)" in text
    assert "/cost-change/?before_start=2026-10-12&before_end=2026-10-18&after_start=2026-10-19" in text
    assert "Charts are unavailable" not in text

    # Exactly once: a second run, and later beat ticks, send nothing more.
    with time_machine.travel(MONDAY_0905_BERLIN + timedelta(minutes=5), tick=False):
        assert "nothing due" in send_reports()
        assert "nothing due" in send_reports("--now")
        assert delivery.plan() == []
    assert len(smtp.messages) == 1
    row = ReportDelivery.objects.get()
    assert (row.subscription_id, row.period_start, row.status, row.attempts) == (
        subscription.pk, WEEK_START, DeliveryStatus.SENT, 1,
    )  # fmt: skip
    assert message["Message-ID"] == f"<costcenter-report-{row.pk}@localhost>"


def test_nothing_is_sent_before_the_local_send_time_nor_for_weeks_before_subscribing(
    people, smtp, no_browser
):
    seed_netops_weeks()
    subscribe(people["alice"])
    with time_machine.travel(MONDAY_0905_BERLIN - timedelta(minutes=10), tick=False):  # 08:55 Berlin
        assert delivery.plan() == []  # the previous week was due before the subscription existed
    assert not smtp.messages and not ReportDelivery.objects.exists()


def test_smtp_down_then_up_delivers_exactly_once(people, settings, no_browser):
    seed_netops_weeks()
    subscribe(people["alice"])
    receiver = SmtpReceiver()
    receiver.use(settings)  # its port has nothing listening yet: connection refused
    with time_machine.travel(MONDAY_0905_BERLIN, tick=False) as clock:
        [delivery_id] = delivery.plan()
        assert delivery.deliver(delivery_id) == DeliveryStatus.FAILED
        row = ReportDelivery.objects.get()
        assert row.attempts == 1 and "ConnectionRefusedError" in row.last_error
        assert row.next_attempt_at == MONDAY_0905_BERLIN + timedelta(minutes=1)
        assert delivery.plan() == []  # not due again before its backoff
        with receiver:
            clock.shift(timedelta(minutes=1))
            assert delivery.plan() == [delivery_id]
            assert delivery.deliver(delivery_id) == DeliveryStatus.SENT
            assert delivery.deliver(delivery_id) is None  # a duplicate task finds nothing to claim
            clock.shift(timedelta(minutes=5))
            assert delivery.plan() == []
            assert "nothing due" in send_reports()
        assert len(receiver.messages) == 1
        text = parts_of(receiver.messages[0][1])["text/plain"][0].get_content()
        assert "Charts are unavailable: no headless browser is configured (BROWSER_PATH)." in text
        assert "image/png" not in parts_of(receiver.messages[0][1])
    row.refresh_from_db()
    assert (row.status, row.attempts, row.last_error) == (DeliveryStatus.SENT, 2, "")


def test_failures_back_off_and_stop_after_the_attempt_cap(people, settings, no_browser):
    seed_netops_weeks()
    subscribe(people["alice"])
    SmtpReceiver().use(settings)  # never started
    with time_machine.travel(MONDAY_0905_BERLIN, tick=False) as clock:
        [delivery_id] = delivery.plan()
        gaps = []
        while (row := ReportDelivery.objects.get()).next_attempt_at is not None:
            clock.move_to(row.next_attempt_at)
            assert delivery.plan() == [delivery_id]
            before = row.next_attempt_at
            assert delivery.deliver(delivery_id) == DeliveryStatus.FAILED
            after = ReportDelivery.objects.get().next_attempt_at
            if after:
                gaps.append(int((after - before).total_seconds() // 60))
    assert row.attempts == delivery.MAX_ATTEMPTS and row.status == DeliveryStatus.FAILED
    assert gaps == [1, 2, 4, 8, 16, 32, 60]


def test_two_workers_claim_one_delivery_once(people, no_browser):
    subscribe(people["alice"])
    with time_machine.travel(MONDAY_0905_BERLIN, tick=False):
        [delivery_id] = delivery.plan()
        assert delivery.plan() == [delivery_id]  # a second tick adds no row
        assert ReportDelivery.objects.count() == 1
        now = datetime.now(UTC)
        assert delivery.claim(delivery_id, now=now) is True
        assert delivery.claim(delivery_id, now=now) is False
        assert delivery.deliver(delivery_id) is None  # the lease is held


def test_unsubscribe_in_one_click_without_a_session(people, smtp, client, no_browser):
    subscription = subscribe(people["alice"])
    with time_machine.travel(MONDAY_0905_BERLIN, tick=False):
        send_reports()
    message = smtp.messages[0][1]
    header = message["List-Unsubscribe"]
    assert message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    url = header.strip().strip("<>")
    path = url.removeprefix("http://localhost:8000")
    assert (
        path.startswith("/reports/unsubscribe/") and url in parts_of(message)["text/plain"][0].get_content()
    )
    # Opening the link (or a mail scanner prefetching it) changes nothing; it offers one button.
    page = client.get(path)
    assert page.status_code == 200 and b"Unsubscribe</button>" in page.content
    subscription.refresh_from_db()
    assert subscription.active
    # The mail client's RFC 8058 one-click POST (no session, no CSRF token) unsubscribes.
    response = client.post(path, {"List-Unsubscribe": "One-Click"})
    assert response.status_code == 200 and b"Unsubscribed" in response.content
    subscription.refresh_from_db()
    assert not subscription.active and subscription.unsubscribed_at is not None
    with time_machine.travel(MONDAY_0905_BERLIN + timedelta(days=7), tick=False):
        assert delivery.plan() == []
    assert len(smtp.messages) == 1
    # A forged or altered token is refused and changes nothing.
    other = subscribe(people["bob"], time_zone="UTC")
    forged = unsubscribe_token(other)[:-2] + "xx"
    assert client.post(f"/reports/unsubscribe/{forged}/").status_code == 404
    other.refresh_from_db()
    assert other.active


def test_a_planned_report_for_an_unsubscribed_user_is_cancelled(people, no_browser, smtp):
    subscription = subscribe(people["alice"])
    with time_machine.travel(MONDAY_0905_BERLIN, tick=False):
        [delivery_id] = delivery.plan()
        Subscription.objects.filter(pk=subscription.pk).update(active=False)
        assert delivery.deliver(delivery_id) == DeliveryStatus.CANCELLED
    assert not smtp.messages


def test_scopes_follow_roles(people, smtp, no_browser):
    """carol (org-wide viewer) gets the whole organisation; bob (support) only support."""
    seed_netops_weeks()
    hour = datetime(2026, 10, 21, 12, tzinfo=UTC)
    for pool, unallocated, idle, utilisation in (("h100-a", "6", "16", "0.2"), ("mi300x-b", "4", "8", "0.6")):
        PoolHour.objects.create(
            pool=Pool.objects.get(name=pool), hour=hour, gpu_count=8, pool_cost=Decimal("20"),
            allocated_cost=Decimal("20") - Decimal(unallocated), unallocated_cost=Decimal(unallocated),
            idle_cost=Decimal(idle), mean_utilisation=Decimal(utilisation),
        )  # fmt: skip
    subscribe(people["carol"], scope="org")
    subscribe(people["bob"])
    subscribe(people["dave"], scope="org")  # not a manager: falls back to his (no) teams
    gone = subscribe(people["alice"])
    gone.user.is_active = False  # left the company: no more reports
    gone.user.save()
    with time_machine.travel(MONDAY_0905_BERLIN, tick=False):
        assert "3 sent" in send_reports()
    texts = {
        recipients[0]: parts_of(message)["text/plain"][0].get_content()
        for recipients, message in smtp.messages
    }
    assert "Scope: the whole organisation." in texts["carol@example.com"]
    carol = texts["carol@example.com"]
    assert "Spend: $78.00 / $11.00" in carol  # 18 netops + 50 support + 10 unallocated pool cost
    assert "Idle GPU cost: $24.00 (previous —, —)" in carol
    assert "Least-utilised pool: h100-a at 20.0% mean utilisation, $16.00 idle" in carol
    assert "Team: support +$50.00" in carol
    assert "No self-run GPU usage in this scope." in texts["bob@example.com"]
    assert "Scope: team support." in texts["bob@example.com"]
    assert "Spend: $50.00 / —" in texts["bob@example.com"]
    assert "netops" not in texts["bob@example.com"]
    assert "Scope: no team." in texts["dave@example.com"]
    assert "Spend: — / —" in texts["dave@example.com"]


def test_an_admin_subscribes_a_distribution_list_to_some_teams(people, smtp, no_browser):
    seed_netops_weeks()
    listed = subscribe(people["root"], email="finops-list@example.com", scope="teams")
    listed.teams.set([Team.objects.get(slug="support")])
    with time_machine.travel(MONDAY_0905_BERLIN, tick=False):
        send_reports("--user", "root")
    [(recipients, message)] = smtp.messages
    assert recipients == ["finops-list@example.com"]
    text = parts_of(message)["text/plain"][0].get_content()
    assert "Scope: team support." in text and "Spend: $50.00" in text
    assert "as the list finops-list@example.com" in parts_of(message)["text/html"][0].get_content()
    # Another admin subscribing the same list would double its mail: refused by the database.
    with pytest.raises(IntegrityError), transaction.atomic():
        Subscription.objects.create(user=people["carol"], email="finops-list@example.com", scope="org")


def test_send_reports_now_and_dry_run(people, smtp, no_browser):
    seed_netops_weeks()
    subscribe(people["alice"], at=datetime(2026, 10, 28, tzinfo=UTC))
    with time_machine.travel(datetime(2026, 10, 28, 12, tzinfo=UTC), tick=False):
        assert "nothing due" in send_reports()  # next Monday's
        dry = send_reports("--now", "--dry-run")
        assert "would send to alice@example.com" in dry and "text/plain, text/html" in dry
        assert "nothing sent or recorded" in dry
        assert not smtp.messages and not ReportDelivery.objects.exists()
        assert "1 sent" in send_reports("--now", "--user", "alice")
        assert "nothing due" in send_reports("--now")
    assert len(smtp.messages) == 1
    assert ReportDelivery.objects.get().period_start == WEEK_START  # the last complete week
    with pytest.raises(Exception, match="unknown user"):
        send_reports("--user", "nobody")


def test_the_settings_page_saves_a_subscription_and_managers_alone_pick_the_organisation(people, client):
    client.login(username="alice", password=PASSWORD)
    page = client.get(reverse("reports:settings"))
    assert page.status_code == 200 and b'value="org"' not in page.content
    refused = client.post(
        reverse("reports:settings"),
        {
            "active": "on",
            "frequency": "weekly",
            "scope": "org",
            "time_zone": BERLIN,
            "send_weekday": 0,
            "send_hour": 9,
        },
    )
    assert refused.status_code == 200 and not Subscription.objects.exists()
    bad_zone = client.post(
        reverse("reports:settings"),
        {
            "active": "on",
            "frequency": "weekly",
            "scope": "teams",
            "time_zone": "Mars/Olympus",
            "send_weekday": 0,
            "send_hour": 9,
        },
    )
    assert b"is not a time zone" in bad_zone.content and not Subscription.objects.exists()
    saved = client.post(
        reverse("reports:settings"),
        {
            "active": "on",
            "frequency": "monthly",
            "scope": "teams",
            "time_zone": BERLIN,
            "send_weekday": 0,
            "send_hour": 7,
        },
    )
    assert saved.status_code == 302
    subscription = Subscription.objects.get(user=people["alice"])
    assert (subscription.frequency, subscription.time_zone, subscription.send_hour, subscription.active) == (
        "monthly", BERLIN, 7, True,
    )  # fmt: skip
    client.login(username="carol", password=PASSWORD)
    assert b'value="org"' in client.get(reverse("reports:settings")).content


def test_the_preview_page_renders_the_mail_for_the_signed_in_user(people, client, no_browser):
    seed_netops_weeks()
    client.login(username="alice", password=PASSWORD)
    with time_machine.travel(MONDAY_0905_BERLIN, tick=False):
        Subscription.objects.create(user=people["alice"], time_zone=BERLIN)
        response = client.get(reverse("reports:preview"))
    assert response.status_code == 200
    page = response.content.decode()
    assert "Week of 19 Oct – 25 Oct 2026" in page and "$18.00" in page
    assert "img-src 'self' data:" in response["Content-Security-Policy"]
    assert "<script" not in page


def test_the_beat_plans_reports_every_five_minutes_and_fans_out(people, monkeypatch, no_browser):
    from costcenter.celery import app
    from costcenter.reports import tasks

    entry = app.conf.beat_schedule["plan-reports"]
    assert entry["task"] == "reports.plan_reports"
    assert entry["schedule"].minute == set(range(0, 60, 5))
    subscribe(people["alice"])
    queued = []
    monkeypatch.setattr(tasks.deliver_report, "apply_async", lambda args: queued.append(args[0]))
    with time_machine.travel(MONDAY_0905_BERLIN, tick=False):
        assert tasks.plan_reports() == 1
        assert queued == [ReportDelivery.objects.get().pk]


def test_the_quick_start_subscribes_the_demo_admin_and_plans_one_report(
    people, settings, tmp_path, no_browser
):
    from costcenter.reports.demo import subscribe_and_plan

    settings.EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    settings.EMAIL_FILE_PATH = tmp_path
    root = people["root"]
    with time_machine.travel(datetime(2026, 10, 28, 12, tzinfo=UTC), tick=False):
        assert subscribe_and_plan(root) == 1
        assert subscribe_and_plan(root) == 1  # the same row, still waiting for the beat
        assert Subscription.objects.get(user=root).scope == "org"
        assert "1 sent" in send_reports()
        assert subscribe_and_plan(root) == 0
    [written] = list(tmp_path.iterdir())  # the embedded default: one mail as a file
    mail = written.read_text()
    assert "X-CostCenter-Report: 2026-10-19" in mail and "To: root@example.com" in mail


def test_a_report_that_cannot_be_built_is_recorded_and_retried_not_lost(
    people, smtp, no_browser, monkeypatch
):
    from costcenter.reports import content

    subscribe(people["alice"])
    real = content.build_report
    monkeypatch.setattr(delivery, "build_report", lambda *a, **k: 1 / 0)  # a bug in one section
    with time_machine.travel(MONDAY_0905_BERLIN, tick=False) as clock:
        [delivery_id] = delivery.plan()
        assert delivery.deliver(delivery_id) == DeliveryStatus.FAILED
        row = ReportDelivery.objects.get()
        assert row.last_error == "ZeroDivisionError: division by zero" and row.claimed_until is None
        monkeypatch.setattr(delivery, "build_report", real)  # fixed and deployed
        clock.shift(timedelta(minutes=1))
        assert delivery.deliver(delivery_id) == DeliveryStatus.SENT
    assert len(smtp.messages) == 1


def test_a_monthly_report_covers_the_calendar_month_of_its_zone(people, smtp, no_browser):
    seed_netops_weeks()
    subscribe(
        people["alice"], frequency="monthly", time_zone="Asia/Tokyo", at=datetime(2026, 10, 2, tzinfo=UTC)
    )
    with time_machine.travel(
        datetime(2026, 10, 31, 23, 55, tzinfo=UTC), tick=False
    ):  # 08:55 on 1 Nov in Tokyo
        assert delivery.plan() == []
    with time_machine.travel(datetime(2026, 11, 1, 0, 5, tzinfo=UTC), tick=False):
        assert "1 sent" in send_reports()
    row = ReportDelivery.objects.get()
    # October in Tokyo (UTC+9): 30 Sep 15:00 UTC to 31 Oct 15:00 UTC, every seeded hour inside it:
    # 4 + 7 + 5 + 10 + 3 + 100 = 129.00 of netops spend.
    assert (row.period_start, row.period_end) == (
        datetime(2026, 9, 30, 15, tzinfo=UTC),
        datetime(2026, 10, 31, 15, tzinfo=UTC),
    )
    text = parts_of(smtp.messages[0][1])["text/plain"][0].get_content()
    assert "CostCenter monthly report — October 2026 (Asia/Tokyo)" in text
    assert "Spend: $129.00 / — /" in text


def test_building_a_report_runs_as_many_queries_with_more_models_and_teams(people):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from costcenter.reports.content import build_report
    from costcenter.reports.periods import period_containing

    carol = subscribe(people["carol"], scope="org")
    week = period_containing("weekly", BERLIN, datetime(2026, 10, 21, tzinfo=UTC))

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            build_report(carol, week, now=MONDAY_0905_BERLIN)
        return len(captured.captured_queries)

    seed_netops_weeks()
    few = queries()
    for team in ("search", "research"):
        for model in ("claude-sonnet-4", "gpt-4.1"):
            spend({datetime(2026, 10, 20, 9, tzinfo=UTC): "1.00"}, team=team, model=model)
    assert queries() == few
