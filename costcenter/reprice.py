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


def mark_model_hours(model_name: str, since: datetime) -> None:
    """Hours from ``since`` with costed usage of any version of the model."""
    _mark(
        "SELECT DISTINCT u.hour FROM costcenter_hourlyusage u JOIN costcenter_llmmodel m ON m.id = u.model_id "
        "WHERE m.name = %s AND u.hour >= date_trunc('hour', %s::timestamptz, 'UTC')",
        [model_name, since],
    )


def mark_pool_hours(pool_id: int, since: datetime | None) -> None:
    """Every costed hour from ``since`` (None: from the pool's first costed hour), used or not."""
    done_until = RollupState.objects.filter(name="hourly").values_list("done_until", flat=True).first()
    if done_until is None:
        return  # nothing costed yet: the first run costs everything
    if since is None:
        since = PoolHour.objects.filter(pool_id=pool_id).aggregate(first=Min("hour"))["first"]
        if since is None:
            return
    _mark(
        "SELECT generate_series(date_trunc('hour', %s::timestamptz, 'UTC'), "
        "%s::timestamptz - interval '1 hour', interval '1 hour')",
        [since, done_until],
    )


def mark_endpoint_hours(endpoint_id: int) -> None:
    _mark("SELECT DISTINCT hour FROM costcenter_hourlyusage WHERE endpoint_id = %s", [endpoint_id])


# --- signal receivers ---------------------------------------------------------------------------
def _remember(sender, instance, **kwargs) -> None:
    """pre_save: keep the stored version, so a moved start date also marks the old range."""
    instance._stored = sender.objects.filter(pk=instance.pk).first() if instance.pk else None


def token_price_changed(sender, instance, **kwargs) -> None:
    stored = getattr(instance, "_stored", None)
    since = min(instance.effective_from, stored.effective_from) if stored else instance.effective_from
    name = LlmModel.objects.filter(pk=instance.model_id).values_list("name", flat=True).first()
    if name is not None:  # None: the model itself is being deleted
        mark_model_hours(name, since)


def gpu_price_changed(sender, instance, **kwargs) -> None:
    stored = getattr(instance, "_stored", None)
    since = min(instance.effective_from, stored.effective_from) if stored else instance.effective_from
    mark_pool_hours(instance.pool_id, since)


def pool_changed(sender, instance, **kwargs) -> None:
    stored = getattr(instance, "_stored", None)
    fields = ("gpu_count", "kwh_price", "input_weight", "output_weight")
    if stored is not None and any(getattr(stored, name) != getattr(instance, name) for name in fields):
        mark_pool_hours(instance.pk, None)


def endpoint_changed(sender, instance, **kwargs) -> None:
    stored = getattr(instance, "_stored", None)
    if stored is not None and (stored.kind, stored.pool_id) != (instance.kind, instance.pool_id):
        mark_endpoint_hours(instance.pk)
