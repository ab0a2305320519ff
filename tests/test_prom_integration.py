"""Against a real Prometheus (Debian's package): backfilled with promtool, served on loopback.

The aggregates Prometheus computes from our PromQL must equal the hand-computed values of
``tests.prom_data`` (NVIDIA, AMD, vLLM and SGLang series with the real exporters' label sets) —
the same values the offline import gives — and an outage in the middle of a pull must leave no
interval missing or counted twice once Prometheus is back.

Locally, without ``prometheus``: skipped (``sudo apt-get install prometheus``); on CI: failed.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command

from ingest.metrics_health import prometheus_health
from ingest.models import DirtyHour, GpuInterval, InferenceInterval, MetricCheckpoint, PrometheusSource
from ingest.prometheus import client_for, plan_queries, pull_source
from tests import prom_checks, prom_data
from tests.prom_server import PrometheusServer, backfill, require_binaries

END = prom_data.HOURS[-1] + timedelta(hours=1)
AFTER = END + timedelta(minutes=10)  # "now" for a pull: two scrape intervals (2 min) past the last window


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory):
    binary, promtool = require_binaries()
    data_dir = tmp_path_factory.mktemp("prometheus") / "data"
    backfill(promtool, prom_data.openmetrics_text(), data_dir)
    server = PrometheusServer(binary, data_dir)
    server.start()
    yield server
    server.stop()


def make_source(url: str, **fields) -> PrometheusSource:
    defaults = {"initial_backfill_hours": 3, "scrape_interval_seconds": 60}
    return PrometheusSource.objects.create(name=fields.pop("name", "prom"), url=url, **(defaults | fields))


@pytest.mark.django_db
def test_pull_gives_the_hand_computed_aggregates(prometheus):
    prom_checks.load_pools()
    source = make_source(prometheus.url)
    result = pull_source(source, now=AFTER)
    assert result.ok, result.errors
    assert result.requests == len(plan_queries(source))  # 3 hourly windows: one request per query
    prom_checks.assert_gpu_rows()
    prom_checks.assert_pool_hours()
    prom_checks.assert_inference_rows()
    prom_checks.assert_unmatched()

    source.refresh_from_db()
    assert source.last_error == "" and source.last_success_at == AFTER
    assert source.lag_seconds == 600  # now − the end of the last committed window
    assert set(MetricCheckpoint.objects.values_list("window_end", flat=True)) == {END}

    # Nothing is due until the next window closes: no request at all.
    assert pull_source(source, now=AFTER + timedelta(minutes=30)).requests == 0
    # A re-pull over the same range rewrites the same numbers and counts nothing twice.
    rows = GpuInterval.objects.count() + InferenceInterval.objects.count()
    again = pull_source(source, start=prom_data.HOURS[0], now=AFTER)
    assert again.ok and GpuInterval.objects.count() + InferenceInterval.objects.count() == rows
    prom_checks.assert_gpu_rows()
    prom_checks.assert_unmatched()

    (health,) = prometheus_health(now=AFTER)
    assert (health.name, health.lag_seconds, health.last_error) == ("prom", 600, "")
    assert health.pools_without_data == [] and health.unmatched_count == 1
    assert health.unmatched_series[0].labels["Hostname"] == prom_data.UNMATCHED_HOST
    assert health.inference_series_without_endpoint  # no endpoint mapping on this source


@pytest.mark.django_db
def test_five_minute_step_and_endpoint_label(prometheus):
    prom_checks.load_pools()
    source = make_source(
        prometheus.url, name="prom-5m", step_seconds=300, endpoint_match={"vllm-h100-a": {"model_name": ".*"}}
    )
    result = pull_source(source, start=prom_data.HOURS[0], end=END, now=AFTER)
    assert result.ok, result.errors
    assert GpuInterval.objects.filter(step_seconds=300).count() == 4 * 36
    prom_checks.assert_pool_hours()  # 12 five-minute windows add up to the same hours
    vllm = InferenceInterval.objects.filter(series__server="vllm")
    assert vllm.count() == 36 and {row.series.endpoint.name for row in vllm} == {"vllm-h100-a"}
    assert sum(row.prompt_tokens for row in vllm) == pytest.approx(3 * 36_000)


@pytest.mark.django_db
def test_ingest_metrics_command(prometheus):
    prom_checks.load_pools()
    make_source(prometheus.url, name="cmd")
    call_command(
        "ingest_metrics",
        "--source",
        "cmd",
        "--start",
        prom_data.HOURS[0].isoformat(),
        "--end",
        END.isoformat().replace("+00:00", "Z"),
    )
    prom_checks.assert_gpu_rows()


@pytest.mark.django_db
def test_outage_during_a_pull_is_backfilled_by_the_next(tmp_path, settings):
    settings.PROMETHEUS_RETRIES = 1
    binary, promtool = require_binaries()
    backfill(promtool, prom_data.openmetrics_text(), tmp_path / "data")
    server = PrometheusServer(binary, tmp_path / "data")
    server.start()
    try:
        prom_checks.load_pools()
        source = make_source(server.url, initial_backfill_hours=1)
        queries = len(plan_queries(source))

        # 01:10: hour 0 is due and pulled.
        assert pull_source(source, now=prom_data.HOURS[1] + timedelta(minutes=10)).ok

        # 02:10: Prometheus goes down after a third of the queries.
        class DiesMidway:
            def __init__(self, inner, after):
                self.inner, self.after, self.calls = inner, after, 0

            def custom_query_range(self, *args, **kwargs):
                self.calls += 1
                if self.calls == self.after + 1:
                    server.stop()
                return self.inner.custom_query_range(*args, **kwargs)

        dying = DiesMidway(client_for(source), after=queries // 3)
        broken = pull_source(source, now=prom_data.HOURS[2] + timedelta(minutes=10), client=dying)
        assert (
            not broken.ok and "unavailable" in broken.errors[0] and "Connection refused" in broken.errors[0]
        )
        source.refresh_from_db()
        assert "unavailable" in source.last_error and source.lag_seconds == 3600 + 600  # 02:10 − 01:00
        behind = MetricCheckpoint.objects.filter(source=source, window_end=prom_data.HOURS[1]).count()
        assert behind == queries - queries // 3  # these queries still need hour 1

        # 03:10: Prometheus is back; one pull fetches hour 1 for the queries that missed it, and hour 2.
        server.start()
        healed = pull_source(source, now=AFTER)
        assert healed.ok, healed.errors
        assert healed.windows == behind * 2 + (queries - behind)
    finally:
        server.stop()
    source.refresh_from_db()
    assert source.last_error == "" and source.lag_seconds == 600
    assert set(MetricCheckpoint.objects.filter(source=source).values_list("window_end", flat=True)) == {END}
    prom_checks.assert_gpu_rows()  # every interval present once, with the right numbers
    prom_checks.assert_pool_hours()
    prom_checks.assert_inference_rows()
    prom_checks.assert_unmatched()  # three intervals, not more
    assert set(DirtyHour.objects.values_list("hour", flat=True)) == set(prom_data.HOURS)
