"""Alert rules: each kind fires and resolves on hand-made rollups, once per transition."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine

from costcenter.alerts import evaluate_all
from costcenter.models import AlertEvent, AlertRule, Pool, PoolHour, Team
from tests.test_budget_world import every_hour, spend

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 10, 12, tzinfo=UTC)


def rule(kind: str, threshold, *, window_hours: int = 6, team: str | None = "netops", **kw) -> AlertRule:
    return AlertRule.objects.create(
        name=f"{kind}-rule",
        team=Team.objects.get(slug=team) if team else None,
        kind=kind,
        threshold=Decimal(str(threshold)),
        window_hours=window_hours,
        emails=["oncall@netops.test"],
        signing_secret="x",
        **kw,
    )


def evaluate(r: AlertRule):
    report = evaluate_all(budget_ids=[], rule_ids=[r.pk])
    assert not report.errors, report.errors
    r.refresh_from_db()
    return report


def test_cost_per_successful_task_above_a_value_fires_once_then_resolves(people):
    r = rule("cost_per_task_above", "0.50")
    with time_machine.travel(NOW, tick=False) as clock:
        # $6 an hour over 10 successful tasks an hour: $0.60 per successful task.
        spend(every_hour(NOW - timedelta(hours=6), NOW, "6"))
        first = evaluate(r)
        assert r.state == "firing" and r.last_value == "0.600000000000"
        assert len(first.events) == 1 and len(first.notifications) == 1
        assert evaluate(r).events == []  # still firing: nothing new
        clock.shift(timedelta(hours=7))  # the window is now empty
        resolved = evaluate(r)
    assert r.state == "ok" and len(resolved.events) == 1
    firing, done = AlertEvent.objects.filter(rule=r).order_by("created_at")
    assert firing.title.startswith(
        "Alert cost_per_task_above-rule (team netops) firing: cost per successful task 0.6"
    )
    assert firing.resolved_at == NOW + timedelta(hours=7)
    assert (done.from_state, done.to_state, done.firing) == ("firing", "ok", False)


def test_cost_per_task_up_n_percent_against_the_trailing_week(people):
    r = rule("cost_per_task_increase", 20)
    with time_machine.travel(NOW, tick=False):
        spend(every_hour(NOW - timedelta(days=7, hours=6), NOW - timedelta(hours=6), "5"))  # $0.50 a task
        spend(every_hour(NOW - timedelta(hours=6), NOW, "6.5"))  # $0.65: +30 %
        evaluate(r)
    assert r.state == "firing" and r.last_value["change_percent"] == "30.00"


def test_failure_and_retry_rates_above_a_percentage(people):
    failure = rule("failure_rate_above", 5)
    retry = rule("retry_rate_above", 50)
    with time_machine.travel(NOW, tick=False):
        # 10 tasks, 9 successful, 16 attempts an hour: failure 10 %, retry rate 60 %.
        spend(
            every_hour(NOW - timedelta(hours=6), NOW, "1"),
            attempts=16,
            successes=9,
            tasks=10,
            successful_tasks=9,
        )
        evaluate(failure)
        evaluate(retry)
    assert (failure.state, failure.last_value) == ("firing", "10.00")
    assert (retry.state, retry.last_value) == ("firing", "60.00")


def test_a_pool_idle_for_n_hours_fires_and_names_the_pool(people):
    r = rule("gpu_idle", 30, window_hours=3, team=None)
    pool = Pool.objects.get(name="h100-a")
    with time_machine.travel(NOW, tick=False):
        for h, util in enumerate(["0.2", "0.1", "0.25"]):
            PoolHour.objects.create(
                pool=pool, hour=NOW - timedelta(hours=3 - h), gpu_count=8, mean_utilisation=Decimal(util)
            )
        evaluate(r)
        assert r.state == "firing" and r.last_value == {"h100-a": "18.33"}
        PoolHour.objects.filter(hour=NOW - timedelta(hours=1)).update(mean_utilisation=Decimal("0.9"))
        evaluate(r)
    assert r.state == "ok"
    assert "h100-a (18.33 %)" in AlertEvent.objects.filter(rule=r).order_by("created_at").first().title


def test_new_unpriced_usage_fires_naming_the_model(people):
    r = rule("unpriced_usage", 0)
    with time_machine.travel(NOW, tick=False):
        spend({NOW - timedelta(hours=1): None}, model="mystery-model", unpriced=4)
        evaluate(r)
    assert r.state == "firing" and r.last_value == {"mystery-model @ openai-gpt-4o-mini": 4}
    assert "mystery-model @ openai-gpt-4o-mini (4)" in AlertEvent.objects.get(rule=r).title


def test_ingestion_lag_above_n_minutes(people):
    from ingest.models import Source

    r = rule("ingestion_lag", 30, team=None)
    source = Source.objects.create(name="gateway", kind="http", last_success_at=NOW - timedelta(minutes=20))
    with time_machine.travel(NOW, tick=False) as clock:
        evaluate(r)
        assert r.state == "ok"
        clock.shift(timedelta(minutes=15))
        evaluate(r)
        assert r.state == "firing" and r.last_value["minutes"] == 35
        source.last_success_at = NOW + timedelta(minutes=14)
        source.save()
        evaluate(r)
    assert r.state == "ok"


def test_a_spend_anomaly_against_the_same_hours_of_previous_weeks(people):
    r = rule("spend_anomaly", 3, window_hours=2)
    with time_machine.travel(NOW, tick=False):
        for weeks, amount in ((1, "10"), (2, "11"), (3, "9"), (4, "10")):
            start = NOW - timedelta(days=7 * weeks, hours=2)
            spend(every_hour(start, start + timedelta(hours=2), amount))
        spend(every_hour(NOW - timedelta(hours=2), NOW, "10.5"))
        evaluate(r)
        # Usual: median 20 for the 2 h, MAD 1 → spread max(1.48, 2) = 2, limit 26.
        assert r.state == "ok" and r.last_value == {
            "current": "21.000000000000",
            "median": "20.000000000000",
            "limit": "26.000000000000",
        }
        spend(
            every_hour(NOW - timedelta(hours=2), NOW, "4"), model="gpt-4.1", endpoint="openai-gpt-4.1"
        )  # 29
        evaluate(r)
    assert r.state == "firing"


def test_rules_of_a_disabled_rule_are_not_evaluated(people):
    r = rule("cost_per_task_above", "0.01", enabled=False)
    with time_machine.travel(NOW, tick=False):
        spend(every_hour(NOW - timedelta(hours=2), NOW, "6"))
        report = evaluate_all(budget_ids=[])
    assert report.rules == 0 and AlertRule.objects.get(pk=r.pk).state == "ok"
