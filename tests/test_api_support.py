"""Fixtures shared by the API and export tests (``tests/test_api_*.py``, ``tests/test_export*.py``).

The world is ``tests/cost_world.py``'s priced hour, costed, plus names a spreadsheet would run as
formulas. alice is in team a, bob in team b, carol an org-wide viewer, root an org admin, dave in
no team. No tests here.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from costcenter.catalog import catalog_load
from costcenter.costing import recompute
from costcenter.models import OrgRole, TeamRole
from costcenter.tokens import api_token_create
from tests.conftest import make_user
from tests.cost_world import CATALOG, H, attempt, load

RANGE = {"start": "2026-11-02T00:00:00Z", "end": "2026-11-03T00:00:00Z"}
# Workload names are free text from usage: each would be a formula in a spreadsheet.
EVIL = ['=HYPERLINK("http://x","y")', "+1+1", "-2+3", "@SUM(A1)", "\tTAB", "\rCR"]


def build_world() -> None:
    catalog_load(CATALOG)
    load(
        attempt(1, task="t1", status="failure", http_status=500, completion_tokens=0),
        attempt(2, task="t1", attempt_no=2, minute=6),
        attempt(3, task="t2", model="llama", endpoint="vllm-1", prompt_tokens=1000, completion_tokens=200),
        attempt(
            4, task="t3", model="llama", endpoint="vllm-2", team="b", prompt_tokens=600, completion_tokens=200
        ),
        attempt(
            5, task="t4", model="llama", endpoint="amd-1", team="b", status="failure", completion_tokens=0
        ),
        attempt(6, task="t4", attempt_no=2, minute=40, team="b"),
        attempt(
            7, task="t5", model="mistral", endpoint="mistral-api", prompt_tokens=300, completion_tokens=50
        ),
        *[attempt(100 + i, minute=10 + i, workload=name, team="b") for i, name in enumerate(EVIL)],
    )
    recompute(now=H + timedelta(hours=2), since=H)


def build_people() -> dict:
    return {
        "alice": make_user("alice", teams={"a": TeamRole.EDITOR}),
        "bob": make_user("bob", teams={"b": TeamRole.VIEWER}),
        "carol": make_user("carol", org_role=OrgRole.VIEWER),
        "root": make_user("root", org_role=OrgRole.ADMIN),
        "dave": make_user("dave"),
    }


@pytest.fixture
def world(db):
    build_world()
    return build_people()


def bearer(user, scope: str = "read") -> dict:
    _, token = api_token_create(user=user, scope=scope)
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def body(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content
