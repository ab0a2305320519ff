"""Run a command and write its peak RSS (bytes) to a file: ``python bench/peak_rss.py REPORT CMD…``.

Why a launcher: Linux counts, in a child's ``ru_maxrss``, the peak RSS of the memory image it was
started from. ``subprocess`` starts children with ``vfork`` (or ``fork``) and ``exec``; at the
``exec`` the kernel keeps the old image's high-water mark in the child's rusage, and that old
image is the *parent's*. A benchmark that has 1 GB resident (the demo simulator holds a day of
attempts) would report 1 GB for every child it measures, whatever the child itself used. This
launcher is a small Python process (~10 MB): the command it starts inherits only that, so the
figure it writes is the command's own peak (and that of any processes the command waits for).
"""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path


def main() -> int:
    report, *command = sys.argv[1:]
    returncode = subprocess.call(command)
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    Path(report).write_text(str(peak_kib * 1024))
    return returncode


if __name__ == "__main__":
    sys.exit(main())
