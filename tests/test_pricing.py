"""The price in force at a timestamp: inclusive starts, exclusive ends, gaps, precedence."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from costcenter.catalog import catalog_load
from costcenter.models import Endpoint, GpuHourPrice, LlmModel, Pool, TokenPrice
from costcenter.pricing import gpu_hour_price_at, overlap_problem, token_price_at

pytestmark = pytest.mark.django_db

CATALOG = """
pools:
  - {name: mi300x-b, vendor: amd, gpu_model: MI300X, gpu_count: 8,
     prices: [{effective_from: 2026-01-01, gpu_hour: "1.90"},
              {effective_from: "2026-11-15T06:00:00Z", effective_to: 2026-12-01, gpu_hour: "1.70"}]}
endpoints:
  - {name: openai-direct, kind: token_priced, provider: openai}
  - {name: azure-eu, kind: token_priced, provider: azure}
models:
  - name: gpt-4.1
    prices:
      - {effective_from: 2026-01-01, effective_to: 2026-11-20, input: "2.00", cached_input: "0.50", output: "8.00"}
      - {effective_from: "2026-11-20T12:00:00Z", input: "1.80", output: "7.20"}
      - {effective_from: 2026-01-01, endpoint: azure-eu, input: "2.20", output: "8.80"}
  - name: gpt-4.1
    version: "2026-04-14"
    prices:
      - {effective_from: 2026-06-01, input: "1.00", output: "4.00"}
"""

US = timedelta(microseconds=1)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.fixture
def book():
    catalog_load(CATALOG)
    return {
        "model": LlmModel.objects.get(name="gpt-4.1", version=""),
        "dated": LlmModel.objects.get(name="gpt-4.1", version="2026-04-14"),
        "direct": Endpoint.objects.get(name="openai-direct"),
        "azure": Endpoint.objects.get(name="azure-eu"),
        "pool": Pool.objects.get(name="mi300x-b"),
    }


def input_price(book, when: datetime, *, model="model", endpoint="direct"):
    price = token_price_at(model=book[model], endpoint=book[endpoint] if endpoint else None, at=when)
    return None if price is None else price.input_per_mtok


def test_a_price_starts_at_its_effective_from_inclusive(book):
    assert input_price(book, at("2026-01-01T00:00:00")) == Decimal("2.00")
    assert input_price(book, at("2026-01-01T00:00:00") - US) is None


def test_an_explicit_effective_to_is_exclusive_and_leaves_a_gap_until_the_next_row(book):
    assert input_price(book, at("2026-11-20T00:00:00") - US) == Decimal("2.00")
    # 2026-11-20 00:00 to 12:00 is covered by no row: unpriced, not the old price.
    assert input_price(book, at("2026-11-20T00:00:00")) is None
    assert input_price(book, at("2026-11-20T11:59:59")) is None
    assert input_price(book, at("2026-11-20T12:00:00")) == Decimal("1.80")
    assert input_price(book, at("2030-01-01T00:00:00")) == Decimal("1.80")


def test_the_cached_price_defaults_to_the_input_price(book):
    old = token_price_at(model=book["model"], endpoint=None, at=at("2026-05-01T00:00:00"))
    new = token_price_at(model=book["model"], endpoint=None, at=at("2026-11-21T00:00:00"))
    assert old.effective_cached_input_per_mtok == Decimal("0.50")
    assert new.effective_cached_input_per_mtok == Decimal("1.80")


def test_an_endpoint_price_wins_over_the_model_price(book):
    assert input_price(book, at("2026-05-01T00:00:00"), endpoint="azure") == Decimal("2.20")
    assert input_price(book, at("2026-05-01T00:00:00"), endpoint="direct") == Decimal("2.00")
    assert input_price(book, at("2026-05-01T00:00:00"), endpoint=None) == Decimal("2.00")


def test_a_versioned_model_uses_its_own_prices_then_the_version_less_ones(book):
    assert input_price(book, at("2026-06-01T00:00:00"), model="dated") == Decimal("1.00")
    # Before its own series starts, the model name's generic price applies.
    assert input_price(book, at("2026-05-31T23:59:59"), model="dated") == Decimal("2.00")


def test_each_lookup_returns_the_price_row_so_costing_can_record_the_version(book):
    first = token_price_at(model=book["model"], endpoint=None, at=at("2026-03-01T00:00:00"))
    second = token_price_at(model=book["model"], endpoint=None, at=at("2026-12-01T00:00:00"))
    assert isinstance(first, TokenPrice) and isinstance(second, TokenPrice)
    assert first.pk != second.pk


def test_gpu_hour_prices_follow_the_same_rule(book):
    pool = book["pool"]
    assert gpu_hour_price_at(pool=pool, at=at("2025-12-31T23:59:59")) is None
    assert gpu_hour_price_at(pool=pool, at=at("2026-11-15T05:59:59")).gpu_hour_price == Decimal("1.90")
    assert gpu_hour_price_at(pool=pool, at=at("2026-11-15T06:00:00")).gpu_hour_price == Decimal("1.70")
    assert gpu_hour_price_at(pool=pool, at=at("2026-12-01T00:00:00") - US).gpu_hour_price == Decimal("1.70")
    assert gpu_hour_price_at(pool=pool, at=at("2026-12-01T00:00:00")) is None


def test_overlap_rules():
    jan, feb, mar = at("2026-01-01T00:00:00"), at("2026-02-01T00:00:00"), at("2026-03-01T00:00:00")
    assert overlap_problem([(jan, None), (feb, None)]) is None  # open end stops at the next start
    assert overlap_problem([(jan, feb), (feb, None)]) is None  # touching is not overlapping
    assert overlap_problem([(feb, None), (jan, mar)]) is not None
    assert overlap_problem([(jan, None), (jan, feb)]) == "two prices start at 2026-01-01T00:00:00+00:00"


def test_the_admin_refuses_an_overlapping_price(book):
    row = GpuHourPrice(
        pool=book["pool"],
        effective_from=at("2026-11-20T00:00:00"),
        effective_to=None,
        gpu_hour_price=Decimal(1),
    )
    with pytest.raises(ValidationError, match="overlaps"):
        row.full_clean()
