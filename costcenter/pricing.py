"""Which price is in force when: the one rule shared by the catalog loader, the admin and costing.

A price row is in force from ``effective_from`` (inclusive) to ``effective_to`` (exclusive) or,
when ``effective_to`` is empty, until the next row of the same series starts. So the row in force
at ``t`` is the latest row with ``effective_from <= t``, unless its explicit end is ``<= t``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from costcenter.models import Endpoint, GpuHourPrice, LlmModel, Pool, TokenPrice

Period = tuple[datetime, datetime | None]


def overlap_problem(periods: Sequence[Period]) -> str | None:
    """A sentence describing the first overlap among price periods of one series, or None.

    Open-ended periods end where the next one starts, so only an explicit end past the next
    start, or two periods starting at the same moment, overlap.
    """
    ordered = sorted(periods, key=lambda period: period[0])
    for (start, end), (next_start, _) in zip(ordered, ordered[1:], strict=False):
        if start == next_start:
            return f"two prices start at {start.isoformat()}"
        if end is not None and end > next_start:
            return (
                f"the period {start.isoformat()} to {end.isoformat()} overlaps the one starting "
                f"{next_start.isoformat()}"
            )
    return None


def in_force(rows, at: datetime):
    """The row in force at ``at`` from rows of one series ordered by ``effective_from`` descending."""
    for row in rows:
        if row.effective_from <= at:
            return row if row.effective_to is None or at < row.effective_to else None
    return None


def token_price_series(model: LlmModel, endpoint_id: int | None, generic_model_id: int | None) -> list[tuple]:
    """The price series that may price an attempt, in order of precedence.

    A price of this exact model version on this endpoint, then of this model version on any
    endpoint; then the same two for the version-less model row of the same name.
    """
    keys = []
    for model_id in [model.pk] + (
        [generic_model_id] if generic_model_id and generic_model_id != model.pk else []
    ):
        if endpoint_id is not None:
            keys.append((model_id, endpoint_id))
        keys.append((model_id, None))
    return keys


def resolve_token_price(series_rows: dict[tuple, list], keys: list[tuple], at: datetime):
    """The first series (in precedence order) with a price in force at ``at``.

    ``series_rows`` maps (model_id, endpoint_id or None) to that series' rows, newest first.
    """
    for key in keys:
        price = in_force(series_rows.get(key, ()), at)
        if price is not None:
            return price
    return None


def token_price_at(*, model: LlmModel, endpoint: Endpoint | None, at: datetime) -> TokenPrice | None:
    """The token price for an attempt on ``model`` via ``endpoint`` at ``at`` (aware), or None."""
    generic = None
    if model.version:
        generic = LlmModel.objects.filter(name=model.name, version="").values_list("pk", flat=True).first()
    keys = token_price_series(model, endpoint.pk if endpoint is not None else None, generic)
    rows: dict[tuple, list] = {}
    for price in TokenPrice.objects.filter(model_id__in={key[0] for key in keys}).order_by("-effective_from"):
        rows.setdefault((price.model_id, price.endpoint_id), []).append(price)
    return resolve_token_price(rows, keys, at)


def gpu_hour_price_at(*, pool: Pool, at: datetime) -> GpuHourPrice | None:
    rows = GpuHourPrice.objects.filter(pool=pool, effective_from__lte=at).order_by("-effective_from")[:1]
    return in_force(rows, at)
