"""The model × hardware evaluation matrix: quality, speed, GPU use and cost side by side.

One row per model × GPU pool for self-run endpoints (all of a pool's endpoints together), and
per model × endpoint for token-priced and unknown endpoints (``pool`` and ``vendor`` are None
there, ``provider`` and ``endpoint`` say where it ran). Read from the rollups only, scoped
exactly like ``selectors.cost_rows`` (``usage_queryset``): one query for whole days, two (facts,
histograms) otherwise, whose size depends on the number of groups, days and histogram buckets,
never on the number of attempts. Whole-day ranges (every page) read the daily rollups, where
``costing.rebuild_day`` has already evaluated the cost split, the priced-only token counts and
the attempt-weighted pool metrics on each hourly row; other ranges read the hourly rows and join
their pool-hours. Both give the same numbers (tests/test_matrix.py holds them equal).

Columns (see docs/cost-change.md):

* ``success_rate`` = successful_tasks / tasks; ``attempt_failure_rate`` = failed attempts /
  attempts; ``retry_rate`` = (attempts − tasks) / tasks — the bucket counts of PRODUCT.md, summed.
* ``ttft_p50_ms``, ``ttft_p95_ms``, ``latency_p95_ms`` (all attempts that reported them, failed
  ones included) and ``output_tokens_per_s_p50`` (successful attempts with output) are read from
  the rollups' log-spaced histograms with ``costcenter.histograms.percentile``: each is the
  geometric middle of the bucket holding the percentile, so it is within ±9.05 %
  (``histograms.MAX_RELATIVE_ERROR`` = 2^(1/8) − 1) of the exact percentile of the same attempts.
* ``mean_gpu_utilisation`` (0–1), ``mean_memory_used_mib`` and ``mean_memory_total_mib``: the
  pool's PoolHour values over the hours this model ran on the pool, weighted by the model's
  attempts in each hour (the utilisation an average attempt of this model ran at); hours with no
  metric are left out of the weights; None where no hour had one, and always for token-priced rows.
* ``cost_per_1m_input_tokens`` / ``cost_per_1m_output_tokens``: for pool rows the allocated cost
  split by the pool's input/output weights (as the engine allocated it) per 1M prompt/completion
  tokens; for token-priced rows the effective price paid (input includes cached input at the
  cached price, so it can sit below the list price). Only priced rows count, numerator and
  denominator alike.
* ``cost`` is the allocated/attempt cost (unallocated pool cost has no model: not here);
  ``cost_per_successful_task`` = cost / successful_tasks, None when there are none or no cost is
  known; ``cost_complete`` is False when the row has unpriced attempts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db import connection

from costcenter import histograms
from costcenter.cost_change import FLAT_COST_SQL, OUTPUT_COST_SQL, ROW_JOINS, scoped_hourly_sql
from costcenter.money import TOKENS_PER_PRICE_UNIT
from costcenter.selectors import CostQuery, usage_queryset


@dataclass(frozen=True)
class MatrixRow:
    model: str
    pool: str | None  # GPU pool (self-run); None for token-priced endpoints
    vendor: str | None  # accelerator vendor of the pool
    endpoint: str | None  # token-priced/unknown endpoint; None for pool rows (all its endpoints)
    provider: str | None
    attempts: int
    successful_attempts: int
    failed_attempts: int
    tasks: int
    successful_tasks: int
    prompt_tokens: int
    completion_tokens: int
    success_rate: float | None
    attempt_failure_rate: float | None
    retry_rate: float | None
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    latency_p95_ms: float | None
    output_tokens_per_s_p50: float | None
    mean_gpu_utilisation: float | None
    mean_memory_used_mib: float | None
    mean_memory_total_mib: float | None
    cost: Decimal | None
    cost_per_1m_input_tokens: Decimal | None
    cost_per_1m_output_tokens: Decimal | None
    cost_per_successful_task: Decimal | None
    cost_complete: bool
    unpriced_attempts: int
    unpriced_tokens: int


# The row's place: pool rows group by pool, the others by endpoint.
_KEYS = """m.name,
       p.name, p.vendor,
       CASE WHEN p.id IS NULL THEN e.name END,
       CASE WHEN p.id IS NULL THEN e.provider END"""
_KEY_COUNT = 5
_PRICED = "FILTER (WHERE h.cost IS NOT NULL)"
_WEIGHT = "h.attempts"


def _weighted(column: str) -> str:
    """Σ attempts × value and Σ attempts over the hours where the pool reported the value."""
    present = f"FILTER (WHERE ph.{column} IS NOT NULL)"
    return f"sum({_WEIGHT} * ph.{column}::float8) {present}, sum({_WEIGHT}) {present}"


def _hourly_facts_sql(table: str) -> str:
    """Facts of a range that is not whole days: every hourly row, joined to its pool-hour."""
    return f"""
        SELECT {_KEYS},
               sum(h.attempts), sum(h.successful_attempts), sum(h.tasks), sum(h.successful_tasks),
               sum(h.prompt_tokens), sum(h.completion_tokens),
               sum(h.prompt_tokens) {_PRICED}, sum(h.completion_tokens) {_PRICED},
               sum(h.cost), sum({OUTPUT_COST_SQL}), sum({FLAT_COST_SQL}),
               sum(h.unpriced_attempts), sum(h.unpriced_tokens),
               {_weighted("mean_utilisation")},
               {_weighted("memory_used_mib")},
               {_weighted("memory_total_mib")}
        FROM {table} {ROW_JOINS}
        LEFT JOIN costcenter_poolhour ph ON ph.pool_id = p.id AND ph.hour = h.hour
        GROUP BY 1, 2, 3, 4, 5
    """  # noqa: S608 - constants and Django's compiled, parameterised scope


# The same facts for whole days: ``costing.rebuild_day`` already evaluated the cost split, the
# priced-only counts and the attempt-weighted pool metrics on each hourly row and summed them.
DAILY_FACT_COLUMNS = (
    "model_id",
    "endpoint_id",
    "attempts",
    "successful_attempts",
    "tasks",
    "successful_tasks",
    "prompt_tokens",
    "completion_tokens",
    "priced_prompt_tokens",
    "priced_completion_tokens",
    "cost",
    "output_cost",
    "flat_cost",
    "unpriced_attempts",
    "unpriced_tokens",
    "utilisation_x_attempts",
    "utilisation_attempts",
    "memory_used_x_attempts",
    "memory_used_attempts",
    "memory_total_x_attempts",
    "memory_total_attempts",
)


# Histograms are added up bucket by bucket in the database, so only buckets travel. Each bucket
# is its own sum (``sum(h.latency_histogram[i])`` for i = 1…BUCKETS; a subscript past a trimmed
# array's end is NULL, which sum() skips): one pass over the rows, about 2.5× faster than
# unnesting the arrays into a row per bucket and grouping those (docs/benchmarks.md).
_HISTOGRAM_METRICS = (
    ("latency", "latency_histogram"),
    ("ttft", "ttft_histogram"),
    ("tps", "output_tps_histogram"),
)
_BUCKET_SUMS = tuple(
    f"h.{column}[{index}]" for _, column in _HISTOGRAM_METRICS for index in range(1, histograms.BUCKETS + 1)
)


def _grouped_sums_sql(table: str, expressions: tuple[str, ...]) -> str:
    """Σ of each expression per matrix row: per model and endpoint id first (integers hash
    faster than names), then per row's names (a pool's endpoints together), joined only to the
    few groups left. Sums of sums: exact for integers and numerics."""
    inner = ", ".join(f"sum({expression}) AS s{n}" for n, expression in enumerate(expressions))
    outer = ", ".join(f"sum(x.s{n})" for n in range(len(expressions)))
    return f"""
        SELECT {_KEYS}, {outer}
        FROM (SELECT h.model_id, h.endpoint_id, {inner} FROM {table} GROUP BY 1, 2) x
        JOIN costcenter_llmmodel m ON m.id = x.model_id
        LEFT JOIN costcenter_endpoint e ON e.id = x.endpoint_id
        LEFT JOIN costcenter_pool p ON p.id = e.pool_id AND e.kind = 'gpu_pool'
        GROUP BY 1, 2, 3, 4, 5
    """  # noqa: S608 - constants and Django's compiled, parameterised scope


_DAILY_FACT_SUMS = tuple(f"h.{column}" for column in DAILY_FACT_COLUMNS[2:])
_HISTOGRAM_COLUMNS = (
    "model_id",
    "endpoint_id",
    "latency_histogram",
    "ttft_histogram",
    "output_tps_histogram",
)


def _per_mtok(cost: Decimal | None, tokens: int | None) -> Decimal | None:
    if cost is None or not tokens:
        return None
    return cost * TOKENS_PER_PRICE_UNIT / tokens


def _mean(weighted_sum, weight) -> float | None:
    return float(weighted_sum) / float(weight) if weight else None


def evaluation_matrix(*, user, workload: str | None, start: datetime, end: datetime) -> list[MatrixRow]:
    """Per model × pool (or token-priced endpoint) for a workload (None: all) over [start, end)."""
    filters = (("workload", (workload,)),) if workload is not None else ()
    # Whole-day ranges read the daily rollups (what the pages ask for), others the hourly ones;
    # ``usage_queryset`` decides and scopes both the same way as every other reader.
    scoped, time_field = usage_queryset(user=user, query=CostQuery(start, end, (), "day", filters))
    with connection.cursor() as cursor:
        if time_field == "day":
            # One pass over the daily rows for the facts and the histograms together.
            sql, params = scoped.values(*DAILY_FACT_COLUMNS, *_HISTOGRAM_COLUMNS[2:]).query.sql_with_params()
            cursor.execute(_grouped_sums_sql(f"({sql}) h", _DAILY_FACT_SUMS + _BUCKET_SUMS), list(params))
            grouped = cursor.fetchall()
            split = _KEY_COUNT + len(_DAILY_FACT_SUMS)
            facts = [row[:split] for row in grouped]
            buckets = [row[:_KEY_COUNT] + row[split:] for row in grouped]
        else:
            table, params = scoped_hourly_sql(user=user, start=start, end=end, filters=filters)
            cursor.execute(_hourly_facts_sql(table), params)
            facts = cursor.fetchall()
            sql, params = scoped.values(*_HISTOGRAM_COLUMNS).query.sql_with_params()
            cursor.execute(_grouped_sums_sql(f"({sql}) h", _BUCKET_SUMS), list(params))
            buckets = cursor.fetchall()
    counts: dict[tuple, dict[str, list[int]]] = {}
    for bucket_row in buckets:
        sums = bucket_row[_KEY_COUNT:]
        counts[tuple(bucket_row[:_KEY_COUNT])] = {
            metric: [int(count or 0) for count in sums[n * histograms.BUCKETS : (n + 1) * histograms.BUCKETS]]
            for n, (metric, _) in enumerate(_HISTOGRAM_METRICS)
        }

    rows = []
    for fact in facts:
        key = tuple(fact[:_KEY_COUNT])
        (
            attempts,
            successful_attempts,
            tasks,
            successes,
            prompt,
            completion,
            priced_prompt,
            priced_completion,
            cost,
            output_cost,
            flat_cost,
            unpriced_attempts,
            unpriced_tokens,
            util_sum,
            util_weight,
            used_sum,
            used_weight,
            total_sum,
            total_weight,
        ) = fact[_KEY_COUNT:]
        # sum() of bigint columns comes back as numeric: counts are ints, ratios floats.
        attempts, successful_attempts, tasks, successes = (
            int(value) for value in (attempts, successful_attempts, tasks, successes)
        )
        input_cost = None if cost is None else cost - output_cost - flat_cost
        hist = counts.get(key, {})

        def pct(metric: str, q: float, scale: histograms.Scale, hist=hist) -> float | None:
            return histograms.percentile(hist.get(metric, []), q, scale)

        model, pool, vendor, endpoint, provider = key
        rows.append(
            MatrixRow(
                model=model,
                pool=pool,
                vendor=vendor,
                endpoint=endpoint,
                provider=provider,
                attempts=attempts,
                successful_attempts=successful_attempts,
                failed_attempts=attempts - successful_attempts,
                tasks=tasks,
                successful_tasks=successes,
                prompt_tokens=int(prompt),
                completion_tokens=int(completion),
                success_rate=successes / tasks if tasks else None,
                attempt_failure_rate=(attempts - successful_attempts) / attempts if attempts else None,
                retry_rate=(attempts - tasks) / tasks if tasks else None,
                ttft_p50_ms=pct("ttft", 0.50, histograms.TTFT_MS),
                ttft_p95_ms=pct("ttft", 0.95, histograms.TTFT_MS),
                latency_p95_ms=pct("latency", 0.95, histograms.LATENCY_MS),
                output_tokens_per_s_p50=pct("tps", 0.50, histograms.OUTPUT_TOKENS_PER_S),
                mean_gpu_utilisation=_mean(util_sum, util_weight),
                mean_memory_used_mib=_mean(used_sum, used_weight),
                mean_memory_total_mib=_mean(total_sum, total_weight),
                cost=cost,
                cost_per_1m_input_tokens=_per_mtok(input_cost, priced_prompt),
                cost_per_1m_output_tokens=_per_mtok(
                    output_cost if cost is not None else None, priced_completion
                ),
                cost_per_successful_task=cost / successes if cost is not None and successes else None,
                cost_complete=unpriced_attempts == 0,
                unpriced_attempts=int(unpriced_attempts),
                unpriced_tokens=int(unpriced_tokens),
            )
        )
    rows.sort(key=lambda row: (row.model, row.pool or "", row.endpoint or ""))
    return rows
