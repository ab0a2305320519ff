"""Every usage format on real samples (vLLM run-batch, copied from shared/samples) and on fixtures
written to the documented shapes, with hand-checked field values. No Django, no database."""

from __future__ import annotations

import gzip
import io
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ingest.formats import iter_path_records, parser_for
from ingest.formats.detect import UnknownFormat, detect_format
from ingest.formats.otlp import parse_otlp_json, parse_otlp_protobuf
from ingest.records import FileDefaults, Reject, UsageRecord

DATA = Path(__file__).parent / "data"
NOW = datetime(2026, 11, 3, tzinfo=UTC)
NO_DEFAULTS = FileDefaults()
# Texts planted in the fixtures' prompt/output fields; they must never reach a record or excerpt.
SECRETS = ("PROMPT-SECRET-7f3a", "OUTPUT-SECRET-91bc")


def parse(fmt: str, data: bytes, defaults: FileDefaults = NO_DEFAULTS) -> list[UsageRecord | Reject]:
    return list(parser_for(fmt)(io.BytesIO(data), defaults=defaults, now=NOW))


def parse_file(
    name: str, fmt: str = "auto", defaults: FileDefaults = NO_DEFAULTS
) -> list[UsageRecord | Reject]:
    return list(iter_path_records(DATA / name, fmt, defaults=defaults, now=NOW))


def records(items: list[UsageRecord | Reject]) -> list[UsageRecord]:
    assert not [i for i in items if isinstance(i, Reject)], items
    return [i for i in items if isinstance(i, UsageRecord)]


# --- OpenAI batch / vLLM run-batch (real samples) ---------------------------------------------


def test_it_reads_the_real_vllm_run_batch_envelope_sample():
    out = records(parse_file("vllm-run-batch.output.jsonl", defaults=FileDefaults(endpoint="vllm-a10g")))
    assert [r.task_id for r in out] == ["request-1", "request-2"]
    first = out[0]
    assert first.idempotency_key == first.request_id == "vllm-batch-806ab64512e44071b37d3f7ccd291413"
    assert first.attempt == 1
    assert first.ts == datetime(2025, 1, 25, 23, 32, 24, tzinfo=UTC)  # body.created 1737847944
    assert first.model == "BAAI/bge-reranker-v2-m3"
    assert first.status == "success" and first.http_status == 200 and first.error_type is None
    # score endpoint: prompt only, prompt_tokens_details null
    assert (first.prompt_tokens, first.completion_tokens, first.cached_tokens) == (37, 0, 0)
    assert first.reasoning_tokens is None
    assert first.endpoint == "vllm-a10g" and first.team == "" and first.workload == ""
    assert out[1].request_id == "vllm-batch-73ce66379026482699f81974e14e1e99"


def test_it_reads_the_real_legacy_vllm_run_batch_sample():
    out = records(parse_file("vllm-run-batch-legacy.output.jsonl"))
    assert [(r.task_id, r.prompt_tokens, r.completion_tokens) for r in out] == [
        ("request-1", 25, 31),
        ("request-2", 27, 5),
    ]
    first = out[0]
    # no request_id in the legacy shape: the line's own id is the unique key
    assert first.idempotency_key == "vllm-383d1c59835645aeb2e07d004d62a826"
    assert first.ts == datetime(2024, 5, 13, 20, 48, 56, tzinfo=UTC)  # created 1715633336
    assert first.model == "meta-llama/Meta-Llama-3-8B-Instruct"
    assert first.status == "success" and first.http_status is None


def test_it_reads_openai_batch_output_with_usage_details():
    (rec,) = records(parse_file("openai-batch.output.jsonl"))
    assert (rec.task_id, rec.request_id, rec.model) == ("task-42", "req_9f2c1e", "gpt-4o-mini-2024-07-18")
    assert rec.ts == datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
    assert (rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens, rec.reasoning_tokens) == (
        22,
        2,
        0,
        0,
    )


def test_it_counts_batch_error_lines_as_failures_when_given_a_timestamp():
    completed = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
    defaults = FileDefaults(model="gpt-4o-mini", ts=completed, team="netops")
    http_error, expired = records(parse_file("openai-batch.errors.jsonl", defaults=defaults))
    assert (http_error.task_id, http_error.status, http_error.http_status) == ("task-43", "failure", 400)
    assert http_error.error_type == "invalid_value" and http_error.request_id == "req_4d5e6f"
    assert (expired.task_id, expired.status, expired.error_type) == ("task-44", "failure", "batch_expired")
    assert expired.request_id == "batch_req_d4e5f6" and expired.http_status is None
    assert expired.ts == completed and expired.model == "gpt-4o-mini" and expired.prompt_tokens == 0


def test_it_rejects_batch_error_lines_without_any_timestamp_and_says_what_to_pass():
    out = parse_file("openai-batch.errors.jsonl", defaults=FileDefaults(model="gpt-4o-mini"))
    assert all(isinstance(r, Reject) for r in out)
    assert out[0].location == "line 1"
    assert "completed_at" in out[0].reason
    for r in out:
        assert not any(s in r.excerpt for s in SECRETS)


def test_it_rejects_a_successful_batch_line_without_usage():
    line = b'{"id":"b1","custom_id":"t","response":{"status_code":200,"request_id":"r","body":{"created":1793610000,"model":"m"}},"error":null}\n'
    (rej,) = parse("openai-batch", line)
    assert rej.reason == "response.body.usage: required for a successful response"


# --- canonical ----------------------------------------------------------------------------------


def test_it_reads_canonical_jsonl():
    out = records(parse_file("canonical.jsonl", defaults=FileDefaults(team="fallback-team")))
    assert len(out) == 5  # the blank line is skipped
    t1, t2a, t2b, t3, t4 = out
    assert t1 == UsageRecord(
        idempotency_key="r-1",
        task_id="t-1",
        attempt=1,
        request_id="r-1",
        ts=datetime(2026, 11, 2, 10, 15, tzinfo=UTC),
        model="llama-3.1-70b-awq",
        model_version="2026-10-01",
        endpoint="vllm-h100-a",
        workload="summarize",
        team="netops",
        status="success",
        http_status=200,
        error_type=None,
        latency_ms=812,
        ttft_ms=95,
        queue_wait_ms=12,
        prompt_tokens=900,
        completion_tokens=120,
        cached_tokens=0,
        reasoning_tokens=None,
    )
    # failed attempt without usage: 0 tokens; +01:00 converted to UTC; key from task#attempt
    assert (t2a.idempotency_key, t2a.status, t2a.prompt_tokens) == ("t-2#1", "failure", 0)
    assert t2a.ts == datetime(2026, 11, 2, 9, 20, tzinfo=UTC)
    assert t2a.error_type == "rate_limit_exceeded" and t2a.http_status == 429
    assert (t2b.idempotency_key, t2b.cached_tokens, t2b.reasoning_tokens) == ("t-2#2", 1024, 128)
    # Responses API usage names; attempt omitted with a request_id; team from the file default
    assert (t3.prompt_tokens, t3.completion_tokens, t3.cached_tokens, t3.reasoning_tokens) == (
        500,
        700,
        100,
        512,
    )
    assert (t3.attempt, t3.team, t3.ts.microsecond) == (1, "fallback-team", 250000)
    # embeddings usage (no completion_tokens), unix-seconds ts, status derived from http_status 200
    assert (t4.completion_tokens, t4.status, t4.ts) == (
        0,
        "success",
        datetime(2026, 11, 2, 12, 0, tzinfo=UTC),
    )


def test_canonical_reads_a_json_array_body():
    body = b'[{"task_id":"a","attempt":1,"ts":"2026-11-02T10:00:00Z","model":"m","status":"failure"},\n 42]'
    rec, rej = parse("canonical", body)
    assert isinstance(rec, UsageRecord) and rec.task_id == "a"
    assert isinstance(rej, Reject) and rej.location == "item 2 of document at line 1"


# --- LiteLLM ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["litellm-spendlogs.csv", "litellm-spendlogs.jsonl", "litellm-spendlogs.json"]
)
def test_it_reads_litellm_spend_logs(name):
    out = records(parse_file(name, defaults=FileDefaults(team="fallback-team")))
    assert len(out) == 4
    explicit, streaming, failed, cached = out

    assert explicit.idempotency_key == explicit.request_id == "chatcmpl-6f1c2a9e-1b2d-4c3e-9f8a-7b6c5d4e3f21"
    assert (explicit.task_id, explicit.attempt, explicit.workload) == ("ticket-4711", 2, "summarize")
    assert explicit.team == "netops"  # metadata.user_api_key_team_alias beats the file default
    assert explicit.endpoint == "openai-gpt-4o-mini"  # model_id (deployment)
    assert explicit.model == "gpt-4o-mini-2024-07-18"
    assert explicit.ts == datetime(2026, 11, 2, 10, 15, 0, 123000, tzinfo=UTC)  # naive = UTC
    assert explicit.latency_ms == 1864 and explicit.ttft_ms is None  # non-streaming: no TTFT
    assert (explicit.prompt_tokens, explicit.completion_tokens) == (2048, 300)
    assert (explicit.cached_tokens, explicit.reasoning_tokens) == (1024, 0)  # from usage_object

    assert (streaming.task_id, streaming.team) == ("sess-42", "fallback-team")  # session is the task
    assert streaming.endpoint == "vllm-h100-a" and streaming.model == "meta-llama/Llama-3.1-70B-Instruct-AWQ"
    assert (streaming.latency_ms, streaming.ttft_ms) == (812, 95)  # endTime-startTime, completionStart-start

    assert (failed.status, failed.http_status, failed.error_type) == ("failure", 429, "RateLimitError")
    assert (failed.task_id, failed.attempt) == ("ticket-4711", 1)

    # answered from LiteLLM's cache: an attempt, but no model tokens to charge
    assert (cached.status, cached.prompt_tokens, cached.completion_tokens) == ("success", 0, 0)
    assert cached.task_id == cached.request_id


def test_litellm_file_default_endpoint_beats_the_guessed_deployment_id():
    (rec, *_) = records(parse_file("litellm-spendlogs.csv", defaults=FileDefaults(endpoint="gw-eu")))
    assert rec.endpoint == "gw-eu"


def test_litellm_csv_rejects_keep_line_numbers_and_hide_prompts():
    lines = (DATA / "litellm-spendlogs.csv").read_text().split("\n")
    # corrupt the streaming row, whose messages/response cells hold prompt and output text
    assert lines[2].startswith("chatcmpl-0a1b2c3d") and "PROMPT-SECRET" in lines[2]
    lines[2] = lines[2].replace(",1020,900,120,", ",1020,-900,120,")
    out = parse("litellm", "\n".join(lines).encode())
    assert len([r for r in out if isinstance(r, UsageRecord)]) == 3
    (rej,) = [r for r in out if isinstance(r, Reject)]
    assert rej.location == "line 3"
    assert rej.reason == "prompt_tokens: must be >= 0 (got -900)"
    assert "chatcmpl-0a1b2c3d" in rej.excerpt
    assert not any(s in rej.excerpt for s in SECRETS)


def test_litellm_csv_quoted_cells_may_span_lines():
    header = b"request_id,startTime,model,prompt_tokens,completion_tokens,user\n"
    row = b'r1,2026-11-02 10:00:00,m,-1,2,"two\nlines"\n'
    good = b"r2,2026-11-02 10:00:01,m,1,2,x\n"
    rej, rec = parse("litellm", header + row + good)
    assert (rej.location, rej.reason) == ("lines 2-3", "prompt_tokens: must be >= 0 (got -1)")
    assert isinstance(rec, UsageRecord) and rec.request_id == "r2"


def test_litellm_csv_without_required_columns_is_one_clear_reject():
    (rej,) = parse("litellm", b"request_id,model\nabc,gpt\n")
    assert rej.location == "line 1"
    assert rej.reason == "header: missing column(s) startTime, prompt_tokens, completion_tokens"


def test_litellm_csv_row_with_wrong_field_count():
    data = b"request_id,startTime,model,prompt_tokens,completion_tokens\nr1,2026-11-02 10:00:00,m,1\n"
    (rej,) = parse("litellm", data)
    assert (rej.location, rej.reason) == ("line 2", "row has 4 fields but the header has 5")


# --- OTLP ---------------------------------------------------------------------------------------


def test_it_reads_otlp_json_genai_spans_and_skips_non_model_spans():
    out = records(parse_file("otlp-genai.traces.jsonl", defaults=FileDefaults(team="fallback-team")))
    # line 1 has 4 spans: chat (kept), HTTP (skipped), invoke_agent (skipped), failed chat (kept)
    chat, failed, vllm = out
    assert chat.task_id == "ticket-9001" and chat.attempt == 1
    assert chat.idempotency_key == "5b8efff798038103d269b633813fc60c:eee19b7ec3c1b174"
    assert chat.ts == datetime(2026, 11, 2, 10, 15, tzinfo=UTC)  # 1793614500000000000 ns
    assert chat.latency_ms == 1250 and chat.ttft_ms == 231
    assert (chat.model, chat.model_version) == ("gpt-4o-mini", "gpt-4o-mini-2024-07-18")
    assert (chat.team, chat.workload, chat.endpoint) == ("support", "triage", "openai-gpt-4o-mini")
    assert (chat.prompt_tokens, chat.completion_tokens, chat.cached_tokens) == (120, 45, 64)
    assert chat.status == "success"

    assert (failed.task_id, failed.status, failed.error_type) == ("ticket-9002", "failure", "timeout")
    assert (failed.prompt_tokens, failed.latency_ms, failed.endpoint) == (0, 30000, "openai")

    # vLLM tracing: old names, base64 ids converted to hex, task falls back to the trace id
    assert vllm.task_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert vllm.request_id == "4bf92f3577b34da6a3ce929d0e0e4736:00f067aa0ba902b7"
    assert (vllm.prompt_tokens, vllm.completion_tokens) == (900, 120)
    assert (vllm.ttft_ms, vllm.queue_wait_ms, vllm.latency_ms) == (95, 12, 812)
    assert (vllm.model, vllm.model_version, vllm.endpoint) == (
        "meta-llama/Llama-3.1-70B-Instruct-AWQ",
        "",
        "vllm",
    )
    assert (vllm.team, vllm.workload) == ("fallback-team", "")


def test_it_reads_a_pretty_printed_otlp_document():
    (rec,) = records(parse_file("otlp-pretty.json"))
    assert rec.ts == datetime(2025, 1, 1, tzinfo=UTC)
    assert (rec.model, rec.prompt_tokens, rec.completion_tokens, rec.latency_ms) == ("gpt-4o", 120, 8, 1200)


def test_otlp_span_rejects_name_the_attribute_and_the_span():
    data = (DATA / "otlp-genai.traces.jsonl").read_bytes().replace(b'"intValue":"45"', b'"intValue":"-45"')
    out = parse("otlp-json", data)
    (rej,) = [r for r in out if isinstance(r, Reject)]
    assert rej.location == "span 1 of line 1"
    assert rej.reason == "gen_ai.usage.output_tokens: must be >= 0 (got -45)"
    assert "gen_ai.usage.input_tokens" in rej.excerpt or rej.excerpt.endswith("…")
    assert len([r for r in out if isinstance(r, UsageRecord)]) == 2


def test_otlp_http_json_body():
    body = (DATA / "otlp-pretty.json").read_bytes()
    (rec,) = records(list(parse_otlp_json(body, defaults=NO_DEFAULTS, now=NOW)))
    assert rec.prompt_tokens == 120
    (rej,) = list(parse_otlp_json(b"{not json", defaults=NO_DEFAULTS, now=NOW))
    assert rej.location == "request" and rej.reason.startswith("not valid JSON")


def _protobuf_request() -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import Status

    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.append(
        KeyValue(key="costcenter.team", value=AnyValue(string_value="netops"))
    )
    spans = resource_spans.scope_spans.add().spans
    ok = spans.add(
        trace_id=bytes.fromhex("5b8efff798038103d269b633813fc60c"),
        span_id=bytes.fromhex("eee19b7ec3c1b174"),
        name="chat gpt-4o-mini",
        kind=3,
        start_time_unix_nano=1793614500000000000,
        end_time_unix_nano=1793614500800000000,
    )
    for key, value in [
        ("gen_ai.operation.name", AnyValue(string_value="chat")),
        ("gen_ai.request.model", AnyValue(string_value="gpt-4o-mini")),
        ("gen_ai.usage.input_tokens", AnyValue(int_value=1200)),
        ("gen_ai.usage.output_tokens", AnyValue(int_value=80)),
        ("gen_ai.usage.reasoning.output_tokens", AnyValue(int_value=16)),
        ("gen_ai.input.messages", AnyValue(string_value="PROMPT-SECRET-7f3a")),
        ("costcenter.task_id", AnyValue(string_value="job-1")),
    ]:
        ok.attributes.append(KeyValue(key=key, value=value))
    failed = spans.add(
        trace_id=bytes.fromhex("5b8efff798038103d269b633813fc60c"),
        span_id=bytes.fromhex("0000000000000002"),
        name="chat gpt-4o-mini",
        start_time_unix_nano=1793614501000000000,
        end_time_unix_nano=1793614502000000000,
        status=Status(code=Status.STATUS_CODE_ERROR, message="boom"),
    )
    failed.attributes.append(KeyValue(key="gen_ai.operation.name", value=AnyValue(string_value="chat")))
    failed.attributes.append(KeyValue(key="gen_ai.request.model", value=AnyValue(string_value="gpt-4o-mini")))
    return request.SerializeToString()


def test_otlp_protobuf_body_goes_through_the_same_span_code():
    ok, failed = records(list(parse_otlp_protobuf(_protobuf_request(), defaults=NO_DEFAULTS, now=NOW)))
    assert ok.request_id == "5b8efff798038103d269b633813fc60c:eee19b7ec3c1b174"  # bytes -> hex
    assert (ok.task_id, ok.team, ok.model) == ("job-1", "netops", "gpt-4o-mini")
    assert (ok.prompt_tokens, ok.completion_tokens, ok.reasoning_tokens, ok.latency_ms) == (1200, 80, 16, 800)
    assert ok.ts == datetime(2026, 11, 2, 10, 15, tzinfo=UTC)
    assert (failed.status, failed.prompt_tokens, failed.task_id) == (
        "failure",
        0,
        "5b8efff798038103d269b633813fc60c",
    )


def test_otlp_protobuf_garbage_is_a_reject():
    (rej,) = list(parse_otlp_protobuf(b"\xff\xff\xff garbage", defaults=NO_DEFAULTS, now=NOW))
    assert rej.location == "request" and "protobuf" in rej.reason


# --- detection, gzip, path-level reading ------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("vllm-run-batch.output.jsonl", "openai-batch"),
        ("vllm-run-batch-legacy.output.jsonl", "openai-batch"),
        ("openai-batch.errors.jsonl", "openai-batch"),
        ("canonical.jsonl", "canonical"),
        ("litellm-spendlogs.csv", "litellm"),
        ("litellm-spendlogs.jsonl", "litellm"),
        ("litellm-spendlogs.json", "litellm"),
        ("otlp-genai.traces.jsonl", "otlp-json"),
        ("otlp-pretty.json", "otlp-json"),
    ],
)
def test_it_detects_every_fixture(name, expected):
    data = (DATA / name).read_bytes()
    assert detect_format(data[:4096], name) == expected
    assert detect_format(gzip.compress(data)[:2048], name + ".gz") == expected


def test_detection_failures_are_clear():
    with pytest.raises(UnknownFormat, match="none of the keys"):
        detect_format(b'{"hello": 1}\n', "x.jsonl")
    with pytest.raises(UnknownFormat, match="request_id and startTime"):
        detect_format(b"a,b,c\n1,2,3\n", "x.csv")
    assert detect_format(b"", "empty.csv") == "litellm"
    assert detect_format(b"  \n", "empty.jsonl") == "canonical"


def test_gzip_files_are_read_transparently(tmp_path):
    path = tmp_path / "usage.jsonl.gz"
    path.write_bytes(gzip.compress((DATA / "canonical.jsonl").read_bytes()))
    assert [r.task_id for r in records(list(iter_path_records(path, defaults=NO_DEFAULTS, now=NOW)))] == [
        "t-1",
        "t-2",
        "t-2",
        "t-3",
        "t-4",
    ]


# Usage-log fixtures only: tests/data also holds Prometheus exporter samples for the metrics tests.
USAGE_FIXTURES = sorted(p.name for p in DATA.iterdir() if not p.name.endswith(".txt"))


@pytest.mark.parametrize("name", USAGE_FIXTURES)
def test_no_fixture_leaks_prompt_or_output_text(name):
    defaults = FileDefaults(model="m", ts=datetime(2026, 11, 2, tzinfo=UTC))
    for item in parse_file(name, defaults=defaults):
        text = item.excerpt + item.reason if isinstance(item, Reject) else repr(item)
        assert not any(s in text for s in SECRETS)


def test_otlp_structure_problems_and_older_shapes():
    span = {
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": "eee19b7ec3c1b174",
        "startTimeUnixNano": 1793614500000000000,
        "attributes": [
            {"key": "gen_ai.system", "value": {"stringValue": "openai"}},
            {"key": "gen_ai.request.model", "value": {"stringValue": "gpt-4"}},
            {"key": "gen_ai.usage.prompt_tokens", "value": {"intValue": 10}},
        ],
        "status": {"code": "STATUS_CODE_ERROR"},  # enum name instead of 2: tolerated
    }
    # pre-1.0 OTLP: instrumentationLibrarySpans instead of scopeSpans
    old = {"resourceSpans": [{"instrumentationLibrarySpans": [{"spans": [span]}]}]}
    (rec,) = records(parse("otlp-json", json.dumps(old).encode()))
    assert (rec.status, rec.prompt_tokens, rec.completion_tokens, rec.endpoint) == (
        "failure",
        10,
        0,
        "openai",
    )
    assert rec.latency_ms is None  # no end time

    bad_id = json.loads(json.dumps(old))
    bad_id["resourceSpans"][0]["instrumentationLibrarySpans"][0]["spans"][0]["traceId"] = "xyz"
    (rej,) = parse("otlp-json", json.dumps(bad_id).encode())
    assert (rej.location, rej.reason) == (
        "span 1 of line 1",
        "traceId: must be 32 hex characters (got 'xyz')",
    )

    metrics = b'{"resourceMetrics": []}\n{}\n'
    (rej,) = parse("otlp-json", metrics)
    assert (rej.location, rej.reason) == ("line 1", "resourceSpans: missing (not an OTLP trace export)")


def test_litellm_bad_metadata_and_one_line_json_array():
    row = json.loads((DATA / "litellm-spendlogs.jsonl").read_text().splitlines()[0])
    broken = {**row, "metadata": "{not json"}
    rej, rec = parse("litellm", json.dumps([broken, row]).encode())
    assert (rej.location, rej.reason) == ("item 1 of line 1", "metadata: not valid JSON")
    assert isinstance(rec, UsageRecord) and rec.task_id == "ticket-4711"


def test_detection_survives_a_truncated_gzip(tmp_path):
    from ingest.formats import sniff

    path = tmp_path / "spend.csv.gz"
    whole = gzip.compress((DATA / "litellm-spendlogs.csv").read_bytes() * 20)
    path.write_bytes(whole[: len(whole) // 2])
    assert detect_format(sniff(path), path.name) == "litellm"
