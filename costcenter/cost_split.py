"""The split of a rollup row's cost into input, output and flat parts, as SQL expressions.

Used by ``cost_change`` and ``matrix`` over hourly rows, and by ``costing.rebuild_day``, which
sums the same expressions per day into ``DailyUsage.output_cost`` / ``flat_cost`` so whole-day
ranges need not read hourly rows. ``h`` is an hourly rollup row, ``p`` its pool (joined only for
``gpu_pool`` endpoints).

Pool rows: the allocated cost split by the pool's weights, exactly as the engine allocated it
(current weights: a weight change marks the hours for recompute, which rebuilds their days).
Token-priced rows: completion tokens × the output price of the row's price version; in an hour
where the price changed mid-hour (two versions) we cannot tell which tokens fell on which side,
so the mean of the versions' output prices is used — the split, never the total, is approximate.
Input cost is the rest: ``cost − output − flat``.
"""

from __future__ import annotations

WEIGHTED_SQL = "(h.prompt_tokens * p.input_weight + h.completion_tokens * p.output_weight)"
OUTPUT_COST_SQL = f"""
CASE WHEN h.cost IS NULL THEN NULL
     WHEN p.id IS NOT NULL THEN
          CASE WHEN {WEIGHTED_SQL} > 0
               THEN h.cost * h.completion_tokens * p.output_weight / {WEIGHTED_SQL} ELSE 0 END
     ELSE LEAST(h.cost, coalesce(h.completion_tokens * (
              SELECT avg(tp.output_per_mtok) FROM costcenter_tokenprice tp WHERE tp.id = ANY(h.token_price_ids)
          ) / 1000000, 0))
END"""  # noqa: S608 - constants only
# Cost that no token explains: a pool-hour whose attempts reported zero tokens (split evenly).
FLAT_COST_SQL = f"""
CASE WHEN h.cost IS NOT NULL AND p.id IS NOT NULL AND {WEIGHTED_SQL} = 0 THEN h.cost ELSE 0 END"""
