"""Fault drill: Postgres restarted in the middle of an ingest.

A separate embedded server (pgserver on a temporary folder, as ``costcenter.embedded_pg`` starts
it) so the suite's own database is never disturbed. ``ingest_usage`` runs as a subprocess against
it; after its first batches are committed the server is restarted with ``pg_ctl restart -m
immediate`` (no shutdown checkpoint, crash recovery on start: what a crash and a supervisor
restart look like). The ingest
must stop with a clear one-paragraph error, not a traceback, keep every committed batch with its
checkpoint, and the retry must finish with exact totals and no duplicate.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import psycopg
import pytest

from tests.conftest import ROOT
from tests.drill_helpers import wait_for
from tests.ingest_helpers import canonical, write_jsonl

pytestmark = pytest.mark.drill

RECORDS = 25_000
REJECT_AT = 7  # one unparsable line: rejects must not double-count either


@pytest.fixture
def drill_postgres():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs' XDG_RUNTIME_DIR warning (see embedded_pg)
        import pgserver
    # Not under pytest's temporary root: as root, pgserver runs Postgres as its own system user,
    # and every pytest session (other runs on this machine too) resets that root to mode 0700,
    # which would lock the server out of its own data directory when it restarts.
    folder = Path(tempfile.mkdtemp(prefix="costcenter-drill-pg-"))
    folder.chmod(0o755)
    server = pgserver.get_server(folder / "pgdata", cleanup_mode="stop")
    socket_dir = str(server.get_postmaster_info().socket_dir)
    with psycopg.connect(host=socket_dir, user="postgres", dbname="postgres", autocommit=True) as conn:
        conn.execute("CREATE DATABASE drill")
    try:
        yield server, socket_dir
    finally:
        server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


def query(socket_dir: str, sql: str):
    """A fresh connection each time: the server is restarted under us."""
    try:
        with psycopg.connect(host=socket_dir, user="postgres", dbname="drill", connect_timeout=5) as conn:
            return conn.execute(sql).fetchone()
    except psycopg.OperationalError:
        return None  # restarting


def test_postgres_restarted_mid_ingest_fails_cleanly_and_the_retry_is_exact(drill_postgres, tmp_path):
    from pgserver._commands import pg_ctl

    server, socket_dir = drill_postgres
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://postgres:@/drill?host={socket_dir}",
        "COSTCENTER_HOME": str(tmp_path / "home"),
        "INGEST_BATCH_SIZE": "1000",
    }
    migrate = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert migrate.returncode == 0, migrate.stderr[-3000:]

    lines = [canonical(i) for i in range(RECORDS)]
    lines[REJECT_AT] = "{not json"
    path = write_jsonl(tmp_path / "usage.jsonl", lines)
    command = [sys.executable, "manage.py", "ingest_usage", str(path), "--source", "drill-pg"]
    child = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for(
            lambda: (
                child.poll() is not None
                or (query(socket_dir, "SELECT count(*) FROM ingest_attempt") or [0])[0] >= 3_000
            ),
            timeout=120,
            what="the first committed batches",
        )
        assert child.poll() is None, "the ingest finished before the restart; raise RECORDS"
        pg_ctl(
            ["-w", "-m", "immediate", "restart"], pgdata=server.pgdata, user=server.system_user, timeout=60
        )
        stdout, stderr = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()

    print(stderr)  # the message a user sees, for the record
    assert child.returncode == 1, (stdout, stderr)
    assert "Traceback" not in stderr, stderr
    assert f"{path}: the database connection was lost while ingesting (" in stderr
    assert "run the same command again to resume" in stderr

    # What survived the crash is consistent: rows match the checkpoint (each batch and its
    # checkpoint were committed together; recovery rolled the one in flight back whole).
    (committed,) = query(socket_dir, "SELECT count(*) FROM ingest_attempt")
    (done,) = query(socket_dir, "SELECT items_done FROM ingest_filecheckpoint")
    assert 3_000 <= committed < RECORDS
    assert committed == done - (1 if done > REJECT_AT else 0)

    retry = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert retry.returncode == 0, retry.stderr[-3000:]
    assert f"{RECORDS - 1 - committed:,} accepted, 0 duplicate, 0 rejected" in retry.stdout

    assert query(socket_dir, "SELECT count(*), sum(prompt_tokens) FROM ingest_attempt") == (
        RECORDS - 1,
        sum(1000 + i % 500 for i in range(RECORDS) if i != REJECT_AT),
    )
    totals = query(
        socket_dir, "SELECT sum(accepted), sum(duplicate), sum(rejected), count(*) FROM ingest_ingestrun"
    )
    assert totals == (RECORDS - 1, 0, 1, 2)
    assert query(socket_dir, "SELECT count(*) FROM ingest_rejectedrecord") == (1,)
    assert query(socket_dir, "SELECT complete FROM ingest_filecheckpoint") == (True,)
