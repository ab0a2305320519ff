"""Killing a recompute mid-run and running it again gives the same rollups as one clean run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

import pytest
from django.db import connection

from costcenter.catalog import catalog_load
from costcenter.costing import recompute
from tests.conftest import ROOT
from tests.cost_world import CATALOG, H, attempt, load
from tests.ingest_helpers import subprocess_database_url

HOURS = 300


def snapshot() -> tuple:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT hour, team_id, workload_id, model_id, endpoint_id, attempts, tasks, successful_tasks, cost, "
            "idle_cost, unpriced_attempts, latency_histogram FROM costcenter_hourlyusage ORDER BY 1, 2, 3, 4, 5"
        )
        hourly = cursor.fetchall()
        cursor.execute(
            "SELECT pool_id, hour, pool_cost, allocated_cost, unallocated_cost FROM costcenter_poolhour ORDER BY 1, 2"
        )
        pools = cursor.fetchall()
        cursor.execute(
            "SELECT day, model_id, team_id, attempts, cost FROM costcenter_dailyusage ORDER BY 1, 2, 3"
        )
        return hourly, pools, cursor.fetchall()


@pytest.mark.django_db(transaction=True)
def test_a_recompute_killed_mid_run_converges_to_the_clean_result():
    catalog_load(CATALOG)
    records = []
    for i in range(HOURS):
        hour = H + timedelta(hours=i)
        records.append(attempt(3 * i, hour=hour, model="llama", endpoint="vllm-1", prompt_tokens=100 + i))
        records.append(attempt(3 * i + 1, hour=hour, team="b", minute=50, prompt_tokens=10 + i))
        records.append(attempt(3 * i + 2, hour=hour, model="llama", endpoint="amd-1", team="b", minute=20))
    load(*records)
    now = H + timedelta(hours=HOURS + 1)
    env = {**os.environ, "DATABASE_URL": subprocess_database_url()}
    command = [
        sys.executable,
        "-c",
        "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'costcenter.settings'); django.setup(); "
        "from datetime import datetime; from costcenter.costing import recompute; "
        f"recompute(now=datetime.fromisoformat('{now.isoformat()}'))",
    ]
    child = subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while child.poll() is None and time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(DISTINCT hour) FROM costcenter_hourlyusage")
            if cursor.fetchone()[0] >= HOURS // 3:
                break
        time.sleep(0.01)
    assert child.poll() is None, "the recompute finished before it could be interrupted"
    child.send_signal(signal.SIGKILL)
    child.wait()
    connection.close()
    # The killed run's database session can outlive it for a moment (the server notices the
    # closed socket later, on a loaded machine noticeably so) and hold its "one run at a time"
    # lock until then: the next run would rightly skip. Wait for that session to end, as the next
    # scheduled run would.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid <> pg_backend_pid() "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            )
            if cursor.fetchone()[0] == 0:
                break
        time.sleep(0.05)

    recompute(now=now)  # the run after the crash
    after_crash = snapshot()
    recompute(now=now, since=H - timedelta(days=1))  # everything again, from scratch
    assert snapshot() == after_crash
    assert len(after_crash[0]) == 3 * HOURS
