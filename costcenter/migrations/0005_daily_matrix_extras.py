"""Daily rollups keep the cost split and the attempt-weighted pool metrics (see DailyUsage).

Existing daily rows are filled from their hourly rows with the same expressions
``costing.rebuild_day`` uses (copied here, so later changes to the code do not change this step).
"""

from django.db import migrations, models

import costcenter.models

# Frozen copy of cost_split.OUTPUT_COST_SQL / FLAT_COST_SQL and costing._DAY_EXTRAS as of 0005.
_WEIGHTED = "(h.prompt_tokens * p.input_weight + h.completion_tokens * p.output_weight)"
_OUTPUT = f"""
CASE WHEN h.cost IS NULL THEN NULL
     WHEN p.id IS NOT NULL THEN
          CASE WHEN {_WEIGHTED} > 0
               THEN h.cost * h.completion_tokens * p.output_weight / {_WEIGHTED} ELSE 0 END
     ELSE LEAST(h.cost, coalesce(h.completion_tokens * (
              SELECT avg(tp.output_per_mtok) FROM costcenter_tokenprice tp WHERE tp.id = ANY(h.token_price_ids)
          ) / 1000000, 0))
END"""  # noqa: S608 - constants only
_FLAT = f"CASE WHEN h.cost IS NOT NULL AND p.id IS NOT NULL AND {_WEIGHTED} = 0 THEN h.cost ELSE 0 END"


def _weighted(column: str) -> str:
    present = f"FILTER (WHERE ph.{column} IS NOT NULL)"
    return f"sum(h.attempts * ph.{column}::float8) {present}, coalesce(sum(h.attempts) {present}, 0)"


BACKFILL = f"""
UPDATE costcenter_dailyusage d
SET priced_attempts = x.pa, priced_successful_tasks = x.pst,
    priced_prompt_tokens = x.ppt, priced_completion_tokens = x.pct,
    output_cost = x.output_cost, flat_cost = x.flat_cost,
    utilisation_x_attempts = x.ux, utilisation_attempts = x.ua,
    memory_used_x_attempts = x.mux, memory_used_attempts = x.mua,
    memory_total_x_attempts = x.mtx, memory_total_attempts = x.mta
FROM (
    SELECT date_trunc('day', h.hour, 'UTC') AS day,
           coalesce(h.team_id, -1) AS team_id, coalesce(h.workload_id, -1) AS workload_id,
           h.model_id, coalesce(h.endpoint_id, -1) AS endpoint_id,
           coalesce(sum(h.attempts) FILTER (WHERE h.cost IS NOT NULL), 0) AS pa,
           coalesce(sum(h.successful_tasks) FILTER (WHERE h.cost IS NOT NULL), 0) AS pst,
           coalesce(sum(h.prompt_tokens) FILTER (WHERE h.cost IS NOT NULL), 0) AS ppt,
           coalesce(sum(h.completion_tokens) FILTER (WHERE h.cost IS NOT NULL), 0) AS pct,
           sum({_OUTPUT}) AS output_cost, sum({_FLAT}) FILTER (WHERE h.cost IS NOT NULL) AS flat_cost,
           {_weighted("mean_utilisation").replace(", coalesce", " AS ux, coalesce")} AS ua,
           {_weighted("memory_used_mib").replace(", coalesce", " AS mux, coalesce")} AS mua,
           {_weighted("memory_total_mib").replace(", coalesce", " AS mtx, coalesce")} AS mta
    FROM costcenter_hourlyusage h
    LEFT JOIN costcenter_endpoint e ON e.id = h.endpoint_id
    LEFT JOIN costcenter_pool p ON p.id = e.pool_id AND e.kind = 'gpu_pool'
    LEFT JOIN costcenter_poolhour ph ON ph.pool_id = p.id AND ph.hour = h.hour
    GROUP BY 1, 2, 3, 4, 5
) x
WHERE d.day = x.day AND coalesce(d.team_id, -1) = x.team_id AND coalesce(d.workload_id, -1) = x.workload_id
  AND d.model_id = x.model_id AND coalesce(d.endpoint_id, -1) = x.endpoint_id
"""  # noqa: S608 - constants only


class Migration(migrations.Migration):
    dependencies = [
        ("costcenter", "0004_budgets_alerts"),
    ]

    operations = [
        migrations.AddField(
            model_name="dailyusage",
            name="priced_attempts",
            field=models.BigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="dailyusage",
            name="priced_successful_tasks",
            field=models.BigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="dailyusage",
            name="priced_prompt_tokens",
            field=models.BigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="dailyusage",
            name="priced_completion_tokens",
            field=models.BigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="dailyusage",
            name="flat_cost",
            field=costcenter.models.ExactSumField(null=True),
        ),
        migrations.AddField(
            model_name="dailyusage",
            name="memory_total_attempts",
            field=models.BigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="dailyusage",
            name="memory_total_x_attempts",
            field=models.FloatField(null=True),
        ),
        migrations.AddField(
            model_name="dailyusage",
            name="memory_used_attempts",
            field=models.BigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="dailyusage",
            name="memory_used_x_attempts",
            field=models.FloatField(null=True),
        ),
        migrations.AddField(
            model_name="dailyusage",
            name="output_cost",
            field=costcenter.models.ExactSumField(null=True),
        ),
        migrations.AddField(
            model_name="dailyusage",
            name="utilisation_attempts",
            field=models.BigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="dailyusage",
            name="utilisation_x_attempts",
            field=models.FloatField(null=True),
        ),
        migrations.RunSQL(BACKFILL, migrations.RunSQL.noop),
    ]
