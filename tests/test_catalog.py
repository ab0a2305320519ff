"""``load_catalog``: idempotent, updates in place, and all-or-nothing with one line per problem."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.core.management import call_command

from costcenter.catalog import CatalogError, catalog_load
from costcenter.models import Endpoint, GpuHourPrice, LlmModel, Pool, Team, TokenPrice
from tests.conftest import EXAMPLE_CATALOG

pytestmark = pytest.mark.django_db

CATALOG_TABLES = [Team, Pool, Endpoint, LlmModel, TokenPrice, GpuHourPrice]

MINIMAL = """
currency: USD
teams: [{slug: netops, name: Network Ops}]
pools:
  - {name: h100-a, vendor: nvidia, gpu_model: H100-80GB, gpu_count: 8, kwh_price: "0.12",
     weights: {input: "1", output: "1"},
     prometheus: {match: {Hostname: "gpu-node-a.*"}},
     prices: [{effective_from: 2026-01-01, gpu_hour: "2.50"}]}
endpoints:
  - {name: vllm-h100-a, kind: gpu_pool, pool: h100-a}
  - {name: openai-gpt-4o-mini, kind: token_priced, provider: openai}
models:
  - {name: gpt-4o-mini, prices: [{effective_from: 2026-01-01, input: "0.15", cached_input: "0.075", output: "0.60"}]}
"""


def snapshot() -> dict:
    """Every row of every catalog table, with ids: equal snapshots mean nothing changed."""
    return {model.__name__: sorted(map(repr, model.objects.values())) for model in CATALOG_TABLES}


def load(text: str):
    return catalog_load(text, source="catalog.yaml")


def test_it_loads_the_product_brief_example():
    report = load(MINIMAL)
    assert report.created == {"teams": 1, "pools": 1, "prices": 2, "endpoints": 2, "models": 1}
    pool = Pool.objects.get(name="h100-a")
    assert (pool.vendor, pool.gpu_model, pool.gpu_count) == ("nvidia", "H100-80GB", 8)
    assert pool.kwh_price == Decimal("0.12")
    assert pool.prometheus_match == {"Hostname": "gpu-node-a.*"}
    assert (pool.input_weight, pool.output_weight) == (Decimal(1), Decimal(1))
    assert Endpoint.objects.get(name="vllm-h100-a").pool == pool
    assert Endpoint.objects.get(name="openai-gpt-4o-mini").provider == "openai"
    price = TokenPrice.objects.get(model__name="gpt-4o-mini")
    assert (price.input_per_mtok, price.cached_input_per_mtok, price.output_per_mtok) == (
        Decimal("0.15"),
        Decimal("0.075"),
        Decimal("0.60"),
    )
    assert price.effective_from == datetime(2026, 1, 1, tzinfo=UTC)
    assert price.effective_to is None and price.endpoint is None
    assert GpuHourPrice.objects.get(pool=pool).gpu_hour_price == Decimal("2.50")


def test_it_changes_nothing_when_the_same_file_is_loaded_twice():
    load(EXAMPLE_CATALOG.read_text())
    before = snapshot()
    report = load(EXAMPLE_CATALOG.read_text())
    assert not report.changed
    assert report.summary().startswith("catalog unchanged")
    assert snapshot() == before


def test_it_updates_a_changed_file_in_place():
    load(MINIMAL)
    pool_id = Pool.objects.get(name="h100-a").pk
    model_id = LlmModel.objects.get(name="gpt-4o-mini").pk
    first_price_id = TokenPrice.objects.get().pk
    changed = (
        MINIMAL.replace("gpu_count: 8", "gpu_count: 16")
        .replace("{slug: netops, name: Network Ops}", "{slug: netops, name: Network Operations}")
        .replace(
            '[{effective_from: 2026-01-01, input: "0.15", cached_input: "0.075", output: "0.60"}]',
            '[{effective_from: 2026-01-01, input: "0.15", cached_input: "0.075", output: "0.60"},'
            ' {effective_from: "2026-11-20T12:00:00Z", input: "0.12", output: "0.48"}]',
        )
        .replace(
            '[{effective_from: 2026-01-01, gpu_hour: "2.50"}]',
            '[{effective_from: 2026-02-01, gpu_hour: "2.40"}]',
        )
    )
    report = load(changed)
    assert report.updated == {"pools": 1, "teams": 1}
    assert report.created == {"prices": 2}  # one new token price, one moved GPU price
    assert report.deleted == {"prices": 1}  # the GPU price that started on 2026-01-01
    pool = Pool.objects.get(name="h100-a")
    assert pool.pk == pool_id and pool.gpu_count == 16
    assert Team.objects.get(slug="netops").name == "Network Operations"
    assert LlmModel.objects.get(name="gpt-4o-mini").pk == model_id
    prices = list(TokenPrice.objects.order_by("effective_from"))
    assert [p.pk for p in prices][0] == first_price_id
    assert prices[1].effective_from == datetime(2026, 11, 20, 12, tzinfo=UTC)
    assert prices[1].cached_input_per_mtok is None  # defaults to the input price when costed
    assert list(GpuHourPrice.objects.values_list("effective_from", "gpu_hour_price")) == [
        (datetime(2026, 2, 1, tzinfo=UTC), Decimal("2.40"))
    ]


def test_the_load_catalog_command_reports_what_it_did():
    out = io.StringIO()
    call_command("load_catalog", str(EXAMPLE_CATALOG), stdout=out)
    assert "pools: 2 created" in out.getvalue()
    assert "budgets: 1 created" in out.getvalue()


BAD_FILES = [
    pytest.param(
        MINIMAL.replace("gpu_count: 8,", "gpu_count: 8, colour: green,"),
        [
            "pools[0].colour: unknown key (expected one of: gpu_count, gpu_model, kwh_price, name, prices, "
            "prometheus, vendor, weights)"
        ],
        id="unknown key",
    ),
    pytest.param(
        MINIMAL.replace("gpu_model: H100-80GB, ", ""),
        ["pools[0].gpu_model: required"],
        id="missing field",
    ),
    pytest.param(
        MINIMAL.replace('gpu_hour: "2.50"', 'gpu_hour: "-2.50"'),
        ["pools[0].prices[0].gpu_hour: must be a non-negative decimal"],
        id="negative price",
    ),
    pytest.param(
        MINIMAL.replace(
            '[{effective_from: 2026-01-01, gpu_hour: "2.50"}]',
            '[{effective_from: 2026-01-01, effective_to: 2026-03-01, gpu_hour: "2.50"},'
            ' {effective_from: 2026-02-01, gpu_hour: "2.40"}]',
        ),
        [
            "pools[0].prices: overlapping price periods: the period 2026-01-01T00:00:00+00:00 to "
            "2026-03-01T00:00:00+00:00 overlaps the one starting 2026-02-01T00:00:00+00:00"
        ],
        id="overlapping price periods",
    ),
    pytest.param(
        MINIMAL.replace("kind: gpu_pool, pool: h100-a", "kind: gpu_pool, pool: h100-z"),
        ["endpoints[0].pool: unknown pool 'h100-z'"],
        id="unknown pool name",
    ),
    pytest.param(
        MINIMAL.replace(
            '{effective_from: 2026-01-01, input: "0.15"', '{effective_from: 2026-13-45, input: "0.15"'
        ),
        [
            "models[0].prices[0].effective_from: must be a date (YYYY-MM-DD) or an ISO 8601 datetime "
            "(YYYY-MM-DDTHH:MM:SSZ)"
        ],
        id="malformed date",
    ),
    pytest.param(
        MINIMAL.replace('gpu_hour: "2.50"', "gpu_hour: 2.50").replace("gpu_count: 8", "gpu_count: eight"),
        ["pools[0].gpu_count: must be a positive integer"],
        id="unquoted decimals are fine, words for numbers are not",
    ),
    pytest.param(
        MINIMAL.replace("vendor: nvidia", "vendor: intel").replace('input: "0.15"', 'input: "cheap"'),
        [
            "pools[0].vendor: must be one of: nvidia, amd, other",
            "models[0].prices[0].input: must be a non-negative decimal",
        ],
        id="several problems are all listed",
    ),
    pytest.param(
        MINIMAL.replace("currency: USD", "currency: EUR"),
        [
            "currency: this installation keeps its books in USD; the catalog says EUR (set CURRENCY=EUR for a "
            "new installation in that currency)"
        ],
        id="another currency",
    ),
    pytest.param(
        "teams: [{slug: netops\n",
        ["catalog.yaml:2:1: YAML syntax error: expected ',' or '}', but got '<stream end>'"],
        id="broken YAML",
    ),
]


@pytest.mark.parametrize(("text", "problems"), BAD_FILES)
def test_a_bad_file_names_each_problem_and_changes_nothing(text, problems):
    load(EXAMPLE_CATALOG.read_text())
    before = snapshot()
    with pytest.raises(CatalogError) as caught:
        load(text)
    assert caught.value.problems == problems
    assert snapshot() == before


def test_the_command_prints_one_line_per_problem_and_exits_non_zero(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        MINIMAL.replace('gpu_hour: "2.50"', 'gpu_hour: "-1"').replace("gpu_count: 8,", "gpu_count: 8, x: 1,")
    )
    err = io.StringIO()
    with pytest.raises(SystemExit) as caught:
        call_command("load_catalog", str(bad), stderr=err)
    assert caught.value.code == 1
    lines = err.getvalue().splitlines()
    assert lines == [
        "pools[0].x: unknown key (expected one of: gpu_count, gpu_model, kwh_price, name, prices, prometheus, "
        "vendor, weights)",
        "pools[0].prices[0].gpu_hour: must be a non-negative decimal",
        f"{bad}: 2 problem(s); nothing was changed",
    ]
    assert "Traceback" not in err.getvalue()
    assert not Pool.objects.exists()


def test_the_command_reports_a_missing_file(tmp_path):
    err = io.StringIO()
    with pytest.raises(SystemExit):
        call_command("load_catalog", str(tmp_path / "nope.yaml"), stderr=err)
    assert "cannot read the catalog" in err.getvalue()


def test_it_refuses_duplicate_names_and_duplicate_keys():
    text = MINIMAL.replace(
        "  - {name: openai-gpt-4o-mini, kind: token_priced, provider: openai}",
        "  - {name: openai-gpt-4o-mini, kind: token_priced, provider: openai}\n"
        "  - {name: vllm-h100-a, kind: token_priced, provider: openai}",
    )
    with pytest.raises(CatalogError) as caught:
        load(text)
    assert caught.value.problems == ["endpoints[2].name: 'vllm-h100-a' is already defined at endpoints[0]"]
    with pytest.raises(CatalogError) as caught:
        load("teams: [{slug: a, slug: b}]")
    assert "duplicate key 'slug'" in caught.value.problems[0]


def test_it_checks_endpoint_kinds_and_label_matchers():
    text = MINIMAL.replace("kind: token_priced, provider: openai", "kind: token_priced").replace(
        '{Hostname: "gpu-node-a.*"}', '{"bad-label": "x", Hostname: "gpu-node-[a"}'
    )
    with pytest.raises(CatalogError) as caught:
        load(text)
    assert (
        caught.value.problems[0]
        == "pools[0].prometheus.match.bad-label: is not a valid Prometheus label name"
    )
    assert caught.value.problems[1].startswith(
        "pools[0].prometheus.match.Hostname: is not a valid regular expression"
    )
    assert caught.value.problems[2] == "endpoints[1].provider: required for a token_priced endpoint"


def test_it_keeps_decimals_exact_and_reads_iso_datetimes_with_offsets():
    text = MINIMAL.replace('input: "0.15"', "input: 0.150000001").replace(
        "effective_from: 2026-01-01, input", 'effective_from: "2026-06-01T02:30:00+02:00", input'
    )
    load(text)
    price = TokenPrice.objects.get()
    assert price.input_per_mtok == Decimal("0.150000001")
    assert price.effective_from == datetime(2026, 6, 1, 0, 30, tzinfo=UTC)
