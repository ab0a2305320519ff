"""Dashboard pages: Explorer, Models × hardware, GPU fleet, Cost change, Ingestion health.

Each view parses its URL (the URL holds the whole state, so a view can be shared), calls the
page selectors of ``costcenter.dashboards`` (which compose the core selectors: page and API
agree), turns rows into figures with ``costcenter.charts`` and renders. Login is required.
"""

from __future__ import annotations

import csv
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone

from costcenter import charts, dashboards
from costcenter.access import sees_all_teams
from costcenter.cost_change import cost_change
from costcenter.matrix import evaluation_matrix
from costcenter.models import Workload
from costcenter.selectors import GRANULARITIES, CostQuery
from ingest.retention import retention_status

# The dimension a drill-down groups by next, after filtering to one value of the clicked one.
NEXT_DIMENSION = {
    "model": "team",
    "team": "model",
    "workload": "model",
    "vendor": "pool",
    "pool": "model",
    "endpoint": "model",
}


def link(path: str, params) -> str:
    """``path`` with a query string built from (name, value) pairs (empty values dropped)."""
    pairs = [(name, value) for name, value in params if value not in (None, "")]
    return f"{path}?{urlencode(pairs)}" if pairs else path


def period_params(period: dashboards.Period) -> list[tuple[str, str]]:
    if period.key == "custom":
        return [
            ("period", "custom"),
            ("start", period.first_day.isoformat()),
            ("end", period.last_day.isoformat()),
        ]
    return [("period", period.key)]


def explorer_link(*, period, group_by, filters=(), granularity: str = "day", **extra) -> str:
    params = [
        *period_params(period),
        *[("group_by", dimension) for dimension in group_by],
        ("granularity", granularity),
        *dashboards.filters_as_params(filters),
        *extra.items(),
    ]
    return link(reverse("cc-explorer"), params)


def _period_form(period: dashboards.Period) -> dict:
    return {
        "choices": dashboards.PERIOD_CHOICES,
        "key": period.key,
        "start": period.first_day.isoformat(),
        "end": period.last_day.isoformat(),
    }


def _selected(filters) -> dict[str, list[str]]:
    return {dimension: [dashboards.url_value(value) for value in values] for dimension, values in filters}


# --- Explorer ------------------------------------------------------------------------------------

TABLE_COLUMNS = (
    ("attempts", "Attempts", "count"),
    ("tasks", "Tasks", "count"),
    ("successful_tasks", "Successful tasks", "count"),
    ("success_rate", "Task success", "pct"),
    ("retry_rate", "Retry rate", "pct"),
    ("tokens", "Tokens", "tokens"),
    ("cost", "Cost", "money"),
    ("cost_per_successful_task", "Cost / successful task", "money_precise"),
    ("idle_cost", "Idle cost", "money"),
    ("unpriced_attempts", "Unpriced attempts", "count"),
)
CSV_FIELDS = (
    "period",
    "attempts",
    "successful_attempts",
    "failed_attempts",
    "tasks",
    "successful_tasks",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "reasoning_tokens",
    "cost",
    "cost_complete",
    "cost_per_successful_task",
    "success_rate",
    "attempt_success_rate",
    "retry_rate",
    "unpriced_attempts",
    "unpriced_tokens",
    "idle_cost",
)


def explorer_csv(data: dashboards.Explorer) -> HttpResponse:
    """The explorer's view as CSV: the API's field names and values (money unrounded)."""
    from costcenter.api import CostRowOutput, _plain

    query = data.query
    fields = [
        *query.group_by,
        *(name for name in CSV_FIELDS if name != "period" or query.granularity != "total"),
    ]
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    name = f"costs_{query.period.first_day}_{query.period.last_day}_{'-'.join(query.group_by) or 'total'}.csv"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    writer = csv.writer(response)
    writer.writerow(fields)
    rows = dashboards.sort_rows(data.all_rows, query.sort, query.group_by)
    for row in CostRowOutput([_plain(dict(row)) for row in rows], many=True).data:
        writer.writerow(["" if row.get(field) is None else row.get(field) for field in fields])
    return response


@login_required
def explorer(request):
    now = timezone.now()
    query, problems = dashboards.parse_explorer(request.GET, user=request.user, now=now)
    data = dashboards.explorer(user=request.user, query=query)
    if request.GET.get("format") == "csv":
        return explorer_csv(data)

    here = request.GET.copy()
    here.pop("format", None)

    def sort_link(column: str) -> str:
        current = query.sort.lstrip("-")
        descending = query.sort.startswith("-")
        wanted = column if current == column and descending else f"-{column}"
        params = here.copy()
        params["sort"] = wanted
        return f"{reverse('cc-explorer')}?{params.urlencode()}"

    def drill(row: dict, dimension: str) -> str:
        filters = [(d, values) for d, values in query.filters if d != dimension]
        filters.append((dimension, ("" if row[dimension] is None else row[dimension],)))
        grouped = {dimension, *(d for d, _ in filters)}
        following = NEXT_DIMENSION[dimension]
        if following in grouped:
            following = next((d for d in dashboards.DIMENSIONS if d not in grouped), dimension)
        return explorer_link(
            period=query.period,
            group_by=(following,),
            filters=filters,
            granularity=query.granularity,
            metric=query.metric,
        )

    metric_label = dict(dashboards.EXPLORER_METRICS)[query.metric]
    rows = []
    for row in data.rows:
        rows.append(
            {
                "groups": [
                    (dimension, dashboards.label_of(dimension, row[dimension]), drill(row, dimension))
                    for dimension in query.group_by
                ],
                "period": row.get("period"),
                "cells": [(dashboards.row_value(row, name), kind) for name, _, kind in TABLE_COLUMNS],
                "complete": row["cost_complete"],
                "unpriced_tokens": row["unpriced_tokens"],
            }
        )
    totals = data.totals
    csv_params = here.copy()
    csv_params["format"] = "csv"
    chart = charts.explorer_chart(
        data.all_rows,
        group_by=query.group_by,
        granularity=query.granularity,
        metric=query.metric,
        metric_label=metric_label,
        value_of=dashboards.row_value,
        label_of_row=lambda row: dashboards.group_label(row, query.group_by),
    )
    return render(
        request,
        "costcenter/explorer.html",
        {
            "query": query,
            "problems": problems,
            "period_form": _period_form(query.period),
            "dimensions": [(d, dashboards.DIMENSION_LABELS[d]) for d in dashboards.DIMENSIONS],
            "options": dashboards.filter_options(user=request.user),
            "selected": _selected(query.filters),
            "group_1": query.group_by[0] if query.group_by else "",
            "group_2": query.group_by[1] if len(query.group_by) > 1 else "",
            "granularities": GRANULARITIES,
            "metrics": dashboards.EXPLORER_METRICS,
            "metric_label": metric_label,
            "columns": [
                (
                    name,
                    label,
                    kind,
                    sort_link(name),
                    query.sort.lstrip("-") == name,
                    query.sort.startswith("-"),
                )
                for name, label, kind in TABLE_COLUMNS
            ],
            "group_headers": [
                (
                    d,
                    dashboards.DIMENSION_LABELS[d],
                    sort_link(d),
                    query.sort.lstrip("-") == d,
                    query.sort.startswith("-"),
                )
                for d in query.group_by
            ],
            "period_header": (
                sort_link("period"),
                query.sort.lstrip("-") == "period",
                query.sort.startswith("-"),
            ),
            "rows": rows,
            "row_count": len(data.all_rows),
            "truncated": data.truncated,
            "totals": totals,
            "total_cells": [(dashboards.row_value(totals, name), kind) for name, _, kind in TABLE_COLUMNS],
            "csv_url": f"{reverse('cc-explorer')}?{csv_params.urlencode()}",
            "chart": chart,
            "filtered": bool(query.filters),
        },
    )


# --- Models × hardware ---------------------------------------------------------------------------


@login_required
def models_hardware(request):
    now = timezone.now()
    # Seven days by default (recent behaviour is what a comparison of models is for). The matrix
    # reads one daily rollup row per group and day, so a month costs 2–3× a week; both stay
    # well inside the page budget at 20M attempts (docs/benchmarks.md, "Dashboard pages").
    period, problem = dashboards.period_or_default(request.GET, now=now, default="7d")
    dashboards.parse_filters(request.GET, user=request.user, dimensions=("team",))  # hidden team: 404
    workloads = list(Workload.objects.order_by("name").values_list("name", flat=True))
    workload = request.GET.get("workload") or None
    problems = [problem] if problem else []
    if workload is not None and workload not in workloads:
        problems.append(f"workload: unknown workload {workload!r}; showing all workloads")
        workload = None
    rows = evaluation_matrix(user=request.user, workload=workload, start=period.start, end=period.end)
    lines = dashboards.matrix_lines(rows)
    groups: list[tuple[str, int]] = []
    for column in dashboards.MATRIX_COLUMNS:
        if groups and groups[-1][0] == column.group:
            groups[-1] = (column.group, groups[-1][1] + 1)
        else:
            groups.append((column.group, 1))
    for line in lines:
        filters = [("model", (line.row.model,))]
        filters.append(
            ("pool", (line.row.pool,)) if line.row.pool else ("endpoint", (line.row.endpoint or "",))
        )
        if workload:
            filters.append(("workload", (workload,)))
        line.explore_url = explorer_link(period=period, group_by=("team",), filters=filters)
    return render(
        request,
        "costcenter/models_hardware.html",
        {
            "period": period,
            "period_form": _period_form(period),
            "problems": problems,
            "workloads": workloads,
            "workload": workload,
            "columns": dashboards.MATRIX_COLUMNS,
            "column_groups": groups,
            "lines": lines,
            "chart": charts.matrix_scatter(lines),
        },
    )


# --- GPU fleet -----------------------------------------------------------------------------------


@login_required
def fleet(request):
    now = timezone.now()
    period, problem = dashboards.period_or_default(request.GET, now=now, default="7d")
    dashboards.parse_filters(request.GET, user=request.user, dimensions=("team",))  # hidden team: 404
    filters = dashboards.parse_filters(request.GET, user=request.user, dimensions=("vendor", "pool"))
    data = dashboards.fleet(user=request.user, period=period, filters=filters)
    for pool in data.pools:
        pool.explore_url = explorer_link(period=period, group_by=("model",), filters=[("pool", (pool.name,))])
    return render(
        request,
        "costcenter/fleet.html",
        {
            "period": period,
            "period_form": _period_form(period),
            "problems": [problem] if problem else [],
            "data": data,
            "options": dashboards.filter_options(user=request.user),
            "selected": _selected(filters),
            "under_used": dashboards.UNDER_USED,
            "utilisation_chart": charts.fleet_utilisation(data.series) if data.org_wide else None,
            "cost_chart": charts.fleet_cost(data.pools) if data.org_wide else None,
            "has_gpus": any(pool.gpus for pool in data.pools),
        },
    )


# --- Cost change ---------------------------------------------------------------------------------

SCOPE_DIMENSIONS = ("team", "workload", "model", "vendor", "endpoint", "pool")


def _per(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


@login_required
def cost_change_page(request):
    now = timezone.now()
    before, after, problem = dashboards.parse_two_periods(request.GET, now=now)
    filters = dashboards.parse_filters(request.GET, user=request.user, dimensions=SCOPE_DIMENSIONS)
    result = cost_change(
        user=request.user,
        before=CostQuery(before.start, before.end, (), "total", filters),
        after=CostQuery(after.start, after.end, (), "total", filters),
    )
    models = []
    for change in result.models[:15]:
        models.append(
            {
                "change": change,
                "largest": max(change.effects, key=lambda effect: abs(effect.amount)),
                "retries_before": _per(change.before.attempts, change.before.successful_tasks),
                "retries_after": _per(change.after.attempts, change.after.successful_tasks),
                "url": explorer_link(
                    period=after,
                    group_by=("team",),
                    filters=[*filters, ("model", (change.model,))]
                    if "model" not in dict(filters)
                    else filters,
                ),
            }
        )
    empty = result.before_spend == 0 and result.after_spend == 0 and not result.models
    return render(
        request,
        "costcenter/cost_change.html",
        {
            "before": before,
            "after": after,
            "problems": [problem] if problem else [],
            "result": result,
            "effects": [(effect, effect.amount) for effect in result.effects],
            "models": models,
            "chart": None if empty else charts.cost_waterfall(result),
            "empty": empty,
            "dimensions": [(d, dashboards.DIMENSION_LABELS[d]) for d in SCOPE_DIMENSIONS],
            "options": dashboards.filter_options(user=request.user),
            "selected": _selected(filters),
            "sees_all": sees_all_teams(request.user),
            "explore_after": explorer_link(
                period=after, group_by=("model",), filters=filters, granularity="day"
            ),
        },
    )


# --- Ingestion health ----------------------------------------------------------------------------


@login_required
def ingestion(request):
    now = timezone.now()
    period, problem = dashboards.period_or_default(request.GET, now=now, default="7d")
    dashboards.parse_filters(request.GET, user=request.user, dimensions=("team",))  # hidden team: 404
    data = dashboards.ingestion(user=request.user, period=period, now=now)
    for row in data.unpriced:
        row["add_price_url"] = (
            reverse("admin:costcenter_llmmodel_change", args=[row["model_id"]]) + "#prices-group"
            if request.user.is_staff and row["model_id"]
            else ""
        )
        row["explore_url"] = explorer_link(
            period=period,
            group_by=("team",),
            filters=[("model", (row["model"],)), ("endpoint", (row["endpoint"] or "",))],
        )
    return render(
        request,
        "costcenter/ingestion.html",
        {
            "period": period,
            "period_form": _period_form(period),
            "problems": [problem] if problem else [],
            "data": data,
            "chart": charts.ingestion_per_day(data.per_day),
            "raw_retention_months": settings.RAW_RETENTION_MONTHS,
            # Storage is not attributed to teams: like sources and runs, org-wide viewers only.
            "retention": (
                retention_status(now=now, keep_months=settings.RAW_RETENTION_MONTHS)
                if data.org_wide
                else None
            ),
        },
    )
