"""GET /api/v1/costs/ and /api/v1/pools/costs/: the contract, hand-computed numbers,
reconciliation of every grouping with the total, and team scoping."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from itertools import combinations

import pytest

from costcenter.catalog import catalog_load
from costcenter.costing import recompute
from costcenter.models import TeamRole
from costcenter.selectors import GROUP_FIELDS, CostQuery, cost_rows, cost_totals
from costcenter.tokens import api_token_create
from tests.conftest import make_user
from tests.cost_world import CATALOG, H, attempt, load

pytestmark = pytest.mark.django_db

RANGE = {"start": "2026-11-02T00:00:00Z", "end": "2026-11-03T00:00:00Z"}


@pytest.fixture
def world():
    catalog_load(CATALOG)
    load(
        # team a: token-priced mini, one retry (failed then succeeded), before the 10:30 price change
        attempt(1, task="t1", status="failure", http_status=500, completion_tokens=0),
        attempt(2, task="t1", attempt_no=2, minute=6),
        # team a on the h100 pool (1200 weighted tokens), team b on the h100 pool (800)
        attempt(3, task="t2", model="llama", endpoint="vllm-1", prompt_tokens=1000, completion_tokens=200),
        attempt(
            4, task="t3", model="llama", endpoint="vllm-2", team="b", prompt_tokens=600, completion_tokens=200
        ),
        # team b: a fallback — failed on the mi300 pool, then succeeded on mini after 10:30
        attempt(
            5, task="t4", model="llama", endpoint="amd-1", team="b", status="failure", completion_tokens=0
        ),
        attempt(6, task="t4", attempt_no=2, minute=40, team="b"),
        # unpriced: an endpoint and model nobody priced
        attempt(
            7, task="t5", model="mistral", endpoint="mistral-api", prompt_tokens=300, completion_tokens=50
        ),
    )
    recompute(now=H + timedelta(hours=2), since=H)
    return {
        "alice": make_user("alice", teams={"a": TeamRole.EDITOR}),
        "bob": make_user("bob", teams={"b": TeamRole.VIEWER}),
        "carol": make_user("carol", org_role="viewer"),
    }


def get(client, user, path, **params):
    _, token = api_token_create(user=user, scope="read")
    return client.get(path, {**RANGE, **params}, HTTP_AUTHORIZATION=f"Bearer {token}")


def test_the_costs_contract_with_hand_computed_numbers(client, world):
    response = get(client, world["carol"], "/api/v1/costs/", group_by="team,model")
    assert response.status_code == 200
    rows = {(row["team"], row["model"]): row for row in response.json()}
    a_mini = rows[("a", "mini")]
    # 1000 × 0.15 / 1e6 (failed, but it reported usage) + (1000 × 0.15 + 100 × 0.60) / 1e6
    assert Decimal(a_mini["cost"]) == Decimal("0.00036")
    assert (a_mini["attempts"], a_mini["tasks"], a_mini["successful_tasks"]) == (2, 1, 1)
    assert (
        a_mini["retry_rate"] == 1.0
        and a_mini["success_rate"] == 1.0
        and a_mini["attempt_success_rate"] == 0.5
    )
    assert Decimal(a_mini["cost_per_successful_task"]) == Decimal("0.00036")
    # The h100 hour (2 × 2.50) split 1200:800 between a and b; b's mi300 hour (4 × 1.50) is all b's.
    assert Decimal(rows[("a", "llama")]["cost"]) == Decimal("3")
    b_llama = rows[("b", "llama")]
    assert Decimal(b_llama["cost"]) == Decimal("2") + Decimal("6")
    assert (b_llama["tasks"], b_llama["successful_tasks"]) == (2, 1)
    # b's fallback succeeded on mini after 10:30: (1000 × 0.20 + 100 × 0.80) / 1e6
    assert Decimal(rows[("b", "mini")]["cost"]) == Decimal("0.00028")
    unpriced = rows[("a", "mistral")]
    assert unpriced["cost"] is None and unpriced["cost_complete"] is False
    assert (unpriced["unpriced_attempts"], unpriced["unpriced_tokens"]) == (1, 350)
    assert unpriced["cost_per_successful_task"] is None
    assert set(a_mini) >= {
        "attempts", "successful_attempts", "tasks", "successful_tasks", "prompt_tokens", "completion_tokens",
        "cached_tokens", "cost", "cost_per_successful_task", "success_rate", "attempt_success_rate", "retry_rate",
        "unpriced_attempts", "unpriced_tokens", "idle_cost",
    }  # fmt: skip


def test_every_grouping_reconciles_with_the_total(world):
    user = world["carol"]
    total = cost_totals(user=user, query=CostQuery(H - timedelta(hours=10), H + timedelta(hours=14)))
    # Attempt costs 0.00036 + 3 + 8 + 0.00028 = 11.00064; both pools were fully used in hour H.
    # Costing ran from H to "now" (H + 2 h): hour H + 1 is idle, 5.00 + 6.00 unallocated.
    assert total["cost"] == Decimal("11.00064")
    assert total["unallocated_cost"] == Decimal("11")
    assert total["total_spend"] == Decimal("22.00064")
    for size in (1, 2):
        for group_by in combinations(GROUP_FIELDS, size):
            query = CostQuery(H - timedelta(hours=10), H + timedelta(hours=14), group_by)
            rows = cost_rows(user=user, query=query)
            assert sum((row["cost"] or 0 for row in rows), Decimal(0)) == total["cost"], group_by
            assert sum(row["attempts"] for row in rows) == 7
            assert sum(row["unpriced_attempts"] for row in rows) == 1


def test_buckets_by_hour_and_day(client, world):
    hourly = get(client, world["carol"], "/api/v1/costs/", granularity="hour").json()
    assert [row["period"] for row in hourly] == ["2026-11-02T10:00:00Z"]
    daily = get(client, world["carol"], "/api/v1/costs/", granularity="day").json()
    assert [row["period"] for row in daily] == ["2026-11-02T00:00:00Z"]
    assert daily[0]["cost"] == hourly[0]["cost"]


def test_team_members_see_only_their_teams(client, world):
    alice = {row["team"] for row in get(client, world["alice"], "/api/v1/costs/", group_by="team").json()}
    bob = {row["team"] for row in get(client, world["bob"], "/api/v1/costs/", group_by="team").json()}
    assert alice == {"a"} and bob == {"b"}
    # Asking for another team's rows gives nothing, not an error that confirms it exists.
    assert get(client, world["alice"], "/api/v1/costs/", group_by="team", team="b").json() == []
    # Pool totals span teams: org-wide viewers only.
    assert get(client, world["alice"], "/api/v1/pools/costs/").json() == []


def test_pool_costs(client, world):
    rows = {row["pool"]: row for row in get(client, world["carol"], "/api/v1/pools/costs/").json()}
    h100 = rows["h100"]
    # Hours 10:00 and 11:00 are costed (now = 12:00): 2 × 5.00, of which 10:00 was allocated.
    assert Decimal(h100["pool_cost"]) == Decimal("10")
    assert Decimal(h100["allocated_cost"]) == Decimal("5") and Decimal(h100["unallocated_cost"]) == Decimal(
        "5"
    )
    assert h100["gpu_hours"] == 4 and h100["vendor"] == "nvidia"
    assert h100["idle_cost"] is None and h100["energy_kwh"] is None  # no GPU metrics arrived


def test_bad_parameters_get_a_clear_400(client, world):
    response = get(client, world["carol"], "/api/v1/costs/", group_by="colour")
    assert response.status_code == 400 and "unknown value(s) colour" in str(response.json())
    response = get(client, world["carol"], "/api/v1/costs/", granularity="hour", end="2026-12-30")
    assert response.status_code == 400 and "at most 31 days" in str(response.json())
    response = get(client, world["carol"], "/api/v1/costs/", start="2026-11-03", end="2026-11-02")
    assert response.status_code == 400


def test_anonymous_callers_are_refused(client, world):
    assert client.get("/api/v1/costs/", RANGE).status_code == 401
    assert client.get("/api/v1/pools/costs/", RANGE).status_code == 401
