"""Crash drill: ``ingest_usage`` killed with SIGKILL at random points (≥ 10 times), then resumed.

The child process writes to the test database through DATABASE_URL; after every kill the rows
committed so far match the file's checkpoint exactly, and the final run brings the total to exactly
the file's records — no record lost, none counted twice, the one reject counted once.

The kill points are drawn from a seeded generator; the seed is printed (and named in every
assertion), and ``DRILL_SEED=<seed>`` replays the same points.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest
from django.db import connection
from django.db.models import Sum

from ingest.models import Attempt, FileCheckpoint, IngestRun
from tests.conftest import ROOT
from tests.drill_helpers import no_advisory_locks_held_by_others, wait_for
from tests.ingest_helpers import canonical, subprocess_database_url, write_jsonl

pytestmark = pytest.mark.drill

RECORDS = 26_000
BATCH = 1_000
KILLS = 12
REJECT_AT = 12_345  # 0-based line index of the one unparsable line


def attempts_committed() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM ingest_attempt")
        return cursor.fetchone()[0]


def kill_points(seed: int) -> list[tuple[int, float]]:
    """(rows committed, extra delay in seconds) for each kill, in increasing order of rows.

    The delay moves the kill off the commit boundary: into parsing, the COPY, or the commit of the
    next batch. A threshold already passed kills the child while it is still starting up.
    """
    rng = random.Random(seed)
    thresholds = sorted(rng.sample(range(1, RECORDS - 2 * BATCH), KILLS))
    return [(threshold, round(rng.uniform(0, 0.08), 3)) for threshold in thresholds]


@pytest.mark.django_db(transaction=True)
def test_sigkill_at_random_points_then_resume_gives_exact_totals(tmp_path):
    seed = int(os.environ.get("DRILL_SEED") or random.SystemRandom().randrange(2**32))
    points = kill_points(seed)
    print(f"ingest crash drill: DRILL_SEED={seed} kill points (rows, delay s): {points}")
    replay = f"replay with DRILL_SEED={seed}"

    lines = [canonical(i) for i in range(RECORDS)]
    lines[REJECT_AT] = "{not json"  # one reject, to check rejects are not double-counted either
    path = write_jsonl(tmp_path / "usage.jsonl", lines)
    env = {**os.environ, "DATABASE_URL": subprocess_database_url(), "INGEST_BATCH_SIZE": str(BATCH)}
    command = [sys.executable, "manage.py", "ingest_usage", str(path), "--source", "drill"]

    kills = 0
    for threshold, delay in points:
        child = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + 120
        while child.poll() is None and attempts_committed() < threshold and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(delay)
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
            kills += 1
        child.wait()
        assert child.returncode in (0, -signal.SIGKILL), (replay, child.stderr.read().decode()[-2000:])
        connection.close()  # a fresh view of what the child committed
        committed = Attempt.objects.count()
        checkpoint = FileCheckpoint.objects.filter(path=str(path)).first()
        done = checkpoint.items_done if checkpoint else 0
        # What the checkpoint says is done is exactly what is in the table (plus the reject).
        assert committed == done - (1 if done > REJECT_AT else 0), (replay, threshold, delay)
        # The killed child's session may still hold the file's lock; the next run would skip.
        wait_for(no_advisory_locks_held_by_others, timeout=60, what="the killed run's session to end")
    assert kills >= 10, (
        f"the file was ingested too fast to interrupt ({kills} kills); raise RECORDS ({replay})"
    )

    final = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert final.returncode == 0, (replay, final.stderr)
    assert Attempt.objects.count() == RECORDS - 1, replay
    runs = IngestRun.objects.filter(source__name="drill")
    totals = runs.aggregate(accepted=Sum("accepted"), duplicate=Sum("duplicate"), rejected=Sum("rejected"))
    assert totals == {"accepted": RECORDS - 1, "duplicate": 0, "rejected": 1}, replay
    assert FileCheckpoint.objects.get(path=str(path)).complete
    # The rows themselves, not just their count: every record's tokens are there once.
    expected_prompt = sum(1000 + i % 500 for i in range(RECORDS) if i != REJECT_AT)
    assert Attempt.objects.aggregate(total=Sum("prompt_tokens"))["total"] == expected_prompt, replay
