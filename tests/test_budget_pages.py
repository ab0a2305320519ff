"""Budgets and alerts pages: who may see and change what, burn-down, history, delivery log, acks."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.urls import reverse

from costcenter.alerts import evaluate_all
from costcenter.models import AlertEvent, AlertRule, Budget, Team
from costcenter.notify import deliver_due
from tests.conftest import PASSWORD
from tests.test_budget_world import WebhookReceiver, every_hour, spend

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 10, 12, tzinfo=UTC)


def login(client, username):
    assert client.login(username=username, password=PASSWORD)


def support_budget() -> Budget:
    return Budget.objects.create(
        name="support-monthly", team=Team.objects.get(slug="support"), amount=Decimal(100), signing_secret="s"
    )


FORM = {
    "name": "netops-weekly",
    "team": "",
    "period": "week",
    "time_zone": "UTC",
    "amount": "700",
    "thresholds": "50, 80, 100",
    "forecast_alert": "on",
    "emails": "lead@netops.test, second@netops.test",
    "webhooks": "",
    "slack_webhooks": "https://hooks.slack.test/abc",
    "scope_model": "gpt-4o-mini",
}


def test_a_team_editor_creates_a_budget_in_the_ui(client, people):
    login(client, "alice")
    netops = Team.objects.get(slug="netops")
    assert client.get(reverse("cc-budget-new")).status_code == 200
    response = client.post(reverse("cc-budget-new"), FORM | {"team": netops.pk})
    budget = Budget.objects.get(name="netops-weekly")
    assert response.status_code == 302 and response["Location"] == reverse(
        "cc-budget", kwargs={"pk": budget.pk}
    )
    assert budget.scope == {"model": ["gpt-4o-mini"]} and budget.emails == [
        "lead@netops.test",
        "second@netops.test",
    ]
    assert budget.webhooks == [{"url": "https://hooks.slack.test/abc", "format": "slack"}]
    assert budget.created_by == people["alice"] and len(budget.signing_secret) == 64
    # All teams is for org admins; a bad threshold is explained.
    response = client.post(reverse("cc-budget-new"), FORM | {"name": "x"})
    assert "You may not manage budgets or rules for all teams." in response.content.decode()
    response = client.post(
        reverse("cc-budget-new"), FORM | {"name": "y", "team": netops.pk, "thresholds": "50, lots"}
    )
    assert "&#x27;lots&#x27; is not a whole percentage" in response.content.decode()


def test_a_viewer_cannot_create_and_an_editor_cannot_reach_another_teams_budget(client, people):
    theirs = support_budget()
    login(client, "bob")
    assert client.get(reverse("cc-budget-new")).status_code == 403
    assert client.get(reverse("cc-budget", kwargs={"pk": theirs.pk})).status_code == 200  # he may look
    assert client.get(reverse("cc-budget-edit", kwargs={"pk": theirs.pk})).status_code == 403
    login(client, "alice")
    for name in ("cc-budget", "cc-budget-edit"):
        assert client.get(reverse(name, kwargs={"pk": theirs.pk})).status_code == 404
    assert client.post(reverse("cc-budget-delete", kwargs={"pk": theirs.pk})).status_code == 404
    team_ids = [
        team.pk for team in client.get(reverse("cc-budget-new")).context["form"].fields["team"].queryset
    ]
    assert team_ids == [Team.objects.get(slug="netops").pk]
    assert "support-monthly" not in client.get(reverse("cc-budgets")).content.decode()
    login(client, "root")
    response = client.post(
        reverse("cc-budget-edit", kwargs={"pk": theirs.pk}),
        FORM | {"name": "support-monthly", "team": theirs.team_id, "amount": "150"},
    )
    assert response.status_code == 302 and Budget.objects.get(pk=theirs.pk).amount == Decimal(150)


def test_the_budget_page_shows_burn_down_forecast_periods_transitions_and_delivery_log(client, people):
    receiver = WebhookReceiver().start()
    try:
        with time_machine.travel(NOW, tick=False):
            budget = Budget.objects.create(
                name="n",
                team=Team.objects.get(slug="netops"),
                amount=Decimal(1000),
                signing_secret="s",
                webhooks=[{"url": receiver.url, "format": "json"}],
            )
            spend(every_hour(datetime(2026, 10, 13, tzinfo=UTC), NOW, "2"))
            spend(
                {NOW - timedelta(hours=1): Decimal(100)}, model="gpt-4.1", endpoint="openai-gpt-4.1"
            )  # 556: 50 %
            evaluate_all(budget_ids=[budget.pk])
            deliver_due()
            login(client, "alice")
            response = client.get(reverse("cc-budget", kwargs={"pk": budget.pk}))
    finally:
        receiver.stop()
    page = response.content.decode()
    chart = json.loads(
        page.split('<script id="burn-chart" type="application/json">')[1].split("</script>")[0]
    )
    names = [trace["name"] for trace in chart["data"]]
    assert names[:3] == ["Spent", "Budget (1,000)", "Even pace"] and "Forecast" in names
    spent_trace = chart["data"][0]
    assert spent_trace["y"][-1] == 556.0 and spent_trace["x"][0] == "2026-11-01T00:00:00+00:00"
    assert "50 % threshold crossed" in page and "ok → warning" in page
    assert "Webhook (JSON)" in page and "delivery log" in page and "HTTP 200" in page
    assert "2026-11-01 00:00 – 2026-12-01 00:00" in page  # the period history
    assert "s</code>" in page  # the signing secret, for those who manage the budget


def test_the_alerts_page_lists_firing_and_history_and_a_member_acknowledges(client, people, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    with time_machine.travel(NOW, tick=False):
        theirs = support_budget()
        theirs.emails = ["lead@support.test"]
        theirs.save()
        spend({datetime(2026, 11, 1, tzinfo=UTC): Decimal(60)}, team="support")
        evaluate_all(budget_ids=[theirs.pk])
        deliver_due()
    event = AlertEvent.objects.get(budget=theirs)
    login(client, "alice")
    assert "support-monthly" not in client.get(reverse("cc-alerts")).content.decode()
    assert client.post(reverse("cc-alert-ack", kwargs={"pk": event.pk})).status_code == 404
    login(client, "bob")
    page = client.get(reverse("cc-alerts")).content.decode()
    assert "Budget support-monthly (team support): 50 % threshold crossed" in page
    assert "<code>lead@support.test</code>: <strong>sent</strong> 2026-11-10 12:00:00" in page
    assert "Acknowledge" in page
    response = client.post(reverse("cc-alert-ack", kwargs={"pk": event.pk}), {"next": reverse("cc-alerts")})
    assert response.status_code == 302
    event.refresh_from_db()
    assert event.acknowledged_by == people["bob"] and event.acknowledged_at is not None
    assert "bob at" in client.get(reverse("cc-alerts")).content.decode()
    login(client, "carol")  # sees every alert, but is no member of the team
    assert client.post(reverse("cc-alert-ack", kwargs={"pk": event.pk})).status_code == 403


def test_an_editor_creates_and_edits_an_alert_rule_in_the_ui(client, people):
    login(client, "alice")
    netops = Team.objects.get(slug="netops")
    form = {
        "name": "retries",
        "team": netops.pk,
        "kind": "retry_rate_above",
        "threshold": "25",
        "window_hours": "6",
        "enabled": "on",
        "emails": "oncall@netops.test",
    }
    assert client.post(reverse("cc-alert-rule-new"), form).status_code == 302
    rule = AlertRule.objects.get(name="retries")
    assert (rule.kind, rule.threshold, rule.emails) == (
        "retry_rate_above",
        Decimal(25),
        ["oncall@netops.test"],
    )
    assert (
        client.post(
            reverse("cc-alert-rule-edit", kwargs={"pk": rule.pk}), form | {"threshold": "30"}
        ).status_code
        == 302
    )
    assert AlertRule.objects.get(pk=rule.pk).threshold == Decimal(30)
    page = client.get(reverse("cc-alerts")).content.decode()
    assert "Retry rate above a value: 30 over 6 h" in page
    login(client, "bob")
    assert client.get(reverse("cc-alert-rule-new")).status_code == 403
    assert client.get(reverse("cc-alert-rule-edit", kwargs={"pk": rule.pk})).status_code == 404
