"""The dashboard pages on a small demo fleet: every page renders its charts from the same
selectors as the API, is scoped to the viewer's teams, runs a pinned number of queries, and
explains empty states.

The demo (3 days, ~800 attempts, GPU metrics) is loaded once for the module and committed, then
flushed at the end, so each test only reads.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import override_settings
from django.urls import reverse

from costcenter.models import OrgRole, TeamRole
from costcenter.selectors import CostQuery, cost_rows, cost_totals
from tests.conftest import EXAMPLE_CATALOG, PASSWORD, make_user

pytestmark = pytest.mark.django_db

FAST_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # as conftest sets per test
NOW = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
PAGES = ("cc-overview", "cc-explorer", "cc-models-hardware", "cc-fleet", "cc-cost-change", "cc-ingestion")
# page → (context key of the figure, id of its json_script block and [data-chart] element)
CHARTS = {
    "cc-overview": [("spend_chart", "spend-chart"), ("gpus_chart", "gpus-chart")],
    "cc-explorer": [("chart", "explorer-chart")],
    "cc-models-hardware": [("chart", "matrix-chart")],
    "cc-fleet": [("utilisation_chart", "utilisation-chart"), ("cost_chart", "fleet-cost-chart")],
    "cc-cost-change": [("chart", "waterfall-chart")],
    "cc-ingestion": [("chart", "ingestion-chart")],
}


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker, tmp_path_factory):
    """The example catalog, users alice/bob/carol/root and 3 days of demo usage with GPU metrics."""
    from costcenter.catalog import catalog_load
    from costcenter.costing import recompute

    with django_db_blocker.unblock(), override_settings(PASSWORD_HASHERS=FAST_HASHERS):
        catalog_load(EXAMPLE_CATALOG.read_text(), source=str(EXAMPLE_CATALOG))
        make_user("alice", teams={"netops": TeamRole.EDITOR})
        make_user("bob", teams={"support": TeamRole.VIEWER})
        make_user("carol", org_role=OrgRole.VIEWER)
        make_user("root", is_superuser=True, is_staff=True)
        directory = Path(tmp_path_factory.mktemp("demo"))
        call_command("demo", days=3, attempts_per_day=300, now=NOW, dir=directory, stdout=io.StringIO())
        recompute(now=NOW)
    yield directory
    with django_db_blocker.unblock():
        call_command("flush", interactive=False, verbosity=0)
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE ingest_attempt")


def login(client, username: str):
    assert client.login(username=username, password=PASSWORD)
    return client


def chart_traces(figure: dict) -> list[dict]:
    return [trace for trace in figure["data"] if trace.get("x") or trace.get("y")]


def week_ago() -> datetime:
    return NOW - timedelta(days=6)


# --- Every page, a manager ------------------------------------------------------------------------


@pytest.mark.parametrize("name", PAGES)
def test_every_page_draws_its_charts_with_data_for_a_manager(world, client, name):
    login(client, "carol")
    response = client.get(reverse(name))
    assert response.status_code == 200
    page = response.content.decode()
    for key, element in CHARTS[name]:
        figure = response.context[key]
        assert figure is not None, key
        assert chart_traces(figure), key
        # The figure is embedded as data for static/js/charts.js, never as a script.
        assert (
            f'data-chart="{element}"' in page and f'<script id="{element}" type="application/json">' in page
        )
    assert "<script>" not in page and "onclick=" not in page


def test_the_overview_kpis_are_the_selectors_totals(world, client):
    login(client, "carol")
    response = client.get(reverse("cc-overview"), {"period": "7d"})
    data = response.context["data"]
    today = NOW.replace(hour=0)
    totals = cost_totals(
        user=response.wsgi_request.user,
        query=CostQuery(today - timedelta(days=6), today + timedelta(days=1)),
    )
    kpis = {kpi.key: kpi for kpi in data.kpis}
    assert kpis["spend"].value == totals["total_spend"] > 0
    assert kpis["successful_tasks"].value == totals["successful_tasks"] > 0
    assert kpis["cost_per_successful_task"].value == totals["cost_per_successful_task"]
    assert kpis["unallocated_cost"].value == totals["unallocated_cost"]
    assert kpis["unpriced_attempts"].value == totals["unpriced_attempts"] > 0  # mistral is unpriced
    assert kpis["spend"].incomplete
    # The stacked bars add up to the spend tile (attempt cost plus unallocated pool cost).
    drawn = sum(sum(trace["y"]) for trace in response.context["spend_chart"]["data"])
    assert drawn == pytest.approx(float(totals["total_spend"]), rel=1e-9)
    page = response.content.decode()
    assert "Unallocated pool cost" in page
    # No usage the week before (only idle pools): changes from zero are "—", never +∞.
    assert kpis["successful_tasks"].previous == 0 and kpis["successful_tasks"].change is None
    assert kpis["spend"].previous == kpis["unallocated_cost"].previous > 0


def test_the_overview_top_movers_link_to_the_explorer(world, client):
    login(client, "carol")
    response = client.get(reverse("cc-overview"), {"period": "7d", "stack_by": "team"})
    movers = response.context["data"].movers
    assert {mover.label for mover in movers} >= {"netops", "support"}
    target = movers[0]
    assert target.url.startswith(reverse("cc-explorer"))
    assert f"team={target.value}" in target.url and "group_by=model" in target.url
    assert client.get(target.url).status_code == 200


def test_the_overview_shows_budget_status_to_those_who_see_the_budget(world, client):
    login(client, "carol")
    response = client.get(reverse("cc-overview"))
    (budget, status, scope, width), *_ = response.context["budgets"]
    assert budget.name == "netops-monthly" and status.amount == Decimal("5000")
    assert status.spent > 0 and 0 <= width <= 100
    assert "netops-monthly" in response.content.decode()
    login(client, "bob")
    page = client.get(reverse("cc-overview")).content.decode()
    assert "netops-monthly" not in page and "No budget yet" in page


def test_the_overview_still_shows_the_catalog(world, client):
    login(client, "carol")
    page = client.get(reverse("cc-overview")).content.decode()
    for text in ("Catalog", "h100-a", "mi300x-b", "gpt-4o-mini", "Top movers", "Budgets"):
        assert text in page


# --- Page and API agree ---------------------------------------------------------------------------


def test_the_explorer_rows_and_csv_are_the_apis(world, client):
    login(client, "carol")
    start, end = week_ago().date().isoformat(), NOW.date().isoformat()
    params = {
        "period": "custom",
        "start": start,
        "end": end,
        "group_by": "team,model",
        "granularity": "total",
    }
    response = client.get(reverse("cc-explorer"), params)
    api = client.get(
        reverse("cc-api-costs"),
        {"start": start, "end": (NOW + timedelta(days=1)).date().isoformat(), "group_by": "team,model"},
    ).json()
    assert api and len(response.context["rows"]) == len(api)
    download = client.get(reverse("cc-explorer"), {**params, "format": "csv"})
    assert download["Content-Type"].startswith("text/csv")
    assert "attachment" in download["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(download.content.decode())))
    by_key = {(row["team"], row["model"]): row for row in api}
    assert len(rows) == len(api)
    for row in rows:
        expected = by_key[(row["team"], row["model"])]
        for field in ("attempts", "successful_tasks", "prompt_tokens", "unpriced_attempts"):
            assert int(row[field]) == expected[field]
        assert row["cost"] == (expected["cost"] or "")  # unrounded decimal strings, like the API
        if expected["cost_per_successful_task"] is not None:
            assert Decimal(row["cost_per_successful_task"]) == Decimal(expected["cost_per_successful_task"])
    # The footer is the range's total, which the rows add up to exactly.
    totals = response.context["totals"]
    assert totals["cost"] == sum(Decimal(row["cost"]) for row in api if row["cost"] is not None)


def test_the_explorer_keeps_its_state_in_the_url_and_sorts(world, client):
    login(client, "carol")
    params = {
        "period": "7d",
        "group_by": ["workload", "model"],
        "granularity": "day",
        "team": ["netops", "support"],
        "metric": "successful_tasks",
        "sort": "-attempts",
    }
    response = client.get(reverse("cc-explorer"), params)
    query = response.context["query"]
    assert query.group_by == ("workload", "model")
    assert query.filters == (("team", ("netops", "support")),)
    page = response.content.decode()
    assert '<option value="netops" selected>' in page and '<option value="day" selected>' in page
    attempts = [cells[0][0] for cells in (row["cells"] for row in response.context["rows"])]
    assert attempts == sorted(attempts, reverse=True)
    # The sort link of the active column flips its direction; the others sort descending first.
    columns = {name: url for name, _, _, url, _, _ in response.context["columns"]}
    assert "sort=attempts" in columns["attempts"] and "sort=-cost" in columns["cost"]
    ascending = client.get(columns["attempts"])
    values = [row["cells"][0][0] for row in ascending.context["rows"]]
    assert values == sorted(values)
    # Every workload shown belongs to the two teams.
    assert {row["groups"][0][1] for row in response.context["rows"]} <= {
        "summarize",
        "classify",
        "chat",
        "extract",
    }


def test_an_explorer_drill_down_filters_and_groups_by_the_next_dimension(world, client):
    login(client, "carol")
    response = client.get(
        reverse("cc-explorer"), {"period": "7d", "group_by": "team", "granularity": "total"}
    )
    netops = next(row for row in response.context["rows"] if row["groups"][0][1] == "netops")
    url = netops["groups"][0][2]
    drilled = client.get(url)
    assert drilled.context["query"].group_by == ("model",)
    assert drilled.context["query"].filters == (("team", ("netops",)),)
    models = {row["groups"][0][1] for row in drilled.context["rows"]}
    assert models == {"llama-3.1-70b-instruct-awq", "llama-3.1-8b-instruct", "gpt-4o-mini"} or models <= {
        "llama-3.1-70b-instruct-awq",
        "llama-3.1-8b-instruct",
        "gpt-4o-mini",
    }


def test_bad_parameters_fall_back_to_defaults_with_a_message(world, client):
    login(client, "carol")
    response = client.get(
        reverse("cc-explorer"),
        {
            "period": "fortnight",
            "group_by": "colour",
            "granularity": "minute",
            "sort": "price",
            "metric": "x",
        },
    )
    assert response.status_code == 200
    problems = " ".join(response.context["problems"])
    for word in ("period", "group_by", "granularity", "sort", "metric"):
        assert word in problems
    page = client.get(reverse("cc-overview"), {"period": "custom", "start": "2026-13-01", "end": "x"})
    assert page.status_code == 200 and "is not a date" in page.content.decode()


def test_an_empty_filter_result_says_what_to_do(world, client):
    login(client, "carol")
    page = client.get(reverse("cc-explorer"), {"period": "7d", "model": "no-such-model"}).content.decode()
    assert "No usage matches these filters" in page and "Remove a filter" in page
    long_ago = {"period": "custom", "start": "2020-01-01", "end": "2020-01-31"}
    assert "No usage in this period yet" in client.get(reverse("cc-overview"), long_ago).content.decode()
    assert "No usage to compare" in client.get(reverse("cc-models-hardware"), long_ago).content.decode()
    assert "No GPU metrics in this period" in client.get(reverse("cc-fleet"), long_ago).content.decode()
    change = client.get(
        reverse("cc-cost-change"),
        {
            "before_start": "2020-01-01",
            "before_end": "2020-01-07",
            "after_start": "2020-01-08",
            "after_end": "2020-01-14",
        },
    ).content.decode()
    assert "No spend in either period" in change


# --- Models × hardware ----------------------------------------------------------------------------


def test_the_matrix_marks_the_best_cell_of_each_column(world, client):
    login(client, "carol")
    response = client.get(reverse("cc-models-hardware"), {"period": "7d"})
    lines = response.context["lines"]
    assert len(lines) >= 6
    columns = response.context["columns"]
    index = next(i for i, column in enumerate(columns) if column.attr == "cost_per_successful_task")
    values = [line.cells[index].value for line in lines if line.cells[index].value is not None]
    best = [line for line in lines if line.cells[index].best]
    assert best and all(line.cells[index].value == min(values) for line in best)
    assert all(line.cells[index].heat == 4 for line in best)
    page = response.content.decode()
    assert "★" in page and "(best)" in page
    pools = {line.row.pool for line in lines if line.row.pool}
    assert pools == {"h100-a", "mi300x-b"}
    summarize = client.get(reverse("cc-models-hardware"), {"period": "7d", "workload": "summarize"})
    assert {line.row.model for line in summarize.context["lines"]} <= {
        "llama-3.1-70b-instruct-awq",
        "gpt-4o-mini",
    }


# --- GPU fleet ------------------------------------------------------------------------------------


def test_the_fleet_shows_utilisation_energy_and_an_under_used_pool(world, client):
    login(client, "carol")
    response = client.get(reverse("cc-fleet"), {"period": "7d"})
    pools = {pool.name: pool for pool in response.context["data"].pools}
    h100, mi300 = pools["h100-a"], pools["mi300x-b"]
    for pool in (h100, mi300):
        assert pool.mean_utilisation is not None and pool.energy_kwh and pool.tokens
        assert len(pool.gpus) == 8
        assert pool.tokens_per_kwh > 0 and pool.tokens_per_gpu_hour > 0
        assert pool.effective_cost_per_gpu_hour > pool.cost_per_gpu_hour
        assert 0 < pool.idle_cost < pool.pool_cost
    # The MI300X pool carries little traffic in the demo: flagged under-used.
    assert mi300.under_used and not h100.under_used
    assert "under-used" in response.content.decode()


def test_a_team_member_sees_only_their_teams_share_of_the_pools(world, client):
    login(client, "bob")
    response = client.get(reverse("cc-fleet"), {"period": "7d"})
    data = response.context["data"]
    assert not data.org_wide
    # Support runs qwen on the MI300X pool only; its share, not the pool's cost.
    assert [pool.name for pool in data.pools] == ["mi300x-b"]
    assert data.pools[0].pool_cost is None and data.pools[0].cost > 0 and not data.pools[0].gpus
    assert response.context["utilisation_chart"] is None


# --- Cost change and ingestion --------------------------------------------------------------------


def test_the_cost_change_waterfall_adds_up_and_explains_the_largest_effect(world, client):
    login(client, "carol")
    before = (NOW - timedelta(days=2)).date()
    after = (NOW - timedelta(days=1)).date()
    response = client.get(
        reverse("cc-cost-change"),
        {"before_start": before, "before_end": before, "after_start": after, "after_end": after},
    )
    result = response.context["result"]
    assert sum(effect.amount for effect in result.effects) == result.change
    figure = response.context["chart"]
    assert figure["data"][0]["measure"][0] == "absolute" and len(figure["data"][0]["x"]) == 9
    assert result.explanation.startswith("Spend ") and result.explanation in response.content.decode()
    scoped = client.get(
        reverse("cc-cost-change"),
        {
            "before_start": before,
            "before_end": before,
            "after_start": after,
            "after_end": after,
            "team": "netops",
        },
    )
    assert scoped.context["result"].after_spend < result.after_spend
    assert not scoped.context["result"].unallocated_included


def test_ingestion_health_shows_rejects_unpriced_models_and_unmatched_gpus(world, client):
    login(client, "root")
    response = client.get(reverse("cc-ingestion"))
    data = response.context["data"]
    page = response.content.decode()
    assert [source.name for source in data.sources] == ["demo"]
    assert data.sources[0].accepted > 700 and data.sources[0].rejected == 4
    assert {row["reason"].split(":")[0] for row in data.reasons} >= {"usage.prompt_tokens", "startTime"}
    assert all(row["example"] is not None for row in data.reasons)
    assert [row["model"] for row in data.unpriced] == ["mistral-large-2411"]
    assert "Add a price" in page and "/admin/costcenter/llmmodel/" in page
    # The spare demo node is in no pool.
    assert "gpu-node-c1" in page and "1 GPU matches no pool" in page


# --- Scoping: every page ------------------------------------------------------------------------


@pytest.mark.parametrize("name", PAGES)
def test_a_team_member_editing_the_url_to_another_team_gets_404(world, client, name):
    login(client, "bob")
    assert client.get(reverse(name), {"team": "netops"}).status_code == 404
    assert client.get(reverse(name), {"team": "no-such-team"}).status_code == 404
    assert client.get(reverse(name), {"team": "support"}).status_code == 200


@pytest.mark.parametrize("name", PAGES)
def test_a_team_member_sees_nothing_of_other_teams(world, client, name):
    login(client, "bob")
    page = client.get(reverse(name), {"period": "7d"}).content.decode()
    # netops runs summarize/classify on llama-3.1-70b; none of it may show up for bob.
    assert "summarize" not in page.replace('value="summarize"', "").replace(">summarize<", "")
    assert "llama-3.1-70b-instruct-awq" not in page.split('id="catalog"')[0].replace(
        '<option value="llama-3.1-70b-instruct-awq">llama-3.1-70b-instruct-awq</option>', ""
    )


def test_a_team_members_numbers_are_their_teams_only(world, client):
    login(client, "bob")
    response = client.get(reverse("cc-overview"), {"period": "7d"})
    bob = response.wsgi_request.user
    today = NOW.replace(hour=0)
    query = CostQuery(today - timedelta(days=6), today + timedelta(days=1), ("team",))
    assert {row["team"] for row in cost_rows(user=bob, query=query)} == {"support"}
    kpis = {kpi.key: kpi for kpi in response.context["data"].kpis}
    support = cost_rows(user=bob, query=query)[0]
    assert kpis["spend"].value == support["cost"]
    assert kpis["unallocated_cost"].value is None  # pool cost that no team used is not bob's
    explorer = client.get(
        reverse("cc-explorer"), {"period": "7d", "group_by": "team", "granularity": "total"}
    )
    assert [row["groups"][0][1] for row in explorer.context["rows"]] == ["support"]
    matrix = client.get(reverse("cc-models-hardware"), {"period": "7d"})
    assert "llama-3.1-70b-instruct-awq" not in {line.row.model for line in matrix.context["lines"]}
    ingestion = client.get(reverse("cc-ingestion"))
    assert ingestion.context["data"].sources == [] and "org-wide viewers" in ingestion.content.decode()


# --- Rollups only: pinned query counts ----------------------------------------------------------

QUERY_COUNTS = {
    # Session, user and profile (3), then the page's own reads: rollup aggregates whose size
    # depends on groups and buckets, never on attempts, and the catalog names the filters offer.
    # 2 × totals (usage + pools), by-day rows, pools by day, budgets + the one budget's status, catalog (8)
    ("cc-overview", "carol"): 19,
    ("cc-explorer", "carol"): 11,  # rows, totals (usage + pools), filter options (5)
    ("cc-models-hardware", "carol"): 5,  # workloads, the matrix (facts and histograms of the daily rows)
    ("cc-fleet", "carol"): 13,  # pools, usage by pool, pool totals, pools by day, GPUs, options (5)
    ("cc-cost-change", "carol"): 14,  # 2 × per-model reads, 2 × totals (usage + pools), options (5)
    # unpriced, runs, sources, per day, reasons, examples, Prometheus (6), retention panel (1)
    ("cc-ingestion", "carol"): 17,
    ("cc-overview", "bob"): 15,  # no pool reads for a team member; netops' budget is not his
    ("cc-explorer", "bob"): 10,
    ("cc-models-hardware", "bob"): 5,
    ("cc-fleet", "bob"): 10,
    ("cc-cost-change", "bob"): 12,
    ("cc-ingestion", "bob"): 4,  # only the team's unpriced usage
}


@pytest.mark.parametrize(("name", "username"), list(QUERY_COUNTS))
def test_each_page_runs_a_fixed_number_of_queries(world, client, django_assert_num_queries, name, username):
    login(client, username)
    client.get(reverse(name))  # warm the session
    with django_assert_num_queries(QUERY_COUNTS[(name, username)]):
        assert (
            client.get(reverse(name), {"period": "7d"} if name != "cc-cost-change" else {}).status_code == 200
        )


def test_chart_labels_are_data_not_html(world, client):
    from costcenter.charts import _text

    assert _text("<img src=x onerror=alert(1)>") == "&lt;img src=x onerror=alert(1)&gt;"
    login(client, "carol")
    figure = client.get(reverse("cc-overview"), {"period": "7d"}).context["spend_chart"]
    assert json.dumps(figure)  # a plain object for json_script
