"""The one normaliser every usage format goes through, plus redaction for reject excerpts.

Format modules only *extract* raw values (whatever JSON/CSV/OTLP gave them) and call
`build_record`; all type, range and consistency checks live here so that the four formats
accept and refuse exactly the same things. A problem raises `InvalidRecord` whose message is
the first problem found, naming the field as the source calls it (e.g. `usage.prompt_tokens`).

Limits and why:
* tokens: integers 0..10,000,000 per field and for prompt+completion of one attempt (no
  model has a context near that; anything larger is a corrupt or unit-confused value);
  cached <= prompt and reasoning <= completion (OpenAI semantics: they are subsets);
* timestamps: aware, converted to UTC, from 2015-01-01 to `now` + 1 day (clock skew);
* ids (task_id, request_id): non-empty, <= 256 characters; dimension strings (model, team,
  workload, endpoint, model_version): trimmed, <= 200 characters. Control characters are
  refused everywhere because Postgres text cannot hold NUL and they break CSV exports;
* status: success|succeeded|ok|completed -> "success", failure|failed|fail|error -> "failure";
* latencies: integers 0..2**31-1 ms (fits a Postgres integer), http_status 100..599;
* attempt: 1..32,767 (stored as a Postgres smallint: a larger number used to fail the whole batch
  at COPY instead of rejecting the one record).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from ingest.records import Reject, Status, UsageRecord

MAX_TOKENS_PER_ATTEMPT = 10_000_000
MAX_ID_CHARS = 256
MAX_DIMENSION_CHARS = 200
MAX_EXCERPT_CHARS = 200
MAX_INT32 = 2**31 - 1
MAX_ATTEMPT = 2**15 - 1  # ingest_attempt.attempt is a smallint
EARLIEST_TS = datetime(2015, 1, 1, tzinfo=UTC)
FUTURE_SLACK = timedelta(days=1)

_SUCCESS = frozenset({"success", "succeeded", "ok", "completed"})
_FAILURE = frozenset({"failure", "failed", "fail", "error"})
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# JSON may escape a lone UTF-16 half ("\\ud800"); Python's json decodes it, but it has no UTF-8
# form, so Postgres could never store it: refused like a control character, before any write.
_SURROGATE = re.compile(r"[\ud800-\udfff]")


class InvalidRecord(ValueError):
    """The first problem with one input record, as a short sentence naming the field."""

    @property
    def reason(self) -> str:
        return str(self.args[0]) if self.args else "invalid record"


# --- small typed extractors -------------------------------------------------------------------


def show(value: Any) -> str:
    """A short repr for error messages (values here are ids and numbers, never prompt text)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def as_int(value: Any, label: str, *, minimum: int = 0, maximum: int = MAX_INT32) -> int:
    # bool is an int subclass in Python but `true` is never a token count.
    if isinstance(value, bool) or value is None:
        raise InvalidRecord(f"{label}: must be a non-negative integer (got {show(value)})")
    if isinstance(value, float):
        # Some exporters (JavaScript, pandas) write integral counts as 37.0; fractions are refused.
        if not math.isfinite(value) or not value.is_integer():
            raise InvalidRecord(f"{label}: must be a non-negative integer (got {show(value)})")
        value = int(value)
    if not isinstance(value, int):
        raise InvalidRecord(f"{label}: must be a non-negative integer (got {show(value)})")
    if value < minimum:
        raise InvalidRecord(f"{label}: must be >= {minimum} (got {value})")
    if value > maximum:
        raise InvalidRecord(f"{label}: {value} is larger than the sane maximum {maximum:,}")
    return value


def as_opt_int(value: Any, label: str, *, minimum: int = 0, maximum: int = MAX_INT32) -> int | None:
    return None if value is None else as_int(value, label, minimum=minimum, maximum=maximum)


def int_from_text(value: Any) -> Any:
    """Turn CSV/OTLP decimal strings into ints; anything else is returned for as_int to refuse.

    "" means "no value" in CSV exports, so it becomes None."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text == "":
        return None
    if re.fullmatch(r"[+-]?\d{1,19}", text):
        return int(text)
    if re.fullmatch(r"[+-]?\d{1,19}\.0*", text):  # "12.0" from spreadsheet round-trips
        return int(text.split(".")[0])
    return value


def lenient_http_status(value: Any) -> int | None:
    """An HTTP status from a free-form source field (LiteLLM error_code, OTLP attribute): kept
    when it is one, dropped otherwise, because a bad optional detail must not lose the attempt."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    code = int_from_text(value)
    return code if isinstance(code, int) and 100 <= code <= 599 else None


def _clean_str(value: Any, label: str, *, max_chars: int) -> str:
    if not isinstance(value, str):
        raise InvalidRecord(f"{label}: must be a string (got {show(value)})")
    text = value.strip()
    if _CONTROL.search(text):
        raise InvalidRecord(f"{label}: contains control characters")
    if _SURROGATE.search(text):
        raise InvalidRecord(f"{label}: contains an unpaired UTF-16 surrogate (not valid Unicode text)")
    if len(text) > max_chars:
        raise InvalidRecord(f"{label}: longer than {max_chars} characters ({len(text)})")
    return text


def required_id(value: Any, label: str) -> str:
    if value is None:
        raise InvalidRecord(f"{label}: required")
    text = _clean_str(value, label, max_chars=MAX_ID_CHARS)
    if not text:
        raise InvalidRecord(f"{label}: required (empty)")
    return text


def optional_id(value: Any, label: str) -> str | None:
    if value is None:
        return None
    return _clean_str(value, label, max_chars=MAX_ID_CHARS) or None


def dimension(value: Any, label: str) -> str:
    return "" if value is None else _clean_str(value, label, max_chars=MAX_DIMENSION_CHARS)


def pick(*candidates: Any) -> Any:
    """First candidate that is not None and not a blank string (precedence is the caller's order)."""
    for value in candidates:
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        return value
    return None


def status_of(value: Any, label: str = "status") -> Status:
    if not isinstance(value, str) or value.strip().lower() not in _SUCCESS | _FAILURE:
        raise InvalidRecord(f"{label}: unknown status {show(value)} (expected success or failure)")
    return "success" if value.strip().lower() in _SUCCESS else "failure"


# --- timestamps ---------------------------------------------------------------------------------


def parse_ts(value: Any, label: str, *, naive_is_utc: bool = False) -> datetime:
    """ISO 8601 string or unix seconds -> aware UTC datetime.

    Naive strings are refused unless the format documents them as UTC (LiteLLM/Prisma does)."""
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            raise InvalidRecord(f"{label}: not an ISO 8601 timestamp (got {show(value)})") from None
    elif isinstance(value, int | float) and not isinstance(value, bool):
        return ts_from_unix_seconds(value, label)
    else:
        raise InvalidRecord(f"{label}: required timestamp (got {show(value)})")
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        if not naive_is_utc:
            raise InvalidRecord(f"{label}: timestamp must include a UTC offset such as Z (got {show(value)})")
        parsed = parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except (OverflowError, ValueError):
        raise InvalidRecord(f"{label}: timestamp out of range (got {show(value)})") from None


def ts_from_unix_seconds(value: Any, label: str) -> datetime:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidRecord(f"{label}: must be unix seconds (got {show(value)})")
    try:
        return datetime.fromtimestamp(value, tz=UTC)
    except (OverflowError, ValueError, OSError):
        raise InvalidRecord(f"{label}: timestamp out of range (got {show(value)})") from None


def ts_from_unix_nanos(value: int, label: str) -> datetime:
    # Integer arithmetic: a float of ~1.7e18 ns would lose sub-microsecond precision.
    seconds, nanos = divmod(value, 1_000_000_000)
    try:
        return datetime.fromtimestamp(seconds, tz=UTC) + timedelta(microseconds=nanos // 1000)
    except (OverflowError, ValueError, OSError):
        raise InvalidRecord(f"{label}: timestamp out of range (got {show(value)})") from None


def _check_ts_range(ts: datetime, label: str, now: datetime) -> datetime:
    if ts.tzinfo is None or ts.utcoffset() is None:
        raise InvalidRecord(f"{label}: timestamp must be timezone-aware")
    ts = ts.astimezone(UTC)
    if ts < EARLIEST_TS:
        raise InvalidRecord(f"{label}: {ts.isoformat()} is before 2015-01-01")
    if ts > now + FUTURE_SLACK:
        raise InvalidRecord(f"{label}: {ts.isoformat()} is more than 1 day in the future")
    return ts


# --- OpenAI usage objects -----------------------------------------------------------------------


def openai_usage(usage: Any, prefix: str = "usage") -> tuple[dict[str, Any], dict[str, str]]:
    """Raw token values and their labels from a Chat Completions or Responses API `usage`.

    Chat: prompt_tokens/completion_tokens (+ *_details); Responses: input_tokens/output_tokens
    (+ *_details); embeddings carry only prompt_tokens and total_tokens (completion is 0).
    Values are returned unchecked: build_record validates them."""
    if not isinstance(usage, Mapping):
        raise InvalidRecord(f"{prefix}: must be an object (got {show(usage)})")
    responses_style = "input_tokens" in usage and "prompt_tokens" not in usage
    p_key, c_key = (
        ("input_tokens", "output_tokens") if responses_style else ("prompt_tokens", "completion_tokens")
    )
    p_det, c_det = (
        ("input_tokens_details", "output_tokens_details")
        if responses_style
        else ("prompt_tokens_details", "completion_tokens_details")
    )
    prompt = usage.get(p_key)
    completion = usage.get(c_key)
    if completion is None:
        completion = 0  # embeddings/score responses have no completion tokens
    prompt_details = usage.get(p_det)
    completion_details = usage.get(c_det)
    # Details objects are optional and often null (vLLM without --enable-prompt-tokens-details).
    cached = prompt_details.get("cached_tokens") if isinstance(prompt_details, Mapping) else None
    reasoning = (
        completion_details.get("reasoning_tokens") if isinstance(completion_details, Mapping) else None
    )
    values = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "cached_tokens": 0 if cached is None else cached,
        "reasoning_tokens": reasoning,
    }
    labels = {
        "prompt_tokens": f"{prefix}.{p_key}",
        "completion_tokens": f"{prefix}.{c_key}",
        "cached_tokens": f"{prefix}.{p_det}.cached_tokens",
        "reasoning_tokens": f"{prefix}.{c_det}.reasoning_tokens",
    }
    return values, labels


# --- the normaliser -----------------------------------------------------------------------------


def build_record(
    *,
    task_id: Any,
    attempt: Any,
    request_id: Any,
    ts: Any,
    model: Any,
    model_version: Any = None,
    endpoint: Any = None,
    workload: Any = None,
    team: Any = None,
    status: Any,
    http_status: Any = None,
    error_type: Any = None,
    latency_ms: Any = None,
    ttft_ms: Any = None,
    queue_wait_ms: Any = None,
    prompt_tokens: Any,
    completion_tokens: Any,
    cached_tokens: Any = 0,
    reasoning_tokens: Any = None,
    now: datetime,
    labels: Mapping[str, str] | None = None,
) -> UsageRecord:
    """Validate already-extracted values and build the record; raise InvalidRecord on the first
    problem. `labels` maps record field names to the source's own field names for messages."""
    if now.tzinfo is None:  # a caller bug, not bad data: fail loudly
        raise ValueError("build_record: now must be timezone-aware")
    fast = _build_plain_record(
        task_id, attempt, request_id, ts, model, model_version, endpoint, workload, team, status,
        http_status, error_type, latency_ms, ttft_ms, queue_wait_ms,
        prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens, now,
    )  # fmt: skip
    if fast is not None:
        return fast
    return build_checked_record(
        task_id=task_id, attempt=attempt, request_id=request_id, ts=ts, model=model,
        model_version=model_version, endpoint=endpoint, workload=workload, team=team, status=status,
        http_status=http_status, error_type=error_type, latency_ms=latency_ms, ttft_ms=ttft_ms,
        queue_wait_ms=queue_wait_ms, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
        cached_tokens=cached_tokens, reasoning_tokens=reasoning_tokens, now=now, labels=labels,
    )  # fmt: skip


def build_checked_record(
    *,
    task_id: Any,
    attempt: Any,
    request_id: Any,
    ts: Any,
    model: Any,
    model_version: Any,
    endpoint: Any,
    workload: Any,
    team: Any,
    status: Any,
    http_status: Any,
    error_type: Any,
    latency_ms: Any,
    ttft_ms: Any,
    queue_wait_ms: Any,
    prompt_tokens: Any,
    completion_tokens: Any,
    cached_tokens: Any,
    reasoning_tokens: Any,
    now: datetime,
    labels: Mapping[str, str] | None,
) -> UsageRecord:
    """Every check one by one, raising InvalidRecord with the reason of the first that fails."""
    names = dict(labels or {})

    def label(field: str) -> str:
        return names.get(field, field)

    task = required_id(task_id, label("task_id"))
    attempt_no = as_int(attempt, label("attempt"), minimum=1, maximum=MAX_ATTEMPT)
    req = optional_id(request_id, label("request_id"))
    if not isinstance(ts, datetime):
        raise InvalidRecord(f"{label('ts')}: required timestamp")
    when = _check_ts_range(ts, label("ts"), now)
    model_name = dimension(model, label("model"))
    if not model_name:
        raise InvalidRecord(f"{label('model')}: required")
    record_status = status_of(status, label("status"))
    prompt = as_int(prompt_tokens, label("prompt_tokens"), maximum=MAX_TOKENS_PER_ATTEMPT)
    completion = as_int(completion_tokens, label("completion_tokens"), maximum=MAX_TOKENS_PER_ATTEMPT)
    if prompt + completion > MAX_TOKENS_PER_ATTEMPT:
        raise InvalidRecord(
            f"{label('prompt_tokens')} + {label('completion_tokens')}: {prompt + completion:,} tokens in one "
            f"attempt is more than the sane maximum {MAX_TOKENS_PER_ATTEMPT:,}"
        )
    cached = as_int(0 if cached_tokens is None else cached_tokens, label("cached_tokens"))
    if cached > prompt:
        raise InvalidRecord(
            f"{label('cached_tokens')}: {cached} is more than {label('prompt_tokens')} {prompt} "
            "(cached tokens are part of the prompt)"
        )
    reasoning = as_opt_int(reasoning_tokens, label("reasoning_tokens"))
    if reasoning is not None and reasoning > completion:
        raise InvalidRecord(
            f"{label('reasoning_tokens')}: {reasoning} is more than {label('completion_tokens')} {completion} "
            "(reasoning tokens are part of the completion)"
        )
    return UsageRecord(
        idempotency_key=req if req is not None else f"{task}#{attempt_no}",
        task_id=task,
        attempt=attempt_no,
        request_id=req,
        ts=when,
        model=model_name,
        model_version=dimension(model_version, label("model_version")),
        endpoint=dimension(endpoint, label("endpoint")),
        workload=dimension(workload, label("workload")),
        team=dimension(team, label("team")),
        status=record_status,
        http_status=as_opt_int(http_status, label("http_status"), minimum=100, maximum=599),
        error_type=_error_type(error_type, label("error_type")),
        latency_ms=as_opt_int(latency_ms, label("latency_ms")),
        ttft_ms=as_opt_int(ttft_ms, label("ttft_ms")),
        queue_wait_ms=as_opt_int(queue_wait_ms, label("queue_wait_ms")),
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached_tokens=cached,
        reasoning_tokens=reasoning,
    )


_STATUS_WORDS = {word: "success" for word in _SUCCESS} | {word: "failure" for word in _FAILURE}


def _plain_int(value: Any, maximum: int) -> bool:
    return type(value) is int and 0 <= value <= maximum


def _build_plain_record(
    task_id, attempt, request_id, ts, model, model_version, endpoint, workload, team, status,
    http_status, error_type, latency_ms, ttft_ms, queue_wait_ms,
    prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens, now,
) -> UsageRecord | None:  # fmt: skip
    """The common case, checked in a few comparisons: every value of its plain type and in range.

    Returns None for anything less plain (a float count, an odd status spelling, a control
    character, a bad value): the full path of ``build_record`` then decides, with its precise
    reason. So this can only accept what the full path accepts, and builds the same record (a
    property test holds the two paths equal).
    """
    texts = (task_id, request_id, model, model_version, endpoint, workload, team, error_type)
    for text in texts:
        if text is not None and type(text) is not str:
            return None
    joined = "\u241f".join(text for text in texts if text is not None)
    if _CONTROL.search(joined) or _SURROGATE.search(joined):
        return None
    task = task_id.strip() if task_id is not None else ""
    model_name = model.strip() if model is not None else ""
    if not task or len(task) > MAX_ID_CHARS or not model_name or len(model_name) > MAX_DIMENSION_CHARS:
        return None
    req = request_id.strip() if request_id is not None else None
    if req is not None and len(req) > MAX_ID_CHARS:
        return None
    dims = [
        (value.strip() if value is not None else "") for value in (model_version, endpoint, workload, team)
    ]
    if any(len(value) > MAX_DIMENSION_CHARS for value in dims):
        return None
    record_status = _STATUS_WORDS.get(status) if type(status) is str else None
    if record_status is None or type(attempt) is not int or not 1 <= attempt <= MAX_ATTEMPT:
        return None
    if cached_tokens is None:
        cached_tokens = 0
    if not (
        _plain_int(prompt_tokens, MAX_TOKENS_PER_ATTEMPT)
        and _plain_int(completion_tokens, MAX_TOKENS_PER_ATTEMPT)
        and prompt_tokens + completion_tokens <= MAX_TOKENS_PER_ATTEMPT
        and _plain_int(cached_tokens, MAX_INT32)
        and cached_tokens <= prompt_tokens
        and (
            reasoning_tokens is None
            or (_plain_int(reasoning_tokens, MAX_INT32) and reasoning_tokens <= completion_tokens)
        )
    ):
        return None
    for value in (latency_ms, ttft_ms, queue_wait_ms):
        if value is not None and not _plain_int(value, MAX_INT32):
            return None
    if http_status is not None and not (type(http_status) is int and 100 <= http_status <= 599):
        return None
    if type(ts) is not datetime or ts.tzinfo is None or ts.utcoffset() is None:
        return None
    when = ts.astimezone(UTC)
    if when < EARLIEST_TS or when > now + FUTURE_SLACK:
        return None
    kind = error_type.strip()[:MAX_DIMENSION_CHARS] or None if error_type is not None else None
    model_version_, endpoint_, workload_, team_ = dims
    return UsageRecord(
        idempotency_key=req if req else f"{task}#{attempt}",
        task_id=task,
        attempt=attempt,
        request_id=req or None,
        ts=when,
        model=model_name,
        model_version=model_version_,
        endpoint=endpoint_,
        workload=workload_,
        team=team_,
        status=record_status,
        http_status=http_status,
        error_type=kind,
        latency_ms=latency_ms,
        ttft_ms=ttft_ms,
        queue_wait_ms=queue_wait_ms,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cached_tokens=cached_tokens,
        reasoning_tokens=reasoning_tokens,
    )


def _error_type(value: Any, label: str) -> str | None:
    # error_type is descriptive (a class such as "timeout" or "rate_limit_exceeded"), so it is
    # cleaned and shortened rather than a reason to lose the attempt.
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise InvalidRecord(f"{label}: must be a string (got {show(value)})")
    text = _SURROGATE.sub("", _CONTROL.sub(" ", value)).strip()[:MAX_DIMENSION_CHARS]
    return text or None


# --- redaction for excerpts ---------------------------------------------------------------------

# A key is prompt/output content if it contains one of these words and is not a token count
# ("prompt_tokens", "input_tokens_details" must stay visible: they are what reasons are about).
# Over-redacting an excerpt costs nothing; leaking one prompt is a breach of what we promise.
_CONTENT_WORDS = (
    "prompt",
    "completion",
    "message",
    "content",
    "choice",
    "instruction",
    "argument",
    "input",
    "output",
    "result",
    "query",
    "document",
    "text",
    "embedding",
)
_CONTENT_EXACT = frozenset({"data", "tools", "events", "logprobs"})
_REDACTED = "[redacted]"
# Count names only: "prompt_token_ids" (vLLM) is the prompt itself, so it is content.
_TOKEN_COUNT = re.compile(r"tokens?(_details)?$")


def is_content_key(key: str, extra: Iterable[str] = ()) -> bool:
    k = key.lower()
    if k in _CONTENT_EXACT or k in extra:
        return True
    if _TOKEN_COUNT.search(k):
        return False
    return any(word in k for word in _CONTENT_WORDS)


def redact(value: Any, extra: frozenset[str] = frozenset()) -> Any:
    """Copy of a parsed JSON value without content keys; OTLP `{key, value}` attribute entries
    whose key is content are dropped too (their key sits in a value, not in a JSON key)."""
    if isinstance(value, Mapping):
        if isinstance(value.get("key"), str) and "value" in value and len(value) <= 2:
            if is_content_key(value["key"], extra):
                return {"key": value["key"], "value": _REDACTED}
        return {
            str(k): (_REDACTED if is_content_key(str(k), extra) else redact(v, extra))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact(v, extra) for v in value[:20]]  # an excerpt never needs more
    return value


def excerpt_of(value: Any, extra: frozenset[str] = frozenset()) -> str:
    try:
        text = json.dumps(redact(value, extra), ensure_ascii=False, separators=(",", ":"), default=str)
    except (ValueError, TypeError, RecursionError):
        text = ""
    return clip(text)


# Alignment-free on purpose: a broken line may start or end inside a string, so rather than
# tokenising we cut at the first content word that is not part of a token-count name.
_RAW_WORDS = "|".join([*_CONTENT_WORDS, r'"(?:data|tools|events|logprobs)"', re.escape(_REDACTED)])
_RAW_CONTENT = re.compile(rf"(?i)(?:{_RAW_WORDS})(?![a-z_.]*tokens?(?:_details)?\b)")


def excerpt_of_raw(raw: bytes | str, extra: frozenset[str] = frozenset()) -> str:
    """Excerpt of input we could not parse, cut before the first word that looks like a content
    key, so a broken line never shows the prompt that follows it."""
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    text = text[:4096]
    cut = [m.start() for m in (_RAW_CONTENT.search(text),) if m]
    for word in extra:
        found = text.lower().find(word.lower())
        if found >= 0:
            cut.append(found)
    if cut:
        text = text[: min(cut)] + _REDACTED
    return clip(text)


def clip(text: str) -> str:
    text = _SURROGATE.sub("\ufffd", _CONTROL.sub(" ", text))
    return text if len(text) <= MAX_EXCERPT_CHARS else text[: MAX_EXCERPT_CHARS - 1] + "…"


def reject(location: str, reason: str, excerpt: str = "") -> Reject:
    return Reject(location=location, reason=reason or "invalid record", excerpt=clip(excerpt))
