"""Budgets, alert rules and alerts over the API: status, unpriced usage, and who may do what."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.urls import reverse

from costcenter.alerts import evaluate_all
from costcenter.catalog import catalog_load
from costcenter.costing import recompute
from costcenter.models import AlertEvent, AlertRule, Budget, Team, TeamRole
from costcenter.tokens import api_token_create
from tests import cost_world
from tests.conftest import make_user
from tests.test_budget_world import spend

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 10, 12, tzinfo=UTC)
NOV_1 = datetime(2026, 11, 1, tzinfo=UTC)


def token(user, scope="read") -> str:
    return api_token_create(user=user, scope=scope)[1]


def call(client, user, method, url, data=None, scope="ingest"):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token(user, scope)}"}
    if method == "get":
        return client.get(url, **headers)
    return getattr(client, method)(url, data=data, content_type="application/json", **headers)


def budget_of(slug: str | None, name: str, amount="100") -> Budget:
    team = Team.objects.get(slug=slug) if slug else None
    return Budget.objects.create(
        name=name, team=team, amount=Decimal(amount), signing_secret="secret-" + name
    )


BODY = {
    "name": "netops-gpt",
    "team": "netops",
    "scope": {"model": "gpt-4o-mini"},
    "period": "week",
    "time_zone": "Europe/Berlin",
    "amount": "250.50",
    "thresholds": [90, 50],
    "emails": ["lead@netops.test"],
    "webhooks": ["https://hooks.netops.test/x", {"url": "https://hooks.slack.test/y", "format": "slack"}],
}


def test_a_team_editor_creates_reads_updates_and_deletes_a_budget(client, people):
    alice = people["alice"]
    created = call(client, alice, "post", reverse("cc-api-budgets"), BODY)
    assert created.status_code == 201, created.json()
    data = created.json()
    assert data["team"] == "netops" and data["scope"] == {"model": ["gpt-4o-mini"]}
    assert data["thresholds"] == [50, 90] and data["amount"] == "250.500000000000"
    assert data["webhooks"][1] == {"url": "https://hooks.slack.test/y", "format": "slack"}
    assert len(data["signing_secret"]) == 64 and data["from_catalog"] is False
    url = reverse("cc-api-budget", kwargs={"pk": data["id"]})
    assert call(client, alice, "patch", url, {"amount": "300"}).json()["amount"] == "300.000000000000"
    assert call(client, alice, "get", url, scope="read").json()["amount"] == "300.000000000000"
    assert call(client, alice, "put", url, BODY | {"name": "renamed"}).json()["name"] == "renamed"
    assert call(client, alice, "delete", url).status_code == 204
    assert not Budget.objects.filter(pk=data["id"]).exists()


def test_a_viewer_cannot_create_budgets(client, people):
    response = call(client, people["bob"], "post", reverse("cc-api-budgets"), BODY | {"team": "support"})
    assert response.status_code == 403
    assert not Budget.objects.filter(name="netops-gpt").exists()


def test_an_editor_of_one_team_cannot_see_or_edit_another_teams_budgets(client, people):
    alice = people["alice"]
    theirs = budget_of("support", "support-monthly")
    ours = budget_of("netops", "netops-extra")
    for method, data in (("get", None), ("patch", {"amount": "1"}), ("put", BODY), ("delete", None)):
        assert (
            call(client, alice, method, reverse("cc-api-budget", kwargs={"pk": theirs.pk}), data).status_code
            == 404
        )
    assert (
        call(client, alice, "get", reverse("cc-api-budget-status", kwargs={"pk": theirs.pk})).status_code
        == 404
    )
    missing = reverse("cc-api-budget", kwargs={"pk": 999_999})
    assert call(client, alice, "get", missing).status_code == 404  # hidden and missing look alike
    # Nor move a budget to, or create one for, a team she cannot see.
    response = call(client, alice, "post", reverse("cc-api-budgets"), BODY | {"team": "support"})
    assert response.status_code == 400 and "unknown team 'support'" in str(response.json())
    url = reverse("cc-api-budget", kwargs={"pk": ours.pk})
    assert call(client, alice, "patch", url, {"team": "support"}).status_code == 400
    listed = call(client, alice, "get", reverse("cc-api-budgets")).json()
    assert [b["name"] for b in listed] == ["netops-extra", "netops-monthly"]
    assert Budget.objects.get(pk=theirs.pk).amount == Decimal(100)


def test_org_admins_manage_every_budget_and_org_wide_ones(client, people):
    root, carol, alice = people["root"], people["carol"], people["alice"]
    theirs = budget_of("support", "support-monthly")
    url = reverse("cc-api-budget", kwargs={"pk": theirs.pk})
    assert call(client, root, "patch", url, {"amount": "7"}).status_code == 200
    everything = call(client, root, "post", reverse("cc-api-budgets"), BODY | {"name": "all", "team": None})
    assert everything.status_code == 201 and everything.json()["team"] is None
    # An org-wide viewer sees them all but changes nothing, and does not see secrets.
    listed = call(client, carol, "get", reverse("cc-api-budgets")).json()
    assert {b["name"] for b in listed} == {"all", "netops-monthly", "support-monthly"}
    assert all("signing_secret" not in b for b in listed)
    assert call(client, carol, "patch", url, {"amount": "8"}).status_code == 403
    assert call(client, carol, "post", reverse("cc-api-budgets"), BODY).status_code == 403
    # A team editor cannot create an org-wide budget, nor see one.
    assert (
        call(client, alice, "post", reverse("cc-api-budgets"), BODY | {"name": "x", "team": None}).status_code
        == 403
    )
    all_url = reverse("cc-api-budget", kwargs={"pk": everything.json()["id"]})
    assert call(client, alice, "get", all_url).status_code == 404


def test_read_tokens_read_and_only_sessions_or_ingest_tokens_write(client, people):
    alice = people["alice"]
    assert call(client, alice, "get", reverse("cc-api-budgets"), scope="read").status_code == 200
    assert call(client, alice, "post", reverse("cc-api-budgets"), BODY, scope="read").status_code == 403
    assert client.get(reverse("cc-api-budgets")).status_code == 401
    client.force_login(alice)
    assert client.post(reverse("cc-api-budgets"), BODY, content_type="application/json").status_code == 201


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"amount": "0"}, "amount", "must be positive"),
        ({"thresholds": [50, "x"]}, "thresholds", "'x' is not a whole percentage"),
        ({"time_zone": "Mars/Base"}, "time_zone", "unknown time zone"),
        ({"scope": {"colour": "red"}}, "scope", "unknown dimension 'colour'"),
        ({"webhooks": ["ftp://x"]}, "webhooks", "is not an http(s) URL"),
        ({"period": "year"}, "period", "is not a valid choice"),
    ],
)
def test_invalid_budgets_are_refused_naming_the_field(client, people, change, field, message):
    response = call(client, people["alice"], "post", reverse("cc-api-budgets"), BODY | change)
    assert response.status_code == 400 and message in str(response.json()[field])


def test_the_status_endpoint_gives_spent_remaining_percent_projection_and_state(client, people):
    budget = budget_of("netops", "n", amount="1000")
    with time_machine.travel(NOW, tick=False):
        hours = {
            datetime(2026, 10, 13, tzinfo=UTC) + timedelta(hours=h): Decimal(2) for h in range(28 * 24 + 12)
        }
        spend(hours)
        data = call(
            client,
            people["alice"],
            "get",
            reverse("cc-api-budget-status", kwargs={"pk": budget.pk}),
            scope="read",
        ).json()
    assert data == {
        "budget": budget.pk,
        "name": "n",
        "currency": "USD",
        "period_start": "2026-11-01T00:00:00Z",
        "period_end": "2026-12-01T00:00:00Z",
        "amount": "1000.000000000000",
        "spent": "456.000000000000",
        "remaining": "544.000000000000",
        "percent": "45.6000",
        "state": "ok",
        "level": 0,
        "projected": "1440.000000000000",
        "projected_low": "1440.000000000000",
        "projected_high": "1440.000000000000",
        "projected_exceed_at": "2026-11-21T20:00:00Z",
        "forecast_exceeds": True,
        "cost_complete": True,
        "unpriced_attempts": 0,
        "unpriced_tokens": 0,
        "as_of": "2026-11-10T12:00:00Z",
    }


def test_a_budget_whose_scope_has_unpriced_usage_says_so(client, db):
    """Through the real pipeline: ingested attempts, costed by the engine, one model unpriced."""
    catalog_load(cost_world.CATALOG)
    H = cost_world.H
    cost_world.load(
        cost_world.attempt(1),
        cost_world.attempt(
            2, model="mistral", endpoint="mistral-api", prompt_tokens=300, completion_tokens=50
        ),
        cost_world.attempt(3, team="b"),
    )
    recompute(now=H + timedelta(hours=2), since=H)
    alice = make_user("alice", teams={"a": TeamRole.EDITOR})
    budget = budget_of("a", "team-a", amount="1")
    with time_machine.travel(H + timedelta(hours=2), tick=False):
        data = call(client, alice, "get", reverse("cc-api-budget-status", kwargs={"pk": budget.pk})).json()
    assert data["cost_complete"] is False
    assert (data["unpriced_attempts"], data["unpriced_tokens"]) == (1, 350)
    assert data["spent"] == "0.000210000000"  # the priced attempt only: (1000 × 0.15 + 100 × 0.60) / 1e6
    page_client = client
    page_client.force_login(alice)
    with time_machine.travel(H + timedelta(hours=2), tick=False):
        page = page_client.get(reverse("cc-budget", kwargs={"pk": budget.pk})).content.decode()
    assert "1 unpriced attempt" in page and "lower bound" in page


def test_alert_rules_over_the_api_follow_the_same_rules(client, people):
    alice, bob = people["alice"], people["bob"]
    body = {
        "name": "pricey",
        "team": "netops",
        "kind": "cost_per_task_above",
        "threshold": "0.05",
        "window_hours": 6,
    }
    created = call(client, alice, "post", reverse("cc-api-alert-rules"), body)
    assert created.status_code == 201 and created.json()["state"] == "ok"
    assert (
        call(client, bob, "post", reverse("cc-api-alert-rules"), body | {"team": "support"}).status_code
        == 403
    )
    theirs = AlertRule.objects.create(
        name="t",
        team=Team.objects.get(slug="support"),
        kind="retry_rate_above",
        threshold=5,
        signing_secret="x",
    )
    assert (
        call(client, alice, "get", reverse("cc-api-alert-rule", kwargs={"pk": theirs.pk})).status_code == 404
    )
    assert [r["name"] for r in call(client, alice, "get", reverse("cc-api-alert-rules")).json()] == ["pricey"]
    bad = call(client, alice, "post", reverse("cc-api-alert-rules"), body | {"kind": "vibes"})
    assert bad.status_code == 400


def test_alert_events_are_listed_with_notifications_and_acknowledged_by_team_members(
    client, people, settings
):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    ours = budget_of("netops", "ours")
    ours.emails = ["lead@netops.test"]
    ours.save()
    theirs = budget_of("support", "theirs")
    with time_machine.travel(NOW, tick=False):
        spend({NOV_1: Decimal(60)})
        spend({NOV_1: Decimal(90)}, team="support")
        evaluate_all(budget_ids=[ours.pk, theirs.pk])
    alice, bob = people["alice"], people["bob"]
    listed = call(client, alice, "get", reverse("cc-api-alerts") + "?state=firing").json()
    assert [(e["title"], e["team"]) for e in listed] == [
        ("Budget ours (team netops): 50 % threshold crossed", "netops")
    ]
    assert listed[0]["notifications"][0] | {"next_attempt_at": None} == {
        "channel": "email",
        "target": "lead@netops.test",
        "status": "pending",
        "attempts": 0,
        "sent_at": None,
        "next_attempt_at": None,
        "last_error": "",
    }
    their_event = AlertEvent.objects.get(budget=theirs)
    ack = reverse("cc-api-alert-ack", kwargs={"pk": their_event.pk})
    assert call(client, alice, "post", ack).status_code == 404  # not her team
    response = call(client, bob, "post", ack)  # a viewer is a member: he may acknowledge
    assert response.status_code == 200 and response.json()["acknowledged_by"] == "bob"
    assert call(client, people["carol"], "post", ack).status_code == 403  # sees it, is no member


def test_team_roles_decide_who_changes_a_teams_budgets_and_rules(client, people):
    """Team editors and admins manage their team's budgets and rules; a team viewer reads them
    and gets 403 on every write; only org admins own org-wide (team-less) ones."""
    tess = make_user("tess", teams={"netops": TeamRole.ADMIN})
    bob, alice, root = people["bob"], people["alice"], people["root"]
    rule_body = {"name": "r", "kind": "retry_rate_above", "threshold": "5", "window_hours": 6}
    # A team admin: the whole cycle on their team's budget and rule.
    made = call(client, tess, "post", reverse("cc-api-budgets"), BODY)
    assert made.status_code == 201
    budget_url = reverse("cc-api-budget", kwargs={"pk": made.json()["id"]})
    assert call(client, tess, "patch", budget_url, {"amount": "9"}).json()["amount"] == "9.000000000000"
    rule = call(client, tess, "post", reverse("cc-api-alert-rules"), rule_body | {"team": "netops"})
    assert rule.status_code == 201
    assert (
        call(
            client, tess, "delete", reverse("cc-api-alert-rule", kwargs={"pk": rule.json()["id"]})
        ).status_code
        == 204
    )
    # A team viewer sees the team's budget and rule but changes neither.
    theirs = budget_of("support", "support-monthly")
    their_rule = AlertRule.objects.create(
        name="s",
        team=Team.objects.get(slug="support"),
        kind="retry_rate_above",
        threshold=5,
        signing_secret="x",
    )
    for url in (
        reverse("cc-api-budget", kwargs={"pk": theirs.pk}),
        reverse("cc-api-alert-rule", kwargs={"pk": their_rule.pk}),
    ):
        assert call(client, bob, "get", url, scope="read").status_code == 200
        assert call(client, bob, "patch", url, {"name": "mine"}).status_code == 403
        assert call(client, bob, "delete", url).status_code == 403
    assert Budget.objects.get(pk=theirs.pk).name == "support-monthly"
    assert AlertRule.objects.get(pk=their_rule.pk).name == "s"
    # A team editor cannot turn a team budget into an org-wide one, nor create an org-wide rule.
    assert call(client, alice, "patch", budget_url, {"team": None}).status_code == 403
    assert Budget.objects.get(pk=made.json()["id"]).team.slug == "netops"
    assert (
        call(client, alice, "post", reverse("cc-api-alert-rules"), rule_body | {"team": None}).status_code
        == 403
    )
    org_rule = call(client, root, "post", reverse("cc-api-alert-rules"), rule_body | {"team": None})
    assert org_rule.status_code == 201 and org_rule.json()["team"] is None
    org_rule_url = reverse("cc-api-alert-rule", kwargs={"pk": org_rule.json()["id"]})
    assert call(client, alice, "get", org_rule_url).status_code == 404  # org-wide: not hers to see
    # Nobody signed in: 401 before anything else.
    assert (
        client.post(reverse("cc-api-alert-rules"), rule_body, content_type="application/json").status_code
        == 401
    )
    assert AlertRule.objects.filter(name="r").count() == 1  # only the org admin's
