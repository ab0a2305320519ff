"""Selector rows → plotly figures as plain dicts, ready for ``json_script``.

The only place where numbers become floats (plotly draws floats); tables keep Decimals.
Labels are user data: plotly renders them as SVG text, and ``json_script`` escapes them for
HTML, so a model called ``<img onerror=…>`` is drawn as those characters, never run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import plotly.graph_objects as go

from costcenter.selectors import PoolRow

VENDOR_COLOURS = {"nvidia": "#76b900", "amd": "#ed1c24", "other": "#7f7f7f"}


def _as_dict(figure: go.Figure) -> dict:
    # plotly's JSON encoder handles numpy and dates; json_script needs a plain object.
    return json.loads(figure.to_json())


def _layout(**overrides) -> dict:
    layout = {
        "margin": {"l": 48, "r": 16, "t": 32, "b": 48},
        "height": 300,
        "font": {"family": "system-ui, sans-serif", "size": 12},
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
    }
    layout.update(overrides)
    return layout


def gpus_by_pool(pools: Sequence[PoolRow]) -> dict | None:
    """Bar chart of GPU count per pool, coloured by accelerator vendor; None when no pools."""
    if not pools:
        return None
    figure = go.Figure()
    for vendor in sorted({pool.vendor for pool in pools}):
        rows = [pool for pool in pools if pool.vendor == vendor]
        figure.add_bar(
            name=rows[0].vendor_label,
            x=[pool.name for pool in rows],
            y=[pool.gpu_count for pool in rows],
            marker_color=VENDOR_COLOURS.get(vendor, VENDOR_COLOURS["other"]),
            hovertemplate="%{x}: %{y} GPUs<extra></extra>",
        )
    figure.update_layout(**_layout(title={"text": "GPUs per pool"}, yaxis={"title": {"text": "GPUs"}}))
    return _as_dict(figure)


# --- Dashboards ---------------------------------------------------------------------------------
# Every label that comes from user data goes through ``_text``: plotly renders a small subset of
# HTML in SVG text (<b>, <br>, <a href>), so names are entity-escaped and show as typed.

PALETTE = (
    "#2456c7", "#e07b00", "#2a9d5c", "#c23b6b", "#7b52c7", "#0f8f9c", "#a8a21b", "#8c5a2b",
    "#d04a2d", "#4b7d2c", "#5b6473",
)  # fmt: skip
OTHER_COLOUR = "#b8bfca"
UNALLOCATED_COLOUR = "#8c96a8"


def _text(label) -> str:
    return str(label).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _float(value) -> float | None:
    return None if value is None else float(value)


def _iso(moment) -> str:
    return moment.isoformat()


def spend_over_time(
    rows: Sequence[dict],
    *,
    dimension: str,
    label_of,
    unallocated_by_day: dict | None,
    top: int = 8,
) -> dict | None:
    """Stacked bars of spend per day by ``dimension`` (the largest ``top`` groups, the rest as
    "other"), plus unallocated pool cost when it is part of the viewer's spend; None when empty."""
    totals: dict = {}
    for row in rows:
        if row["cost"] is not None:
            totals[row[dimension]] = totals.get(row[dimension], 0) + row["cost"]
    if not totals and not unallocated_by_day:
        return None
    ranked = sorted(totals, key=lambda value: (-totals[value], str(value)))
    shown, rest = ranked[:top], set(ranked[top:])
    figure = go.Figure()
    for index, value in enumerate(shown):
        points = [row for row in rows if row[dimension] == value and row["cost"] is not None]
        figure.add_bar(
            name=_text(label_of(dimension, value)),
            x=[_iso(row["period"]) for row in points],
            y=[float(row["cost"]) for row in points],
            marker_color=PALETTE[index % len(PALETTE)],
            hovertemplate="%{x|%d %b}: $%{y:,.2f}<extra>%{fullData.name}</extra>",
        )
    if rest:
        other: dict = {}
        for row in rows:
            if row[dimension] in rest and row["cost"] is not None:
                other[row["period"]] = other.get(row["period"], 0) + row["cost"]
        figure.add_bar(
            name=f"{len(rest)} other",
            x=[_iso(day) for day in sorted(other)],
            y=[float(other[day]) for day in sorted(other)],
            marker_color=OTHER_COLOUR,
            hovertemplate="%{x|%d %b}: $%{y:,.2f}<extra>other</extra>",
        )
    if unallocated_by_day:
        days = sorted(unallocated_by_day)
        figure.add_bar(
            name="Unallocated pool cost",
            x=[_iso(day) for day in days],
            y=[float(unallocated_by_day[day]) for day in days],
            marker_color=UNALLOCATED_COLOUR,
            marker_pattern_shape="/",
            hovertemplate="%{x|%d %b}: $%{y:,.2f}<extra>unallocated</extra>",
        )
    figure.update_layout(
        **_layout(
            barmode="stack",
            yaxis={"title": {"text": "Spend ($)"}, "tickformat": "$,.2f"},
            xaxis={"type": "date", "tickformat": "%d %b"},
            legend={"orientation": "h", "y": -0.2},
            height=340,
        )
    )
    return _as_dict(figure)


# Metrics that add up across groups (an "other" series makes sense for them).
ADDITIVE = {"cost", "successful_tasks", "attempts", "tokens", "idle_cost", "unpriced_attempts"}
METRIC_FORMATS = {
    "cost": "$,.2f",
    "idle_cost": "$,.2f",
    "cost_per_successful_task": "$,.4f",
    "success_rate": ".1%",
    "retry_rate": ".1%",
}


def explorer_chart(
    rows: Sequence[dict],
    *,
    group_by: Sequence[str],
    granularity: str,
    metric: str,
    metric_label: str,
    value_of,
    label_of_row,
    top: int = 10,
) -> dict | None:
    """Bars per group (granularity ``total``) or one line per group over time; None when no rows."""
    if not rows:
        return None
    figure = go.Figure()
    tick = METRIC_FORMATS.get(metric, ",.0f")
    if granularity == "total":
        points = [(label_of_row(row), value_of(row, metric)) for row in rows]
        points = [(label, value) for label, value in points if value is not None]
        points.sort(key=lambda item: -float(item[1]))
        points = points[:30]
        figure.add_bar(
            x=[float(value) for _, value in points],
            y=[_text(label) for label, _ in points],
            orientation="h",
            marker_color=PALETTE[0],
            hovertemplate=f"%{{y}}: %{{x:{tick}}}<extra></extra>",
        )
        figure.update_layout(
            **_layout(
                xaxis={"title": {"text": metric_label}, "tickformat": tick},
                yaxis={"autorange": "reversed", "automargin": True},
                height=max(240, 28 * len(points) + 90),
            )
        )
        return _as_dict(figure)
    weight: dict = {}
    for row in rows:
        key = label_of_row(row)
        weight[key] = weight.get(key, 0) + float(row["cost"] or 0) + float(row["attempts"] or 0) * 1e-9
    ranked = sorted(weight, key=lambda key: (-weight[key], key))
    shown, rest = ranked[:top], set(ranked[top:])
    for index, key in enumerate(shown):
        points = [(row["period"], value_of(row, metric)) for row in rows if label_of_row(row) == key]
        points = [(period, value) for period, value in points if value is not None]
        figure.add_scatter(
            name=_text(key),
            x=[_iso(period) for period, _ in points],
            y=[float(value) for _, value in points],
            mode="lines+markers",
            line={"color": PALETTE[index % len(PALETTE)], "width": 2},
            marker={"size": 5},
            hovertemplate=f"%{{x}}: %{{y:{tick}}}<extra>%{{fullData.name}}</extra>",
        )
    if rest and metric in ADDITIVE:
        other: dict = {}
        for row in rows:
            if label_of_row(row) in rest and value_of(row, metric) is not None:
                other[row["period"]] = other.get(row["period"], 0) + float(value_of(row, metric))
        figure.add_scatter(
            name=f"{len(rest)} other",
            x=[_iso(period) for period in sorted(other)],
            y=[other[period] for period in sorted(other)],
            mode="lines",
            line={"color": OTHER_COLOUR, "dash": "dot"},
        )
    figure.update_layout(
        **_layout(
            yaxis={"title": {"text": metric_label}, "tickformat": tick, "rangemode": "tozero"},
            xaxis={"type": "date"},
            legend={"orientation": "h", "y": -0.2},
            height=360,
        )
    )
    return _as_dict(figure)


def matrix_scatter(lines) -> dict | None:
    """Cost per successful task against p95 latency, one marker per model × hardware (size: attempts)."""
    points = [
        line
        for line in lines
        if line.row.cost_per_successful_task is not None and line.row.latency_p95_ms is not None
    ]
    if not points:
        return None
    largest = max(line.row.attempts for line in points) or 1
    figure = go.Figure()
    for vendor in sorted({line.row.vendor or "" for line in points}):
        group = [line for line in points if (line.row.vendor or "") == vendor]
        figure.add_scatter(
            name=VENDOR_NAMES.get(vendor, "Hosted API"),
            x=[line.row.latency_p95_ms / 1000 for line in group],
            y=[float(line.row.cost_per_successful_task) for line in group],
            text=[_text(f"{line.row.model} @ {line.where}") for line in group],
            mode="markers",
            marker={
                "size": [10 + 30 * (line.row.attempts / largest) ** 0.5 for line in group],
                "color": VENDOR_COLOURS.get(vendor, PALETTE[0]),
                "opacity": 0.8,
                "line": {"width": 1, "color": "#ffffff"},
            },
            hovertemplate="%{text}<br>p95 latency %{x:.2f} s<br>$%{y:.4f} per successful task<extra></extra>",
        )
    figure.update_layout(
        **_layout(
            xaxis={"title": {"text": "Latency p95 (s)"}, "rangemode": "tozero"},
            yaxis={
                "title": {"text": "Cost per successful task ($)"},
                "tickformat": "$,.4f",
                "rangemode": "tozero",
            },
            legend={"orientation": "h", "y": -0.25},
            height=360,
        )
    )
    return _as_dict(figure)


VENDOR_NAMES = {"nvidia": "NVIDIA", "amd": "AMD", "other": "Other", "": "Hosted API"}


def fleet_utilisation(series: Sequence[dict]) -> dict | None:
    """Mean GPU utilisation per pool over time (hour or day buckets); None without any metric."""
    pools = sorted({row["pool"] for row in series if row["mean_utilisation"] is not None})
    if not pools:
        return None
    figure = go.Figure()
    for index, pool in enumerate(pools):
        points = [row for row in series if row["pool"] == pool and row["mean_utilisation"] is not None]
        figure.add_scatter(
            name=_text(pool),
            x=[_iso(row["period"]) for row in points],
            y=[float(row["mean_utilisation"]) for row in points],
            mode="lines",
            line={
                "color": VENDOR_COLOURS.get(points[0]["vendor"], PALETTE[index % len(PALETTE)]),
                "width": 2,
            },
            hovertemplate="%{x}: %{y:.0%}<extra>%{fullData.name}</extra>",
        )
    figure.update_layout(
        **_layout(
            yaxis={"title": {"text": "Mean GPU utilisation"}, "tickformat": ".0%", "range": [0, 1]},
            xaxis={"type": "date"},
            legend={"orientation": "h", "y": -0.2},
            shapes=[
                {
                    "type": "line",
                    "xref": "paper",
                    "x0": 0,
                    "x1": 1,
                    "y0": 0.4,
                    "y1": 0.4,
                    "line": {"color": "#a61b1b", "dash": "dot", "width": 1},
                }
            ],
        )
    )
    return _as_dict(figure)


def fleet_cost(pools) -> dict | None:
    """Per pool: busy (pool cost − idle) and idle cost, stacked; None when no pool cost is known."""
    priced = [pool for pool in pools if pool.pool_cost is not None]
    if not priced:
        return None
    figure = go.Figure()
    busy = [float(pool.pool_cost - (pool.idle_cost or 0)) for pool in priced]
    figure.add_bar(
        name="Busy",
        x=[_text(pool.name) for pool in priced],
        y=busy,
        marker_color="#2a9d5c",
        hovertemplate="%{x}: $%{y:,.2f} busy<extra></extra>",
    )
    figure.add_bar(
        name="Idle",
        x=[_text(pool.name) for pool in priced],
        y=[float(pool.idle_cost or 0) for pool in priced],
        marker_color="#d04a2d",
        hovertemplate="%{x}: $%{y:,.2f} idle<extra></extra>",
    )
    figure.update_layout(
        **_layout(barmode="stack", yaxis={"title": {"text": "Pool cost ($)"}, "tickformat": "$,.0f"})
    )
    return _as_dict(figure)


def cost_waterfall(result) -> dict:
    """Spend before → the seven effects → spend after, as a plotly waterfall."""
    labels = ["Before", *[_text(effect.label.split(" (")[0]) for effect in result.effects], "After"]
    values = [
        float(result.before_spend),
        *[float(effect.amount) for effect in result.effects],
        float(result.after_spend),
    ]
    measures = ["absolute", *["relative"] * len(result.effects), "total"]
    figure = go.Figure(
        go.Waterfall(
            x=labels,
            y=values,
            measure=measures,
            text=[f"${value:,.2f}" for value in values],
            textposition="outside",
            connector={"line": {"color": "#b8bfca"}},
            increasing={"marker": {"color": "#d04a2d"}},
            decreasing={"marker": {"color": "#2a9d5c"}},
            totals={"marker": {"color": "#2456c7"}},
            hovertemplate="%{x}: $%{y:,.2f}<extra></extra>",
        )
    )
    figure.update_layout(**_layout(yaxis={"title": {"text": "Spend ($)"}, "tickformat": "$,.0f"}, height=360))
    return _as_dict(figure)


def ingestion_per_day(per_day: Sequence[dict]) -> dict | None:
    """Accepted, duplicate and rejected records per day, stacked; None when nothing ran."""
    if not per_day:
        return None
    figure = go.Figure()
    for name, colour in (("accepted", "#2a9d5c"), ("duplicate", "#b8bfca"), ("rejected", "#d04a2d")):
        figure.add_bar(
            name=name,
            x=[_iso(row["day"]) for row in per_day],
            y=[int(row[name] or 0) for row in per_day],
            marker_color=colour,
            hovertemplate=f"%{{x|%d %b}}: %{{y:,}} {name}<extra></extra>",
        )
    figure.update_layout(
        **_layout(
            barmode="stack",
            yaxis={"title": {"text": "Records"}},
            xaxis={"type": "date", "tickformat": "%d %b"},
            legend={"orientation": "h", "y": -0.2},
        )
    )
    return _as_dict(figure)
