"""Fault drill: Prometheus killed (SIGKILL) between pulls and down for two of them, then back.

A real Prometheus (Debian's package) over promtool-backfilled data, as in
tests/test_prom_integration.py — whose own outage test stops the server in the middle of one pull.
Here the server dies outright, the pulls while it is down reach a closed port and commit nothing,
and the first pull after it is back fills every missed window: no gap, nothing counted twice.
"""

from __future__ import annotations

import signal
from datetime import timedelta

import pytest

from ingest.models import DirtyHour, MetricCheckpoint
from ingest.prometheus import plan_queries, pull_source
from tests import prom_checks, prom_data
from tests.prom_server import PrometheusServer, backfill, require_binaries
from tests.test_prom_integration import AFTER, END, make_source

pytestmark = [pytest.mark.drill, pytest.mark.django_db]


def test_prometheus_killed_for_two_pulls_leaves_no_gap_after_it_returns(tmp_path, settings):
    settings.PROMETHEUS_RETRIES = 1
    binary, promtool = require_binaries()
    backfill(promtool, prom_data.openmetrics_text(), tmp_path / "data")
    server = PrometheusServer(binary, tmp_path / "data")
    server.start()
    try:
        prom_checks.load_pools()
        source = make_source(server.url, initial_backfill_hours=1)
        queries = len(plan_queries(source))

        # 01:10: hour 0 is pulled.
        assert pull_source(source, now=prom_data.HOURS[1] + timedelta(minutes=10)).ok
        # Prometheus dies without a shutdown (OOM killer, lost node).
        server.process.send_signal(signal.SIGKILL)
        server.process.wait(timeout=10)
        server.process = None

        # 02:10 and 03:10: a closed port. Nothing is committed, the lag grows, the error says why.
        for now in (prom_data.HOURS[2] + timedelta(minutes=10), AFTER):
            down = pull_source(source, now=now)
            assert not down.ok and down.windows == 0
            assert "Connection refused" in down.errors[0]
            source.refresh_from_db()
            assert source.lag_seconds == (now - prom_data.HOURS[1]).total_seconds()
            assert source.last_error
        assert set(MetricCheckpoint.objects.values_list("window_end", flat=True)) == {prom_data.HOURS[1]}

        # Back on the same port: one pull fills hours 1 and 2 for every query.
        server.start()
        healed = pull_source(source, now=AFTER)
        assert healed.ok, healed.errors
        assert healed.windows == 2 * queries
    finally:
        server.stop()

    source.refresh_from_db()
    assert source.last_error == "" and source.lag_seconds == 600
    assert set(MetricCheckpoint.objects.values_list("window_end", flat=True)) == {END}
    prom_checks.assert_gpu_rows()  # every interval once, with the hand-computed numbers
    prom_checks.assert_pool_hours()
    prom_checks.assert_inference_rows()
    prom_checks.assert_unmatched()
    assert set(DirtyHour.objects.values_list("hour", flat=True)) == set(prom_data.HOURS)
