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
