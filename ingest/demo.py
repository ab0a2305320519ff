"""A deterministic simulator of a realistic LLM fleet, written out in the real usage formats.

`python manage.py demo` uses it to fill an empty installation with a month of believable usage:
four teams, seven workloads, open models on an NVIDIA H100 pool (`vllm-h100-a`) and an AMD
MI300X pool (`vllm-mi300x-b`), hosted API models (gpt-4o-mini, gpt-4.1, claude-sonnet-4) and one
model the catalog does not know (`mistral-large-2411` on `mistral-api`), so the demo shows an
unpriced model too.

What is simulated, and why it looks the way it does:
* traffic follows business hours (UTC) and weekdays, per workload profile; a nightly OpenAI
  batch job runs at 01:00;
* prompt and completion lengths are log-normal per workload; chat reuses cached prompt prefixes;
  gpt-4.1 sometimes reasons (its completion then *includes* the reasoning tokens, and prompts
  include cached tokens, exactly as the OpenAI usage object reports them);
* latency = queue wait + time to first token (grows with the prompt) + decode time (grows with
  the output), so TTFT < latency always;
* failures (timeouts, 429 rate limits, 5xx) at model-dependent rates; GPU-pool timeouts rise with
  load; some days have a short 5xx incident on one endpoint;
* retries reuse the task id with attempt 2, 3; a timeout on a GPU pool (a saturated pool) falls
  back at once to a hosted API model, and the last attempt always uses the fallback.

Every hour is generated from its own `random.Random` seeded by (seed, hour), so an hour's
attempts are identical whatever window they are generated in: re-running the demo later only
adds the hours that are new, and the ingest writer's de-duplication does the rest.

Where each attempt goes (each attempt is in exactly one file):
* `batch/`      OpenAI Batch API output + error files, one pair per night (research/eval-batch);
* `otlp/`       OTLP/JSON GenAI spans, one export request per hour (search/rerank);
* `litellm/`    a LiteLLM_SpendLogs CSV export (support team's hosted-API calls);
* `canonical/`  canonical usage JSONL, one file per UTC day, gzip for days older than a week.
A few deliberately malformed lines (`MALFORMED_KINDS`) are placed at fixed absolute hours, one
of each kind in any window of `days`, so the demo's ingestion health shows real rejects.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import math
import os
import random
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import cache, lru_cache
from json.encoder import encode_basestring as _quote  # C-accelerated JSON string quoting
from pathlib import Path
from typing import Any

from ingest.records import FileDefaults

DEFAULT_DAYS = 30
# ~150,000 attempts over the default 30 days.
DEFAULT_ATTEMPTS_PER_DAY = 5000
DEFAULT_SEED = 7
GZIP_AFTER_DAYS = 7  # canonical day files older than this are gzip-compressed ("archived")
MAX_TOKENS = 120_000  # longest prompt or completion drawn (a 128k context with headroom)
BATCH_HOUR = 1  # the nightly batch is submitted at 01:00 UTC

CANONICAL, BATCH, LITELLM, OTLP = "canonical", "openai-batch", "litellm", "otlp-json"
SINKS = (CANONICAL, BATCH, LITELLM, OTLP)

TIMEOUT, RATE_LIMIT, SERVER_ERROR, EXPIRED = "timeout", "rate_limit", "server_error", "expired"


# --- the fleet ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelProfile:
    """One model on one endpoint: speed and failure behaviour."""

    model: str
    endpoint: str
    gpu_pool: bool
    provider: str  # LiteLLM custom_llm_provider / OTel gen_ai.provider.name ("" for self-run)
    ttft_ms: float  # median time to first token for a tiny prompt, without queueing
    prefill_ms_per_token: float
    tpot_ms: float  # time per output token while decoding
    timeout_rate: float
    rate_limit_rate: float
    server_error_rate: float
    server_error_codes: tuple[int, ...] = (500, 503)
    expired_rate: float = 0.0  # batch only: the request outlived the completion window
    reasons: bool = False  # may report reasoning tokens


PROFILES: dict[str, ModelProfile] = {
    p.model + "@" + p.endpoint: p
    for p in (
        ModelProfile("llama-3.1-70b-instruct-awq", "vllm-h100-a", True, "", 110, 0.06, 27, 0.012, 0, 0.004),
        ModelProfile("llama-3.1-8b-instruct", "vllm-h100-a", True, "", 35, 0.012, 8, 0.004, 0, 0.002),
        ModelProfile("llama-3.1-8b-instruct", "vllm-mi300x-b", True, "", 45, 0.015, 10, 0.006, 0, 0.003),
        ModelProfile(
            "qwen2.5-72b-instruct", "vllm-mi300x-b", True, "", 140, 0.07, 31, 0.015, 0, 0.006, (500, 502, 503)
        ),
        ModelProfile(
            "gpt-4o-mini", "openai-gpt-4o-mini", False, "openai", 320, 0.015, 11, 0.002, 0.01, 0.003
        ),
        ModelProfile(
            "gpt-4.1", "openai-gpt-4.1", False, "openai", 550, 0.03, 20, 0.004, 0.015, 0.005, reasons=True
        ),
        ModelProfile(
            "claude-sonnet-4",
            "anthropic-claude-sonnet",
            False,
            "anthropic",
            750,
            0.04,
            24,
            0.003,
            0.02,
            0.006,
            (500, 529),  # 529 = Anthropic "overloaded"
        ),
        # Not in examples/catalog.yaml on purpose: auto-registered at ingest, and unpriced.
        ModelProfile(
            "mistral-large-2411", "mistral-api", False, "mistral_ai", 480, 0.04, 28, 0.005, 0.01, 0.008
        ),
    )
}
# The nightly batch: same model and endpoint as online gpt-4o-mini, batch failure modes.
BATCH_PROFILE = ModelProfile(
    "gpt-4o-mini", "openai-gpt-4o-mini", False, "openai", 0, 0, 0, 0, 0, 0.012, (500,), expired_rate=0.008
)


@dataclass(frozen=True)
class Route:
    primary: str  # a PROFILES key
    fallback: str | None = None


@dataclass(frozen=True)
class Lengths:
    """Log-normal token lengths (median, sigma) and cache/reasoning behaviour of a workload."""

    prompt: tuple[float, float]
    completion: tuple[float, float]
    cached_share: float = 0.0  # share of requests that hit a cached prompt prefix (hosted models)
    reasoning_share: float = 0.0  # share of requests to a reasoning-capable model that reason


@dataclass(frozen=True)
class Workload:
    team: str
    name: str
    share: float  # of the fleet's attempts
    profile: str  # seasonality: ops | business | research | nightly
    routes: tuple[tuple[float, Route], ...]
    lengths: Lengths
    timeout_ms: int
    sink: str = CANONICAL  # BATCH/OTLP send the whole workload there; see sink_for()
    max_attempts: int = 3


WORKLOADS: tuple[Workload, ...] = (
    Workload(
        "netops",
        "summarize",
        0.18,
        "ops",
        ((1.0, Route("llama-3.1-70b-instruct-awq@vllm-h100-a", "gpt-4o-mini@openai-gpt-4o-mini")),),
        Lengths((2500, 0.6), (250, 0.5)),
        60_000,
    ),
    Workload(
        "netops",
        "classify",
        0.14,
        "ops",
        (
            (0.7, Route("llama-3.1-8b-instruct@vllm-h100-a")),
            (0.3, Route("llama-3.1-8b-instruct@vllm-mi300x-b")),
        ),
        Lengths((600, 0.4), (8, 0.4)),
        10_000,
    ),
    Workload(
        "support",
        "chat",
        0.20,
        "business",
        (
            (0.7, Route("gpt-4o-mini@openai-gpt-4o-mini")),
            (0.3, Route("claude-sonnet-4@anthropic-claude-sonnet", "gpt-4o-mini@openai-gpt-4o-mini")),
        ),
        Lengths((1500, 0.7), (300, 0.7), cached_share=0.6),
        60_000,
    ),
    Workload(
        "support",
        "extract",
        0.10,
        "business",
        ((1.0, Route("qwen2.5-72b-instruct@vllm-mi300x-b", "gpt-4.1@openai-gpt-4.1")),),
        Lengths((1800, 0.5), (350, 0.5)),
        60_000,
    ),
    Workload(
        "search",
        "rerank",
        0.20,
        "business",
        ((1.0, Route("llama-3.1-8b-instruct@vllm-mi300x-b", "gpt-4o-mini@openai-gpt-4o-mini")),),
        Lengths((1200, 0.3), (30, 0.3)),
        5_000,
        sink=OTLP,
    ),
    Workload(
        "research",
        "code-review",
        0.08,
        "research",
        (
            (0.8, Route("gpt-4.1@openai-gpt-4.1", "claude-sonnet-4@anthropic-claude-sonnet")),
            (0.2, Route("mistral-large-2411@mistral-api")),
        ),
        Lengths((6000, 0.7), (900, 0.6), cached_share=0.3, reasoning_share=0.35),
        120_000,
    ),
    Workload(
        "research",
        "eval-batch",
        0.10,
        "nightly",
        ((1.0, Route("batch")),),
        Lengths((900, 0.5), (150, 0.6)),
        0,
        sink=BATCH,
        max_attempts=1,  # a batch line is one request; failed lines are not resubmitted here
    ),
)
BATCH_WORKLOAD = next(w for w in WORKLOADS if w.sink == BATCH)
# Attempts per task on average (retries); converts the attempts/day knob into tasks/day.
RETRY_OVERHEAD = 1.025


def profile_of(key: str) -> ModelProfile:
    return BATCH_PROFILE if key == "batch" else PROFILES[key]


def sink_for(workload: Workload, profile: ModelProfile) -> str:
    """Which file format an attempt is logged in."""
    if workload.sink != CANONICAL:
        return workload.sink
    # The support team calls hosted APIs through a LiteLLM proxy; its GPU-pool calls do not.
    if workload.team == "support" and not profile.gpu_pool:
        return LITELLM
    return CANONICAL


# --- seasonality -------------------------------------------------------------------------------

# Relative traffic per UTC hour on a weekday: a morning ramp, a lunch dip, an evening tail.
_BUSINESS = (
    0.12, 0.10, 0.10, 0.10, 0.12, 0.20, 0.35, 0.70, 1.20, 1.60, 1.70, 1.60,
    1.30, 1.50, 1.70, 1.60, 1.40, 1.00, 0.70, 0.50, 0.40, 0.30, 0.20, 0.15,
)  # fmt: skip
_WEEKEND = {"ops": 0.85, "business": 0.3, "research": 0.15, "nightly": 1.0}


def _raw_weight(profile: str, hour: int, weekday: int) -> float:
    weekend = _WEEKEND[profile] if weekday >= 5 else 1.0
    if profile == "nightly":
        return 1.0 if hour == BATCH_HOUR else 0.0
    if profile == "ops":  # round-the-clock monitoring with a business-hours bump
        return (0.6 + 0.4 * _BUSINESS[hour]) * weekend
    return _BUSINESS[hour] * weekend


@cache
def _daily_mean(profile: str) -> float:
    # Normalised over a whole week so that attempts_per_day is the weekly average per day.
    return sum(_raw_weight(profile, h, d) for d in range(7) for h in range(24)) / 7


def day_fraction(profile: str, hour_start: datetime) -> float:
    """Share of an average day's traffic of this profile that falls in this hour."""
    return _raw_weight(profile, hour_start.hour, hour_start.weekday()) / _daily_mean(profile)


def load_of(hour_start: datetime) -> float:
    """How busy the GPU pools are, 0..1 (drives queue wait and timeouts)."""
    weekend = 0.4 if hour_start.weekday() >= 5 else 1.0
    return _BUSINESS[hour_start.hour] / max(_BUSINESS) * weekend


@dataclass(frozen=True)
class Incident:
    endpoint: str
    start: datetime
    end: datetime
    server_error_rate: float


@lru_cache(maxsize=4096)
def incident_on(seed: int, day: date) -> Incident | None:
    """About one day in five has a 1-3 hour burst of 5xx on one endpoint (a bad deploy, a node)."""
    rng = random.Random(f"{seed}/incident/{day.isoformat()}")
    if rng.random() >= 0.2:
        return None
    endpoint = rng.choice(["vllm-h100-a", "vllm-mi300x-b", "vllm-mi300x-b", "anthropic-claude-sonnet"])
    start = datetime(day.year, day.month, day.day, rng.randint(8, 16), tzinfo=UTC)
    return Incident(endpoint, start, start + timedelta(hours=rng.randint(1, 3)), rng.uniform(0.08, 0.2))


# --- attempts ----------------------------------------------------------------------------------


@dataclass(slots=True)
class DemoAttempt:
    """One simulated attempt, with the values the sink's parser will read back.

    `key` is the idempotency key the parser derives (request id, OTLP `trace:span`, ...)."""

    sink: str
    key: str
    task_id: str
    attempt: int
    ts: datetime
    team: str
    workload: str
    model: str
    endpoint: str
    gpu_pool: bool
    status: str  # success | failure
    error: str | None  # TIMEOUT | RATE_LIMIT | SERVER_ERROR | EXPIRED
    http_status: int | None
    latency_ms: int | None
    ttft_ms: int | None
    queue_wait_ms: int | None
    has_usage: bool
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    reasoning_tokens: int | None
    provider: str = ""
    aux_id: str = ""  # a second id some formats carry (batch line id, response id)


@dataclass
class Plan:
    """Everything the simulator decided; the writers only format it."""

    now: datetime
    days: int
    seed: int
    attempts: list[DemoAttempt] = field(default_factory=list)
    malformed: list[Malformed] = field(default_factory=list)
    batch_completed: dict[date, datetime] = field(default_factory=dict)

    @property
    def start(self) -> datetime:
        return self.now - timedelta(days=self.days)


@dataclass(frozen=True)
class Malformed:
    kind: str  # one of MALFORMED_KINDS
    sink: str
    hour: datetime


# kind -> the sink whose file gets the broken line. Each yields exactly one reject.
MALFORMED_KINDS = {
    "truncated-json": CANONICAL,  # a line cut off mid-write (disk full, killed writer)
    "negative-tokens": CANONICAL,  # a client bug: usage.prompt_tokens < 0
    "missing-start-time": LITELLM,  # a row without startTime
    "span-without-usage": OTLP,  # a successful chat span that lost its token attributes
}


def align_now(now: datetime) -> datetime:
    """`now` floored to the hour; naive datetimes are refused (everything here is UTC)."""
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be timezone-aware")
    return now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def simulate(
    *,
    now: datetime,
    days: int = DEFAULT_DAYS,
    attempts_per_day: int = DEFAULT_ATTEMPTS_PER_DAY,
    seed: int = DEFAULT_SEED,
) -> Plan:
    """The attempts of the `days` before `now` (hour-aligned), in time order."""
    if days < 1 or attempts_per_day < 1:
        raise ValueError("days and attempts_per_day must be at least 1")
    plan = Plan(now=align_now(now), days=days, seed=seed)
    period = days * 24
    offsets = {
        kind: period * (2 * i + 1) // (2 * len(MALFORMED_KINDS)) for i, kind in enumerate(MALFORMED_KINDS)
    }
    for hour_start in _hours(plan.start, plan.now):
        rng = random.Random(f"{seed}/{hour_start.isoformat()}")
        for workload in WORKLOADS:
            _simulate_hour(rng, plan, workload, hour_start, attempts_per_day)
        hour_no = int(hour_start.timestamp()) // 3600
        for kind, offset in offsets.items():
            # Absolute hours, so a later re-run with the same --days finds the same broken lines.
            if hour_no % period == offset:
                plan.malformed.append(Malformed(kind, MALFORMED_KINDS[kind], hour_start))
    plan.attempts.sort(key=lambda a: (a.ts, a.task_id, a.attempt))
    return plan


def _hours(start: datetime, end: datetime) -> Iterator[datetime]:
    hour = start
    while hour < end:
        yield hour
        hour += timedelta(hours=1)


def _simulate_hour(
    rng: random.Random, plan: Plan, workload: Workload, hour_start: datetime, attempts_per_day: int
) -> None:
    expected = attempts_per_day * workload.share / RETRY_OVERHEAD * day_fraction(workload.profile, hour_start)
    count = _poisson(rng, expected)
    if count == 0:
        return
    if workload.sink == BATCH:
        _simulate_batch(rng, plan, workload, hour_start, count)
        return
    load = load_of(hour_start)
    prefix = f"{workload.team}-{workload.name}-{hour_start:%Y%m%d%H}"
    for index in range(count):
        start = hour_start + timedelta(milliseconds=rng.randrange(3_600_000))
        task_id = f"{prefix}-{index:04d}"
        plan.attempts.extend(_simulate_task(rng, plan, workload, task_id, start, load))


def _poisson(rng: random.Random, lam: float) -> int:
    if lam <= 0:
        return 0
    if lam < 30:  # Knuth: exact and cheap for small means
        limit, k, p = math.exp(-lam), 0, 1.0
        while True:
            p *= rng.random()
            if p <= limit:
                return k
            k += 1
    return max(0, round(rng.gauss(lam, math.sqrt(lam))))


def _pick_route(rng: random.Random, workload: Workload) -> Route:
    roll = rng.random()
    for weight, route in workload.routes:
        roll -= weight
        if roll < 0:
            return route
    return workload.routes[-1][1]


def _jitter(rng: random.Random, sigma: float) -> float:
    """A log-normal factor with median 1 (gauss is the fastest normal in `random`)."""
    return math.exp(rng.gauss(0.0, sigma))


def _lognormal(rng: random.Random, median: float, sigma: float) -> int:
    return min(MAX_TOKENS, max(1, round(median * _jitter(rng, sigma))))


def _simulate_task(
    rng: random.Random, plan: Plan, workload: Workload, task_id: str, start: datetime, load: float
) -> list[DemoAttempt]:
    route = _pick_route(rng, workload)
    # The task's input is the same on every attempt; each answer has its own length.
    prompt = _lognormal(rng, *workload.lengths.prompt)
    cache_hit = rng.random() < workload.lengths.cached_share
    key = route.primary
    ts = start
    attempts: list[DemoAttempt] = []
    for number in range(1, workload.max_attempts + 1):
        profile = profile_of(key)
        attempt = _simulate_attempt(
            rng, plan, workload, profile, task_id, number, ts, prompt, cache_hit, load
        )
        attempts.append(attempt)
        if attempt.status == "success":
            break
        # A timeout on a GPU pool means the pool is saturated: go straight to the hosted
        # fallback. Other errors are retried on the same model; the last try uses the fallback.
        if route.fallback and (
            (attempt.error == TIMEOUT and profile.gpu_pool) or number == workload.max_attempts - 1
        ):
            key = route.fallback
        backoff_ms = (2**number) * 1000 if attempt.error == RATE_LIMIT else 500
        ts = ts + timedelta(milliseconds=(attempt.latency_ms or 0) + backoff_ms + rng.randrange(1000))
    # Attempts after the window are dropped only now, after the whole task was drawn: stopping
    # early would change what the hour's later tasks draw, and a later run must see the same hour.
    return [attempt for attempt in attempts if attempt.ts < plan.now]


def _failure(
    rng: random.Random, plan: Plan, profile: ModelProfile, ts: datetime, load: float
) -> tuple[str, int | None] | None:
    """The error of an attempt, or None when it succeeds."""
    timeout = profile.timeout_rate * ((0.4 + 1.6 * load) if profile.gpu_pool else 1.0)
    server = profile.server_error_rate
    incident = incident_on(plan.seed, ts.date())
    if incident and incident.endpoint == profile.endpoint and incident.start <= ts < incident.end:
        server += incident.server_error_rate
    roll = rng.random()
    if roll < timeout:
        return TIMEOUT, 408
    roll -= timeout
    if roll < profile.rate_limit_rate:
        return RATE_LIMIT, 429
    roll -= profile.rate_limit_rate
    if roll < server:
        return SERVER_ERROR, rng.choice(profile.server_error_codes)
    roll -= server
    if roll < profile.expired_rate:
        return EXPIRED, None
    return None


def _simulate_attempt(
    rng: random.Random,
    plan: Plan,
    workload: Workload,
    profile: ModelProfile,
    task_id: str,
    number: int,
    ts: datetime,
    prompt: int,
    cache_hit: bool,
    load: float,
) -> DemoAttempt:
    sink = sink_for(workload, profile)
    completion = _lognormal(rng, *workload.lengths.completion)
    reasoning: int | None = None
    if profile.reasons:
        reasoning = 0  # OpenAI reports completion_tokens_details.reasoning_tokens = 0 when none
        if rng.random() < workload.lengths.reasoning_share:
            reasoning = min(MAX_TOKENS, round(completion * rng.uniform(0.5, 3.0)))
            completion += reasoning  # completion_tokens include the reasoning tokens
    cached = 0
    if cache_hit and not profile.gpu_pool and prompt >= 1024:
        # Provider prompt caches work in 128-token blocks beyond the first 1024 tokens.
        cached = max(1024, int(prompt * rng.uniform(0.4, 0.95)) // 128 * 128)
    queue = round(rng.expovariate(1 / (4 + 150 * load**2))) if profile.gpu_pool else None
    ttft = (queue or 0) + round(
        (profile.ttft_ms + prompt * profile.prefill_ms_per_token) * _jitter(rng, 0.25)
    )
    decode = round(completion * profile.tpot_ms * _jitter(rng, 0.2))
    attempt = DemoAttempt(
        sink=sink,
        key=_request_key(rng, sink),
        task_id=task_id,
        attempt=number,
        ts=ts,
        team=workload.team,
        workload=workload.name,
        model=profile.model,
        endpoint=profile.endpoint,
        gpu_pool=profile.gpu_pool,
        status="success",
        error=None,
        http_status=200,
        latency_ms=ttft + max(1, decode),
        ttft_ms=ttft,
        queue_wait_ms=queue,
        has_usage=True,
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached_tokens=cached,
        reasoning_tokens=reasoning,
        provider=profile.provider,
        aux_id=_hex(rng, 24),
    )
    failure = _failure(rng, plan, profile, ts, load)
    if failure is not None:
        _fail(rng, attempt, workload, *failure)
    return attempt


def _fail(rng: random.Random, attempt: DemoAttempt, workload: Workload, error: str, http: int | None) -> None:
    attempt.status, attempt.error, attempt.http_status = "failure", error, http
    attempt.ttft_ms = None
    if error == TIMEOUT:
        attempt.latency_ms = workload.timeout_ms + rng.randrange(250)
        # A self-run server did the work until the client gave up, and its gateway logs that
        # usage; hosted APIs report nothing for a timed-out call.
        if attempt.gpu_pool:
            attempt.completion_tokens = rng.randrange(attempt.completion_tokens + 1)
            return
    elif error == RATE_LIMIT:
        attempt.latency_ms = rng.randint(15, 400)
    else:
        attempt.latency_ms = rng.randint(80, 4000)
    attempt.has_usage = False
    attempt.prompt_tokens = attempt.completion_tokens = attempt.cached_tokens = 0
    attempt.reasoning_tokens = None


def _simulate_batch(
    rng: random.Random, plan: Plan, workload: Workload, hour_start: datetime, count: int
) -> None:
    """One nightly batch: `count` requests created in the first 45 minutes, then completed."""
    profile = BATCH_PROFILE
    batch: list[DemoAttempt] = []
    for index in range(count):
        # Batch responses carry `created` in whole unix seconds.
        ts = hour_start + timedelta(seconds=rng.randrange(45 * 60))
        task_id = f"{workload.team}-{workload.name}-{hour_start:%Y%m%d}-{index:05d}"
        prompt = _lognormal(rng, *workload.lengths.prompt)
        attempt = _simulate_attempt(rng, plan, workload, profile, task_id, 1, ts, prompt, False, 0.0)
        attempt.latency_ms = attempt.ttft_ms = None  # batch output says nothing about speed
        batch.append(attempt)
    completed = max(a.ts for a in batch) + timedelta(seconds=rng.randint(30, 600))
    plan.batch_completed[hour_start.date()] = completed
    for attempt in batch:
        if attempt.status == "failure":
            # Error lines carry no time: ingestion uses the batch's completed_at for them.
            attempt.ts = completed
            if attempt.error == EXPIRED:
                attempt.key = attempt.aux_id  # no response, so the key is the line's own id
    plan.attempts.extend(batch)


def _hex(rng: random.Random, digits: int) -> str:
    return f"{rng.getrandbits(4 * digits):0{digits}x}"


def _uuid(rng: random.Random) -> str:
    h = _hex(rng, 32)
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:]}"


def _request_key(rng: random.Random, sink: str) -> str:
    if sink == OTLP:
        return f"{_hex(rng, 32)}:{_hex(rng, 16)}"  # traceId:spanId, as the OTLP parser keys spans
    if sink == LITELLM:
        return f"chatcmpl-{_uuid(rng)}"
    if sink == BATCH:
        return f"req_{_hex(rng, 32)}"
    return f"req_{_hex(rng, 24)}"


# --- writing -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ManifestEntry:
    """One written file and what its parser must give back for it."""

    path: Path
    format: str
    expected_records: int
    expected_rejects: int
    defaults: FileDefaults = FileDefaults()  # pass to the parser/ingest (batch files need them)


def write_demo(
    directory: Path,
    *,
    now: datetime,
    days: int = DEFAULT_DAYS,
    attempts_per_day: int = DEFAULT_ATTEMPTS_PER_DAY,
    seed: int = DEFAULT_SEED,
) -> list[ManifestEntry]:
    """Simulate and write; returns the manifest (see `write_plan`)."""
    plan = simulate(now=now, days=days, attempts_per_day=attempts_per_day, seed=seed)
    return write_plan(plan, directory)


def write_plan(plan: Plan, directory: Path) -> list[ManifestEntry]:
    """Write every attempt of `plan` into exactly one file under `directory`.

    Files whose bytes would not change are left untouched (so re-runs keep mtimes); demo files
    from an earlier window that this plan no longer writes are removed."""
    directory = Path(directory)
    by_sink: dict[str, list[DemoAttempt]] = defaultdict(list)
    for attempt in plan.attempts:
        by_sink[attempt.sink].append(attempt)
    bad = defaultdict(list)
    for item in plan.malformed:
        bad[item.sink].append(item)
    manifest = [
        *_write_canonical(plan, directory, by_sink[CANONICAL], bad[CANONICAL]),
        *_write_batches(plan, directory, by_sink[BATCH]),
        *_write_litellm(directory, by_sink[LITELLM], bad[LITELLM]),
        *_write_otlp(directory, by_sink[OTLP], bad[OTLP]),
    ]
    _remove_stale(directory, {entry.path for entry in manifest})
    return manifest


_OWN_FILES = {
    "canonical": ("usage-*.jsonl", "usage-*.jsonl.gz"),
    "batch": ("batch_*.output.jsonl", "batch_*.errors.jsonl"),
    "litellm": ("*-spendlogs.csv",),
    "otlp": ("*.traces.jsonl",),
}


def _remove_stale(directory: Path, keep: set[Path]) -> None:
    # Only names this module writes, so a --dir pointing at other files never loses them.
    for sub, patterns in _OWN_FILES.items():
        for pattern in patterns:
            for path in (directory / sub).glob(pattern):
                if path not in keep:
                    path.unlink()


def _write_file(path: Path, data: bytes, *, compress: bool = False) -> None:
    if compress:
        buffer = io.BytesIO()
        # mtime=0 and no file name: the same content always gives the same bytes. Level 1: this
        # is the slowest step of the demo at the default level, for files ~25% smaller.
        with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=1) as gz:
            gz.write(data)
        data = buffer.getvalue()
    if path.exists() and path.read_bytes() == data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)  # a watcher never sees a half-written file


def _iso(ts: datetime) -> str:
    return ts.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _lines(items: Iterable[tuple[Any, str]]) -> bytes:
    ordered = sorted(items, key=lambda item: item[0])
    return "".join(text + "\n" for _, text in ordered).encode("utf-8")


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# canonical ----------------------------------------------------------------------------------


def _write_canonical(
    plan: Plan, directory: Path, attempts: list[DemoAttempt], bad: list[Malformed]
) -> list[ManifestEntry]:
    per_day: dict[date, list[tuple[Any, str]]] = defaultdict(list)
    records: dict[date, int] = defaultdict(int)
    rejects: dict[date, int] = defaultdict(int)
    for attempt in attempts:
        day = attempt.ts.date()
        per_day[day].append(
            ((attempt.ts, attempt.task_id, attempt.attempt), _dumps(canonical_object(attempt)))
        )
        records[day] += 1
    for item in bad:
        day = item.hour.date()
        per_day[day].append(((item.hour + timedelta(minutes=30), "~", 0), _malformed_canonical(item)))
        rejects[day] += 1
    entries = []
    for day, items in sorted(per_day.items()):
        compress = (plan.now.date() - day).days > GZIP_AFTER_DAYS
        path = directory / "canonical" / f"usage-{day.isoformat()}.jsonl{'.gz' if compress else ''}"
        _write_file(path, _lines(items), compress=compress)
        entries.append(ManifestEntry(path, CANONICAL, records[day], rejects[day]))
    return entries


_CANONICAL_ERRORS = {TIMEOUT: "timeout", RATE_LIMIT: "rate_limit_exceeded", SERVER_ERROR: "server_error"}


def canonical_object(a: DemoAttempt) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "task_id": a.task_id,
        "attempt": a.attempt,
        "request_id": a.key,
        "ts": _iso(a.ts),
        "model": a.model,
        "endpoint": a.endpoint,
        "workload": a.workload,
        "team": a.team,
        "status": a.status,
        "http_status": a.http_status,
        "error_type": _CANONICAL_ERRORS.get(a.error or ""),
        "latency_ms": a.latency_ms,
        "ttft_ms": a.ttft_ms,
        "queue_wait_ms": a.queue_wait_ms,
    }
    if a.has_usage:
        obj["usage"] = _openai_usage(a)
    return obj


def _openai_usage(a: DemoAttempt) -> dict[str, Any]:
    total = a.prompt_tokens + a.completion_tokens
    if a.gpu_pool:
        # vLLM's field order, and no details unless started with --enable-prompt-tokens-details.
        return {
            "prompt_tokens": a.prompt_tokens,
            "total_tokens": total,
            "completion_tokens": a.completion_tokens,
            "prompt_tokens_details": None,
        }
    usage: dict[str, Any] = {
        "prompt_tokens": a.prompt_tokens,
        "completion_tokens": a.completion_tokens,
        "total_tokens": total,
        "prompt_tokens_details": {"cached_tokens": a.cached_tokens},
    }
    if a.reasoning_tokens is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": a.reasoning_tokens}
    return usage


def _malformed_canonical(item: Malformed) -> str:
    obj = {
        "task_id": f"netops-summarize-{item.hour:%Y%m%d%H}-broken",
        "attempt": 1,
        "request_id": f"req_broken_{item.hour:%Y%m%d%H}",
        "ts": _iso(item.hour + timedelta(minutes=30)),
        "model": "llama-3.1-70b-instruct-awq",
        "endpoint": "vllm-h100-a",
        "workload": "summarize",
        "team": "netops",
        "status": "success",
        "http_status": 200,
        "error_type": None,
        "latency_ms": 1200,
        "ttft_ms": 150,
        "queue_wait_ms": 10,
        "usage": {"prompt_tokens": 900, "total_tokens": 1020, "completion_tokens": 120},
    }
    if item.kind == "negative-tokens":
        obj["usage"] = {"prompt_tokens": -900, "total_tokens": -780, "completion_tokens": 120}
        return _dumps(obj)
    text = _dumps(obj)
    return text[: len(text) * 2 // 3]  # cut off mid-record, as a killed writer leaves it


# OpenAI batch -------------------------------------------------------------------------------


def batch_defaults(completed: datetime) -> FileDefaults:
    """What the batch files do not say themselves: who ran it, where, and when error lines happened."""
    return FileDefaults(
        team=BATCH_WORKLOAD.team,
        workload=BATCH_WORKLOAD.name,
        endpoint=BATCH_PROFILE.endpoint,
        model=BATCH_PROFILE.model,
        ts=completed,
    )


def _write_batches(plan: Plan, directory: Path, attempts: list[DemoAttempt]) -> list[ManifestEntry]:
    per_day: dict[date, list[DemoAttempt]] = defaultdict(list)
    for attempt in attempts:
        # Lines are created after 01:00 and errors stamped with completed_at, both that night.
        per_day[attempt.ts.date()].append(attempt)
    entries = []
    for day, batch in sorted(per_day.items()):
        defaults = batch_defaults(plan.batch_completed[day])
        # Output order is not input order: order lines by their (random) line id.
        ok = sorted((a for a in batch if a.status == "success"), key=lambda a: a.aux_id)
        failed = sorted((a for a in batch if a.status != "success"), key=lambda a: a.aux_id)
        for suffix, lines in (("output", ok), ("errors", failed)):
            if not lines:
                continue  # OpenAI leaves error_file_id null when nothing failed
            path = directory / "batch" / f"batch_{day:%Y%m%d}.{suffix}.jsonl"
            _write_file(path, "".join(_dumps(batch_line(a)) + "\n" for a in lines).encode())
            entries.append(ManifestEntry(path, BATCH, len(lines), 0, defaults))
    return entries


def batch_line(a: DemoAttempt) -> dict[str, Any]:
    line_id = f"batch_req_{a.aux_id}"
    if a.error == EXPIRED:
        return {
            "id": line_id,
            "custom_id": a.task_id,
            "response": None,
            "error": {
                "code": "batch_expired",
                "message": "This request could not be executed before the completion window expired.",
            },
        }
    if a.status != "success":
        body: dict[str, Any] = {
            "error": {
                "message": "The server had an error while processing your request.",
                "type": "server_error",
                "param": None,
                "code": None,
            }
        }
    else:
        body = {
            "id": f"chatcmpl-{a.aux_id}",
            "object": "chat.completion",
            "created": int(a.ts.timestamp()),
            "model": a.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "[demo label]", "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": _openai_usage(a),
            "service_tier": "default",
            "system_fingerprint": f"fp_{a.aux_id[:10]}",
        }
    return {
        "id": line_id,
        "custom_id": a.task_id,
        "response": {"status_code": a.http_status, "request_id": a.key, "body": body},
        "error": None,
    }


# LiteLLM ------------------------------------------------------------------------------------

LITELLM_COLUMNS = (
    "request_id,call_type,api_key,spend,total_tokens,prompt_tokens,completion_tokens,startTime,endTime,"
    "request_duration_ms,completionStartTime,model,model_id,model_group,custom_llm_provider,api_base,user,"
    "metadata,cache_hit,cache_key,request_tags,team_id,organization_id,end_user,requester_ip_address,"
    "messages,response,session_id,status,mcp_namespaced_tool_name,agent_id,proxy_server_request"
).split(",")
# LiteLLM's own cost estimate (its price map, list prices per 1M tokens). We never read `spend`;
# it is here because a real export has it.
_LITELLM_PRICES = {
    "gpt-4o-mini": (0.15, 0.075, 0.60),
    "gpt-4.1": (2.00, 0.50, 8.00),
    "claude-sonnet-4": (3.00, 0.30, 15.00),
}
_API_BASES = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
_LITELLM_ERRORS = {
    TIMEOUT: "Timeout",
    RATE_LIMIT: "RateLimitError",
    SERVER_ERROR: "InternalServerError",
}
_SUPPORT_KEY = hashlib.sha256(b"sk-demo-support-key").hexdigest()  # the proxy stores key hashes
_SUPPORT_TEAM_ID = "5c1d7e2a-4b3f-4e8d-9a6c-2f0e1d3c4b5a"


def _write_litellm(directory: Path, attempts: list[DemoAttempt], bad: list[Malformed]) -> list[ManifestEntry]:
    if not attempts and not bad:
        return []
    items = [((a.ts, a.task_id, a.attempt), litellm_row(a)) for a in attempts]
    for item in bad:
        row = dict(
            request_id=f"chatcmpl-broken-{item.hour:%Y%m%d%H}",
            call_type="acompletion",
            model="gpt-4o-mini",
            total_tokens="0",
            prompt_tokens="0",
            completion_tokens="0",
            status="failure",
        )
        items.append(((item.hour + timedelta(minutes=30), "~", 0), row))
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(LITELLM_COLUMNS)
    # Plain rows: csv.DictWriter re-checks every row's keys, which doubled the demo's CSV time.
    writer.writerows(
        [row.get(column, "") for column in LITELLM_COLUMNS]
        for _, row in sorted(items, key=lambda item: item[0])
    )
    path = directory / "litellm" / "support-spendlogs.csv"
    _write_file(path, buffer.getvalue().encode("utf-8"))
    return [ManifestEntry(path, LITELLM, len(attempts), len(bad))]


def _pg_ts(ts: datetime) -> str:
    # psql's CSV for a `timestamp(3)` column: naive, space-separated, UTC (Prisma stores UTC).
    return ts.astimezone(UTC).replace(tzinfo=None).isoformat(" ", "milliseconds")


def litellm_row(a: DemoAttempt) -> dict[str, str]:
    end = a.ts + timedelta(milliseconds=a.latency_ms or 0)
    meta: dict[str, Any] = {
        "user_api_key": _SUPPORT_KEY,
        "user_api_key_alias": "support-prod",
        "user_api_key_team_id": _SUPPORT_TEAM_ID,
        "user_api_key_team_alias": a.team,
        "spend_logs_metadata": {
            "task_id": a.task_id,
            "attempt": a.attempt,
            "team": a.team,
            "workload": a.workload,
            "endpoint": a.endpoint,
        },
    }
    if a.has_usage:
        meta["usage_object"] = _openai_usage(a)
    if a.error:
        meta["error_information"] = {
            "error_code": str(a.http_status),
            "error_class": _LITELLM_ERRORS[a.error],
            "llm_provider": a.provider,
        }
    success = a.status == "success"
    return {  # columns not named here are empty (NULL)
        "request_id": a.key,
        "call_type": "acompletion",
        "api_key": _SUPPORT_KEY,
        "spend": f"{_litellm_spend(a):.9f}".rstrip("0").rstrip("."),
        "total_tokens": str(a.prompt_tokens + a.completion_tokens),
        "prompt_tokens": str(a.prompt_tokens),
        "completion_tokens": str(a.completion_tokens),
        "startTime": _pg_ts(a.ts),
        "endTime": _pg_ts(end),
        "request_duration_ms": str(a.latency_ms),
        # Streaming calls: the first chunk's time; LiteLLM leaves it empty for failed calls.
        "completionStartTime": _pg_ts(a.ts + timedelta(milliseconds=a.ttft_ms)) if a.ttft_ms else "",
        "model": a.model,
        "model_id": a.endpoint,
        "model_group": a.model,
        "custom_llm_provider": a.provider,
        "api_base": _API_BASES.get(a.provider, ""),
        "metadata": json.dumps(meta),
        "cache_hit": "False",
        "request_tags": json.dumps([a.team, a.workload]),
        "team_id": _SUPPORT_TEAM_ID,
        # Prompt storage is on in this proxy; the content here is placeholder text only.
        "messages": json.dumps([{"role": "user", "content": "[demo prompt]"}]) if success else "{}",
        "response": json.dumps({"choices": [{"message": {"content": "[demo reply]"}}]}) if success else "{}",
        "status": a.status,
    }


def _litellm_spend(a: DemoAttempt) -> float:
    price_in, price_cached, price_out = _LITELLM_PRICES.get(a.model, (0.0, 0.0, 0.0))
    uncached = a.prompt_tokens - a.cached_tokens
    return (uncached * price_in + a.cached_tokens * price_cached + a.completion_tokens * price_out) / 1e6


# OTLP ---------------------------------------------------------------------------------------
# Spans are rendered straight to JSON text: building ~15 attribute dicts per span and encoding
# them was most of the demo's run time.

_OTLP_RESOURCE = {
    "service.name": "search-reranker",
    "costcenter.team": "search",
    "costcenter.workload": "rerank",
}
_OTLP_SCOPE = {"name": "opentelemetry.instrumentation.openai_v2", "version": "2.1b0"}
_SERVER_ADDRESS = {"openai": "api.openai.com"}


def _write_otlp(directory: Path, attempts: list[DemoAttempt], bad: list[Malformed]) -> list[ManifestEntry]:
    if not attempts and not bad:
        return []
    # The collector's file exporter writes one ExportTraceServiceRequest per line; here one per hour.
    per_hour: dict[datetime, list[tuple[int, str, str]]] = defaultdict(list)
    by_task: dict[str, list[DemoAttempt]] = defaultdict(list)
    for attempt in attempts:
        by_task[attempt.task_id].append(attempt)
    for task in by_task.values():
        per_hour[_hour_of(task[0].ts)].append(_server_span(task))
        for attempt in task:
            per_hour[_hour_of(attempt.ts)].append(otlp_span(attempt))
    for item in bad:
        per_hour[item.hour].append(_span_without_usage(item))
    resource = '{"attributes":[' + ",".join(_attr(k, v) for k, v in _OTLP_RESOURCE.items()) + "]}"
    head = (
        f'{{"resourceSpans":[{{"resource":{resource},"scopeSpans":[{{"scope":{_dumps(_OTLP_SCOPE)},"spans":['
    )
    lines = []
    for hour, spans in sorted(per_hour.items()):
        spans.sort()
        lines.append(((hour, ""), head + ",".join(text for _, _, text in spans) + "]}]}]}"))
    path = directory / "otlp" / "search-rerank.traces.jsonl"
    _write_file(path, _lines(lines))
    return [ManifestEntry(path, OTLP, len(attempts), len(bad))]


def _hour_of(ts: datetime) -> datetime:
    return ts.replace(minute=0, second=0, microsecond=0)


def _attr(key: str, value: Any) -> str:
    """One OTLP/JSON `{key, value}` attribute as JSON text."""
    if type(value) is str:  # the common case first
        wrapped = '{"stringValue":' + _quote(value) + "}"
    elif isinstance(value, bool):
        wrapped = '{"boolValue":' + ("true" if value else "false") + "}"
    elif isinstance(value, int):
        wrapped = '{"intValue":"' + str(value) + '"}'  # int64 is a JSON string in OTLP/JSON
    elif isinstance(value, float):
        wrapped = '{"doubleValue":' + repr(value) + "}"
    elif isinstance(value, list):
        wrapped = (
            '{"arrayValue":{"values":[' + ",".join('{"stringValue":' + _quote(v) + "}" for v in value) + "]}}"
        )
    else:
        wrapped = '{"stringValue":' + _quote(str(value)) + "}"
    return '{"key":' + _quote(key) + ',"value":' + wrapped + "}"


def _span(
    *,
    trace: str,
    span_id: str,
    parent: str,
    name: str,
    kind: int,
    start_ns: int,
    end_ns: int,
    attrs: list[str],
    status: dict[str, Any],
) -> tuple[int, str, str]:
    """(start, span id, JSON text): sortable the way the spans are ordered in a request."""
    text = (
        f'{{"traceId":"{trace}","spanId":"{span_id}","parentSpanId":"{parent}","name":{_quote(name)},'
        f'"kind":{kind},"startTimeUnixNano":"{start_ns}","endTimeUnixNano":"{end_ns}",'
        f'"attributes":[{",".join(attrs)}],"status":{_dumps(status)}}}'
    )
    return start_ns, span_id, text


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _nanos(ts: datetime) -> int:
    return (ts - _EPOCH) // _MICROSECOND * 1000


def _server_span(task: list[DemoAttempt]) -> tuple[int, str, str]:
    """The app's own request span around the model calls; not a model call, so never counted."""
    trace = task[0].key.split(":")[0]
    last = task[-1]
    return _span(
        trace=trace,
        span_id=trace[16:],
        parent="",
        name="POST /v1/rerank",
        kind=2,
        start_ns=_nanos(task[0].ts),
        end_ns=_nanos(last.ts + timedelta(milliseconds=last.latency_ms or 0)),
        attrs=[_attr("http.request.method", "POST"), _attr("http.route", "/v1/rerank")],
        status={"code": 0},
    )


def otlp_span(a: DemoAttempt) -> tuple[int, str, str]:
    trace, span_id = a.key.split(":")
    start = _nanos(a.ts)
    attrs = [
        _attr("gen_ai.operation.name", "chat"),
        *([_attr("gen_ai.provider.name", a.provider)] if a.provider else []),
        _attr("gen_ai.request.model", a.model),
        _attr("server.address", _SERVER_ADDRESS.get(a.provider, f"{a.endpoint}.internal")),
        _attr("costcenter.task_id", a.task_id),
        _attr("costcenter.attempt", a.attempt),
        _attr("costcenter.endpoint", a.endpoint),
    ]
    if a.status == "success":
        attrs += [
            _attr("gen_ai.response.model", a.model),
            _attr("gen_ai.response.id", f"chatcmpl-{a.aux_id}"),
            _attr("gen_ai.response.finish_reasons", ["stop"]),
            _attr("http.response.status_code", 200),
        ]
    else:
        attrs += [
            _attr("error.type", "timeout" if a.error == TIMEOUT else str(a.http_status)),
            _attr("http.response.status_code", a.http_status),
        ]
    if a.has_usage:
        attrs += [
            _attr("gen_ai.usage.input_tokens", a.prompt_tokens),
            _attr("gen_ai.usage.output_tokens", a.completion_tokens),
        ]
        if a.cached_tokens:
            attrs.append(_attr("gen_ai.usage.cache_read.input_tokens", a.cached_tokens))
    if a.ttft_ms is not None:
        attrs.append(_attr("gen_ai.response.time_to_first_chunk", a.ttft_ms / 1000))
    return _span(
        trace=trace,
        span_id=span_id,
        parent=trace[16:],
        name=f"chat {a.model}",
        kind=3,
        start_ns=start,
        end_ns=start + (a.latency_ms or 0) * 1_000_000,
        attrs=attrs,
        status={"code": 0} if a.status == "success" else {"code": 2, "message": a.error or "error"},
    )


def _span_without_usage(item: Malformed) -> tuple[int, str, str]:
    digest = hashlib.sha256(f"broken-span/{item.hour.isoformat()}".encode()).hexdigest()
    start = item.hour + timedelta(minutes=30)
    return _span(
        trace=digest[:32],
        span_id=digest[32:48],
        parent="",
        name="chat llama-3.1-8b-instruct",
        kind=3,
        start_ns=_nanos(start),
        end_ns=_nanos(start + timedelta(seconds=1)),
        attrs=[
            _attr("gen_ai.operation.name", "chat"),
            _attr("gen_ai.request.model", "llama-3.1-8b-instruct"),
            _attr("costcenter.task_id", f"search-rerank-{item.hour:%Y%m%d%H}-broken"),
            _attr("costcenter.endpoint", "vllm-mi300x-b"),
        ],
        status={"code": 1},
    )


# --- GPU metrics (OpenMetrics, for the GPU fleet page and idle cost) ------------------------------
# The two self-run pools' GPUs as their exporters would report them, scraped every 30 minutes:
# NVIDIA dcgm-exporter on the H100 nodes (label ``Hostname``, matched by the catalog's
# ``gpu-node-a.*``) and the AMD device-metrics-exporter on the MI300X nodes (``hostname``,
# ``gpu-node-b.*``), plus one spare NVIDIA node that matches no pool (ingestion health shows it).
# Utilisation follows the simulated traffic: each hour's weighted tokens on the pool's endpoint
# over the pool's capacity, with per-GPU and per-sample noise; power follows utilisation; energy
# counters integrate power. The H100 pool runs at roughly half load, the MI300X pool is under-used.

METRICS_SCRAPE_S = 1800
METRICS_FILE = Path("metrics") / "gpus.openmetrics.txt"


@dataclass(frozen=True)
class GpuNode:
    hostname: str
    vendor: str  # nvidia | amd
    endpoint: str  # the pool's endpoint whose traffic drives utilisation ("" = none)
    gpus: int
    model_name: str
    memory_total_mib: int
    idle_w: float
    max_w: float
    # Weighted tokens per hour (prompt + completion × the pool's output weight) at full load, per
    # attempt per day of the demo's traffic knob, so utilisation does not depend on the scale.
    capacity_per_daily_attempt: float


GPU_NODES: tuple[GpuNode, ...] = (
    GpuNode("gpu-node-a1", "nvidia", "vllm-h100-a", 4, "NVIDIA H100 80GB HBM3", 81559, 70, 700, 45),
    GpuNode("gpu-node-a2", "nvidia", "vllm-h100-a", 4, "NVIDIA H100 80GB HBM3", 81559, 70, 700, 45),
    GpuNode("gpu-node-b1", "amd", "vllm-mi300x-b", 4, "AMD Instinct MI300X OAM", 196592, 130, 750, 110),
    GpuNode("gpu-node-b2", "amd", "vllm-mi300x-b", 4, "AMD Instinct MI300X OAM", 196592, 130, 750, 110),
    # A node nobody added to a pool: its series match no pool's matchers.
    GpuNode("gpu-node-c1", "nvidia", "", 1, "NVIDIA H100 80GB HBM3", 81559, 70, 700, 45),
)
_OUTPUT_WEIGHT = {"vllm-mi300x-b": 3}  # as examples/catalog.yaml weighs the MI300X pool's output


def pool_load(plan: Plan) -> dict[tuple[str, datetime], float]:
    """Weighted tokens per (endpoint, hour) of the plan's self-run attempts."""
    load: dict[tuple[str, datetime], float] = defaultdict(float)
    for a in plan.attempts:
        if a.gpu_pool:
            weight = a.prompt_tokens + a.completion_tokens * _OUTPUT_WEIGHT.get(a.endpoint, 1)
            load[(a.endpoint, _hour_of(a.ts))] += weight
    return load


def _gpu_labels(node: GpuNode, index: int, seed: int) -> str:
    digest = hashlib.sha256(f"{seed}/{node.hostname}/{index}".encode()).hexdigest()
    if node.vendor == "nvidia":
        uuid = f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
        return f'gpu="{index}",UUID="{uuid}",modelName="{node.model_name}",Hostname="{node.hostname}"'
    return (
        f'card_series="{node.model_name}",gpu_id="{index}",gpu_partition_id="0",'
        f'hostname="{node.hostname}",serial_number="{digest[:16].upper()}"'
    )


def gpu_metrics_text(plan: Plan) -> str:
    """The OpenMetrics exposition (seconds timestamps, ``# EOF``) of every demo GPU over the plan.

    Utilisation, power and energy are scraped every ``METRICS_SCRAPE_S`` seconds (mid-interval,
    so each hour's window holds its own samples); memory, which vLLM preallocates, once an hour.
    Samples are grouped per series in time order, as a Prometheus backfill file is.
    """
    load = pool_load(plan)
    capacity_scale = plan_attempts_per_day(plan)
    # family → series labels → sample lines ("value timestamp")
    samples: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    energy: dict[tuple[str, int], float] = {}
    scrapes = 3600 // METRICS_SCRAPE_S
    for hour in _hours(plan.start, plan.now):
        rng = random.Random(f"{plan.seed}/gpu/{hour.isoformat()}")
        for node in GPU_NODES:
            capacity = node.capacity_per_daily_attempt * capacity_scale
            busy = min(1.0, load.get((node.endpoint, hour), 0.0) / capacity) if node.endpoint else 0.0
            nvidia = node.vendor == "nvidia"
            for index in range(node.gpus):
                labels = _gpu_labels(node, index, plan.seed)
                offset = rng.uniform(-0.06, 0.06)
                key = (node.hostname, index)
                # Counters since driver load: a per-GPU starting value, then the integral of power.
                counter = energy.get(key, 5e8 + 1e7 * index)
                for step in range(scrapes):
                    stamp = f"{hour.timestamp() + (step + 0.5) * METRICS_SCRAPE_S:.1f}"
                    util = min(0.99, max(0.01, 0.03 + 0.9 * busy + offset + rng.gauss(0, 0.03)))
                    power = node.idle_w + (node.max_w - node.idle_w) * util * rng.uniform(0.95, 1.05)
                    counter += power * METRICS_SCRAPE_S  # joules
                    if nvidia:
                        samples["DCGM_FI_DEV_GPU_UTIL"][labels].append(f"{util * 100:.0f} {stamp}")
                        samples["DCGM_FI_DEV_POWER_USAGE"][labels].append(f"{power:.3f} {stamp}")
                        energy_mj = f"{counter * 1000:.0f} {stamp}"
                        samples["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"][labels].append(energy_mj)
                    else:
                        samples["gpu_gfx_activity"][labels].append(f"{util * 100:.0f} {stamp}")
                        samples["gpu_package_power"][labels].append(f"{power:.0f} {stamp}")
                        samples["gpu_energy_consumed"][labels].append(f"{counter * 1e6:.0f} {stamp}")  # µJ
                energy[key] = counter
                used = node.memory_total_mib * (0.9 if node.endpoint else 0.01) + rng.uniform(0, 300)
                stamp = f"{hour.timestamp() + 1800:.1f}"
                if nvidia:
                    samples["DCGM_FI_DEV_FB_USED"][labels].append(f"{used:.0f} {stamp}")
                    samples["DCGM_FI_DEV_FB_FREE"][labels].append(
                        f"{node.memory_total_mib - used:.0f} {stamp}"
                    )
                else:
                    samples["gpu_used_vram"][labels].append(f"{used:.0f} {stamp}")
                    samples["gpu_total_vram"][labels].append(f"{node.memory_total_mib} {stamp}")
    # dcgm-exporter's energy counter has no _total suffix, which the strict OpenMetrics parser
    # refuses: first, so the importer falls back to the tolerant parser at once.
    families = {
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("counter", "Total energy consumption since boot (in mJ)."),
        "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %)."),
        "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W)."),
        "DCGM_FI_DEV_FB_USED": ("gauge", "Framebuffer memory used (in MiB)."),
        "DCGM_FI_DEV_FB_FREE": ("gauge", "Framebuffer memory free (in MiB)."),
        "gpu_gfx_activity": ("gauge", "Graphics engine usage in Percentage (0-100)"),
        "gpu_package_power": ("gauge", "Current socket power in Watts"),
        "gpu_energy_consumed": ("gauge", "Accumulated energy consumed by the GPU in uJ"),
        "gpu_used_vram": ("gauge", "Used VRAM in MB"),
        "gpu_total_vram": ("gauge", "Total VRAM available in MB"),
    }
    out = []
    for name, (kind, help_text) in families.items():
        if not samples[name]:
            continue
        out.append(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")
        for labels, lines in samples[name].items():
            prefix = f"{name}{{{labels}}} "
            out.extend(prefix + line + "\n" for line in lines)
    out.append("# EOF\n")
    return "".join(out)


def plan_attempts_per_day(plan: Plan) -> float:
    """The traffic knob the plan was made with, from its own size (the plan does not keep it)."""
    return max(1.0, len(plan.attempts) / plan.days / RETRY_OVERHEAD)


def write_gpu_metrics(plan: Plan, directory: Path) -> Path:
    """Write the GPU metrics of ``plan`` under ``directory``; unchanged bytes are left alone."""
    path = Path(directory) / METRICS_FILE
    _write_file(path, gpu_metrics_text(plan).encode("utf-8"))
    return path
