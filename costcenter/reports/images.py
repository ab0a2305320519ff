"""The report's charts: the dashboard's own plotly figures (``costcenter.charts``), exported as PNG
by plotly's static export (kaleido driving a headless Chromium at ``settings.BROWSER_PATH``).

Without a browser — or when the export fails for any reason — ``render`` returns no images and a
reason; the report then goes out without charts and says so. A chart never fails a report.
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from django.conf import settings

from costcenter import charts
from costcenter.dashboards import label_of
from costcenter.reports.content import Report

log = logging.getLogger(__name__)

WIDTH, HEIGHT = 640, 320


@dataclass(frozen=True)
class Chart:
    cid: str  # Content-ID of the inline image (without <>)
    title: str
    alt: str
    png: bytes


def figures(report: Report) -> list[tuple[str, str, str, dict]]:
    """(cid, title, alt text, figure) of each chart with data, from the dashboard's figure builders."""
    out = []
    dimension = "team" if report.scope.team_slugs is None else "model"
    spend = charts.spend_over_time(
        report.spend_by_day,
        dimension=dimension,
        label_of=label_of,
        unallocated_by_day=report.unallocated_by_day,
    )
    if spend is not None:
        first, last = report.period.first_day, report.period.last_day
        # Every day of the period on the axis, bars centred on their day's tick.
        spend["layout"]["xaxis"]["range"] = [f"{first - timedelta(days=1)}T12:00:00", f"{last}T12:00:00"]
        spend["layout"]["xaxis"]["dtick"] = 86400000
        days = {row["period"] for row in report.spend_by_day} | set(report.unallocated_by_day or {})
        out.append(
            (
                "spend-by-day",
                "Spend by day",
                f"Bar chart of spend per day by {dimension}, {report.period.label}, "
                f"{len(days)} day(s) with spend; the figures are in the table above.",
                spend,
            )
        )
    points = [row for row in report.trend if row["cost_per_successful_task"] is not None]
    if points:
        trend = charts.explorer_chart(
            points,
            group_by=(),
            granularity="week",
            metric="cost_per_successful_task",
            metric_label="Cost per successful task",
            value_of=lambda row, metric: row[metric],
            label_of_row=lambda row: row["label"],
        )
        last = points[-1]["cost_per_successful_task"]
        out.append(
            (
                "cost-per-task-trend",
                f"Cost per successful task, last {len(report.trend)} {report.period.noun}s",
                f"Line chart of cost per successful task per {report.period.noun} over the last "
                f"{len(report.trend)} {report.period.noun}s; the latest is {last:.4f} {settings.CURRENCY}.",
                trend,
            )
        )
    return out


def browser_path() -> str | None:
    path = getattr(settings, "BROWSER_PATH", None)
    return path if path and os.path.exists(path) else None


def render(report: Report) -> tuple[list[Chart], str]:
    """PNG charts of ``report`` and, when there are none although data exists, why."""
    wanted = figures(report)
    if not wanted:
        return [], ""
    browser = browser_path()
    if browser is None:
        return [], "Charts are unavailable: no headless browser is configured (BROWSER_PATH)."
    # kaleido (through choreographer) finds the browser through this variable.
    os.environ.setdefault("BROWSER_PATH", browser)
    try:
        import kaleido
        import plotly.graph_objects as go

        shown = {}
        for cid, _, _, figure in wanted:
            chart = go.Figure(figure)
            # The mail's heading names the chart; a white background reads in dark-mode clients too.
            chart.update_layout(paper_bgcolor="#ffffff", plot_bgcolor="#ffffff", margin={"t": 16})
            shown[cid] = chart
        with tempfile.TemporaryDirectory(prefix="costcenter-report-") as folder:
            # plotly's static export engine, one browser for all of the report's charts (a browser
            # start costs ~2 s; pio.to_image would start one per chart).
            kaleido.write_fig_from_object_sync(
                [
                    {
                        "fig": chart,
                        "path": Path(folder) / f"{cid}.png",
                        "opts": {"format": "png", "width": WIDTH, "height": HEIGHT, "scale": 1},
                    }
                    for cid, chart in shown.items()
                ]
            )
            rendered = [
                Chart(cid, title, alt, (Path(folder) / f"{cid}.png").read_bytes())
                for cid, title, alt, _ in wanted
            ]
        return rendered, ""
    except Exception as exc:  # noqa: BLE001 - any export failure only costs the charts
        log.warning("report charts could not be rendered: %s: %s", type(exc).__name__, exc)
        return [], "Charts are unavailable: the chart renderer failed; the figures above are complete."


# kaleido and choreographer log every browser start and tab at INFO; one line per chart is noise.
for _name in ("kaleido", "choreographer"):
    logging.getLogger(_name).setLevel(logging.WARNING)
