"""Writing metric aggregates: one family's values for some windows, upserted, in one transaction.

Both the Prometheus pull and the OpenMetrics import call these. Rows are keyed on (GPU or served
model, interval start, step), and an upsert rewrites only the columns of the family being
written, so pulling a window twice (an overlap, a re-run, ``--start`` over old data) stores the
same numbers once. Hours that received GPU data are marked dirty for the cost engine.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import connection

from costcenter.models import Endpoint, LlmModel, Pool
from ingest.metric_families import Family, GpuIdentity, gpu_identity, labels_key, matches
from ingest.models import (
    GpuDevice,
    GpuInterval,
    InferenceInterval,
    InferenceSeries,
    MetricCheckpoint,
    PrometheusSource,
    UnmatchedSeries,
)


@dataclass(frozen=True)
class Point:
    """One aggregate: the grouping labels of a result series, the window start and its value."""

    labels: Mapping[str, str]
    start: datetime
    value: float


def usable(value: float) -> bool:
    return not (math.isnan(value) or math.isinf(value))


def _device(identity: GpuIdentity, pool: Pool, cache: dict) -> int:
    key = (identity.vendor, identity.hostname, identity.device_key, identity.partition)
    if key not in cache:
        device, created = GpuDevice.objects.get_or_create(
            vendor=identity.vendor,
            hostname=identity.hostname,
            device_key=identity.device_key,
            partition=identity.partition,
            defaults={"gpu_index": identity.gpu_index, "gpu_model": identity.gpu_model, "pool": pool},
        )
        if not created and (device.pool_id != pool.pk or (identity.gpu_model and not device.gpu_model)):
            device.pool = pool
            device.gpu_model = device.gpu_model or identity.gpu_model
            device.save(update_fields=["pool", "gpu_model", "last_seen"])
        cache[key] = device.pk
    return cache[key]


def mark_dirty_hours(starts: Iterable[datetime]) -> None:
    hours = sorted({start.replace(minute=0, second=0, microsecond=0) for start in starts})
    if not hours:
        return
    with connection.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO ingest_dirtyhour (hour, marked_at) VALUES (%s, now()) "
            "ON CONFLICT (hour) DO UPDATE SET marked_at = excluded.marked_at",
            [(hour,) for hour in hours],
        )


def store_gpu_points(
    family: Family,
    points: list[Point],
    *,
    pool: Pool,
    source: PrometheusSource | None,
    step: int,
    cache: dict,
) -> int:
    """Upsert one GPU family's values; the caller holds the transaction."""
    rows: dict[tuple[int, datetime], GpuInterval] = {}
    for point in points:
        if not usable(point.value):
            continue
        gpu_id = _device(gpu_identity(family.group, point.labels), pool, cache)
        row = GpuInterval(
            gpu_id=gpu_id, pool=pool, source=source, interval_start=point.start, step_seconds=step
        )
        setattr(row, family.column, point.value)
        # Two result series can map to one device only if labels collide; last one wins.
        rows[(gpu_id, point.start)] = row
    if rows:
        GpuInterval.objects.bulk_create(
            list(rows.values()),
            update_conflicts=True,
            unique_fields=["gpu", "interval_start", "step_seconds"],
            update_fields=[family.column, "pool", "source", "updated_at"],
        )
        mark_dirty_hours(start for _, start in rows)
    return len(rows)


def _resolve_endpoint(
    source: PrometheusSource, labels: Mapping[str, str], endpoints: dict[str, int]
) -> int | None:
    if source.endpoint_label and labels.get(source.endpoint_label) in endpoints:
        return endpoints[labels[source.endpoint_label]]
    for name, match in (source.endpoint_match or {}).items():
        if name in endpoints and matches(match, labels):
            return endpoints[name]
    return None


def inference_group_labels(source: PrometheusSource | None) -> tuple[str, ...]:
    """model_name plus the labels the source maps endpoints by."""
    extra: list[str] = []
    if source is not None:
        if source.endpoint_label:
            extra.append(source.endpoint_label)
        for match in (source.endpoint_match or {}).values():
            extra.extend(label for label in match if label not in extra)
    return ("model_name", *(label for label in extra if label != "model_name"))


def _series(family: Family, labels: Mapping[str, str], source: PrometheusSource, cache: dict) -> int:
    model_name = labels.get("model_name", "")
    extra = {key: value for key, value in labels.items() if key not in ("model_name", "le")}
    key = (family.group, model_name, labels_key(extra))
    if key not in cache:
        if "_endpoints" not in cache:
            cache["_endpoints"] = dict(Endpoint.objects.values_list("name", "pk"))
        endpoint_id = _resolve_endpoint(source, labels, cache["_endpoints"])
        model_id = LlmModel.objects.filter(name=model_name, version="").values_list("pk", flat=True).first()
        series, _ = InferenceSeries.objects.update_or_create(
            source=source,
            server=family.group,
            model_name=model_name,
            labels_key=key[2],
            defaults={"labels": extra, "endpoint_id": endpoint_id, "model_id": model_id},
        )
        cache[key] = series.pk
    return cache[key]


def store_inference_points(
    family: Family, points: list[Point], *, source: PrometheusSource, step: int, cache: dict
) -> int:
    values: dict[tuple[int, datetime], object] = {}
    for point in points:
        if not usable(point.value):
            continue
        series_id = _series(family, point.labels, source, cache)
        if family.histogram:
            buckets = values.setdefault((series_id, point.start), {})
            buckets[point.labels.get("le", "+Inf")] = point.value
        else:
            values[(series_id, point.start)] = point.value
    rows = []
    for (series_id, start), value in values.items():
        row = InferenceInterval(series_id=series_id, interval_start=start, step_seconds=step)
        setattr(row, family.column, value)
        rows.append(row)
    if rows:
        InferenceInterval.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["series", "interval_start", "step_seconds"],
            update_fields=[family.column, "updated_at"],
        )
    return len(rows)


def store_unmatched(vendor: str, points: list[Point], *, source: PrometheusSource, step: int) -> int:
    """Count each GPU that matched no pool once per interval (a re-pulled interval is not recounted)."""
    by_key: dict[str, tuple[Mapping[str, str], set[datetime]]] = defaultdict(lambda: ({}, set()))
    for point in points:
        key = labels_key(point.labels)
        labels, starts = by_key[key]
        labels.update(point.labels)
        starts.add(point.start)
    for key, (labels, starts) in by_key.items():
        row = (
            UnmatchedSeries.objects.select_for_update()
            .filter(source=source, vendor=vendor, labels_key=key)
            .first()
        )
        if row is None:
            UnmatchedSeries.objects.create(
                source=source,
                vendor=vendor,
                labels=dict(labels),
                labels_key=key,
                first_interval=min(starts),
                last_interval=max(starts),
                intervals=len(starts),
            )
            continue
        new = [start for start in starts if start > row.last_interval or start < row.first_interval]
        row.intervals += len(new)
        row.first_interval = min(row.first_interval, *starts)
        row.last_interval = max(row.last_interval, *starts)
        row.save(update_fields=["intervals", "first_interval", "last_interval"])
    return len(by_key)


def advance_checkpoint(source: PrometheusSource, query_key: str, start: datetime, end: datetime) -> None:
    """Move the checkpoint to ``end`` if [start, end) continues it; never backwards, never over a gap."""
    checkpoint = (
        MetricCheckpoint.objects.select_for_update().filter(source=source, query_key=query_key).first()
    )
    if checkpoint is None:
        MetricCheckpoint.objects.create(source=source, query_key=query_key, window_end=end)
    elif start <= checkpoint.window_end < end:
        checkpoint.window_end = end
        checkpoint.save(update_fields=["window_end", "updated_at"])


def floor_to_step(moment: datetime, step: int) -> datetime:
    seconds = math.floor(moment.timestamp())
    return datetime.fromtimestamp(seconds - seconds % step, tz=UTC)


def ceil_to_step(moment: datetime, step: int) -> datetime:
    floored = floor_to_step(moment, step)
    return floored if floored == moment else floored + timedelta(seconds=step)
