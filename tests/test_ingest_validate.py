"""The shared normaliser, exercised end to end through canonical JSONL: every bad line becomes one
Reject whose reason names the field, and the good lines around it are kept."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import pytest

from ingest.formats import parser_for
from ingest.records import FileDefaults, Reject, UsageRecord
from ingest.validate import InvalidRecord, build_record, excerpt_of, excerpt_of_raw, parse_ts

NOW = datetime(2026, 11, 3, tzinfo=UTC)
SECRET = "PROMPT-SECRET-7f3a"


def good(**overrides) -> dict:
    record = {
        "task_id": "t-1",
        "attempt": 1,
        "request_id": "r-1",
        "ts": "2026-11-02T10:15:00Z",
        "model": "gpt-4o-mini",
        "endpoint": "openai-gpt-4o-mini",
        "workload": "summarize",
        "team": "netops",
        "status": "success",
        "messages": [{"role": "user", "content": SECRET}],
        "usage": {
            "prompt_tokens": 900,
            "completion_tokens": 120,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
    }
    record.update(overrides)
    return record


def usage(**overrides) -> dict:
    return {**good()["usage"], **overrides}


def sandwich(bad_line: bytes) -> list[UsageRecord | Reject]:
    """A bad line between two good ones, through the canonical parser."""
    before = json.dumps(good(request_id="before")).encode()
    after = json.dumps(good(request_id="after")).encode()
    data = before + b"\n" + bad_line + b"\n" + after + b"\n"
    return list(parser_for("canonical")(io.BytesIO(data), defaults=FileDefaults(), now=NOW))


def only_reject(bad_line: bytes) -> Reject:
    out = sandwich(bad_line)
    assert [r.request_id for r in out if isinstance(r, UsageRecord)] == ["before", "after"], out
    (rej,) = [r for r in out if isinstance(r, Reject)]
    assert rej.location == "line 2"
    assert len(rej.excerpt) <= 200 and SECRET not in rej.excerpt
    return rej


BAD_RECORDS = [
    ({"usage": usage(prompt_tokens="12")}, "usage.prompt_tokens: must be a non-negative integer (got '12')"),
    ({"usage": usage(prompt_tokens=12.5)}, "usage.prompt_tokens: must be a non-negative integer (got 12.5)"),
    ({"usage": usage(prompt_tokens=True)}, "usage.prompt_tokens: must be a non-negative integer (got True)"),
    ({"usage": usage(completion_tokens=-5)}, "usage.completion_tokens: must be >= 0 (got -5)"),
    (
        {"usage": usage(prompt_tokens=10_000_001)},
        "usage.prompt_tokens: 10000001 is larger than the sane maximum 10,000,000",
    ),
    (
        {"usage": usage(prompt_tokens=6_000_000, completion_tokens=6_000_000)},
        "usage.prompt_tokens + usage.completion_tokens: 12,000,000 tokens in one attempt is more than the "
        "sane maximum 10,000,000",
    ),
    (
        {"usage": usage(prompt_tokens_details={"cached_tokens": 901})},
        "usage.prompt_tokens_details.cached_tokens: 901 is more than usage.prompt_tokens 900 "
        "(cached tokens are part of the prompt)",
    ),
    (
        {"usage": usage(completion_tokens_details={"reasoning_tokens": 121})},
        "usage.completion_tokens_details.reasoning_tokens: 121 is more than usage.completion_tokens 120 "
        "(reasoning tokens are part of the completion)",
    ),
    ({"usage": "lots"}, "usage: must be an object (got 'lots')"),
    ({"usage": usage(prompt_tokens=None)}, "usage.prompt_tokens: must be a non-negative integer (got None)"),
    ({"usage": None}, "usage: required for a successful attempt"),
    ({"task_id": None}, "task_id: required"),
    ({"task_id": "   "}, "task_id: required (empty)"),
    ({"task_id": "x" * 257}, "task_id: longer than 256 characters (257)"),
    ({"task_id": 17}, "task_id: must be a string (got 17)"),
    ({"task_id": "a\x00b"}, "task_id: contains control characters"),
    ({"request_id": None, "attempt": None}, "attempt: required when request_id is absent"),
    ({"attempt": 0}, "attempt: must be >= 1 (got 0)"),
    ({"request_id": "r" * 300}, "request_id: longer than 256 characters (300)"),
    ({"ts": "2014-12-31T23:59:59Z"}, "ts: 2014-12-31T23:59:59+00:00 is before 2015-01-01"),
    ({"ts": "2026-11-04T00:00:01Z"}, "ts: 2026-11-04T00:00:01+00:00 is more than 1 day in the future"),
    (
        {"ts": "2026-11-02T10:15:00"},
        "ts: timestamp must include a UTC offset such as Z (got '2026-11-02T10:15:00')",
    ),
    ({"ts": "yesterday"}, "ts: not an ISO 8601 timestamp (got 'yesterday')"),
    ({"ts": 1793614500000}, "ts: timestamp out of range (got 1793614500000)"),  # milliseconds, not seconds
    ({"ts": None}, "ts: required timestamp"),
    ({"status": "maybe"}, "status: unknown status 'maybe' (expected success or failure)"),
    ({"status": None}, "status: required (and no http_status to derive it from)"),
    ({"model": ""}, "model: required"),
    ({"team": "t" * 201}, "team: longer than 200 characters (201)"),
    ({"workload": ["a"]}, "workload: must be a string (got ['a'])"),
    ({"endpoint": "a\nb"}, "endpoint: contains control characters"),
    ({"http_status": 99}, "http_status: must be >= 100 (got 99)"),
    ({"latency_ms": -1}, "latency_ms: must be >= 0 (got -1)"),
    ({"ttft_ms": "95"}, "ttft_ms: must be a non-negative integer (got '95')"),
]


@pytest.mark.parametrize(("overrides", "reason"), BAD_RECORDS, ids=[r for _, r in BAD_RECORDS])
def test_each_bad_field_is_one_reject_naming_the_field(overrides, reason):
    assert only_reject(json.dumps(good(**overrides)).encode()).reason == reason


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b'{"task_id": "x" "y"}', "not valid JSON: Expecting ',' delimiter (column 17)"),
        (b"not json at all", "not valid JSON: Expecting value (column 1)"),
        (b'"just a string"', "record: must be a JSON object"),
        (b'{"task_id": "x", "usage": {"prompt_tokens": 1', "not valid JSON: the line is incomplete"),
        (
            b'{"n": ' + b"9" * 5000 + b"}",
            "not valid JSON: Exceeds the limit (4300 digits) for integer string",
        ),
        (b"[" * 100_000, "not valid JSON: maximum recursion depth exceeded"),
    ],
)
def test_malformed_json_is_one_reject(line, reason):
    assert only_reject(line).reason.startswith(reason)


def test_malformed_json_excerpt_never_shows_the_prompt():
    line = b'{"task_id": "x", "messages": [{"role": "user", "content": "' + SECRET.encode() + b'"}], oops}'
    rej = only_reject(line)
    assert rej.excerpt.startswith('{"task_id": "x", ')
    assert SECRET not in rej.excerpt


def test_strings_are_trimmed_and_status_aliases_accepted():
    out = sandwich(json.dumps(good(team="  netops  ", status="OK", request_id=" r-9 ")).encode())
    rec = out[1]
    assert isinstance(rec, UsageRecord)
    assert (rec.team, rec.status, rec.request_id, rec.idempotency_key) == ("netops", "success", "r-9", "r-9")
    failed = sandwich(json.dumps(good(status="Failed", usage=None)).encode())[1]
    assert failed.status == "failure" and failed.prompt_tokens == 0


def test_integral_floats_are_accepted_as_token_counts():
    rec = sandwich(json.dumps(good(usage=usage(prompt_tokens=900.0))).encode())[1]
    assert rec.prompt_tokens == 900 and isinstance(rec.prompt_tokens, int)


def test_error_type_is_shortened_not_rejected():
    rec = sandwich(json.dumps(good(status="failure", error_type="E" * 500)).encode())[1]
    assert rec.error_type == "E" * 200


def test_the_future_limit_is_relative_to_now():
    ts = NOW + timedelta(hours=23)
    rec = build_record(
        task_id="t",
        attempt=1,
        request_id=None,
        ts=ts,
        model="m",
        status="success",
        prompt_tokens=1,
        completion_tokens=1,
        now=NOW,
    )
    assert rec.ts == ts and rec.idempotency_key == "t#1"
    with pytest.raises(InvalidRecord, match="more than 1 day in the future"):
        build_record(
            task_id="t",
            attempt=1,
            request_id=None,
            ts=ts,
            model="m",
            status="success",
            prompt_tokens=1,
            completion_tokens=1,
            now=NOW - timedelta(hours=2),
        )


def test_timestamps_become_utc():
    assert parse_ts("2026-11-02T12:15:00+02:00", "ts") == datetime(2026, 11, 2, 10, 15, tzinfo=UTC)
    assert parse_ts("2026-11-02 10:15:00.5", "ts", naive_is_utc=True).tzinfo is UTC
    assert parse_ts(1793614500, "ts") == datetime(2026, 11, 2, 10, 15, tzinfo=UTC)


def test_excerpts_drop_content_but_keep_token_counts():
    obj = {
        "custom_id": "t",
        "usage": {"prompt_tokens": 3, "prompt_tokens_details": {"cached_tokens": 1}},
        "prompt_token_ids": [1, 2, 3],  # vLLM token ids are the prompt in another form
        "choices": [{"message": {"content": SECRET}}],
        "attributes": [{"key": "gen_ai.prompt.0.content", "value": {"stringValue": SECRET}}],
    }
    text = excerpt_of(obj)
    assert SECRET not in text and "[1, 2, 3]" not in text and "[1,2,3]" not in text
    assert '"prompt_tokens":3' in text and '"cached_tokens":1' in text
    raw = excerpt_of_raw('{"a":1,"usage":{"prompt_tokens":3},"input":"' + SECRET)
    assert raw == '{"a":1,"usage":{"prompt_tokens":3},"[redacted]'
