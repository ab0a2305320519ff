"""Offline import: Prometheus text / OpenMetrics exposition with timestamps → the same aggregates.

For users without access to Prometheus (and for the demo). The file is parsed with
``prometheus_client``'s parsers, and each planned query of ``ingest.prometheus`` is evaluated here
the way Prometheus evaluates its PromQL: windows of ``step`` seconds aligned to the epoch, the
window ending at t holding the samples with t − step < timestamp ≤ t; ``avg_over_time`` and
``max_over_time`` as plain means and maxima; ``increase`` with Prometheus' counter-reset
correction and extrapolation to the window edges (promql/functions.go, extrapolatedRate);
then ``avg``/``sum``/``max by`` the identity labels and the preference order of alternatives.

Timestamps: OpenMetrics (a file ending in ``# EOF``) gives seconds, the classic text format
milliseconds. Samples without a timestamp cannot be placed in a window and are counted, not
stored.
"""

from __future__ import annotations

import bisect
import gzip
import math
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from django.db import transaction

from costcenter.models import Pool
from ingest.metric_families import (
    AVG,
    INCREASE,
    MAX,
    PRESENCE_METRICS,
    SENTINEL_MIN,
    Family,
    matches,
    pool_vendors,
)
from ingest.metric_store import Point, store_gpu_points, store_inference_points, store_unmatched
from ingest.models import PrometheusSource
from ingest.prometheus import PlannedQuery, configured_pools, plan_queries


@dataclass
class Series:
    labels: dict[str, str]
    times: list[float] = field(default_factory=list)  # seconds, sorted
    values: list[float] = field(default_factory=list)


@dataclass
class ImportResult:
    samples: int = 0
    series: int = 0
    without_timestamp: int = 0
    sentinels: int = 0
    out_of_order: int = 0
    rows: int = 0
    first: datetime | None = None
    last: datetime | None = None
    windows: int = 0
    unmatched_gpus: int = 0


# --- Parsing ---------------------------------------------------------------------------------


def _read_text(path: Path) -> str:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return raw.decode("utf-8")


def _is_openmetrics(text: str) -> bool:
    return text.rstrip().endswith("# EOF")


def iter_samples(text: str) -> Iterator[tuple[str, dict[str, str], float, float | None]]:
    """(name, labels, value, timestamp in seconds or None) for every sample line."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
    from prometheus_client.parser import text_string_to_metric_families as text_families

    if _is_openmetrics(text):
        try:
            # The strict OpenMetrics parser first; it refuses much that promtool and Prometheus
            # accept (a counter without _total, as dcgm-exporter writes), so fall back below.
            parsed = list(openmetrics_families(text))
        except ValueError:
            parsed = None
        if parsed is not None:
            for family in parsed:
                for sample in family.samples:
                    stamp = None if sample.timestamp is None else float(sample.timestamp)
                    yield sample.name, dict(sample.labels), float(sample.value), stamp
            return
        body = "\n".join(line for line in text.splitlines() if line.strip() != "# EOF")
        for family in text_families(body):
            for sample in family.samples:
                # The text parser reads timestamps as milliseconds; these are OpenMetrics seconds.
                stamp = None if sample.timestamp is None else round(sample.timestamp * 1000, 3)
                yield sample.name, dict(sample.labels), float(sample.value), stamp
        return
    for family in text_families(text):
        for sample in family.samples:
            yield sample.name, dict(sample.labels), float(sample.value), sample.timestamp


def _wanted_metrics(queries: Iterable[PlannedQuery]) -> set[str]:
    names: set[str] = set()
    for query in queries:
        if query.family is not None:
            names.update(alternative.metric for alternative in query.family.alternatives)
        else:
            names.update(PRESENCE_METRICS[query.vendor])
    return names


def load_series(text: str, wanted: set[str], result: ImportResult) -> dict[str, list[Series]]:
    by_identity: dict[tuple[str, tuple], Series] = {}
    for name, labels, value, stamp in iter_samples(text):
        if name not in wanted:
            # prometheus_client's text parser adds _total to every counter sample; Prometheus keeps
            # the name as written (dcgm-exporter's counters have no _total).
            if name.endswith("_total") and name[:-6] in wanted:
                name = name[:-6]
            else:
                continue
        if stamp is None:
            result.without_timestamp += 1
            continue
        if abs(value) >= SENTINEL_MIN:
            result.sentinels += 1
            continue
        key = (name, tuple(sorted(labels.items())))
        series = by_identity.get(key)
        if series is None:
            series = by_identity[key] = Series(labels)
        if series.times and stamp <= series.times[-1]:
            # Prometheus (and promtool) drop out-of-order and duplicate samples; so do we.
            result.out_of_order += 1
            continue
        series.times.append(stamp)
        series.values.append(value)
        result.samples += 1
    grouped: dict[str, list[Series]] = defaultdict(list)
    for (name, _), series in by_identity.items():
        grouped[name].append(series)
    result.series = len(by_identity)
    return grouped


# --- PromQL, evaluated here ------------------------------------------------------------------


def extrapolated_increase(times: list[float], values: list[float], range_start: float, range_end: float):
    """Prometheus' increase(): counter resets corrected, extrapolated towards the window edges."""
    if len(times) < 2:
        return None
    result = values[-1] - values[0]
    previous = 0.0
    for value in values:
        if value < previous:
            result += previous
        previous = value
    sampled = times[-1] - times[0]
    average_gap = sampled / (len(times) - 1)
    to_start = times[0] - range_start
    to_end = range_end - times[-1]
    if result > 0 and values[0] >= 0:
        # A counter does not go below zero: do not extrapolate to before it would have started.
        to_start = min(to_start, sampled * (values[0] / result))
    threshold = average_gap * 1.1
    interval = sampled
    interval += to_start if to_start < threshold else average_gap / 2
    interval += to_end if to_end < threshold else average_gap / 2
    return result * (interval / sampled)


def window_value(function: str, series: Series, end: float, step: int) -> float | None:
    low = bisect.bisect_right(series.times, end - step)
    high = bisect.bisect_right(series.times, end)
    if low >= high:
        return None
    values = series.values[low:high]
    if function == AVG:
        return math.fsum(values) / len(values)
    if function == MAX:
        return max(values)
    if function == INCREASE:
        return extrapolated_increase(series.times[low:high], values, end - step, end)
    raise ValueError(function)


def _group_key(labels: dict[str, str], by: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    # PromQL drops empty labels: a label with value "" is the same as no label.
    return tuple((label, labels[label]) for label in by if labels.get(label, ""))


_COMBINE = {"avg": lambda values: math.fsum(values) / len(values), "sum": math.fsum, "max": max}


def evaluate_family(
    family: Family,
    series_by_name: dict[str, list[Series]],
    *,
    ends: list[float],
    step: int,
    group_by: tuple[str, ...],
    match: dict[str, str] | None,
) -> dict[tuple[tuple, float], float]:
    """{(group labels, window end): value}, preferred alternative first."""
    by = (*group_by, "le") if family.histogram else group_by
    chosen: dict[tuple[tuple, float], float] = {}
    for alternative in family.alternatives:
        collected: dict[tuple[tuple, float], list[float]] = defaultdict(list)
        for series in series_by_name.get(alternative.metric, ()):
            if match is not None and not matches(match, series.labels):
                continue
            key = _group_key(series.labels, by)
            for end in ends:
                value = window_value(family.function, series, end, step)
                if value is not None:
                    collected[(key, end)].append(value)
        for slot, values in collected.items():
            if slot not in chosen:  # ``or``: the left-hand (preferred) alternative wins
                chosen[slot] = _COMBINE[family.combine](values) / alternative.divisor
    return chosen


def evaluate_unmatched(
    vendor: str,
    series_by_name: dict[str, list[Series]],
    *,
    ends: list[float],
    step: int,
    group_by: tuple[str, ...],
    pools: list[Pool],
) -> set[tuple[tuple, float]]:
    present: set[tuple[tuple, float]] = set()
    claimed: set[tuple[tuple, float]] = set()
    for metric in PRESENCE_METRICS[vendor]:
        for series in series_by_name.get(metric, ()):
            key = _group_key(series.labels, group_by)
            is_claimed = any(matches(pool.prometheus_match, series.labels) for pool in pools)
            for end in ends:
                low = bisect.bisect_right(series.times, end - step)
                if low < bisect.bisect_right(series.times, end):
                    present.add((key, end))
                    if is_claimed:
                        claimed.add((key, end))
    return present - claimed


# --- The import --------------------------------------------------------------------------------


def _window_ends(series_by_name: dict[str, list[Series]], step: int) -> list[float]:
    stamps = [series.times[0] for group in series_by_name.values() for series in group] + [
        series.times[-1] for group in series_by_name.values() for series in group
    ]
    if not stamps:
        return []
    first = math.ceil(min(stamps) / step) * step
    last = math.ceil(max(stamps) / step) * step
    return [float(end) for end in range(int(first), int(last) + 1, step)]


def import_openmetrics(path: Path, *, source: PrometheusSource) -> ImportResult:
    """Aggregate the file's samples per window and upsert them, all in one transaction."""
    result = ImportResult()
    pools = configured_pools()
    queries = plan_queries(source, pools)
    series_by_name = load_series(_read_text(path), _wanted_metrics(queries), result)
    step = source.step_seconds
    ends = _window_ends(series_by_name, step)
    if not ends:
        return result
    result.windows = len(ends)
    result.first = datetime.fromtimestamp(ends[0] - step, tz=UTC)
    result.last = datetime.fromtimestamp(ends[-1], tz=UTC)
    cache: dict = {}
    with transaction.atomic():
        for query in queries:
            if query.kind == "unmatched":
                claiming = [pool for pool in pools if query.vendor in pool_vendors(pool.vendor)]
                slots = evaluate_unmatched(
                    query.vendor,
                    series_by_name,
                    ends=ends,
                    step=step,
                    group_by=query.group_by,
                    pools=claiming,
                )
                points = [_point(key, end, 1.0, step) for key, end in slots]
                result.unmatched_gpus += store_unmatched(query.vendor, points, source=source, step=step)
                continue
            values = evaluate_family(
                query.family,
                series_by_name,
                ends=ends,
                step=step,
                group_by=query.group_by,
                match=query.pool.prometheus_match if query.pool is not None else None,
            )
            points = [_point(key, end, value, step) for (key, end), value in values.items()]
            if query.kind == "gpu":
                result.rows += store_gpu_points(
                    query.family, points, pool=query.pool, source=source, step=step, cache=cache
                )
            else:
                result.rows += store_inference_points(
                    query.family, points, source=source, step=step, cache=cache
                )
    return result


def _point(key: tuple, end: float, value: float, step: int) -> Point:
    return Point(dict(key), datetime.fromtimestamp(end - step, tz=UTC), value)


def import_source(name: str) -> PrometheusSource:
    """The source an import is recorded under: created disabled and without a URL if new."""
    return PrometheusSource.objects.get_or_create(name=name, defaults={"url": "", "enabled": False})[0]
