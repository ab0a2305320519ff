"""Budgets in the catalog YAML: loaded idempotently, in place, all or nothing, with field paths."""

from __future__ import annotations

from decimal import Decimal

import pytest

from costcenter.catalog import CatalogError, catalog_load
from costcenter.models import Budget, Team
from tests.conftest import EXAMPLE_CATALOG

pytestmark = pytest.mark.django_db

CATALOG = """
teams: [{slug: netops, name: Network Ops}]
budgets:
  - {name: netops-monthly, scope: {team: netops}, period: month, amount: "5000", thresholds: [50, 80, 100],
     notify: {emails: [lead@example.com], webhooks: [https://hooks.example.com/x]}}
  - name: gpt-weekly
    scope: {team: netops, model: [gpt-4o-mini, gpt-4.1], vendor: amd}
    period: week
    time_zone: Europe/Berlin
    amount: 250.50
    thresholds: [90, 25]
    forecast: false
    notify:
      webhooks: [{url: "https://hooks.slack.invalid/T0/B0", format: slack}]
  - {name: everything, amount: "100000", period: quarter}
"""


def test_it_loads_budgets_with_scope_period_thresholds_and_channels():
    report = catalog_load(CATALOG)
    assert report.created == {"teams": 1, "budgets": 3}
    monthly = Budget.objects.get(name="netops-monthly")
    assert monthly.team == Team.objects.get(slug="netops") and monthly.scope == {}
    assert (monthly.period, monthly.time_zone, monthly.amount) == ("month", "UTC", Decimal("5000"))
    assert monthly.thresholds == [50, 80, 100] and monthly.forecast_alert is True
    assert monthly.emails == ["lead@example.com"]
    assert monthly.webhooks == [{"url": "https://hooks.example.com/x", "format": "json"}]
    assert monthly.from_catalog and len(monthly.signing_secret) == 64
    weekly = Budget.objects.get(name="gpt-weekly")
    assert weekly.scope == {"model": ["gpt-4o-mini", "gpt-4.1"], "vendor": ["amd"]}
    assert (weekly.period, weekly.time_zone, weekly.amount) == ("week", "Europe/Berlin", Decimal("250.50"))
    assert weekly.thresholds == [25, 90] and weekly.forecast_alert is False
    assert weekly.webhooks == [{"url": "https://hooks.slack.invalid/T0/B0", "format": "slack"}]
    everything = Budget.objects.get(name="everything")
    assert everything.team is None and everything.period == "quarter"


def test_loading_twice_changes_nothing_and_keeps_ids_and_secrets():
    catalog_load(CATALOG)
    before = {b.name: (b.pk, b.signing_secret, b.updated_at) for b in Budget.objects.all()}
    report = catalog_load(CATALOG)
    assert not report.changed and report.summary() == "catalog unchanged"
    assert {b.name: (b.pk, b.signing_secret, b.updated_at) for b in Budget.objects.all()} == before


def test_a_changed_budget_is_updated_in_place():
    catalog_load(CATALOG)
    budget = Budget.objects.get(name="netops-monthly")
    report = catalog_load(CATALOG.replace('amount: "5000"', 'amount: "6000"'))
    assert report.updated == {"budgets": 1} and report.created == {}
    budget_after = Budget.objects.get(name="netops-monthly")
    assert budget_after.pk == budget.pk and budget_after.amount == Decimal("6000")
    assert budget_after.signing_secret == budget.signing_secret


def test_the_example_catalog_budget_loads():
    report = catalog_load(EXAMPLE_CATALOG.read_text())
    assert report.created["budgets"] == 1
    assert "budgets: 1 created" in report.summary()


@pytest.mark.parametrize(
    ("change", "problems"),
    [
        (('amount: "5000"', 'amount: "-5"'), ["budgets[0].amount: must be a positive decimal"]),
        (('amount: "5000"', "amount: 0"), ["budgets[0].amount: must be a positive decimal"]),
        (
            ("period: month", "period: fortnight"),
            ["budgets[0].period: must be one of: day, week, month, quarter"],
        ),
        (
            ("thresholds: [50, 80, 100]", "thresholds: [50, fifty]"),
            ["budgets[0].thresholds: 'fifty' is not a whole percentage"],
        ),
        (("scope: {team: netops}", "scope: {team: nope}"), ["budgets[0].scope.team: unknown team 'nope'"]),
        (
            ("scope: {team: netops}", "scope: {team: netops, colour: red}"),
            [
                "budgets[0].scope: unknown dimension 'colour' (expected one of: workload, model, vendor, endpoint, pool)"
            ],
        ),
        (
            ("emails: [lead@example.com]", "emails: [not-an-address]"),
            ["budgets[0].notify.emails: 'not-an-address' is not an e-mail address"],
        ),
        (
            ("webhooks: [https://hooks.example.com/x]", "webhooks: [ftp://x]"),
            ["budgets[0].notify.webhooks: 'ftp://x' is not an http(s) URL"],
        ),
        (
            ("time_zone: Europe/Berlin", "time_zone: Mars/Olympus"),
            ["budgets[1].time_zone: unknown time zone 'Mars/Olympus'"],
        ),
        (
            ("name: gpt-weekly", "name: netops-monthly"),
            ["budgets[1].name: 'netops-monthly' is already defined at budgets[0]"],
        ),
        (
            ("period: month,", "period: month, colour: red,"),
            [
                "budgets[0].colour: unknown key (expected one of: amount, forecast, name, notify, period, scope, thresholds, time_zone)"
            ],
        ),
        (("forecast: false", "forecast: maybe"), ["budgets[1].forecast: must be true or false"]),
    ],
)
def test_a_bad_budget_is_reported_by_field_path_and_nothing_changes(change, problems):
    with pytest.raises(CatalogError) as raised:
        catalog_load(CATALOG.replace(*change))
    assert raised.value.problems == problems
    assert not Budget.objects.exists() and not Team.objects.exists()
