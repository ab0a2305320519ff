"""Every endpoint of the REST API refuses anonymous callers; two teams' tokens never see each
other's rows or objects (BOLA: another team's object is a 404, like a missing one); shared
infrastructure is for org-wide viewers only; catalog writes are for org admins' sessions (with CSRF)
only, never for a token."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

from costcenter.models import GpuHourPrice, LlmModel, Pool, TokenPrice
from ingest.models import RejectedRecord, Source
from tests import test_api_support as support
from tests.test_api_support import RANGE, bearer, body

pytestmark = pytest.mark.django_db
world = support.world  # the shared fixture

PERIODS = {
    "before_start": "2026-11-01",
    "before_end": "2026-11-02",
    "after_start": "2026-11-02",
    "after_end": "2026-11-03",
}


def endpoints() -> list[tuple[str, dict]]:
    """(path, query) of every GET endpoint of ours, with the ids of objects that exist."""
    model = LlmModel.objects.get(name="mini")
    price = TokenPrice.objects.filter(model=model).first()
    pool = Pool.objects.get(name="h100")
    source = Source.objects.get(name="t")
    return [
        ("/api/v1/export/focus/", RANGE),
        ("/api/v1/export/costs/", RANGE),
        ("/api/v1/catalog/teams/", {}),
        ("/api/v1/catalog/teams/a/", {}),
        ("/api/v1/catalog/models/", {}),
        (f"/api/v1/catalog/models/{model.pk}/", {}),
        ("/api/v1/catalog/pools/", {}),
        (f"/api/v1/catalog/pools/{pool.pk}/", {}),
        ("/api/v1/catalog/endpoints/", {}),
        (f"/api/v1/catalog/endpoints/{pool.endpoints.first().pk}/", {}),
        ("/api/v1/catalog/prices/tokens/", {}),
        (f"/api/v1/catalog/prices/tokens/{price.pk}/", {}),
        ("/api/v1/catalog/prices/gpu-hours/", {}),
        (f"/api/v1/catalog/prices/gpu-hours/{pool.prices.first().pk}/", {}),
        ("/api/v1/ingest/sources/", {}),
        (f"/api/v1/ingest/sources/{source.pk}/", {}),
        ("/api/v1/ingest/rejects/", {}),
        ("/api/v1/attempts/", RANGE),
        ("/api/v1/gpu/pools/", RANGE),
        ("/api/v1/matrix/", RANGE),
        ("/api/v1/cost-change/", PERIODS),
        ("/api/v1/costs/", RANGE),
        ("/api/v1/pools/costs/", RANGE),
        (reverse("cc-api-docs"), {}),
        (reverse("cc-api-schema"), {}),
    ]


def test_every_endpoint_refuses_anonymous_callers_and_bad_tokens(client, world):
    for path, query in endpoints():
        response = client.get(path, query)
        assert response.status_code == 401, path
        assert response["WWW-Authenticate"].startswith("Bearer"), path
        bogus = client.get(path, query, HTTP_AUTHORIZATION="Bearer cc_not-a-token")
        assert bogus.status_code == 401, path
    for path in ("/api/v1/catalog/models/", "/api/v1/catalog/prices/tokens/"):
        assert client.post(path, {}, content_type="application/json").status_code == 401


def test_every_endpoint_answers_a_signed_in_org_viewer(client, world):
    for path, query in endpoints():
        response = client.get(path, query, **bearer(world["carol"]))
        assert response.status_code == 200, (path, body(response)[:300])


def _rows(client, user, path, query, key=None):
    data = client.get(path, query, **bearer(user)).json()
    return data[key] if key else data


@pytest.mark.parametrize(("me", "mine", "theirs"), [("alice", "a", "b"), ("bob", "b", "a")])
def test_a_team_never_sees_another_teams_rows(client, world, me, mine, theirs):
    user = world[me]
    focus = client.get("/api/v1/export/focus/", {**RANGE, "format": "json"}, **bearer(user))
    assert {row["x_Team"] for row in json.loads(body(focus))} == {mine}
    costs = client.get(
        "/api/v1/export/costs/", {**RANGE, "group_by": "team", "format": "json"}, **bearer(user)
    )
    assert [row["team"] for row in json.loads(body(costs))] == [mine]
    # Asking for the other team by name gives nothing, not their rows.
    asked = client.get("/api/v1/export/focus/", {**RANGE, "format": "json", "team": theirs}, **bearer(user))
    assert json.loads(body(asked)) == []
    attempts = _rows(client, user, "/api/v1/attempts/", {**RANGE, "page_size": 1000}, "results")
    assert attempts and {row["team"] for row in attempts} == {mine}
    assert _rows(client, user, "/api/v1/attempts/", {**RANGE, "team": theirs}, "results") == []
    other_task = "t3" if theirs == "b" else "t2"
    assert _rows(client, user, "/api/v1/attempts/", {**RANGE, "task_id": other_task}, "results") == []
    teams = _rows(client, user, "/api/v1/catalog/teams/", {})
    assert [team["slug"] for team in teams] == [mine]
    assert client.get(f"/api/v1/catalog/teams/{mine}/", **bearer(user)).status_code == 200
    hidden = client.get(f"/api/v1/catalog/teams/{theirs}/", **bearer(user))
    missing = client.get("/api/v1/catalog/teams/nobody/", **bearer(user))
    assert hidden.status_code == missing.status_code == 404 and hidden.json() == missing.json()
    matrix_attempts = sum(row["attempts"] for row in _rows(client, user, "/api/v1/matrix/", RANGE))
    costs_attempts = sum(row["attempts"] for row in _rows(client, user, "/api/v1/costs/", RANGE))
    assert matrix_attempts == costs_attempts == len(attempts)
    change = _rows(client, user, "/api/v1/cost-change/", PERIODS)
    assert change["after_spend"] == _rows(client, user, "/api/v1/costs/", RANGE)[0]["cost"]
    assert change["unallocated_included"] is False


def test_shared_infrastructure_is_for_org_wide_viewers_only(client, world):
    source = Source.objects.get(name="t")
    RejectedRecord.objects.create(source=source, location="f line 1", reason="bad", excerpt="{")
    for who in ("alice", "bob", "dave"):
        user = world[who]
        assert _rows(client, user, "/api/v1/ingest/sources/", {}) == []
        assert client.get(f"/api/v1/ingest/sources/{source.pk}/", **bearer(user)).status_code == 404
        assert _rows(client, user, "/api/v1/ingest/rejects/", {}, "results") == []
        assert _rows(client, user, "/api/v1/gpu/pools/", RANGE) == []
        assert _rows(client, user, "/api/v1/pools/costs/", RANGE) == []
    assert [s["name"] for s in _rows(client, world["carol"], "/api/v1/ingest/sources/", {})] == ["t"]
    assert len(_rows(client, world["carol"], "/api/v1/ingest/rejects/", {}, "results")) == 1
    assert {p["pool"] for p in _rows(client, world["carol"], "/api/v1/gpu/pools/", RANGE)} == {
        "h100",
        "mi300",
    }


def test_someone_in_no_team_sees_no_rows(client, world):
    dave = world["dave"]
    assert (
        json.loads(body(client.get("/api/v1/export/focus/", {**RANGE, "format": "json"}, **bearer(dave))))
        == []
    )
    assert _rows(client, dave, "/api/v1/attempts/", RANGE, "results") == []
    assert _rows(client, dave, "/api/v1/matrix/", RANGE) == []
    assert _rows(client, dave, "/api/v1/catalog/teams/", {}) == []


WRITES = [
    ("post", "/api/v1/catalog/models/", {"name": "new-model"}),
    ("post", "/api/v1/catalog/prices/gpu-hours/", {"pool": "h100", "effective_from": "2027-01-01T00:00:00Z", "gpu_hour_price": "3.00"}),
]  # fmt: skip


def _signed_in(user) -> Client:
    """A browser session that, like a real one, must send the CSRF token with every write."""
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(user)
    assert browser.get(reverse("cc-tokens")).status_code == 200  # a page with a form sets the CSRF cookie
    return browser


def _session_write(browser: Client, method, path, payload, *, csrf=True):
    headers = {"HTTP_X_CSRFTOKEN": browser.cookies["csrftoken"].value} if csrf else {}
    return getattr(browser, method)(path, payload, content_type="application/json", **headers)


@pytest.mark.parametrize(("method", "path", "payload"), WRITES)
def test_catalog_writes_are_for_org_admins_signed_in_never_for_tokens(
    client, world, settings, method, path, payload
):
    def with_token(user, scope):
        return getattr(client, method)(path, payload, content_type="application/json", **bearer(user, scope))

    settings.CSRF_COOKIE_HTTPONLY = False  # read the cookie like the page's script would
    created_before = LlmModel.objects.count() + GpuHourPrice.objects.count()
    # Anonymous: 401 with the Bearer challenge.
    anonymous = getattr(client, method)(path, payload, content_type="application/json")
    assert anonymous.status_code == 401 and anonymous["WWW-Authenticate"].startswith("Bearer")
    # No token writes the catalog, whoever owns it: the org admin's read and ingest tokens, a team
    # editor's write-capable (ingest) token, an org-wide viewer's.
    assert with_token(world["root"], "read").status_code == 403
    refused = with_token(world["root"], "ingest")
    assert refused.status_code == 403 and "API tokens only read it" in refused.json()["detail"]
    assert with_token(world["alice"], "ingest").status_code == 403  # a team editor
    assert with_token(world["carol"], "ingest").status_code == 403  # an org-wide viewer
    # Sessions: a team editor and an org-wide viewer are refused; an org admin without the CSRF
    # token too (a forged cross-site request); the org admin with it succeeds.
    assert _session_write(_signed_in(world["alice"]), method, path, payload).status_code == 403
    assert _session_write(_signed_in(world["carol"]), method, path, payload).status_code == 403
    admin = _signed_in(world["root"])
    forged = _session_write(admin, method, path, payload, csrf=False)
    assert forged.status_code == 403 and "CSRF" in forged.json()["detail"]
    assert LlmModel.objects.count() + GpuHourPrice.objects.count() == created_before  # nothing written
    assert _session_write(admin, method, path, payload).status_code == 201
    assert LlmModel.objects.count() + GpuHourPrice.objects.count() == created_before + 1


def test_catalog_detail_writes_refuse_every_token_and_non_admins(client, world):
    price = TokenPrice.objects.first()
    model = LlmModel.objects.get(name="mini")
    patch = {"family": "x"}
    for user, scope in ((world["root"], "read"), (world["root"], "ingest"), (world["alice"], "ingest")):
        assert (
            client.patch(
                f"/api/v1/catalog/models/{model.pk}/",
                patch,
                content_type="application/json",
                **bearer(user, scope),
            ).status_code
            == 403
        )
        assert (
            client.delete(f"/api/v1/catalog/prices/tokens/{price.pk}/", **bearer(user, scope)).status_code
            == 403
        )
    bob = Client()
    bob.force_login(world["bob"])  # a team viewer's session
    assert bob.delete(f"/api/v1/catalog/prices/tokens/{price.pk}/").status_code == 403
    model.refresh_from_db()
    assert model.family != "x"
    assert TokenPrice.objects.filter(pk=price.pk).exists()
    assert (
        client.get(f"/api/v1/catalog/models/{model.pk + 10_000}/", **bearer(world["alice"])).status_code
        == 404
    )
