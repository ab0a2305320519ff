"""The ingestion page's Retention panel, on raw partitions of known months.

The test drops every existing partition of ``ingest_attempt`` first (inside the test's
transaction, so it is rolled back), ingests three attempts in three known months and costs their
hours, then reads the panel before and after the daily retention task's function runs.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import time_machine
from django.db import connection
from django.template.defaultfilters import filesizeformat
from django.urls import reverse

from costcenter.costing import rebuild_day, recompute_hour
from costcenter.models import DailyUsage, HourlyUsage
from ingest.models import Attempt
from ingest.partitions import drop_expired_partitions, forget_known_partitions
from ingest.retention import months_after, retention_status
from ingest.services import ingest_path, source_for
from tests.ingest_helpers import canonical, write_jsonl

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 10, 15, 12, 0, tzinfo=UTC)
SEPTEMBER_2025 = datetime(2025, 9, 30, 23, tzinfo=UTC)  # the last hour of an expired month
OCTOBER_2025 = datetime(2025, 10, 1, 0, tzinfo=UTC)  # the first hour of the oldest month kept
OCTOBER_2026 = datetime(2026, 10, 14, 10, tzinfo=UTC)  # this month


def partition_bytes(*names: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT sum(pg_total_relation_size(c::regclass)) FROM unnest(%s::text[]) c", [list(names)]
        )
        return int(cursor.fetchone()[0])


@pytest.fixture
def three_months(people, tmp_path):
    """Only the partitions of 2025-09, 2025-10 and 2026-10, one attempt each, costed."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'ingest_attempt'::regclass"
        )
        for (name,) in cursor.fetchall():  # made by earlier tests; the rollback brings them back
            cursor.execute(f"DROP TABLE {name}")  # noqa: S608 - a name read from the catalog
    forget_known_partitions()
    records = [
        canonical(3, ts="2025-09-30T23:10:00Z"),
        canonical(4, ts="2025-10-01T00:10:00Z"),
        canonical(5, ts="2026-10-14T10:10:00Z"),
    ]
    assert (
        ingest_path(write_jsonl(tmp_path / "usage.jsonl", records), source=source_for("files")).accepted == 3
    )
    for hour in (SEPTEMBER_2025, OCTOBER_2025, OCTOBER_2026):
        recompute_hour(hour)
        rebuild_day(hour)
    yield people
    forget_known_partitions()


def panel(client, user) -> tuple[object, str]:
    client.force_login(user)
    with time_machine.travel(NOW, tick=False):
        response = client.get(reverse("cc-ingestion"))
    assert response.status_code == 200
    return response.context["retention"], response.content.decode()


def test_months_after_crosses_years():
    assert months_after(datetime(2025, 11, 1, tzinfo=UTC), 13) == datetime(2026, 12, 1, tzinfo=UTC)
    assert months_after(datetime(2025, 12, 1, tzinfo=UTC), 1) == datetime(2026, 1, 1, tzinfo=UTC)
    assert months_after(datetime(2025, 1, 1, tzinfo=UTC), 0) == datetime(2025, 1, 1, tzinfo=UTC)


def test_panel_before_and_after_the_expired_month_is_dropped(client, three_months):
    carol = three_months["carol"]
    names = ("ingest_attempt_y2025m09", "ingest_attempt_y2025m10", "ingest_attempt_y2026m10")
    status, html = panel(client, carol)
    assert status.keep_months == 13
    assert status.partitions == 3
    assert status.raw_bytes == partition_bytes(*names) > 0
    assert status.oldest_raw_month == datetime(2025, 9, 1, tzinfo=UTC)
    # September 2025 + 13 months: due on 2026-10-01, before NOW; beat has not run yet.
    assert status.next_drop == datetime(2026, 10, 1, tzinfo=UTC) and status.drop_overdue
    assert status.oldest_rollup_day == datetime(2025, 9, 30, tzinfo=UTC)
    assert "Raw attempts are kept <strong>13 months</strong>" in html
    assert '<td data-field="oldest-raw-month">2025-09</td>' in html
    assert "due</span> since 2026-10-01: the daily task drops 2025-09" in html
    assert "3 monthly partitions" in html
    assert f'<span data-field="raw-size">{filesizeformat(partition_bytes(*names))}</span>' in html

    assert drop_expired_partitions(now=NOW, keep_months=13) == ["ingest_attempt_y2025m09"]
    # The month's raw rows are gone; its costs are not.
    assert not Attempt.objects.filter(ts__lt=OCTOBER_2025).exists()
    assert Attempt.objects.count() == 2
    assert HourlyUsage.objects.filter(hour=SEPTEMBER_2025).count() == 1
    september_day = DailyUsage.objects.get(day=datetime(2025, 9, 30, tzinfo=UTC))
    assert (
        september_day.attempts == 1 and september_day.prompt_tokens == canonical(3)["usage"]["prompt_tokens"]
    )

    status, html = panel(client, carol)
    assert status.partitions == 2
    assert status.raw_bytes == partition_bytes(*names[1:])
    assert status.oldest_raw_month == datetime(2025, 10, 1, tzinfo=UTC)
    assert status.next_drop == datetime(2026, 11, 1, tzinfo=UTC) and not status.drop_overdue
    assert status.oldest_rollup_day == datetime(2025, 9, 30, tzinfo=UTC) and status.costs_without_raw
    assert '<td data-field="next-drop">2026-11-01 (2025-10)</td>' in html
    assert "2 monthly partitions" in html
    assert "2025-09-30 — costs before 2025-10 remain, without their raw attempts" in html


def test_the_policy_follows_the_setting(client, three_months, settings):
    settings.RAW_RETENTION_MONTHS = 3
    status, html = panel(client, three_months["carol"])
    assert "Raw attempts are kept <strong>3 months</strong>" in html
    assert status.next_drop == datetime(2025, 12, 1, tzinfo=UTC) and status.drop_overdue
    # What the daily task would then drop: every month but August–October 2026 (none stored).
    assert drop_expired_partitions(now=NOW, keep_months=3) == [
        "ingest_attempt_y2025m09",
        "ingest_attempt_y2025m10",
    ]
    status, _ = panel(client, three_months["carol"])
    assert status.oldest_raw_month == datetime(2026, 10, 1, tzinfo=UTC)
    assert status.next_drop == datetime(2027, 1, 1, tzinfo=UTC)


def test_team_members_see_the_policy_but_not_the_storage(client, three_months):
    status, html = panel(client, three_months["bob"])
    assert status is None
    assert "Raw attempts are kept <strong>13 months</strong>" in html
    assert 'data-field="partitions"' not in html and "oldest-rollup-day" not in html


def test_retention_status_is_one_query(three_months, django_assert_num_queries):
    with django_assert_num_queries(1):
        status = retention_status(now=NOW, keep_months=13)
    assert status.partitions == 3


def test_empty_installation(db):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'ingest_attempt'::regclass"
        )
        for (name,) in cursor.fetchall():
            cursor.execute(f"DROP TABLE {name}")  # noqa: S608 - a name read from the catalog
    status = retention_status(now=NOW, keep_months=13)
    assert (status.partitions, status.raw_bytes, status.oldest_raw_month, status.next_drop) == (
        0,
        0,
        None,
        None,
    )
    assert status.oldest_rollup_day is None and not status.costs_without_raw and not status.drop_overdue
