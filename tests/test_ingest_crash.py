"""Crash drill: ``ingest_usage`` killed with SIGKILL at several points, then resumed.

The child process writes to the test database through DATABASE_URL; after every kill the rows
committed so far are intact, and the final run brings the total to exactly the file's records.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from django.db import connection
from django.db.models import Sum

from ingest.models import Attempt, FileCheckpoint, IngestRun
from tests.conftest import ROOT
from tests.ingest_helpers import canonical, subprocess_database_url, write_jsonl

RECORDS = 30_000
KILL_AT = [3_000, 11_000, 19_000, 26_000]


def attempts_committed() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM ingest_attempt")
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_sigkill_at_several_points_then_resume_gives_exact_totals(tmp_path):
    lines = [canonical(i) for i in range(RECORDS)]
    lines[12_345] = "{not json"  # one reject, to check rejects are not double-counted either
    path = write_jsonl(tmp_path / "usage.jsonl", lines)
    env = {**os.environ, "DATABASE_URL": subprocess_database_url(), "INGEST_BATCH_SIZE": "1000"}
    command = [sys.executable, "manage.py", "ingest_usage", str(path), "--source", "drill"]

    kills = 0
    for threshold in KILL_AT:
        child = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + 120
        while child.poll() is None and attempts_committed() < threshold and time.monotonic() < deadline:
            time.sleep(0.005)
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
            kills += 1
        child.wait()
        assert child.returncode in (0, -signal.SIGKILL), child.stderr.read().decode()[-2000:]
        connection.close()  # a fresh view of what the child committed
        committed = Attempt.objects.count()
        checkpoint = FileCheckpoint.objects.get(path=str(path))
        # What the checkpoint says is done is exactly what is in the table (plus the reject).
        assert committed == checkpoint.items_done - (1 if checkpoint.items_done > 12_345 else 0)
    assert kills >= 3, "the file was ingested too fast to interrupt; raise RECORDS"

    final = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert final.returncode == 0, final.stderr
    assert Attempt.objects.count() == RECORDS - 1
    runs = IngestRun.objects.filter(source__name="drill")
    totals = runs.aggregate(accepted=Sum("accepted"), duplicate=Sum("duplicate"), rejected=Sum("rejected"))
    assert totals == {"accepted": RECORDS - 1, "duplicate": 0, "rejected": 1}
    assert FileCheckpoint.objects.get(path=str(path)).complete
