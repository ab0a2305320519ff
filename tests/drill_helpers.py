"""Real processes for the fault drills: a Redis broker on a loopback port and Celery workers.

Workers are ``celery -A costcenter worker`` subprocesses, each in its own session (so a drill can
SIGKILL the whole worker, parent and pool child, as an OOM killer or a lost machine would) and
writing to the test database through DATABASE_URL. Without ``redis-server`` the drills that need
it are skipped locally with the install hint, and fail on CI (CI=true).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.ingest_helpers import subprocess_database_url
from tests.prom_server import free_port

REDIS_HINT = "install redis-server (Debian: sudo apt-get install redis-server)"


def require_redis() -> str:
    binary = shutil.which("redis-server")
    if binary:
        return binary
    message = f"redis-server not found: {REDIS_HINT}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def wait_for(condition: Callable[[], object], *, timeout: float, what: str, log: Path | None = None):
    """Poll ``condition`` until it returns something truthy; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
    pytest.fail(f"timed out after {timeout}s waiting for {what}\n{tail}")


def no_advisory_locks_held_by_others() -> bool:
    """True once no other session of the test database holds an advisory lock.

    A SIGKILLed process's database session outlives it for a moment (the server notices the
    closed socket later; on a loaded machine noticeably so) and keeps its per-file lock until
    then: a run started at once would rightly skip the file as busy. Drills wait for this, as the
    next scheduled run would come later anyway.
    """
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid <> pg_backend_pid() "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        return cursor.fetchone()[0] == 0


class RedisServer:
    """redis-server on 127.0.0.1 with no persistence (a drill's broker lives and dies with it)."""

    def __init__(self, binary: str, workdir: Path) -> None:
        self.binary, self.workdir = binary, workdir
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> RedisServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
            + ["--dir", str(self.workdir)],
            stdout=(self.workdir / "redis.log").open("ab"),
            stderr=subprocess.STDOUT,
        )
        import redis

        client = redis.Redis.from_url(self.url)

        def pong() -> bool:
            try:
                return bool(client.ping())
            except redis.ConnectionError:
                return False

        wait_for(pong, timeout=20, what="redis-server to answer", log=self.workdir / "redis.log")
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None


class Worker:
    """One ``celery worker`` subprocess (prefork, --concurrency 1: a parent and one pool child)."""

    def __init__(self, name: str, broker_url: str, home: Path, *, extra_env: dict | None = None) -> None:
        self.name = name
        self.node = f"{name}@drill"
        self.log = home / f"worker-{name}.log"
        self.env = {
            **os.environ,
            "DATABASE_URL": subprocess_database_url(),
            "CELERY_BROKER_URL": broker_url,
            "COSTCENTER_HOME": str(home),
            **(extra_env or {}),
        }
        self.process: subprocess.Popen | None = None

    def start(self) -> Worker:
        command = [sys.executable, "-m", "celery", "-A", "costcenter", "worker", "--concurrency", "1"]
        command += ["-n", self.node, "--loglevel", "INFO", "--without-gossip", "--without-mingle"]
        # The drills' fault injection (tests/drill_tasks.py) is loaded into the worker only.
        command += ["--include", "tests.drill_tasks"]
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=self.env,
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: killpg reaches the pool child too
        )
        wait_for(self.ready, timeout=60, what=f"worker {self.node} to be ready", log=self.log)
        return self

    def ready(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            pytest.fail(
                f"worker {self.node} exited with {self.process.returncode}:\n{self.log.read_text()[-3000:]}"
            )
        return self.log.exists() and f"{self.node} ready." in self.log.read_text()

    def kill(self) -> None:
        """SIGKILL the whole worker at once: no shutdown, no reject, no ack."""
        if self.process is not None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
            self.process = None

    def stop(self) -> None:
        """Warm shutdown: SIGTERM to the parent only, which lets the pool child finish its task and
        logs the result (a SIGTERM to the child would kill it mid-task); SIGKILL if it hangs."""
        if self.process is None:
            return
        try:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        except ProcessLookupError:
            pass
        self.process = None


def sender(broker_url: str):
    """A Celery client of the drill's broker (the test process's own app uses the filesystem one)."""
    from celery import Celery

    return Celery("drill-client", broker=broker_url, set_as_current=False)
