"""FinOps FOCUS 1.2 rows from the cost rollups: one dataset for token-priced usage, GPU-pool cost
allocated to usage, and unallocated pool cost.

Rows (each a charge over ``[ChargePeriodStart, ChargePeriodEnd)``, UTC, clipped to the range):

* **Usage** — one row per rollup group (team × workload × model × endpoint) and bucket (hour, day
  or month). ``BilledCost`` is the group's known cost: token-priced attempts as priced, GPU-pool
  attempts as their allocated share of the pool-hour cost. A group whose attempts are all
  unpriced has ``BilledCost`` 0 — FOCUS forbids null — and says so in ``x_CostComplete`` (false),
  ``x_UnpricedAttempts`` / ``x_UnpricedTokens`` and ``ChargeDescription``: unpriced is not free.
* **Unallocated pool cost** — one row per pool and bucket in which the pool served nothing for
  some hours: ``ServiceCategory`` Compute, no team, ``x_CostKind`` ``unallocated``. Only for
  org-wide viewers and unfiltered (or pool/vendor-filtered) exports, exactly as
  ``selectors.cost_totals`` counts it.

So ``Σ BilledCost`` equals ``cost_totals(...)["total_spend"]`` (attempt costs + unallocated pool
cost) exactly — no rounding: amounts keep the rollups' 12 decimal places (round the sum, not
the rows, to reconcile to the cent). ``EffectiveCost``, ``ListCost`` and ``ContractedCost`` equal
``BilledCost``: the price book has no discounts, commitments or amortisation. Token quantities
are priced per ``1000 Tokens``, idle pool capacity per ``GPU-Hours``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db.models import F, Sum
from django.db.models.functions import Trunc

from costcenter import selectors
from costcenter.access import sees_all_teams
from costcenter.export import CHUNK_SIZE, Column

GRANULARITIES = ("hour", "day", "month")
USAGE_FILTERS = {"team", "model", "workload", "endpoint"}
AI_SERVICE = "AI and Machine Learning"
SELF_RUN = "Self-hosted"

# The rollup fields a usage row needs, by name (``values()`` joins the dimension tables).
_DIMENSIONS = {
    "team": "team__slug",
    "team_name": "team__name",
    "workload": "workload__name",
    "model": "model__name",
    "model_version": "model__version",
    "endpoint": "endpoint__name",
    "endpoint_kind": "endpoint__kind",
    "provider": "endpoint__provider",
    "pool": "endpoint__pool__name",
    "vendor": "endpoint__pool__vendor",
}
_SUMS = (
    "attempts",
    "successful_attempts",
    "tasks",
    "successful_tasks",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "reasoning_tokens",
    "cost",
    "idle_cost",
    "unpriced_attempts",
    "unpriced_tokens",
)

M, C, X = "FOCUS mandatory", "FOCUS conditional", "CostCenter extension"
COLUMNS: list[Column] = [
    Column("BilledCost", "decimal", False, M),
    Column("EffectiveCost", "decimal", False, M),
    Column("ListCost", "decimal", False, M),
    Column("ContractedCost", "decimal", False, M),
    Column("BillingAccountId", "string", False, M),
    Column("BillingAccountName", "string", False, M),
    Column("BillingCurrency", "string", False, M),
    Column("BillingPeriodStart", "datetime", False, M),
    Column("BillingPeriodEnd", "datetime", False, M),
    Column("ChargePeriodStart", "datetime", False, M),
    Column("ChargePeriodEnd", "datetime", False, M),
    Column("ChargeCategory", "string", False, M),
    Column("ChargeClass", "string", True, M),
    Column("ChargeDescription", "string", True, M),
    Column("ChargeFrequency", "string", True, "FOCUS recommended"),
    Column("PricingQuantity", "decimal", True, M),
    Column("PricingUnit", "string", True, M),
    Column("PricingCategory", "string", True, C),
    Column("ListUnitPrice", "decimal", True, C),
    Column("ContractedUnitPrice", "decimal", True, C),
    Column("ProviderName", "string", False, M),
    Column("PublisherName", "string", False, M),
    Column("InvoiceIssuerName", "string", False, M),
    Column("ServiceCategory", "string", False, M),
    Column("ServiceSubcategory", "string", True, "FOCUS recommended"),
    Column("ServiceName", "string", False, M),
    Column("ConsumedQuantity", "decimal", True, C),
    Column("ConsumedUnit", "string", True, C),
    Column("ResourceId", "string", True, C),
    Column("ResourceName", "string", True, C),
    Column("ResourceType", "string", True, C),
    Column("SkuId", "string", True, C),
    Column("SubAccountId", "string", True, C),
    Column("SubAccountName", "string", True, C),
    Column("SubAccountType", "string", True, C),
    Column("Tags", "json", True, C),
    Column("x_CostKind", "string", False, X),
    Column("x_Team", "string", True, X),
    Column("x_Workload", "string", True, X),
    Column("x_Model", "string", True, X),
    Column("x_ModelVersion", "string", True, X),
    Column("x_Endpoint", "string", True, X),
    Column("x_AcceleratorVendor", "string", True, X),
    Column("x_Pool", "string", True, X),
    Column("x_Attempts", "int", False, X),
    Column("x_SuccessfulAttempts", "int", False, X),
    Column("x_Tasks", "int", False, X),
    Column("x_SuccessfulTasks", "int", False, X),
    Column("x_PromptTokens", "int", False, X),
    Column("x_CompletionTokens", "int", False, X),
    Column("x_CachedTokens", "int", False, X),
    Column("x_ReasoningTokens", "int", False, X),
    Column("x_IdleCost", "decimal", True, X),
    Column("x_UnpricedAttempts", "int", False, X),
    Column("x_UnpricedTokens", "int", False, X),
    Column("x_IdleGpuHours", "decimal", True, X),
    Column("x_CostComplete", "bool", False, X),
]
COLUMN_NAMES = [column.name for column in COLUMNS]


def _step(moment: datetime, granularity: str) -> datetime:
    if granularity == "hour":
        return moment + timedelta(hours=1)
    if granularity == "day":
        return moment + timedelta(days=1)
    return _next_month(moment)


def _month_start(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def _next_month(moment: datetime) -> datetime:
    first = _month_start(moment)
    return (
        first.replace(year=first.year + 1, month=1)
        if first.month == 12
        else first.replace(month=first.month + 1)
    )


def _truncate(moment: datetime, granularity: str) -> datetime:
    moment = moment.astimezone(UTC)
    if granularity == "hour":
        return moment.replace(minute=0, second=0, microsecond=0)
    if granularity == "day":
        return moment.replace(hour=0, minute=0, second=0, microsecond=0)
    return _month_start(moment)


def _common(period: datetime, granularity: str, start: datetime, end: datetime) -> dict:
    """Billing and charge periods (the charge clipped to the exported range) and the account."""
    billing_start = _month_start(period)
    return {
        "BillingAccountId": getattr(settings, "FOCUS_BILLING_ACCOUNT_ID", "costcenter"),
        "BillingAccountName": getattr(settings, "FOCUS_BILLING_ACCOUNT_NAME", "CostCenter"),
        "BillingCurrency": settings.CURRENCY,
        "BillingPeriodStart": billing_start,
        "BillingPeriodEnd": _next_month(billing_start),
        "ChargePeriodStart": max(period, start),
        "ChargePeriodEnd": min(_step(period, granularity), end),
        "ChargeCategory": "Usage",
        "ChargeClass": None,
        "ChargeFrequency": "Usage-Based",
        "PricingCategory": "Standard",
        "ListUnitPrice": None,
        "ContractedUnitPrice": None,
    }


def _costs(amount: Decimal) -> dict:
    return {"BilledCost": amount, "EffectiveCost": amount, "ListCost": amount, "ContractedCost": amount}


def usage_row(row: dict, *, period: datetime, granularity: str, start: datetime, end: datetime) -> dict:
    """The FOCUS row of one rollup group in one bucket."""
    kind = row["endpoint_kind"] or "unknown"
    model = row["model"] if not row["model_version"] else f"{row['model']}@{row['model_version']}"
    endpoint = row["endpoint"]
    tokens = row["prompt_tokens"] + row["completion_tokens"]
    cost = row["cost"]
    if kind == "gpu_pool":
        provider = publisher = issuer = SELF_RUN
        service = f"GPU pool {row['pool']}"
        resource = ("pool/" + row["pool"], row["pool"], "GPU pool")
    else:
        provider = row["provider"] or endpoint or "Unknown"
        publisher = issuer = provider
        service = endpoint or "Unknown endpoint"
        resource = ("endpoint/" + endpoint, endpoint, "LLM API endpoint") if endpoint else (None, None, None)
    description = (
        f"{model} on {endpoint or 'an unnamed endpoint'}: {row['attempts']} attempts, "
        f"{row['successful_tasks']} of {row['tasks']} tasks successful"
    )
    if row["unpriced_attempts"]:
        description += f"; {row['unpriced_attempts']} attempts unpriced (cost unknown, not zero)"
    tags = {
        "team": row["team"],
        "workload": row["workload"],
        "model": model,
        "endpoint": endpoint,
        "pool": row["pool"],
        "accelerator_vendor": row["vendor"],
    }
    quantity = Decimal(tokens) / 1000
    return {
        **_costs(cost if cost is not None else Decimal(0)),
        **_common(period, granularity, start, end),
        "ChargeDescription": description,
        "PricingQuantity": quantity,
        "PricingUnit": "1000 Tokens",
        "ProviderName": provider,
        "PublisherName": publisher,
        "InvoiceIssuerName": issuer,
        "ServiceCategory": AI_SERVICE,
        "ServiceSubcategory": "Generative AI",
        "ServiceName": service,
        "ConsumedQuantity": Decimal(tokens),
        "ConsumedUnit": "Tokens",
        "ResourceId": resource[0],
        "ResourceName": resource[1],
        "ResourceType": resource[2],
        "SkuId": model,
        "SubAccountId": row["team"],
        "SubAccountName": row["team_name"],
        "SubAccountType": "Team" if row["team"] else None,
        "Tags": {key: value for key, value in tags.items() if value},
        "x_CostKind": kind,
        "x_Team": row["team"],
        "x_Workload": row["workload"],
        "x_Model": row["model"],
        "x_ModelVersion": row["model_version"] or None,
        "x_Endpoint": endpoint,
        "x_AcceleratorVendor": row["vendor"],
        "x_Pool": row["pool"],
        "x_Attempts": row["attempts"],
        "x_SuccessfulAttempts": row["successful_attempts"],
        "x_Tasks": row["tasks"],
        "x_SuccessfulTasks": row["successful_tasks"],
        "x_PromptTokens": row["prompt_tokens"],
        "x_CompletionTokens": row["completion_tokens"],
        "x_CachedTokens": row["cached_tokens"],
        "x_ReasoningTokens": row["reasoning_tokens"],
        "x_IdleCost": row["idle_cost"],
        "x_UnpricedAttempts": row["unpriced_attempts"],
        "x_UnpricedTokens": row["unpriced_tokens"],
        "x_IdleGpuHours": None,
        "x_CostComplete": row["unpriced_attempts"] == 0,
    }


def usage_queryset(*, user, start: datetime, end: datetime, granularity: str, filters=()):
    """Scoped rollup rows of the range as ``values()`` with ``period``, in time order.

    Rows of the table that already has the requested bucket (hourly rows for ``hour``, daily rows
    for ``day`` on day-aligned ranges) are read as they are; otherwise the database adds them up.
    """
    query = selectors.CostQuery(start, end, (), "hour" if granularity == "hour" else "day", tuple(filters))
    rows, time_field = selectors.usage_queryset(user=user, query=query)
    as_stored = (time_field == "hour" and granularity == "hour") or (
        time_field == "day" and granularity == "day"
    )
    if as_stored:
        return rows.values(*_DIMENSIONS.values(), *_SUMS, period=F(time_field)).order_by(time_field, "id")
    return (
        rows.annotate(period=Trunc(time_field, granularity, tzinfo=UTC))
        .values("period", *_DIMENSIONS.values())
        .annotate(**{name: Sum(name) for name in _SUMS})
        .order_by("period", *_DIMENSIONS.values())
    )


def _usage_rows(*, user, start, end, granularity, filters) -> Iterator[dict]:
    rows = usage_queryset(user=user, start=start, end=end, granularity=granularity, filters=filters)
    for row in rows.iterator(chunk_size=CHUNK_SIZE):
        plain = {name: row[field] for name, field in _DIMENSIONS.items()} | {
            name: row[name] for name in _SUMS
        }
        period = _truncate(row["period"], granularity)
        yield usage_row(plain, period=period, granularity=granularity, start=start, end=end)


def unallocated_included(*, user, filters=()) -> bool:
    """As ``selectors.cost_totals``: unallocated cost has no team, so only org-wide viewers of
    exports not filtered to teams, models, workloads or endpoints get it."""
    return sees_all_teams(user) and not any(dimension in USAGE_FILTERS for dimension, _ in filters)


def _pool_hours(*, user, start: datetime, end: datetime, filters) -> Iterator[dict]:
    """Hourly pool rows from ``selectors.pool_cost_rows``, a month at a time (bounded memory)."""
    window = start
    while window < end:
        window_end = min(window + timedelta(days=31), end)
        yield from selectors.pool_cost_rows(
            user=user, start=window, end=window_end, granularity="hour", filters=filters
        )
        window = window_end


def unallocated_row(bucket: dict, *, period, granularity, start, end) -> dict:
    amount = bucket["unallocated"]
    description = f"Unallocated cost of GPU pool {bucket['pool']}: {bucket['idle_gpu_hours']} GPU-hours that served no attempt"
    if bucket["unpriced_hours"]:
        description += f"; {bucket['unpriced_hours']} idle hours unpriced (cost unknown, not zero)"
    return {
        **_costs(amount),
        **_common(period, granularity, start, end),
        "ChargeDescription": description,
        "PricingQuantity": bucket["idle_gpu_hours"],
        "PricingUnit": "GPU-Hours",
        "ProviderName": SELF_RUN,
        "PublisherName": SELF_RUN,
        "InvoiceIssuerName": SELF_RUN,
        "ServiceCategory": "Compute",
        "ServiceSubcategory": None,
        "ServiceName": f"GPU pool {bucket['pool']}",
        "ConsumedQuantity": bucket["idle_gpu_hours"],
        "ConsumedUnit": "GPU-Hours",
        "ResourceId": "pool/" + bucket["pool"],
        "ResourceName": bucket["pool"],
        "ResourceType": "GPU pool",
        "SkuId": None,
        "SubAccountId": None,
        "SubAccountName": None,
        "SubAccountType": None,
        "Tags": {"pool": bucket["pool"], "accelerator_vendor": bucket["vendor"]},
        "x_CostKind": "unallocated",
        "x_Team": None,
        "x_Workload": None,
        "x_Model": None,
        "x_ModelVersion": None,
        "x_Endpoint": None,
        "x_AcceleratorVendor": bucket["vendor"],
        "x_Pool": bucket["pool"],
        **dict.fromkeys(
            (
                "x_Attempts",
                "x_SuccessfulAttempts",
                "x_Tasks",
                "x_SuccessfulTasks",
                "x_PromptTokens",
                "x_CompletionTokens",
                "x_CachedTokens",
                "x_ReasoningTokens",
                "x_UnpricedAttempts",
                "x_UnpricedTokens",
            ),
            0,
        ),
        "x_IdleCost": None,
        "x_IdleGpuHours": bucket["idle_gpu_hours"],
        "x_CostComplete": bucket["unpriced_hours"] == 0,
    }


def _unallocated_rows(*, user, start, end, granularity, filters) -> Iterator[dict]:
    """One row per pool and bucket with unallocated (or unpriced idle) pool-hours.

    A pool-hour is unallocated all or nothing (it served no attempt), so its GPU-hours are the
    idle capacity the row charges for.
    """
    pool_filters = [(dimension, values) for dimension, values in filters if dimension in {"pool", "vendor"}]
    # One small dict per pool and bucket with idle hours: pools × buckets, bounded by the range cap.
    buckets: dict[tuple[str, datetime], dict] = {}
    for hour in _pool_hours(user=user, start=start, end=end, filters=pool_filters):
        if hour["attempts"]:
            continue
        key = (hour["pool"], _truncate(hour["period"], granularity))
        bucket = buckets.setdefault(
            key,
            {
                "pool": hour["pool"],
                "vendor": hour["vendor"],
                "unallocated": Decimal(0),
                "idle_gpu_hours": Decimal(0),
                "unpriced_hours": 0,
            },
        )
        bucket["unallocated"] += hour["unallocated_cost"] or Decimal(0)
        bucket["idle_gpu_hours"] += hour["gpu_hours"]
        bucket["unpriced_hours"] += hour["unpriced_hours"]
    for (_, period), bucket in sorted(buckets.items(), key=lambda item: item[0][1]):
        if bucket["unallocated"] or bucket["unpriced_hours"]:
            yield unallocated_row(bucket, period=period, granularity=granularity, start=start, end=end)


def focus_rows(
    *, user, start: datetime, end: datetime, granularity: str = "day", filters=()
) -> Iterator[dict]:
    """FOCUS 1.2 rows of [start, end) (UTC, half-open) that ``user`` may see; see the module doc."""
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {', '.join(GRANULARITIES)}")
    filters = tuple(filters)
    yield from _usage_rows(user=user, start=start, end=end, granularity=granularity, filters=filters)
    if unallocated_included(user=user, filters=filters):
        yield from _unallocated_rows(
            user=user, start=start, end=end, granularity=granularity, filters=filters
        )


def usage_row_count(*, user, start: datetime, end: datetime, granularity: str, filters=()) -> int:
    """How many usage rows an export of the range has (for the size cap, before streaming)."""
    return usage_queryset(user=user, start=start, end=end, granularity=granularity, filters=filters).count()
