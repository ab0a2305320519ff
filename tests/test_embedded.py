"""The embedded defaults: Postgres from pgserver, and the quick start serving the app end to end."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
import requests
from django.conf import settings
from django.db import connection

from tests.conftest import ROOT

EMBEDDED_ONLY = pytest.mark.skipif(
    bool(os.environ.get("DATABASE_URL")),
    reason="the suite runs against DATABASE_URL, not the embedded server",
)


def clean_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "SECRET_KEY", "DEBUG"}}
    return {**env, "COSTCENTER_HOME": str(home), "DEBUG": "true"}


def postmaster_running(pgdata: Path) -> bool:
    pid_file = pgdata / "postmaster.pid"
    if not pid_file.exists():
        return False
    return psutil.pid_exists(int(pid_file.read_text().split()[0]))


@EMBEDDED_ONLY
@pytest.mark.django_db
def test_the_suite_itself_runs_on_the_embedded_postgres():
    assert settings.DATABASES["default"]["ENGINE"] == "costcenter.embedded_pg"
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version_num")
        assert int(cursor.fetchone()[0]) >= 160000
        cursor.execute("SELECT current_database()")
        assert cursor.fetchone()[0] == "test_costcenter"


START_AND_QUERY = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import psycopg
    from costcenter.embedded_pg import ensure_server
    socket_dir = ensure_server(Path(sys.argv[1]), "costcenter")
    with psycopg.connect(host=socket_dir, user="postgres", dbname="costcenter") as conn:
        print(conn.execute("SELECT current_database()").fetchone()[0], flush=True)
    if len(sys.argv) > 2:
        time.sleep(float(sys.argv[2]))
    """
)


def run_python(code: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env
    )


def test_a_fresh_embedded_server_starts_creates_the_database_and_stops_with_its_last_user(tmp_path):
    pgdata = tmp_path / "pgdata"
    result = run_python(START_AND_QUERY, str(pgdata))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "costcenter"
    assert (pgdata / "PG_VERSION").read_text().strip() == "16"
    assert not postmaster_running(pgdata)


def test_a_killed_user_does_not_keep_the_server_alive(tmp_path):
    pgdata = tmp_path / "pgdata"
    victim = subprocess.Popen(
        [sys.executable, "-c", START_AND_QUERY, str(pgdata), "60"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert victim.stdout.readline().strip() == "costcenter"
    victim.kill()  # SIGKILL: no exit handler runs, its pid stays in pgserver's list
    victim.wait()
    assert postmaster_running(pgdata)
    result = run_python(START_AND_QUERY, str(pgdata))
    assert result.returncode == 0, result.stderr
    assert not postmaster_running(pgdata), "the last live user should have stopped the server"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_quick_start_serves_the_example_catalog_and_stops_cleanly_on_ctrl_c(tmp_path):
    port = free_port()
    home = tmp_path / "home"
    process = subprocess.Popen(
        [sys.executable, "manage.py", "quickstart", "--port", str(port)],
        cwd=ROOT,
        env=clean_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        password = None
        # The whole quick start (migrate, demo data, first costing) takes ~65 s on an idle 2-core
        # machine; the bound is generous because a loaded CI box can take twice that.
        deadline = time.monotonic() + 240
        while password is None and time.monotonic() < deadline:
            line = process.stdout.readline()
            assert line, "quickstart exited before printing the demo admin's credentials"
            match = re.search(r"log in as admin / (\S+)", line)
            password = match.group(1) if match else None
        assert password, "no credentials printed"

        base = f"http://127.0.0.1:{port}"
        session = requests.Session()
        while time.monotonic() < deadline:
            try:
                login_page = session.get(f"{base}/accounts/login/", timeout=5)
                break
            except requests.ConnectionError:
                time.sleep(0.3)
        assert login_page.status_code == 200
        response = session.post(
            f"{base}/accounts/login/",
            data={
                "username": "admin",
                "password": password,
                "csrfmiddlewaretoken": session.cookies["csrftoken"],
            },
            headers={"Referer": f"{base}/accounts/login/"},
            timeout=10,
        )
        assert response.status_code == 200 and response.url == f"{base}/"
        for name in ("h100-a", "mi300x-b", "gpt-4o-mini", "Network Ops"):
            assert name in response.text
        assert session.get(f"{base}/static/vendor/plotly.min.js", timeout=10).status_code == 200

        children = psutil.Process(process.pid).children(recursive=True)
        names = " ".join(" ".join(child.cmdline()) for child in children)
        assert "runserver" in names and "worker" in names and "beat" in names
        assert postmaster_running(home / "pgdata")

        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
        assert "stopped web, worker and beat" in process.stdout.read()
        _, alive = psutil.wait_procs(children, timeout=10)
        assert not alive, f"left running: {alive}"
        assert not postmaster_running(home / "pgdata")
    finally:
        if process.poll() is None:
            process.kill()
