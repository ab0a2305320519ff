"""Writing usage: records in, rows out, exactly once. (Implementation in progress.)"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ingest.models import Source, SourceKind
from ingest.records import FileDefaults, Reject, UsageRecord

SAMPLE_REJECTS = 100


@dataclass
class IngestResult:
    accepted: int = 0
    duplicate: int = 0
    rejected: int = 0
    reasons: Counter = field(default_factory=Counter)
    sample_rejects: list[Reject] = field(default_factory=list)


def source_for(name: str, *, kind: str = SourceKind.FILES) -> Source:
    raise NotImplementedError


def ingest_items(
    items: Iterable[UsageRecord | Reject],
    *,
    source: Source,
    origin: str,
    allowed_teams: set[str] | None = None,
    progress: Callable[[IngestResult], None] | None = None,
) -> IngestResult:
    raise NotImplementedError


def ingest_path(
    path: Path,
    *,
    source: Source,
    fmt: str = "auto",
    defaults: FileDefaults | None = None,
    progress: Callable[[IngestResult], None] | None = None,
) -> IngestResult:
    raise NotImplementedError
