"""Settings from the environment: typed helpers fail loudly, production settings pass --deploy."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from costcenter.env import database_from_url, env_bool, env_int, env_list
from tests.conftest import ROOT


def test_it_reads_booleans_and_refuses_anything_else(monkeypatch):
    monkeypatch.setenv("FLAG", "Yes")
    assert env_bool("FLAG", False) is True
    monkeypatch.setenv("FLAG", "0")
    assert env_bool("FLAG", True) is False
    monkeypatch.setenv("FLAG", "")
    assert env_bool("FLAG", True) is True
    monkeypatch.setenv("FLAG", "treu")
    with pytest.raises(ImproperlyConfigured, match=r"FLAG='treu': expected one of true/false"):
        env_bool("FLAG", False)


def test_it_reads_integers_with_a_minimum(monkeypatch):
    monkeypatch.setenv("PORT_X", "2525")
    assert env_int("PORT_X", 25, minimum=1) == 2525
    monkeypatch.setenv("PORT_X", "25x")
    with pytest.raises(ImproperlyConfigured, match="expected an integer"):
        env_int("PORT_X", 25)
    monkeypatch.setenv("PORT_X", "0")
    with pytest.raises(ImproperlyConfigured, match="must be at least 1"):
        env_int("PORT_X", 25, minimum=1)


def test_it_splits_lists(monkeypatch):
    monkeypatch.setenv("HOSTS", " a.example.com, ,b.example.com ")
    assert env_list("HOSTS", []) == ["a.example.com", "b.example.com"]
    monkeypatch.delenv("HOSTS")
    assert env_list("HOSTS", ["x"]) == ["x"]


def test_it_parses_database_urls():
    db = database_from_url("postgres://cc:p%40ss@db.internal:6432/costs?sslmode=require")
    assert db["ENGINE"] == "django.db.backends.postgresql"
    assert (db["NAME"], db["USER"], db["PASSWORD"], db["HOST"], db["PORT"]) == (
        "costs",
        "cc",
        "p@ss",
        "db.internal",
        "6432",
    )
    assert db["OPTIONS"] == {"sslmode": "require"}
    socket = database_from_url("postgresql:///costs?host=/var/run/postgresql")
    assert socket["HOST"] == "/var/run/postgresql"
    with pytest.raises(ImproperlyConfigured, match="scheme 'mysql' is not supported"):
        database_from_url("mysql://x@y/z")
    with pytest.raises(ImproperlyConfigured, match="names no database"):
        database_from_url("postgres://x@y:5432/")


def _manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "SECRET_KEY", "HTTPS", "ALLOWED_HOSTS"}}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_it_refuses_to_start_without_a_secret_key_when_debug_is_off(tmp_path):
    result = _manage("check", env={"DEBUG": "false", "COSTCENTER_HOME": str(tmp_path)})
    assert result.returncode != 0
    assert "SECRET_KEY is required when DEBUG is off" in result.stderr


def test_it_is_clean_under_check_deploy_with_production_settings(tmp_path):
    production = {
        "DEBUG": "false",
        "SECRET_KEY": "k3y-" + "x7Gq2" * 12,
        "HTTPS": "true",
        "ALLOWED_HOSTS": "costs.example.com",
        "COSTCENTER_HOME": str(tmp_path),
    }
    result = _manage("check", "--deploy", "--fail-level", "WARNING", env=production)
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def test_it_is_clean_under_check_for_local_use(tmp_path):
    result = _manage(
        "check", "--fail-level", "WARNING", env={"DEBUG": "true", "COSTCENTER_HOME": str(tmp_path)}
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "dev-secret-key").exists()


def test_collectstatic_builds_the_hashed_manifest_production_serves(tmp_path):
    production = {
        "DEBUG": "false",
        "SECRET_KEY": "k3y-" + "x7Gq2" * 12,
        "COSTCENTER_HOME": str(tmp_path),
        "STATIC_ROOT": str(tmp_path / "static"),
        "STATIC_MANIFEST": "true",
        "WHITENOISE_USE_FINDERS": "false",
    }
    result = _manage("collectstatic", "--noinput", env=production)
    assert result.returncode == 0, result.stderr
    manifest = json.loads((tmp_path / "static" / "staticfiles.json").read_text())
    hashed = manifest["paths"]["vendor/plotly.min.js"]
    assert hashed != "vendor/plotly.min.js" and (tmp_path / "static" / (hashed + ".gz")).exists()


def test_a_configuration_mistake_is_one_sentence_not_a_traceback(tmp_path):
    result = _manage("check", env={"DEBUG": "maybe", "COSTCENTER_HOME": str(tmp_path)})
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == "configuration error: DEBUG='maybe': expected one of true/false, 1/0, yes/no, on/off"
    )


def test_an_unwritable_costcenter_home_is_reported_clearly(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = _manage("check", env={"DEBUG": "true", "COSTCENTER_HOME": str(blocker / "home")})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"COSTCENTER_HOME={blocker / 'home'}: cannot write" in result.stderr
    assert "point COSTCENTER_HOME at a writable folder with free space" in result.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root (CI runs as root)")
def test_a_full_costcenter_home_is_reported_clearly(tmp_path):
    mount = tmp_path / "full"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mount)]).returncode != 0:
        pytest.skip("this sandbox does not allow mounting a tmpfs")
    try:
        with (mount / "filler").open("wb") as filler:  # fill the disk
            try:
                filler.write(b"x" * 1_000_000)
            except OSError:
                pass
        result = _manage("check", env={"DEBUG": "true", "COSTCENTER_HOME": str(mount)})
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert "No space left on device" in result.stderr
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_processes_starting_together_do_not_trip_over_each_others_write_probe(tmp_path):
    """gunicorn's workers, the Celery worker and beat import the settings at the same moment with
    one COSTCENTER_HOME; each checks that it can write there. With one shared probe file name a
    worker could delete another's probe before that one removed it: the second failed to boot with
    "cannot write … (No such file or directory)" (seen as `gunicorn exited with 3`). Threads race
    the same way; with the shared name this failed ~200 times in 2,400 calls."""
    import threading

    from costcenter.settings import _home_dir

    folder = tmp_path / "home" / "staticfiles"
    start = threading.Barrier(8)
    failures: list[Exception] = []

    def check_many_times():
        start.wait()
        for _ in range(300):
            try:
                _home_dir(folder)
            except ImproperlyConfigured as exc:
                failures.append(exc)

    threads = [threading.Thread(target=check_many_times) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert list(folder.iterdir()) == []  # every probe removed
