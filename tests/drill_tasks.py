"""Fault injection loaded into drill workers only (``celery worker --include tests.drill_tasks``).

A *poison* file stands for input that kills whichever worker reads it (memory exhausted, a crash
in a native library): ingesting any file whose name starts with ``poison`` SIGKILLs the worker's
pool process. This is the one simulated part of the redelivery-cap drill — the worker, broker,
redelivery, counter and refusal are all real.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from ingest import services

_real_ingest_path = services.ingest_path


def _ingest_path_or_die(path, *args, **kwargs):
    if Path(path).name.startswith("poison"):
        os.kill(os.getpid(), signal.SIGKILL)
    return _real_ingest_path(path, *args, **kwargs)


services.ingest_path = _ingest_path_or_die
