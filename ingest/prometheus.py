"""Pulling GPU and inference-server aggregates from Prometheus, with no gaps and no doubles.

Per source, every query (one metric family for one pool, the unmatched-GPU census per vendor,
one inference family) has a checkpoint: the end of its last committed window. A pull asks
Prometheus (``prometheus-api-client``'s ``custom_query_range``) for the step-aligned windows from
the checkpoint up to two scrape intervals before now, in chunks of at most 11,000 points per
series and 24 hours, and commits each chunk's rows together with the checkpoint. If Prometheus
is down, the pull stops with the error on the source and the next pull starts at the
checkpoints, so every missed window is fetched then; windows are upserted, so overlaps are
harmless.

Timeouts, connection errors, 429 and 5xx are retried with exponential backoff (30 ms doubling
to 5 s); 400 and 422 are not (the query or its range is wrong, retrying cannot help) and become
the source's visible error.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol

import requests
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from costcenter.models import Pool
from costcenter.pg import session_lock
from ingest.metric_families import (
    GPU_GROUP_LABELS,
    INFERENCE_FAMILIES,
    Family,
    family_promql,
    gpu_families,
    pool_vendors,
    selector_bodies,
    unmatched_promql,
)
from ingest.metric_store import (
    Point,
    advance_checkpoint,
    floor_to_step,
    inference_group_labels,
    store_gpu_points,
    store_inference_points,
    store_unmatched,
)
from ingest.models import MetricCheckpoint, PrometheusSource

log = logging.getLogger(__name__)

MAX_POINTS_PER_SERIES = 11_000  # Prometheus refuses more with a 400
MAX_REQUEST_SECONDS = 24 * 3600
FIRST_RETRY_DELAY = 0.03
MAX_RETRY_DELAY = 5.0
RETRYABLE_STATUS = frozenset({408, 429}) | frozenset(range(500, 600))


class PrometheusQueryError(Exception):
    """Prometheus refused the query (400/422 or another 4xx): a visible source error, not retried."""


class PrometheusUnavailable(Exception):
    """Timeouts, connection errors or 5xx outlasted the retries."""


class QueryRangeClient(Protocol):
    def custom_query_range(
        self, query: str, start_time: datetime, end_time: datetime, step: str, params: dict | None = None
    ) -> list[dict]: ...


# --- Windows and chunks ----------------------------------------------------------------------------


def chunk_windows(
    start: datetime,
    end: datetime,
    step: int,
    *,
    max_points: int = MAX_POINTS_PER_SERIES,
    max_seconds: int = MAX_REQUEST_SECONDS,
) -> list[tuple[datetime, datetime]]:
    """Split the step-aligned windows of [start, end) into request-sized runs of whole windows.

    A run of n windows is one query_range with start = first window's end, end = last window's end
    and this step: n points per series. n is capped so n ≤ ``max_points`` and n × step ≤
    ``max_seconds`` (but at least one window).
    """
    per_chunk = max(1, min(max_points, max_seconds // step))
    chunks = []
    cursor = start
    while cursor < end:
        chunk_end = min(end, cursor + timedelta(seconds=per_chunk * step))
        chunks.append((cursor, chunk_end))
        cursor = chunk_end
    return chunks


def target_end(source: PrometheusSource, now: datetime) -> datetime:
    """The end of the last window that is safe to pull: two scrape intervals behind now."""
    lag = timedelta(seconds=2 * source.scrape_interval_seconds)
    return floor_to_step(now - lag, source.step_seconds)


# --- HTTP with retries ---------------------------------------------------------------------------


def _status_of(error: Exception) -> int | None:
    match = re.search(r"HTTP Status Code (\d{3})", str(error))
    return int(match.group(1)) if match else None


def _prometheus_message(error: Exception) -> str:
    # Prometheus answers {"status":"error","errorType":…,"error":"…"}; show its message.
    match = re.search(r'"error":\s*"((?:[^"\\]|\\.)*)"', str(error))
    return match.group(1) if match else str(error)[:300]


def _short(error: Exception) -> str:
    """requests' messages repeat the whole URL (the PromQL); keep the cause."""
    text = str(error)
    if "Caused by" in text:
        text = text[text.index("Caused by") :]
    return f"{type(error).__name__}: {text[:300]}"


def retry_delays(retries: int) -> list[float]:
    return [min(FIRST_RETRY_DELAY * 2**attempt, MAX_RETRY_DELAY) for attempt in range(retries)]


def query_range(
    client: QueryRangeClient,
    query: str,
    start: datetime,
    end: datetime,
    step: int,
    *,
    retries: int | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> list[dict]:
    """One query_range, retried on transient failures only."""
    from prometheus_api_client import PrometheusApiClientException

    if retries is None:
        retries = getattr(settings, "PROMETHEUS_RETRIES", 8)
    delays = retry_delays(retries)
    for attempt in range(retries + 1):
        try:
            return client.custom_query_range(query, start_time=start, end_time=end, step=str(step))
        except PrometheusApiClientException as error:
            status = _status_of(error)
            if status not in RETRYABLE_STATUS:
                raise PrometheusQueryError(f"HTTP {status}: {_prometheus_message(error)}") from error
            failure: Exception = error
        except (requests.Timeout, requests.ConnectionError) as error:
            failure = error
        if attempt < retries:
            log.info("prometheus: retrying in %.2fs after %s", delays[attempt], _short(failure))
            sleep(delays[attempt])
    raise PrometheusUnavailable(_short(failure))


def client_for(source: PrometheusSource) -> QueryRangeClient:
    """A client that does not retry by itself (``query_range`` decides what is retried)."""
    from prometheus_api_client import PrometheusConnect
    from urllib3.util.retry import Retry

    headers = {}
    for header, variable in (source.auth_header_env or {}).items():
        value = os.environ.get(variable)
        if value is None:
            raise PrometheusQueryError(f"environment variable {variable} (header {header}) is not set")
        headers[header] = value
    return PrometheusConnect(
        url=source.url.rstrip("/"),
        headers=headers or None,
        retry=Retry(total=0, raise_on_status=False),
        timeout=getattr(settings, "PROMETHEUS_TIMEOUT_SECONDS", 60),
    )


# --- What to ask ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlannedQuery:
    key: str  # checkpoint key
    kind: str  # gpu, inference, unmatched
    family: Family | None
    pool: Pool | None
    vendor: str
    group_by: tuple[str, ...]
    selectors: tuple[str, ...]  # pool selectors (gpu) or every claiming pool's (unmatched)

    def promql(self, step: int) -> str:
        if self.kind == "unmatched":
            return unmatched_promql(self.vendor, step=step, pool_selectors=list(self.selectors))
        return family_promql(self.family, step=step, selectors=list(self.selectors), group_by=self.group_by)


def configured_pools() -> list[Pool]:
    """Pools with label matchers; a pool without them would claim every GPU, so it is skipped."""
    return [pool for pool in Pool.objects.order_by("pk") if pool.prometheus_match]


def plan_queries(source: PrometheusSource, pools: list[Pool] | None = None) -> list[PlannedQuery]:
    pools = configured_pools() if pools is None else pools
    planned = []
    for pool in pools:
        selectors = tuple(selector_bodies(pool.prometheus_match))
        for family in gpu_families(pool.vendor):
            planned.append(
                PlannedQuery(
                    f"pool{pool.pk}:{family.key}",
                    "gpu",
                    family,
                    pool,
                    family.group,
                    GPU_GROUP_LABELS[family.group],
                    selectors,
                )
            )
    for vendor in GPU_GROUP_LABELS:
        claiming = tuple(
            body
            for pool in pools
            if vendor in pool_vendors(pool.vendor)
            for body in selector_bodies(pool.prometheus_match)
        )
        planned.append(
            PlannedQuery(
                f"unmatched:{vendor}", "unmatched", None, None, vendor, GPU_GROUP_LABELS[vendor], claiming
            )
        )
    group_by = inference_group_labels(source)
    for family in INFERENCE_FAMILIES:
        planned.append(
            PlannedQuery(f"inference:{family.key}", "inference", family, None, family.group, group_by, ("",))
        )
    return planned


def store_points(
    query: PlannedQuery, points: list[Point], *, source: PrometheusSource, step: int, cache: dict
) -> int:
    if query.kind == "gpu":
        return store_gpu_points(query.family, points, pool=query.pool, source=source, step=step, cache=cache)
    if query.kind == "inference":
        return store_inference_points(query.family, points, source=source, step=step, cache=cache)
    return store_unmatched(query.vendor, points, source=source, step=step)


def _points(result: list[dict], step: int) -> list[Point]:
    """query_range answers at each window's end; the row belongs to the window's start."""
    points = []
    for series in result:
        labels = {key: value for key, value in series.get("metric", {}).items() if key != "__name__"}
        for stamp, text in series.get("values", []):
            start = datetime.fromtimestamp(float(stamp) - step, tz=UTC)
            points.append(Point(labels, start, float(text)))
    return points


# --- The pull ----------------------------------------------------------------------------------


@dataclass
class PullResult:
    source: str
    requests: int = 0
    windows: int = 0  # query × window committed
    rows: int = 0
    errors: list[str] = field(default_factory=list)
    busy: bool = False  # another process was pulling this source
    lag_seconds: int | None = None

    @property
    def ok(self) -> bool:
        return not self.errors


def source_lock(source: PrometheusSource):
    return session_lock(f"prometheus-source:{source.pk}")


def pull_source(
    source: PrometheusSource,
    *,
    start: datetime | None = None,
    end: datetime | None = None,
    now: datetime | None = None,
    client: QueryRangeClient | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> PullResult:
    """Pull every due window of every query of ``source``.

    Without ``start`` each query continues from its checkpoint (a new one starts
    ``initial_backfill_hours`` back). ``start``/``end`` re-pull a range by hand; the checkpoint
    moves only if that range continues it. ``end`` is never later than now minus the lag.
    """
    now = now or timezone.now()
    result = PullResult(source=source.name)
    with source_lock(source) as acquired:
        if not acquired:
            result.busy = True
            return result
        _pull_locked(source, result, start=start, end=end, now=now, client=client, sleep=sleep)
    return result


def _pull_locked(source, result: PullResult, *, start, end, now, client, sleep) -> None:
    step = source.step_seconds
    limit = target_end(source, now)
    if end is not None:
        limit = min(limit, floor_to_step(end, step))
    checkpoints = dict(MetricCheckpoint.objects.filter(source=source).values_list("query_key", "window_end"))
    default_start = limit - timedelta(hours=source.initial_backfill_hours)
    cache: dict = {}
    try:
        client = client or client_for(source)
        for query in plan_queries(source):
            if start is not None:
                first = floor_to_step(start, step)
            elif query.key in checkpoints:
                # A checkpoint from a coarser or finer step is re-aligned to this step's grid.
                first = floor_to_step(checkpoints[query.key], step)
            else:
                first = floor_to_step(default_start, step)
            promql = query.promql(step)
            for chunk_start, chunk_end in chunk_windows(first, limit, step):
                try:
                    answer = query_range(
                        client,
                        promql,
                        chunk_start + timedelta(seconds=step),
                        chunk_end,
                        step,
                        sleep=sleep,
                    )
                except PrometheusQueryError as error:
                    # This query cannot be answered; the others may well be.
                    result.errors.append(f"{query.key}: {error}")
                    break
                finally:
                    result.requests += 1
                points = _points(answer, step)
                with transaction.atomic():
                    result.rows += store_points(query, points, source=source, step=step, cache=cache)
                    advance_checkpoint(source, query.key, chunk_start, chunk_end)
                result.windows += int((chunk_end - chunk_start).total_seconds()) // step
    except PrometheusUnavailable as error:
        result.errors.append(f"Prometheus at {source.url} unavailable: {error}")
    except PrometheusQueryError as error:
        result.errors.append(str(error))
    _finish(source, result, now)


def source_lag_seconds(source: PrometheusSource, now: datetime) -> int | None:
    """now − the oldest checkpoint of the queries the source currently makes."""
    keys = [query.key for query in plan_queries(source)]
    ends = MetricCheckpoint.objects.filter(source=source, query_key__in=keys).values_list(
        "window_end", flat=True
    )
    return int((now - min(ends)).total_seconds()) if ends else None


def _finish(source: PrometheusSource, result: PullResult, now: datetime) -> None:
    result.lag_seconds = source_lag_seconds(source, now)
    source.last_pull_at = now
    source.lag_seconds = result.lag_seconds
    if result.ok:
        source.last_success_at = now
        source.last_error = ""
    else:
        source.last_error = "\n".join(result.errors)[:5000]
    source.save(update_fields=["last_pull_at", "last_success_at", "lag_seconds", "last_error"])


def ensure_default_source() -> None:
    """With PROMETHEUS_URL set and no Prometheus source yet, create one named "default"."""
    if settings.PROMETHEUS_URL and not PrometheusSource.objects.filter(url__gt="").exists():
        PrometheusSource.objects.get_or_create(name="default", defaults={"url": settings.PROMETHEUS_URL})


def pull_all(
    *,
    source_name: str | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
    now: datetime | None = None,
) -> list[PullResult]:
    """Pull every enabled source with a URL (or just ``source_name``, enabled or not)."""
    ensure_default_source()
    if source_name is not None:
        sources = list(PrometheusSource.objects.filter(name=source_name))
        if not sources:
            raise PrometheusSource.DoesNotExist(f"no Prometheus source named {source_name!r}")
    else:
        sources = list(PrometheusSource.objects.filter(enabled=True).exclude(url=""))
    results = []
    for source in sources:
        if not source.url:
            results.append(PullResult(source=source.name, errors=["the source has no URL"]))
            continue
        results.append(pull_source(source, start=start, end=end, now=now))
    return results
