"""Fault drill: a read-only COSTCENTER_HOME in the embedded mode gives one clear sentence.

Its siblings live in tests/test_env.py: an unwritable home (a path under a file) and a full one
(a 16 KiB tmpfs, filled). Here the home is a tmpfs mounted read-only — what a remounted disk
after I/O errors looks like — and the embedded mode is on (no DATABASE_URL). Mounting needs root
(CI runs as root); elsewhere the drill is skipped, and on CI a refused mount fails it.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.drill


def mount_or_skip(args: list[str]) -> None:
    result = subprocess.run(["mount", *args], capture_output=True, text=True)
    if result.returncode != 0:
        message = f"cannot mount a tmpfs here: {result.stderr.strip()}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root (CI runs as root)")
@pytest.mark.parametrize("command", [["migrate", "--no-input"], ["ingest_usage", "/dev/null"]])
def test_a_read_only_costcenter_home_is_one_clear_sentence(tmp_path, command):
    home = tmp_path / "home"
    home.mkdir()
    mount_or_skip(["-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(home)])
    try:
        env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "SECRET_KEY"}}
        result = subprocess.run(
            [sys.executable, "manage.py", *command],
            cwd=ROOT,
            env={**env, "DEBUG": "true", "COSTCENTER_HOME": str(home)},
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        subprocess.run(["umount", str(home)], check=False)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert f"COSTCENTER_HOME={home}: cannot write" in result.stderr
    assert "Read-only file system" in result.stderr
    assert "point COSTCENTER_HOME at a writable folder with free space" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
