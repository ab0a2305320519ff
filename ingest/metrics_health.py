"""Health of the Prometheus sources, for the Ingestion page and the admin: is data arriving?"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone

from costcenter.models import Pool
from ingest.models import GpuInterval, InferenceSeries, MetricCheckpoint, PrometheusSource, UnmatchedSeries


@dataclass(frozen=True)
class UnmatchedGpu:
    vendor: str
    labels: dict
    first_interval: datetime
    last_interval: datetime
    intervals: int


@dataclass
class SourceHealth:
    name: str
    url: str
    enabled: bool
    step_seconds: int
    last_pull_at: datetime | None
    last_success_at: datetime | None
    lag_seconds: int | None  # now − the oldest checkpoint; None before the first pull
    last_error: str
    pools_without_data: list[str] = field(default_factory=list)
    pools_without_matchers: list[str] = field(default_factory=list)
    unmatched_series: list[UnmatchedGpu] = field(default_factory=list)
    unmatched_count: int = 0
    inference_series_without_endpoint: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not self.last_error and not self.pools_without_data and self.last_success_at is not None


def prometheus_health(
    *, now: datetime | None = None, recent: timedelta = timedelta(hours=24)
) -> list[SourceHealth]:
    """Per source: last successful pull, lag, last error, pools with no data in ``recent`` before
    the source's newest checkpoint, and the GPUs whose series match no pool."""
    now = now or timezone.now()
    pools = list(Pool.objects.order_by("name"))
    report = []
    for source in PrometheusSource.objects.order_by("name"):
        ends = list(MetricCheckpoint.objects.filter(source=source).values_list("window_end", flat=True))
        lag = int((now - min(ends)).total_seconds()) if ends else None
        horizon = (max(ends) if ends else now) - recent
        with_data = set(
            GpuInterval.objects.filter(source=source, interval_start__gte=horizon)
            .values_list("pool_id", flat=True)
            .distinct()
        )
        unmatched = list(
            UnmatchedSeries.objects.filter(source=source).order_by("-last_interval", "labels_key")
        )
        report.append(
            SourceHealth(
                name=source.name,
                url=source.url,
                enabled=source.enabled,
                step_seconds=source.step_seconds,
                last_pull_at=source.last_pull_at,
                last_success_at=source.last_success_at,
                lag_seconds=lag,
                last_error=source.last_error,
                pools_without_data=[p.name for p in pools if p.prometheus_match and p.pk not in with_data],
                pools_without_matchers=[p.name for p in pools if not p.prometheus_match],
                unmatched_series=[
                    UnmatchedGpu(row.vendor, row.labels, row.first_interval, row.last_interval, row.intervals)
                    for row in unmatched
                ],
                unmatched_count=len(unmatched),
                inference_series_without_endpoint=[
                    str(series)
                    for series in InferenceSeries.objects.filter(source=source, endpoint__isnull=True)
                ],
            )
        )
    return report
