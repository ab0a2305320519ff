"""POST /v1/traces with the real OpenTelemetry SDK and OTLP/HTTP exporter, plus hand-made requests.

The live-server tests send spans over real HTTP exactly as an instrumented application would
(``OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer …"``) and check the stored attempts.
"""

from __future__ import annotations

import gzip
import json
import time

import pytest
import requests
from django.db import connection
from django.urls import reverse
from google.rpc.status_pb2 import Status as RpcStatus
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode
from rest_framework.test import APIClient

from costcenter.models import Team, TokenScope
from costcenter.tokens import api_token_create
from ingest.models import Attempt, IngestRun, Source, SourceKind

PROTOBUF = "application/x-protobuf"


@pytest.fixture(autouse=True)
def no_attempts_from_other_tests(django_db_setup, django_db_blocker):
    """``ingest_attempt`` is unmanaged, so transactional tests' flushes leave its rows behind."""

    def clear():
        with django_db_blocker.unblock(), connection.cursor() as cursor:
            cursor.execute("DELETE FROM ingest_attempt")

    clear()
    yield
    clear()


def test_the_url_is_named():
    assert reverse("cc-otlp-traces") == "/v1/traces"


# --- spans as an instrumented application makes them ------------------------------------------


def emit_genai_spans(provider: TracerProvider) -> None:
    """Three model calls (current and older attribute names, one failure) and one non-model span."""
    tracer = provider.get_tracer("opentelemetry.instrumentation.openai", "0.1")
    with tracer.start_as_current_span("handle request", kind=SpanKind.SERVER):  # not a model call
        with tracer.start_as_current_span(
            "chat gpt-4o-mini",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
                "gen_ai.usage.input_tokens": 120,
                "gen_ai.usage.output_tokens": 30,
                "gen_ai.usage.cache_read.input_tokens": 20,
                "costcenter.task_id": "ticket-42",
                "costcenter.team": "netops",
                "costcenter.workload": "summarize",
                "costcenter.endpoint": "openai-gpt-4o-mini",
            },
        ):
            pass
        with tracer.start_as_current_span(
            "llama-3.1-70b-instruct-awq",
            kind=SpanKind.CLIENT,
            attributes={  # vLLM-style older names: gen_ai.system, prompt/completion tokens
                "gen_ai.system": "vllm",
                "gen_ai.request.model": "llama-3.1-70b-instruct-awq",
                "gen_ai.usage.prompt_tokens": 900,
                "gen_ai.usage.completion_tokens": 210,
                "costcenter.task_id": "ticket-43",
                "costcenter.team": "netops",
                "costcenter.endpoint": "vllm-h100-a",
            },
        ):
            pass
        with tracer.start_as_current_span(
            "chat gpt-4o-mini",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": "gpt-4o-mini",
                "error.type": "timeout",
                "costcenter.task_id": "ticket-44",
                "costcenter.team": "netops",
            },
        ) as failed:
            failed.set_status(Status(StatusCode.ERROR, "upstream timed out"))


def ingest_token(user) -> str:
    return api_token_create(user=user, scope=TokenScope.INGEST, name="otel")[1]


def provider_exporting_to(exporter) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": "llm-gateway"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def captured_spans():
    memory = InMemorySpanExporter()
    emit_genai_spans(provider_exporting_to(memory))
    return memory.get_finished_spans()


def assert_the_three_attempts_are_stored():
    netops = Team.objects.get(slug="netops").pk
    rows = {row.task_id: row for row in Attempt.objects.all()}
    assert set(rows) == {"ticket-42", "ticket-43", "ticket-44"}
    current, older, failed = rows["ticket-42"], rows["ticket-43"], rows["ticket-44"]
    assert (current.prompt_tokens, current.completion_tokens, current.cached_tokens) == (120, 30, 20)
    assert (older.prompt_tokens, older.completion_tokens, older.cached_tokens) == (900, 210, 0)
    assert (failed.prompt_tokens, failed.completion_tokens) == (0, 0)
    assert current.succeeded and older.succeeded and not failed.succeeded
    assert {row.team_id for row in rows.values()} == {netops}
    assert current.latency_ms is not None and current.attempt == 1


@pytest.mark.django_db(transaction=True)
def test_the_official_exporter_sends_spans_that_are_stored(live_server, people):
    token = ingest_token(people["alice"])
    exporter = OTLPSpanExporter(
        endpoint=live_server.url + "/v1/traces", headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    provider = provider_exporting_to(exporter)
    emit_genai_spans(provider)
    assert provider.force_flush(10_000)
    provider.shutdown()
    assert_the_three_attempts_are_stored()
    source = Source.objects.get(name="otlp")
    assert source.kind == SourceKind.OTLP
    # SimpleSpanProcessor exports each ended span alone: four requests, one without a model call.
    assert IngestRun.objects.filter(source=source).count() == 4


@pytest.mark.django_db(transaction=True)
def test_configured_only_by_environment_variables(live_server, people, monkeypatch):
    # Exactly what the README tells users to set for an instrumented application.
    token = ingest_token(people["alice"])
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", live_server.url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"Authorization=Bearer%20{token}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    exporter = OTLPSpanExporter()
    assert exporter.export(captured_spans()) is SpanExportResult.SUCCESS
    assert_the_three_attempts_are_stored()


@pytest.mark.django_db(transaction=True)
def test_gzip_compression_and_resending_is_idempotent(live_server, people):
    token = ingest_token(people["alice"])
    exporter = OTLPSpanExporter(
        endpoint=live_server.url + "/v1/traces?source=gateway",
        headers={"Authorization": f"Bearer {token}"},
        compression=Compression.Gzip,
        timeout=10,
    )
    spans = captured_spans()
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    assert exporter.export(spans) is SpanExportResult.SUCCESS  # an exporter retry after a lost answer
    assert_the_three_attempts_are_stored()
    runs = IngestRun.objects.filter(source__name="gateway").order_by("started_at")
    assert [(run.accepted, run.duplicate, run.rejected) for run in runs] == [(3, 0, 0), (0, 3, 0)]


@pytest.mark.django_db(transaction=True)
def test_a_wrong_or_read_only_token_makes_the_export_fail(live_server, people):
    spans = captured_spans()
    _, read_only = api_token_create(user=people["alice"], scope=TokenScope.READ)
    for token in ("cc_not-a-real-token", read_only):
        exporter = OTLPSpanExporter(
            endpoint=live_server.url + "/v1/traces", headers={"Authorization": f"Bearer {token}"}, timeout=5
        )
        started = time.monotonic()
        assert exporter.export(spans) is SpanExportResult.FAILURE
        assert time.monotonic() - started < 4  # 401/403 are final: the exporter does not retry
    assert Attempt.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_a_json_body_made_by_hand(live_server, people):
    token = ingest_token(people["alice"])
    request = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "costcenter.team", "value": {"stringValue": "netops"}}]},
                "scopeSpans": [
                    {
                        "scope": {"name": "hand-made"},
                        "spans": [
                            {
                                "traceId": "5b8efff798038103d269b633813fc60c",
                                "spanId": "eee19b7ec3c1b174",
                                "name": "chat gpt-4o",
                                "kind": 3,
                                "startTimeUnixNano": "1793620800000000000",
                                "endTimeUnixNano": "1793620801200000000",
                                "attributes": [
                                    {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                                    {"key": "gen_ai.request.model", "value": {"stringValue": "gpt-4o"}},
                                    {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "120"}},
                                    {"key": "gen_ai.usage.output_tokens", "value": {"intValue": 15}},
                                ],
                                "status": {"code": 0},
                            },
                            {  # a span of a team alice does not belong to: rejected, reported
                                "traceId": "5b8efff798038103d269b633813fc60c",
                                "spanId": "eee19b7ec3c1b175",
                                "name": "chat gpt-4o",
                                "startTimeUnixNano": "1793620802000000000",
                                "attributes": [
                                    {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                                    {"key": "gen_ai.request.model", "value": {"stringValue": "gpt-4o"}},
                                    {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "7"}},
                                    {"key": "costcenter.team", "value": {"stringValue": "support"}},
                                ],
                            },
                        ],
                    }
                ],
            }
        ]
    }
    response = requests.post(
        live_server.url + "/v1/traces",
        data=gzip.compress(json.dumps(request).encode()),
        headers={
            "Content-Type": "application/json",
            "Content-Encoding": "gzip",
            "Authorization": f"Bearer {token}",
        },
        timeout=10,
    )
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/json"
    partial = response.json()["partialSuccess"]
    assert int(partial["rejectedSpans"]) == 1
    assert "record 2" in partial["errorMessage"] and "'support'" in partial["errorMessage"]
    row = Attempt.objects.get()
    assert (row.task_id, row.prompt_tokens, row.completion_tokens, row.latency_ms) == (
        "5b8efff798038103d269b633813fc60c",
        120,
        15,
        1200,
    )
    assert row.team_id == Team.objects.get(slug="netops").pk


# --- the OTLP/HTTP protocol details (test client, no live server) ------------------------------


@pytest.fixture
def otlp(people):
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {ingest_token(people['alice'])}")
    return api


def post(api: APIClient, body: bytes, content_type: str = PROTOBUF, **extra):
    return api.post("/v1/traces", body, content_type=content_type, **extra)


@pytest.mark.django_db
def test_protobuf_success_is_an_empty_export_response(otlp):
    body = encode_spans(captured_spans()).SerializeToString()
    response = post(otlp, body)
    assert response.status_code == 200 and response["Content-Type"] == PROTOBUF
    answer = ExportTraceServiceResponse.FromString(response.content)
    assert not answer.HasField("partial_success")
    assert Attempt.objects.count() == 3
    json_answer = post(otlp, b"{}", content_type="application/json")
    assert json_answer.status_code == 200 and json_answer.json() == {}


@pytest.mark.django_db
def test_rejected_spans_are_a_protobuf_partial_success(people):
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {ingest_token(people['bob'])}")  # bob: support only
    response = post(api, encode_spans(captured_spans()).SerializeToString())
    assert response.status_code == 200
    answer = ExportTraceServiceResponse.FromString(response.content)
    assert answer.partial_success.rejected_spans == 3
    assert answer.partial_success.error_message.startswith("3 span(s) rejected: ")
    assert "this token may write usage of teams support" in answer.partial_success.error_message
    assert Attempt.objects.count() == 0


@pytest.mark.django_db
def test_an_unparseable_body_is_400_with_a_status_message(otlp):
    response = post(otlp, b"\xff\xff\xff not protobuf")
    assert response.status_code == 400 and response["Content-Type"] == PROTOBUF
    status = RpcStatus.FromString(response.content)
    assert status.code == 3 and "not a valid OTLP ExportTraceServiceRequest" in status.message
    response = post(otlp, b"{not json", content_type="application/json")
    assert response.status_code == 400 and response.json()["message"].startswith("not valid JSON")
    response = post(otlp, b'{"resourceMetrics": []}', content_type="application/json")
    assert response.status_code == 400 and "resourceSpans" in response.json()["message"]
    response = post(otlp, b"\x1f\x8b broken", HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 400 and "gzip" in RpcStatus.FromString(response.content).message
    assert not IngestRun.objects.exists()


@pytest.mark.django_db
def test_other_content_types_are_415(otlp):
    response = post(otlp, b"a,b", content_type="text/csv")
    assert response.status_code == 415
    assert "application/x-protobuf" in response.json()["message"]


@pytest.mark.django_db
def test_auth_errors_use_the_otlp_error_body(people):
    body = encode_spans(captured_spans()).SerializeToString()
    anonymous = post(APIClient(), body)
    assert anonymous.status_code == 401 and anonymous["WWW-Authenticate"].startswith("Bearer")
    assert RpcStatus.FromString(anonymous.content).code == 16
    reader = APIClient()
    _, raw = api_token_create(user=people["alice"], scope=TokenScope.READ)
    reader.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    forbidden = post(reader, b"{}", content_type="application/json")
    assert forbidden.status_code == 403
    assert forbidden.json() == {
        "code": 7,
        "message": "Writing usage needs an API token with the 'ingest' scope.",
    }


@pytest.mark.django_db
def test_the_body_cap_applies(otlp, settings):
    settings.INGEST_MAX_BODY_BYTES = 100
    body = encode_spans(captured_spans()).SerializeToString()
    response = post(otlp, body)
    assert response.status_code == 413
    assert "INGEST_MAX_BODY_BYTES" in RpcStatus.FromString(response.content).message
