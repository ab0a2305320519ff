"""Catalog and price writes (validated like the admin, repricing the hours they affect), raw attempts
with cursor pagination, rejects, GPU aggregates, the matrix and the cost change as endpoints, and
the offline /api/docs/ page."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.staticfiles import finders

from costcenter.matrix import evaluation_matrix
from costcenter.models import GpuHourPrice, LlmModel, Pool, RepriceHour
from costcenter.selectors import CostQuery, cost_totals
from ingest.models import RejectedRecord, Source
from tests import test_api_support as support
from tests.conftest import PASSWORD
from tests.cost_world import H
from tests.test_api_support import RANGE, bearer

pytestmark = pytest.mark.django_db
world = support.world  # the shared fixture


@pytest.fixture
def root(client, world):
    """An org admin signed in: catalog writes take a session (with CSRF), never a token."""
    client.force_login(world["root"])
    return client


def test_an_admin_adds_a_model_and_prices_and_the_hours_are_marked_for_recompute(root):
    created = root.post(
        "/api/v1/catalog/models/",
        {"name": "llama", "version": "v2"},
        content_type="application/json",
    )
    assert created.status_code == 201 and created.json()["name"] == "llama"
    duplicate = root.post(
        "/api/v1/catalog/models/",
        {"name": "llama", "version": "v2"},
        content_type="application/json",
    )
    assert duplicate.status_code == 400
    RepriceHour.objects.all().delete()
    mini = LlmModel.objects.get(name="mini", version="")
    price = {
        "model": mini.pk,
        "effective_from": "2026-11-02T10:45:00Z",
        "input_per_mtok": "0.30",
        "output_per_mtok": "1.20",
    }
    response = root.post(
        "/api/v1/catalog/prices/tokens/",
        price,
        content_type="application/json",
    )
    assert response.status_code == 201, response.json()
    assert response.json()["model_name"] == "mini" and response.json()["input_per_mtok"] == "0.300000000"
    assert RepriceHour.objects.filter(hour=H).exists()  # the backdated price reprices hour H
    overlap = root.post(
        "/api/v1/catalog/prices/tokens/",
        {**price, "effective_from": "2026-11-02T10:45:00Z"},
        content_type="application/json",
    )
    assert overlap.status_code == 400
    negative = root.post(
        "/api/v1/catalog/prices/tokens/",
        {**price, "effective_from": "2027-01-01T00:00:00Z", "input_per_mtok": "-1"},
        content_type="application/json",
    )
    assert negative.status_code == 400
    pk = response.json()["id"]
    assert root.delete(f"/api/v1/catalog/prices/tokens/{pk}/").status_code == 204


def test_an_admin_edits_a_pool_and_an_endpoint_with_the_catalogs_rules(root):
    pool = Pool.objects.get(name="h100")
    changed = root.patch(
        f"/api/v1/catalog/pools/{pool.pk}/",
        {"gpu_count": 4},
        content_type="application/json",
    )
    assert changed.status_code == 200 and changed.json()["gpu_count"] == 4
    assert sorted(changed.json()["endpoints"]) == ["vllm-1", "vllm-2"]
    bad_regex = root.patch(
        f"/api/v1/catalog/pools/{pool.pk}/",
        {"prometheus_match": {"Hostname": "("}},
        content_type="application/json",
    )
    assert bad_regex.status_code == 400 and "regular expression" in str(bad_regex.json())
    # A GPU-pool endpoint needs a pool (the model's clean(), as in the admin).
    bad = root.post(
        "/api/v1/catalog/endpoints/",
        {"name": "e", "kind": "gpu_pool"},
        content_type="application/json",
    )
    assert bad.status_code == 400
    good = root.post(
        "/api/v1/catalog/endpoints/",
        {"name": "e", "kind": "gpu_pool", "pool": "mi300"},
        content_type="application/json",
    )
    assert good.status_code == 201 and good.json()["vendor"] == "amd"
    gpu = root.post(
        "/api/v1/catalog/prices/gpu-hours/",
        {"pool": "h100", "effective_from": "2026-06-01T00:00:00Z", "gpu_hour_price": "2"},
        content_type="application/json",
    )
    assert gpu.status_code == 201 and GpuHourPrice.objects.filter(pool=pool).count() == 2


def test_everyone_reads_the_catalog(client, world):
    models = client.get("/api/v1/catalog/models/", **bearer(world["dave"])).json()
    assert {m["name"] for m in models} >= {"mini", "llama", "mistral"}
    prices = client.get("/api/v1/catalog/prices/tokens/", **bearer(world["dave"])).json()
    assert [(p["model_name"], p["input_per_mtok"]) for p in prices] == [
        ("mini", "0.150000000"),
        ("mini", "0.200000000"),
    ]
    pools = client.get("/api/v1/catalog/pools/", **bearer(world["bob"])).json()
    assert {p["name"]: p["gpu_count"] for p in pools} == {"h100": 2, "mi300": 4}


def test_attempts_are_paged_with_a_cursor_without_gaps_or_repeats(client, world):
    seen, url, params = [], "/api/v1/attempts/", {**RANGE, "page_size": 4}
    while url:
        page = client.get(url, params, **bearer(world["carol"])).json()
        seen.extend(page["results"])
        url, params = page["next"], {}
    assert len(seen) == 13
    assert len({(row["task_id"], row["attempt"], row["ts"]) for row in seen}) == 13
    assert [row["ts"] for row in seen] == sorted((row["ts"] for row in seen), reverse=True)
    retry = client.get("/api/v1/attempts/", {**RANGE, "task_id": "t1"}, **bearer(world["alice"])).json()[
        "results"
    ]
    assert [(r["attempt"], r["status"], r["http_status"]) for r in retry] == [
        (2, "success", 200),
        (1, "failure", 500),
    ]
    assert retry[0]["model"] == "mini" and retry[0]["endpoint"] == "openai" and retry[0]["team"] == "a"
    failed = client.get("/api/v1/attempts/", {**RANGE, "status": "failure"}, **bearer(world["carol"])).json()
    assert {r["task_id"] for r in failed["results"]} == {"t1", "t4"}
    bad = client.get("/api/v1/attempts/", {**RANGE, "cursor": "garbage!"}, **bearer(world["carol"]))
    assert bad.status_code == 400 and "cursor" in bad.json()
    too_long = client.get(
        "/api/v1/attempts/", {"start": "2026-10-01", "end": "2026-11-01"}, **bearer(world["carol"])
    )
    assert too_long.status_code == 400


def test_rejects_are_paged_newest_first(client, world):
    source = Source.objects.get(name="t")
    for n in range(5):
        RejectedRecord.objects.create(source=source, location=f"f line {n}", reason="bad")
    first = client.get(
        "/api/v1/ingest/rejects/", {"page_size": 3, "source": "t"}, **bearer(world["carol"])
    ).json()
    second = client.get(first["next"], **bearer(world["carol"])).json()
    assert [r["location"] for r in first["results"] + second["results"]] == [
        f"f line {n}" for n in range(4, -1, -1)
    ]
    assert second["next"] is None


def test_gpu_aggregates_per_pool_and_hour(client, world):
    rows = client.get("/api/v1/gpu/pools/", {**RANGE, "granularity": "hour"}, **bearer(world["carol"])).json()
    h100 = [r for r in rows if r["pool"] == "h100"]
    assert [r["period"] for r in h100] == ["2026-11-02T10:00:00Z", "2026-11-02T11:00:00Z"]
    assert [r["gpu_hours"] for r in h100] == [2, 2] and [Decimal(r["pool_cost"]) for r in h100] == [5, 5]


def test_the_matrix_endpoint_serves_the_selector(client, world):
    rows = client.get("/api/v1/matrix/", RANGE, **bearer(world["carol"])).json()
    expected = evaluation_matrix(
        user=world["carol"], workload=None, start=H - timedelta(hours=10), end=H + timedelta(hours=14)
    )
    assert [(r["model"], r["pool"], r["endpoint"], r["attempts"]) for r in rows] == [
        (e.model, e.pool, e.endpoint, e.attempts) for e in expected
    ]
    only = client.get("/api/v1/matrix/", {**RANGE, "workload": "w"}, **bearer(world["carol"])).json()
    assert sum(r["attempts"] for r in only) == 7


def test_the_cost_change_endpoint_adds_up(client, world):
    response = client.get(
        "/api/v1/cost-change/",
        {
            "before_start": "2026-11-01",
            "before_end": "2026-11-02",
            "after_start": "2026-11-02",
            "after_end": "2026-11-03",
        },
        **bearer(world["carol"]),
    )
    data = response.json()
    spend = cost_totals(
        user=world["carol"], query=CostQuery(H - timedelta(hours=10), H + timedelta(hours=14))
    )["total_spend"]
    assert Decimal(data["after_spend"]) == spend and Decimal(data["change"]) == spend
    assert sum(Decimal(e["amount"]) for e in data["effects"]) == Decimal(data["change"])
    assert data["complete"] is False  # mistral is unpriced
    reversed_range = client.get(
        "/api/v1/cost-change/",
        {
            "before_start": "2026-11-02",
            "before_end": "2026-11-01",
            "after_start": "2026-11-02",
            "after_end": "2026-11-03",
        },
        **bearer(world["carol"]),
    )
    assert reversed_range.status_code == 400


def test_the_api_docs_load_offline_from_our_own_static_files(client, world, settings):
    assert client.login(username="carol", password=PASSWORD)
    page = client.get("/api/docs/")
    html = page.content.decode()
    assert page.status_code == 200
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in html
    assert "http://" not in html and "https://" not in html  # no CDN
    assert "<script>" not in html  # our CSP forbids inline scripts: the init script is a file
    script = client.get("/api/docs/?script=")
    assert script.status_code == 200 and "/api/schema/" in script.content.decode()
    # The sidecar is an installed app, so its files are found (and collected) like ours.
    assert "drf_spectacular_sidecar" in settings.INSTALLED_APPS
    for name in (
        "swagger-ui-bundle.js",
        "swagger-ui-standalone-preset.js",
        "swagger-ui.css",
        "favicon-32x32.png",
    ):
        assert finders.find(f"drf_spectacular_sidecar/swagger-ui-dist/{name}"), name


def test_the_schema_lists_every_endpoint(client, world):
    schema = client.get("/api/schema/", {"format": "json"}, **bearer(world["carol"])).json()
    for path in (
        "/api/v1/export/focus/", "/api/v1/export/costs/", "/api/v1/catalog/models/{id}/",
        "/api/v1/catalog/prices/tokens/", "/api/v1/attempts/", "/api/v1/gpu/pools/", "/api/v1/matrix/",
        "/api/v1/cost-change/", "/api/v1/ingest/sources/", "/api/v1/ingest/rejects/",
    ):  # fmt: skip
        assert path in schema["paths"], path
    focus = schema["paths"]["/api/v1/export/focus/"]["get"]["responses"]["200"]["content"]
    assert set(focus) == {
        "text/csv",
        "application/json",
        "application/x-ndjson",
        "application/vnd.apache.parquet",
    }
