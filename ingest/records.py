"""Plain values that the ingestion parsers produce; no Django, no database.

Every usage format (canonical JSONL, OpenAI batch output, LiteLLM spend logs, OTLP GenAI spans)
is turned into a stream of `UsageRecord` (one attempt = one request to a model) or `Reject`
(a piece of input we could not accept, with where and why). Neither ever holds prompt or output
text: records keep counts and ids only, and reject excerpts are redacted before they are built.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

Status = Literal["success", "failure"]


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """One attempt, normalised. Tokens follow OpenAI semantics: prompt includes cached,
    completion includes reasoning, so cost code must never add them twice."""

    idempotency_key: str  # request_id when present, else f"{task_id}#{attempt}"; unique per source
    task_id: str
    attempt: int
    request_id: str | None
    ts: datetime  # aware, UTC; start of the request
    model: str
    model_version: str  # "" if unknown
    endpoint: str  # "" if unknown (the attempt is then unpriced downstream, never dropped)
    workload: str  # "" if unknown
    team: str  # "" if unknown
    status: Status
    http_status: int | None
    error_type: str | None
    latency_ms: int | None
    ttft_ms: int | None
    queue_wait_ms: int | None
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    reasoning_tokens: int | None


@dataclass(frozen=True, slots=True)
class Reject:
    """Input we refused. `location` is e.g. "line 17" or "span 3 of line 2"; `reason` names the
    field first ("usage.prompt_tokens: must be a non-negative integer"); `excerpt` is at most
    200 characters of the input with prompt/output text removed."""

    location: str
    reason: str
    excerpt: str


@dataclass(frozen=True, slots=True)
class FileDefaults:
    """Values the user sets for a whole file (`--team`, `--endpoint`, ...).

    They fill in what a record does not say itself; a value stated explicitly in the record wins.
    Values a format can only guess (LiteLLM `model_id`, OTLP `server.address`, `service.name`)
    rank below these defaults. `ts` is only used by formats whose lines can lack any timestamp
    (OpenAI batch error lines): pass the batch's `completed_at` there.
    """

    team: str | None = None
    workload: str | None = None
    endpoint: str | None = None
    model: str | None = None
    ts: datetime | None = None
