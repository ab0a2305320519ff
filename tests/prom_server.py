"""A real Prometheus (Debian's package) over backfilled test data, as a subprocess on loopback.

Data is written as OpenMetrics (timestamps in seconds, a final ``# EOF``), turned into blocks with
``promtool tsdb create-blocks-from openmetrics`` and served by ``prometheus`` with scraping off
(an empty ``scrape_configs``) and a retention long enough for old timestamps.

On CI (``CI=true``) a missing binary fails the tests; locally they are skipped with a hint.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

INSTALL_HINT = "install Debian's Prometheus (it ships promtool): sudo apt-get install prometheus"


def require_binaries() -> tuple[str, str]:
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if prometheus and promtool:
        return prometheus, promtool
    message = f"prometheus/promtool not found: {INSTALL_HINT}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def backfill(promtool: str, openmetrics: str, data_dir: Path) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    source = data_dir.parent / f"{data_dir.name}.om"
    source.write_text(openmetrics)
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(data_dir)],
        check=True,
        capture_output=True,
        timeout=120,
    )


class PrometheusServer:
    def __init__(self, binary: str, data_dir: Path, port: int | None = None) -> None:
        self.binary = binary
        self.data_dir = data_dir
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = data_dir.parent / f"{data_dir.name}.yml"
        self.config.write_text("scrape_configs: []\n")
        self.log = data_dir.parent / f"{data_dir.name}.log"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 60) -> None:
        self.process = subprocess.Popen(  # noqa: S603
            [
                self.binary,
                f"--config.file={self.config}",
                f"--storage.tsdb.path={self.data_dir}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                # Retention counts back from the newest block; the fixtures are old on purpose.
                "--storage.tsdb.retention.time=100y",
            ],
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("ab"),
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:  # noqa: S310
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"prometheus not ready after {timeout}s: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)
        self.process = None
