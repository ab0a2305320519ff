"""Pages: login on every one, team scoping, catalog on the overview, escaping, CSP, query counts."""

from __future__ import annotations

import json

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from rest_framework.views import APIView

from costcenter.models import Pool, Team
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db

PUBLIC = {"login"}
POST_ONLY = {"logout"}
# One-click unsubscribe is opened from a mail, usually without a session: a signed token in the
# URL is its credential instead of a login, so a made-up token is refused (404), never redirected.
SIGNED_TOKEN = {"reports:unsubscribe"}
# Sample values for URL converters, so every pattern is checked without a list to maintain.
SAMPLES = {
    "slug": "netops",
    "int": 1,
    "str": "x",
    "string": "x",  # StringConverter, the class behind <str:…>
    "path": "x",
    "uuid": "00000000-0000-0000-0000-000000000001",
}


def own_patterns(patterns=None, prefix: str = "") -> list[tuple[str, URLPattern]]:
    """(name, pattern) of every named URL of ours (the admin has its own staff check)."""
    found = []
    for entry in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(entry, URLPattern) and entry.name:
            found.append((f"{prefix}{entry.name}", entry))
        elif isinstance(entry, URLResolver) and entry.app_name != "admin":
            found.extend(
                own_patterns(entry.url_patterns, f"{entry.namespace}:" if entry.namespace else prefix)
            )
    return found


def sample_url(name: str, pattern: URLPattern) -> str:
    converters = pattern.pattern.converters
    kwargs = {
        key: SAMPLES[type(converter).__name__.replace("Converter", "").lower()]
        for key, converter in converters.items()
    }
    return reverse(name, kwargs=kwargs or None)


def login(client, username: str) -> None:
    assert client.login(username=username, password=PASSWORD)


@pytest.mark.parametrize(("name", "pattern"), own_patterns(), ids=[name for name, _ in own_patterns()])
def test_every_page_requires_login(client, people, name, pattern):
    url = sample_url(name, pattern)
    view_class = getattr(pattern.callback, "cls", None)
    if view_class is not None and issubclass(view_class, APIView):
        # The API answers 401 with a WWW-Authenticate challenge instead of redirecting to login.
        methods = [m for m in ("get", "post", "put", "patch", "delete") if hasattr(view_class, m)]
        if methods[0] == "get":
            response = client.get(url)
        else:
            response = getattr(client, methods[0])(url, data=b"[]", content_type="application/json")
        assert response.status_code == 401, (name, response.status_code)
        return
    if name in POST_ONLY:
        assert client.get(url).status_code == 405
        return
    response = client.get(url)
    if name in SIGNED_TOKEN:
        assert response.status_code == 404, (name, response.status_code)
        return
    if name in PUBLIC:
        assert response.status_code == 200
        return
    assert response.status_code == 302, (name, response.status_code)
    assert response["Location"].startswith(reverse("login") + "?next=")


def test_the_admin_requires_staff(client, people):
    assert client.get("/admin/").status_code == 302
    login(client, "alice")
    assert client.get("/admin/").status_code == 302
    login(client, "root")
    assert client.get("/admin/").status_code == 200


def test_logging_in_and_out(client, people):
    response = client.post(reverse("login"), {"username": "alice", "password": "wrong"})
    assert b"didn't match" in response.content
    response = client.post(reverse("login"), {"username": "alice", "password": PASSWORD})
    assert response.status_code == 302 and response["Location"] == reverse("cc-overview")
    assert client.get(reverse("cc-overview")).status_code == 200
    client.post(reverse("logout"))
    assert client.get(reverse("cc-overview")).status_code == 302


def test_the_overview_shows_the_catalog(client, people):
    login(client, "alice")
    response = client.get(reverse("cc-overview"))
    page = response.content.decode()
    for name in ("h100-a", "mi300x-b", "vllm-h100-a", "openai-gpt-4o-mini", "gpt-4o-mini", "claude-sonnet-4"):
        assert name in page
    assert "H100-80GB-SXM" in page and "AMD" in page
    assert 'Hostname=~"gpu-node-a.*"' in page
    # gpt-4.1 got a list-price cut on 2026-11-20; the overview shows the price in force today.
    assert "$1.80" in page
    # Self-run models have no token price: flagged, not shown as free.
    assert page.count("no token price") == 3
    chart = json.loads(response.context["gpus_chart"] and json.dumps(response.context["gpus_chart"]))
    assert {trace["name"] for trace in chart["data"]} == {"NVIDIA", "AMD"}
    assert sorted(y for trace in chart["data"] for y in trace["y"]) == [8, 8]


def visible_team_slugs(response) -> list[str]:
    return [team.slug for team in response.context["teams"]]


@pytest.mark.parametrize(
    ("username", "expected"),
    [
        ("alice", ["netops"]),
        ("bob", ["support"]),
        ("dave", []),
        ("carol", ["netops", "research", "search", "support"]),
        ("root", ["netops", "research", "search", "support"]),
    ],
)
def test_team_visibility_follows_roles(client, people, username, expected):
    login(client, username)
    assert visible_team_slugs(client.get(reverse("cc-teams"))) == expected
    overview = client.get(reverse("cc-overview"))
    assert [team.slug for team in overview.context["catalog"].teams] == expected
    for slug in ["netops", "support", "search", "research"]:
        status = client.get(reverse("cc-team", kwargs={"slug": slug})).status_code
        assert status == (200 if slug in expected else 404), (username, slug)


def test_a_hidden_team_and_a_missing_team_look_the_same(client, people):
    login(client, "bob")
    hidden = client.get(reverse("cc-team", kwargs={"slug": "netops"}))
    missing = client.get(reverse("cc-team", kwargs={"slug": "no-such-team"}))
    assert hidden.status_code == missing.status_code == 404


def test_the_team_page_lists_members_with_roles(client, people):
    login(client, "alice")
    page = client.get(reverse("cc-team", kwargs={"slug": "netops"})).content.decode()
    assert "alice" in page and "Editor" in page
    assert "bob" not in page


def test_user_data_is_escaped_on_pages_and_in_chart_data(client, people):
    evil = "<img src=x onerror=alert(1)>"
    Team.objects.filter(slug="netops").update(name=evil)

    Pool.objects.filter(name="h100-a").update(name=evil)
    login(client, "alice")
    page = client.get(reverse("cc-overview")).content.decode()
    assert evil not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    # json_script escapes <, > and & inside the JSON so the block cannot end the script element.
    assert "\\u003Cimg src=x onerror=alert(1)\\u003E" in page


def test_pages_carry_a_strict_content_security_policy(client, people):
    login(client, "alice")
    response = client.get(reverse("cc-overview"))
    policy = response["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "unsafe-eval" not in policy
    assert "'unsafe-inline'" not in policy.split("script-src")[1].split(";")[0]
    assert "frame-ancestors 'none'" in policy
    assert response["X-Frame-Options"] == "DENY"


def test_the_overview_runs_a_fixed_number_of_queries(client, people, django_assert_num_queries):
    login(client, "carol")
    client.get(reverse("cc-overview"))  # warm the session
    # session, user, profile; the KPIs (rollup totals and pool costs of this and the previous
    # period, spend by day, pool costs by day: 6, see tests/test_dashboards.py); budgets and the
    # example's one budget status (2); the catalog: memberships, teams, pools, pool prices, pool
    # endpoints, models, model prices, endpoints.
    with django_assert_num_queries(19):
        client.get(reverse("cc-overview"))


def test_an_empty_catalog_explains_what_to_do(client, db):
    from tests.conftest import make_user

    make_user("newbie")
    login(client, "newbie")
    page = client.get(reverse("cc-overview")).content.decode()
    assert "The catalog is empty" in page and "load_catalog" in page
    assert "not a member of any team" in page


def test_rates_are_shown_with_units_and_at_least_cents():
    from decimal import Decimal

    from costcenter.templatetags.cc import rate

    assert rate(Decimal("2.500000000"), "USD") == "$2.50"
    assert rate(Decimal("0.075000000"), "USD") == "$0.075"
    assert rate(Decimal("1234.5"), "EUR") == "€1,234.50"
    assert rate(Decimal("3"), "CHF") == "3.00 CHF"
    assert rate(None, "USD") == "—"


def test_the_admin_lists_and_edits_every_catalog_object(client, people):
    from django.contrib import admin

    from ingest.admin import ReadOnlyAdmin

    login(client, "root")
    for model, model_admin in admin.site._registry.items():
        meta = model._meta
        url = reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist")
        assert client.get(url).status_code == 200, url
        add = client.get(reverse(f"admin:{meta.app_label}_{meta.model_name}_add")).status_code
        # Ingestion records (runs, rejects, checkpoints) are read-only: no add form.
        assert add == (403 if isinstance(model_admin, ReadOnlyAdmin) else 200), meta.label
    pool_id = Pool.objects.get(name="h100-a").pk
    page = client.get(reverse("admin:costcenter_pool_change", args=[pool_id])).content.decode()
    assert "gpu-node-a" in page and "2.500000000" in page  # matchers and the GPU-hour price rows


def test_names_first_seen_in_usage_are_flagged_new(client, people):
    from costcenter.models import Endpoint, EndpointKind, LlmModel

    LlmModel.objects.create(name="mistral-large-2411", auto_registered=True)
    Endpoint.objects.create(name="mistral-api", kind=EndpointKind.UNKNOWN, auto_registered=True)
    login(client, "alice")
    page = client.get(reverse("cc-overview")).content.decode()
    assert page.count(">new</span>") == 2
    assert "Unknown (not in the catalog)" in page
