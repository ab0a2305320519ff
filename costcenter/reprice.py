"""Marking the hours a price-book change affects, so the next recompute picks them up.

Connected to model signals (``costcenter.apps``) because every writer of prices — the catalog
loader, the admin, later the API — must trigger it, and forgetting one would leave stale costs.
Over-marking is harmless: recomputing an hour that did not change gives the same rows.
"""

from __future__ import annotations

from datetime import datetime

from django.db import connection
from django.db.models import Min

from costcenter.models import LlmModel, PoolHour, RollupState


def _mark(sql: str, params: list) -> None:
    # DO UPDATE (not DO NOTHING) gives an existing mark a new row version, which tells a recompute
    # running right now that the hour changed again after it started (see costing.recompute).
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO costcenter_repricehour (hour) {sql} ON CONFLICT (hour) DO UPDATE SET hour = EXCLUDED.hour",  # noqa: S608
            params,
        )


def mark_model_hours(model_name: str, since: datetime, until: datetime | None = None) -> None:
    """Hours in [since, until) with costed usage of any version of the model."""
    _mark(
        "SELECT DISTINCT u.hour FROM costcenter_hourlyusage u JOIN costcenter_llmmodel m ON m.id = u.model_id "
        "WHERE m.name = %s AND u.hour >= date_trunc('hour', %s::timestamptz, 'UTC') "
        "AND (%s::timestamptz IS NULL OR u.hour < %s::timestamptz)",
        [model_name, since, until, until],
    )


def mark_pool_hours(pool_id: int, since: datetime | None, until: datetime | None = None) -> None:
    """Every costed hour in [since, until) (since None: the pool's first costed hour), used or not."""
    done_until = RollupState.objects.filter(name="hourly").values_list("done_until", flat=True).first()
    if done_until is None:
        return  # nothing costed yet: the first run costs everything
    if since is None:
        since = PoolHour.objects.filter(pool_id=pool_id).aggregate(first=Min("hour"))["first"]
        if since is None:
            return
    last = done_until if until is None else min(until, done_until)
    _mark(
        "SELECT generate_series(date_trunc('hour', %s::timestamptz, 'UTC'), "
        "%s::timestamptz - interval '1 microsecond', interval '1 hour')",
        [since, last],
    )


def mark_endpoint_hours(endpoint_id: int) -> None:
    _mark("SELECT DISTINCT hour FROM costcenter_hourlyusage WHERE endpoint_id = %s", [endpoint_id])


# --- signal receivers ---------------------------------------------------------------------------
def _remember(sender, instance, **kwargs) -> None:
    """pre_save: keep the stored version, so a moved start date also marks the old range."""
    instance._stored = sender.objects.filter(pk=instance.pk).first() if instance.pk else None


def _affected(instance, stored) -> tuple[datetime, datetime | None]:
    """[start, end) over which a price row's change can alter which price is in force.

    A row governs [effective_from, its end), its end being its explicit ``effective_to`` or else
    the next row's start in the same series (None: open-ended). Before and after an edit, the
    union of both versions' ranges covers every attempt whose price may differ.
    """
    series = type(instance).objects.filter(instance.series_filter()).exclude(pk=instance.pk)

    def end_of(row) -> datetime | None:
        if row.effective_to is not None:
            return row.effective_to
        return (
            series.filter(effective_from__gt=row.effective_from)
            .order_by("effective_from")
            .values_list("effective_from", flat=True)
            .first()
        )

    versions = [row for row in (instance, stored) if row is not None]
    ends = [end_of(row) for row in versions]
    start = min(row.effective_from for row in versions)
    return start, None if any(end is None for end in ends) else max(ends)


def token_price_changed(sender, instance, **kwargs) -> None:
    start, end = _affected(instance, getattr(instance, "_stored", None))
    name = LlmModel.objects.filter(pk=instance.model_id).values_list("name", flat=True).first()
    if name is not None:  # None: the model itself is being deleted
        mark_model_hours(name, start, end)


def gpu_price_changed(sender, instance, **kwargs) -> None:
    start, end = _affected(instance, getattr(instance, "_stored", None))
    mark_pool_hours(instance.pool_id, start, end)


def pool_changed(sender, instance, **kwargs) -> None:
    stored = getattr(instance, "_stored", None)
    fields = ("gpu_count", "kwh_price", "input_weight", "output_weight")
    if stored is not None and any(getattr(stored, name) != getattr(instance, name) for name in fields):
        mark_pool_hours(instance.pk, None)


def endpoint_changed(sender, instance, **kwargs) -> None:
    stored = getattr(instance, "_stored", None)
    if stored is not None and (stored.kind, stored.pool_id) != (instance.kind, instance.pool_id):
        mark_endpoint_hours(instance.pk)
