"""Finding usage files: the paths given, or the files inside given directories."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

# Files still being written must not be read half-way: a directory scan leaves files modified
# in the last few seconds for the next scan.
SETTLE_SECONDS = 10
_SKIP_SUFFIXES = {".tmp", ".part", ".partial", ".swp"}


def usage_files(paths: Iterable[Path], *, settle_seconds: float = 0) -> list[Path]:
    """Files named directly, plus every file under named directories (sorted, hidden ones skipped)."""
    found: list[Path] = []
    now = time.time()
    for path in paths:
        if path.is_dir():
            for child in sorted(path.rglob("*")):
                if not child.is_file() or any(part.startswith(".") for part in child.relative_to(path).parts):
                    continue
                if child.suffix in _SKIP_SUFFIXES:
                    continue
                if settle_seconds and now - child.stat().st_mtime < settle_seconds:
                    continue
                found.append(child)
        elif path.is_file():
            found.append(path)
    return found
