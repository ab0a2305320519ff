"""OpenTelemetry GenAI spans: OTLP/JSON files and OTLP/HTTP request bodies (JSON or protobuf).

A file is what the collector's file exporter writes: one `ExportTraceServiceRequest` per line
(`{"resourceSpans":[{"resource":{...},"scopeSpans":[{"spans":[...]}]}]}`); a single
pretty-printed request is accepted too. `parse_otlp_json` / `parse_otlp_protobuf` read one
`POST /v1/traces` body; the protobuf message is converted with `MessageToDict`, so both paths
share the same span code. Attribute values are `{key, value:{stringValue|intValue|doubleValue|
boolValue|arrayValue|kvlistValue|bytesValue}}`; int64 values may be JSON strings; trace/span ids
are hex (base64 from protobuf conversion or non-conforming exporters is converted).

Which spans count: one span = one attempt when it is a model call, i.e. `gen_ai.operation.name`
is chat/text_completion/generate_content/embeddings (or another non-agent operation carrying
token usage), or it has no operation name but carries `gen_ai.usage.*` tokens (vLLM's own
tracing). Agent and tool spans (invoke_agent, create_agent, execute_tool, retrieval) are
skipped even with usage, because they aggregate their child model calls and would count them
twice. Spans without any of this (HTTP, DB, app spans) are skipped silently, not rejected.

Mapping ("span, then resource" = the span attribute, else the resource attribute):
* task id = `costcenter.task_id` (span, then resource), else the trace id (32 hex);
  attempt = `costcenter.attempt` (span), else 1; idempotency key = request_id =
  `{traceId}:{spanId}` (OTLP's own span identity, always present).
* status = failure when the span status code is ERROR (2) or `error.type` is set, else
  success; error_type = `error.type`; http_status = `http.response.status_code`.
* team / workload / endpoint = `costcenter.team` / `costcenter.workload` /
  `costcenter.endpoint` (span, then resource), else the file default; for endpoint only, then
  the guesses `server.address`, `gen_ai.provider.name`, the older `gen_ai.system`. Resource
  attributes need no code in the instrumented app:
  `OTEL_RESOURCE_ATTRIBUTES=costcenter.team=netops,costcenter.workload=summarize`.
* model = `gen_ai.request.model`, else `gen_ai.response.model`, else the file default;
  model_version = `costcenter.model_version`, else `gen_ai.response.model` when it differs
  from the requested model (e.g. `gpt-4o-mini` served as `gpt-4o-mini-2024-07-18`).
* ts = `startTimeUnixNano`; latency = end - start; ttft = `gen_ai.response.time_to_first_chunk`
  or vLLM's `gen_ai.latency.time_to_first_token` (seconds); queue wait = vLLM's
  `gen_ai.latency.time_in_queue` (seconds).
* tokens = `gen_ai.usage.input_tokens` / `output_tokens` (older `prompt_tokens` /
  `completion_tokens`); cached = `gen_ai.usage.cache_read.input_tokens`; reasoning =
  `gen_ai.usage.reasoning.output_tokens`. A failed span without usage counts 0 tokens.
Content attributes (`gen_ai.input.messages`, `gen_ai.output.messages`, prompts in events) are
never read.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any, BinaryIO

from ingest.formats import Item, iter_json_values
from ingest.records import FileDefaults, Reject, UsageRecord
from ingest.validate import (
    InvalidRecord,
    as_int,
    build_record,
    excerpt_of,
    excerpt_of_raw,
    int_from_text,
    lenient_http_status,
    pick,
    reject,
    show,
    ts_from_unix_nanos,
)

# One file line is a whole export request (up to ~512 spans per batch by default), so lines may
# be far longer than a usage JSONL line; memory stays bounded by this limit.
MAX_REQUEST_BYTES = 64 * 1024 * 1024

MODEL_CALL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "embeddings"})
AGGREGATE_OPERATIONS = frozenset({"invoke_agent", "create_agent", "execute_tool", "retrieval"})
INPUT_TOKEN_KEYS = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")
OUTPUT_TOKEN_KEYS = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens")
CACHED_TOKEN_KEYS = ("gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.cache_read_input_tokens")
REASONING_TOKEN_KEYS = ("gen_ai.usage.reasoning.output_tokens", "gen_ai.usage.reasoning_tokens")
_STATUS_ERROR = 2


def iter_records(stream: BinaryIO, *, defaults: FileDefaults, now: datetime) -> Iterator[Item]:
    for item in iter_json_values(
        stream, max_line_bytes=MAX_REQUEST_BYTES, max_document_bytes=MAX_REQUEST_BYTES
    ):
        if isinstance(item, Reject):
            yield item
            continue
        location, value = item
        yield from records_from_request(value, where=location, defaults=defaults, now=now)


def parse_otlp_json(body: bytes, *, defaults: FileDefaults, now: datetime) -> Iterator[Item]:
    """Records of one OTLP/HTTP JSON body (`Content-Type: application/json`)."""
    try:
        request = json.loads(body)
    except (ValueError, RecursionError) as exc:
        yield reject("request", f"not valid JSON: {_short(exc)}", excerpt_of_raw(body[:400]))
        return
    yield from records_from_request(request, where="request", defaults=defaults, now=now)


def parse_otlp_protobuf(body: bytes, *, defaults: FileDefaults, now: datetime) -> Iterator[Item]:
    """Records of one OTLP/HTTP protobuf body (`Content-Type: application/x-protobuf`)."""
    # Imported here so that reading JSON files never needs protobuf at import time.
    from google.protobuf.json_format import MessageToDict
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    try:
        message = ExportTraceServiceRequest.FromString(body)
        # Integer enums match OTLP/JSON (status.code 2, kind 3); ids arrive base64 and are
        # converted in _span_id like those from non-conforming JSON exporters.
        request = MessageToDict(message, use_integers_for_enums=True)
    except (DecodeError, ValueError, RecursionError) as exc:
        yield reject("request", f"not a valid OTLP ExportTraceServiceRequest protobuf: {_short(exc)}")
        return
    yield from records_from_request(request, where="request", defaults=defaults, now=now)


def records_from_request(
    request: Any, *, where: str, defaults: FileDefaults, now: datetime
) -> Iterator[Item]:
    """Walk resourceSpans[].scopeSpans[].spans[]; locations are "span N of {where}"."""
    if not isinstance(request, Mapping):
        yield reject(
            where, "request: must be a JSON object (an ExportTraceServiceRequest)", excerpt_of(request)
        )
        return
    resource_spans = request.get("resourceSpans", request.get("resource_spans"))
    if resource_spans is None:
        if request:  # `{}` is a valid empty export; anything else without spans is not traces
            yield reject(where, "resourceSpans: missing (not an OTLP trace export)", excerpt_of(request))
        return
    if not isinstance(resource_spans, list):
        yield reject(where, "resourceSpans: must be a list", excerpt_of(request))
        return
    index = 0
    for resource_span in resource_spans:
        resource_span = resource_span if isinstance(resource_span, Mapping) else {}
        resource = resource_span.get("resource")
        resource_attrs = attributes(resource.get("attributes") if isinstance(resource, Mapping) else None)
        # instrumentationLibrarySpans is the pre-1.0 OTLP name of scopeSpans.
        scopes = resource_span.get("scopeSpans", resource_span.get("instrumentationLibrarySpans"))
        for scope in scopes if isinstance(scopes, list) else []:
            spans = scope.get("spans") if isinstance(scope, Mapping) else None
            for span in spans if isinstance(spans, list) else []:
                index += 1
                location = f"span {index} of {where}"
                try:
                    record = record_from_span(span, resource_attrs, defaults=defaults, now=now)
                except InvalidRecord as exc:
                    yield reject(location, exc.reason, excerpt_of(span))
                    continue
                except RecursionError:  # absurdly nested attribute values
                    yield reject(location, "attributes: nested too deeply")
                    continue
                if record is not None:
                    yield record


def record_from_span(
    span: Any, resource_attrs: Mapping[str, Any], *, defaults: FileDefaults, now: datetime
) -> UsageRecord | None:
    """One span -> UsageRecord, None for spans that are not model calls; raises InvalidRecord."""
    if not isinstance(span, Mapping):
        raise InvalidRecord("span: must be an object")
    attrs = attributes(span.get("attributes"))
    input_key = _first_key(attrs, INPUT_TOKEN_KEYS)
    output_key = _first_key(attrs, OUTPUT_TOKEN_KEYS)
    if not _is_model_call(attrs.get("gen_ai.operation.name"), has_usage=bool(input_key or output_key)):
        return None

    trace_id = _span_id(span.get("traceId"), "traceId", 16)
    span_id = _span_id(span.get("spanId"), "spanId", 8)
    start_ns = _nanos(span.get("startTimeUnixNano"), "startTimeUnixNano")
    end_value = span.get("endTimeUnixNano")
    end_ns = _nanos(end_value, "endTimeUnixNano") if end_value not in (None, "", 0, "0") else None
    failed = _status_code(span.get("status")) == _STATUS_ERROR or attrs.get("error.type") is not None
    if input_key is None and output_key is None and failed:
        tokens: dict[str, Any] = {"prompt_tokens": 0, "completion_tokens": 0}
    else:
        if input_key is None:
            raise InvalidRecord(f"{INPUT_TOKEN_KEYS[0]}: required on a successful model-call span")
        tokens = {
            "prompt_tokens": int_from_text(attrs.get(input_key)),
            "completion_tokens": int_from_text(attrs.get(output_key, 0)),
        }
    cached_key = _first_key(attrs, CACHED_TOKEN_KEYS)
    reasoning_key = _first_key(attrs, REASONING_TOKEN_KEYS)

    def both(key: str) -> Any:
        return pick(attrs.get(key), resource_attrs.get(key))

    request_model = attrs.get("gen_ai.request.model")
    response_model = attrs.get("gen_ai.response.model")
    version = pick(
        both("costcenter.model_version"),
        response_model if request_model is not None and response_model != request_model else None,
    )
    return build_record(
        task_id=pick(both("costcenter.task_id"), trace_id),
        attempt=int_from_text(pick(attrs.get("costcenter.attempt"), 1)),
        request_id=f"{trace_id}:{span_id}",
        ts=ts_from_unix_nanos(start_ns, "startTimeUnixNano"),
        model=pick(request_model, response_model, defaults.model),
        model_version=version,
        endpoint=pick(
            both("costcenter.endpoint"),
            defaults.endpoint,
            attrs.get("server.address"),
            both("gen_ai.provider.name"),
            both("gen_ai.system"),
        ),
        workload=pick(both("costcenter.workload"), defaults.workload),
        team=pick(both("costcenter.team"), defaults.team),
        status="failure" if failed else "success",
        http_status=lenient_http_status(attrs.get("http.response.status_code")),
        error_type=attrs.get("error.type"),
        latency_ms=(end_ns - start_ns) // 1_000_000 if end_ns is not None and end_ns >= start_ns else None,
        ttft_ms=_seconds_to_ms(
            attrs, ("gen_ai.response.time_to_first_chunk", "gen_ai.latency.time_to_first_token")
        ),
        queue_wait_ms=_seconds_to_ms(attrs, ("gen_ai.latency.time_in_queue",)),
        cached_tokens=int_from_text(attrs.get(cached_key, 0)) if cached_key else 0,
        reasoning_tokens=int_from_text(attrs.get(reasoning_key)) if reasoning_key else None,
        now=now,
        labels={
            "task_id": "costcenter.task_id",
            "attempt": "costcenter.attempt",
            "model": "gen_ai.request.model",
            "model_version": "costcenter.model_version",
            "endpoint": "costcenter.endpoint",
            "workload": "costcenter.workload",
            "team": "costcenter.team",
            "ts": "startTimeUnixNano",
            "http_status": "http.response.status_code",
            "error_type": "error.type",
            "prompt_tokens": input_key or INPUT_TOKEN_KEYS[0],
            "completion_tokens": output_key or OUTPUT_TOKEN_KEYS[0],
            "cached_tokens": cached_key or CACHED_TOKEN_KEYS[0],
            "reasoning_tokens": reasoning_key or REASONING_TOKEN_KEYS[0],
        },
        **tokens,
    )


def _is_model_call(operation: Any, *, has_usage: bool) -> bool:
    if not isinstance(operation, str):  # a malformed operation name is treated as absent
        operation = None
    if operation in AGGREGATE_OPERATIONS:
        return False
    if operation in MODEL_CALL_OPERATIONS:
        return True
    return has_usage  # unknown/new operation names or none at all: count only if tokens are reported


def _first_key(attrs: Mapping[str, Any], keys: tuple[str, ...]) -> str | None:
    return next((key for key in keys if attrs.get(key) is not None), None)


# --- OTLP value decoding -----------------------------------------------------------------------


def attributes(raw: Any) -> dict[str, Any]:
    """`[{key, value:{...}}]` -> {key: python value}; malformed entries are ignored (an attribute we
    cannot read is treated as absent, and required ones are then reported by name)."""
    result: dict[str, Any] = {}
    for entry in raw if isinstance(raw, list) else []:
        if isinstance(entry, Mapping) and isinstance(entry.get("key"), str):
            result[entry["key"]] = any_value(entry.get("value"))
    return result


def any_value(value: Any) -> Any:
    if not isinstance(value, Mapping):
        return None
    if "stringValue" in value:
        return value["stringValue"]
    if "intValue" in value:
        return int_from_text(value["intValue"])  # int64 is a JSON string in OTLP/JSON
    if "doubleValue" in value:
        return value["doubleValue"]
    if "boolValue" in value:
        return value["boolValue"]
    if "arrayValue" in value:
        values = value["arrayValue"].get("values") if isinstance(value["arrayValue"], Mapping) else None
        return [any_value(v) for v in values] if isinstance(values, list) else []
    if "kvlistValue" in value:
        values = value["kvlistValue"].get("values") if isinstance(value["kvlistValue"], Mapping) else None
        return attributes(values)
    return None  # bytesValue and empty values carry nothing we use


def _span_id(value: Any, label: str, size: int) -> str:
    """Hex id; base64 (protobuf JSON mapping, some exporters) is converted to hex."""
    if isinstance(value, str):
        text = value.strip()
        if len(text) == size * 2:
            try:
                bytes.fromhex(text)
            except ValueError:
                pass
            else:
                return text.lower()
        try:
            raw = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) == size:
            return raw.hex()
    raise InvalidRecord(f"{label}: must be {size * 2} hex characters (got {show(value)})")


def _nanos(value: Any, label: str) -> int:
    return as_int(int_from_text(value), label, maximum=2**63 - 1)


def _status_code(status: Any) -> Any:
    if not isinstance(status, Mapping):
        return 0
    code = status.get("code")
    # Lenient: some exporters write the enum name instead of the number.
    if code == "STATUS_CODE_ERROR":
        return _STATUS_ERROR
    return int_from_text(code)


def _seconds_to_ms(attrs: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    key = _first_key(attrs, keys)
    if key is None:
        return None
    value = attrs[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise InvalidRecord(f"{key}: must be a number of seconds (got {show(value)})")
    if not -1e9 < value < 1e9:
        raise InvalidRecord(f"{key}: {value} seconds is out of range")
    return round(value * 1000)


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 120 else text[:117] + "..."
