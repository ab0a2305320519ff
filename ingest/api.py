"""Usage over HTTP: ``POST /api/v1/usage/`` (canonical records) and ``POST /v1/traces`` (OTLP/HTTP).

Both views only read the body, hand the parsed records to ``ingest.services.ingest_items`` and
answer with the counts. Both need an ``ingest``-scoped API token (``Authorization: Bearer …``,
which is also what OTLP exporters send through ``OTEL_EXPORTER_OTLP_HEADERS``); the token's user
may write only their own teams' usage (org admins: any team). Sessions are not accepted here, so
CSRF does not apply: a browser cannot be tricked into posting usage.
"""

from __future__ import annotations

import io
import itertools
import json
import re
import zlib
from collections.abc import Iterator

from django.conf import settings
from django.http import HttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from costcenter.api_auth import BearerTokenAuthentication, IngestScope, TokenRateThrottle, writable_teams
from costcenter.varint import varint
from ingest.formats import canonical
from ingest.formats.otlp import parse_otlp_json, parse_otlp_protobuf
from ingest.models import SourceKind
from ingest.records import FileDefaults, Reject, UsageRecord
from ingest.services import IngestResult, ingest_items, source_for

SHOWN_REJECTS = 100
USAGE_MEDIA_TYPES = frozenset(
    {
        "application/json",
        "application/x-ndjson",
        "application/ndjson",
        "application/jsonl",
        "application/x-jsonlines",
    }
)
OTLP_PROTOBUF = "application/x-protobuf"
OTLP_JSON = "application/json"
SOURCE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$")
_READ_CHUNK = 64 * 1024
_UTF8_BOM = b"\xef\xbb\xbf"


class BodyError(Exception):
    """A request we refuse before ingesting anything: HTTP status and a message for the caller."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def max_body_bytes() -> int:
    return settings.INGEST_MAX_BODY_BYTES


def media_type(request: Request) -> str:
    return (request.content_type or "").split(";", 1)[0].strip().lower()


def read_body(request: Request, limit: int) -> bytes:
    """The request body, decompressed per ``Content-Encoding``; at most ``limit`` bytes either way.

    Read from the raw stream on purpose: ``HttpRequest.body`` refuses anything above
    ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (2.5 MB), far below a normal usage batch.
    """
    too_large = f"request body is larger than {limit:,} bytes (INGEST_MAX_BODY_BYTES); send smaller batches"
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise BodyError(400, "Content-Length is not a number") from None
    if declared > limit:
        raise BodyError(413, too_large)
    chunks: list[bytes] = []
    total = 0
    while chunk := request._request.read(_READ_CHUNK):
        total += len(chunk)
        if total > limit:
            raise BodyError(413, too_large)
        chunks.append(chunk)
    body = b"".join(chunks)
    encoding = request.META.get("HTTP_CONTENT_ENCODING", "").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding in ("gzip", "x-gzip"):
        wbits = 16 + zlib.MAX_WBITS
    elif encoding == "deflate":  # HTTP "deflate" is zlib-wrapped (what OTLP exporters send)
        wbits = zlib.MAX_WBITS
    else:
        raise BodyError(415, f"Content-Encoding {encoding!r} is not supported; use gzip, deflate or none")
    return _decompress(body, wbits, limit, encoding)


def _decompress(body: bytes, wbits: int, limit: int, encoding: str) -> bytes:
    out: list[bytes] = []
    size = 0
    data = body
    try:
        while data:  # gzip allows several concatenated members
            inflater = zlib.decompressobj(wbits)
            # max_length bounds the output, so a small "zip bomb" cannot exhaust memory.
            part = inflater.decompress(data, limit + 1 - size)
            size += len(part)
            if size > limit or inflater.unconsumed_tail:
                raise BodyError(
                    413, f"decompressed body is larger than {limit:,} bytes (INGEST_MAX_BODY_BYTES)"
                )
            if not inflater.eof:
                raise BodyError(400, f"{encoding} body is truncated")
            out.append(part)
            data = inflater.unused_data
    except zlib.error as exc:
        raise BodyError(400, f"{encoding} body is corrupt ({exc})") from None
    return b"".join(out)


def source_name(request: Request, default: str) -> str:
    name = request.query_params.get("source", default).strip()
    if not SOURCE_NAME.match(name):
        raise BodyError(
            400, "source: 1-100 letters, digits, '.', '_', ':' or '-', starting with a letter or digit"
        )
    return name


def origin(request: Request) -> str:
    """What the ingest run records as its origin: the endpoint and which token sent it."""
    token = request.auth
    return f"request {request.method} {request.path} by {request.user.get_username()} (token {token.prefix}…)"


def _ingest(request: Request, items: Iterator[UsageRecord | Reject], *, name: str, kind: str) -> IngestResult:
    return ingest_items(
        items,
        source=source_for(name, kind=kind),
        origin=origin(request),
        allowed_teams=writable_teams(request.user),
    )


class _IngestView(APIView):
    # Token auth only: no SessionAuthentication means no CSRF and no browser-session writes.
    authentication_classes = [BearerTokenAuthentication]
    permission_classes = [IngestScope]
    throttle_classes = [TokenRateThrottle]
    parser_classes: list = []  # the body is read raw, never through request.data


_USAGE_RESULT = inline_serializer(
    "UsageIngestResult",
    {
        "accepted": serializers.IntegerField(),
        "duplicate": serializers.IntegerField(),
        "rejected": serializers.IntegerField(),
        "rejects": inline_serializer(
            "UsageReject",
            {
                "location": serializers.CharField(),
                "reason": serializers.CharField(),
                "excerpt": serializers.CharField(),
            },
            many=True,
        ),
        "rejects_not_shown": serializers.IntegerField(),
        "reasons": serializers.DictField(child=serializers.IntegerField()),
    },
)


class UsageIngestView(_IngestView):
    """Canonical usage records as a JSON array or NDJSON; re-sending the same records adds nothing."""

    @extend_schema(
        summary="Send usage records",
        parameters=[OpenApiParameter("source", str, description="source name (default: api)")],
        request={"application/json": OpenApiTypes.OBJECT, "application/x-ndjson": OpenApiTypes.STR},
        responses={
            200: _USAGE_RESULT,
            400: OpenApiResponse(description="not JSON/NDJSON, bad gzip or bad source name"),
            401: OpenApiResponse(description="missing, invalid, expired or revoked token"),
            403: OpenApiResponse(description="the token lacks the ingest scope"),
            413: OpenApiResponse(description="body larger than INGEST_MAX_BODY_BYTES"),
            415: OpenApiResponse(description="unsupported Content-Type or Content-Encoding"),
        },
    )
    def post(self, request: Request) -> Response:
        try:
            if media_type(request) not in USAGE_MEDIA_TYPES:
                raise BodyError(
                    415,
                    f"Content-Type {request.content_type or '(none)'!r} is not supported; "
                    "send application/json (an array of records) or application/x-ndjson",
                )
            name = source_name(request, "api")
            body = read_body(request, max_body_bytes())
            start = body.removeprefix(_UTF8_BOM).lstrip()
            # Only a body that is not JSON at all is refused whole; a broken line inside an
            # array or NDJSON becomes a reject and the good records around it are kept.
            if start[:1] not in (b"[", b"{"):
                what = "empty" if not start else "not JSON or NDJSON"
                raise BodyError(400, f"request body is {what}: send a JSON array of records or NDJSON")
        except BodyError as exc:
            return Response({"detail": exc.message}, status=exc.status)
        items = canonical.iter_records(io.BytesIO(body), defaults=FileDefaults(), now=timezone.now())
        result = _ingest(request, items, name=name, kind=SourceKind.HTTP)
        shown = result.sample_rejects[:SHOWN_REJECTS]
        return Response(
            {
                "accepted": result.accepted,
                "duplicate": result.duplicate,
                "rejected": result.rejected,
                "rejects": [
                    {"location": r.location, "reason": r.reason, "excerpt": r.excerpt} for r in shown
                ],
                "rejects_not_shown": max(result.rejected - len(shown), 0),
                "reasons": {str(reason): count for reason, count in result.reasons.items()},
            }
        )


# gRPC status codes for the google.rpc.Status body of OTLP/HTTP error responses.
_GRPC_CODE = {400: 3, 401: 16, 403: 7, 404: 5, 413: 3, 415: 3, 429: 8}
_GRPC_UNKNOWN = 2
_ERROR_MESSAGE_REJECTS = 5


class OtlpTracesView(_IngestView):
    """OTLP/HTTP trace export (protobuf or JSON, optionally gzip), per the OTLP/HTTP spec.

    Success is 200 with an ``ExportTraceServiceResponse`` in the request's encoding, carrying
    ``partial_success`` when spans were rejected; a rejected span is never retried by the exporter,
    which is right because re-sending it would be rejected again. Spans that are not model calls
    (HTTP, DB, agent spans) are skipped silently and are not counted as rejected.
    """

    @extend_schema(
        summary="OTLP/HTTP trace export",
        parameters=[OpenApiParameter("source", str, description="source name (default: otlp)")],
        request={OTLP_PROTOBUF: OpenApiTypes.BINARY, OTLP_JSON: OpenApiTypes.OBJECT},
        responses={
            200: OpenApiResponse(description="ExportTraceServiceResponse (protobuf or JSON, as sent)"),
            400: OpenApiResponse(description="google.rpc.Status: unparseable body"),
            401: OpenApiResponse(description="google.rpc.Status: missing or bad token"),
            403: OpenApiResponse(description="google.rpc.Status: token lacks the ingest scope"),
            413: OpenApiResponse(description="google.rpc.Status: body too large"),
            415: OpenApiResponse(description="google.rpc.Status: unsupported Content-Type"),
        },
    )
    def post(self, request: Request) -> HttpResponse:
        kind = media_type(request)
        if kind not in (OTLP_PROTOBUF, OTLP_JSON):
            message = f"Content-Type {request.content_type or '(none)'!r} is not supported; use {OTLP_PROTOBUF} or {OTLP_JSON}"
            return otlp_status_response(415, message, protobuf=False)
        as_protobuf = kind == OTLP_PROTOBUF
        try:
            name = source_name(request, "otlp")
            body = read_body(request, max_body_bytes())
        except BodyError as exc:
            return otlp_status_response(exc.status, exc.message, protobuf=as_protobuf)
        parse = parse_otlp_protobuf if as_protobuf else parse_otlp_json
        items = parse(body, defaults=FileDefaults(), now=timezone.now())
        first = next(items, None)
        # The parsers report a body they cannot read at all as one reject located at "request"
        # (span-level problems are "span N of request"): that is the spec's 400, not a partial success.
        if isinstance(first, Reject) and first.location == "request":
            return otlp_status_response(400, first.reason, protobuf=as_protobuf)
        items = itertools.chain([first] if first is not None else [], items)
        result = _ingest(request, items, name=name, kind=SourceKind.OTLP)
        return otlp_success_response(result, protobuf=as_protobuf)

    def handle_exception(self, exc: Exception) -> HttpResponse:
        # Auth, permission and throttle errors also get the OTLP error body (google.rpc.Status),
        # keeping DRF's status code and its WWW-Authenticate / Retry-After headers.
        response = super().handle_exception(exc)
        data = getattr(response, "data", None)
        message = str(data.get("detail", "")) if isinstance(data, dict) else str(data or "")
        otlp = otlp_status_response(
            response.status_code, message, protobuf=media_type(self.request) == OTLP_PROTOBUF
        )
        for header in ("WWW-Authenticate", "Retry-After"):
            if header in response:
                otlp[header] = response[header]
        return otlp


def otlp_success_response(result: IngestResult, *, protobuf: bool) -> HttpResponse:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTracePartialSuccess,
        ExportTraceServiceResponse,
    )

    message = ExportTraceServiceResponse()
    if result.rejected:
        message.partial_success.CopyFrom(
            ExportTracePartialSuccess(rejected_spans=result.rejected, error_message=_rejects_summary(result))
        )
    if protobuf:
        return HttpResponse(message.SerializeToString(), content_type=OTLP_PROTOBUF)
    from google.protobuf.json_format import MessageToDict

    return HttpResponse(json.dumps(MessageToDict(message)), content_type=OTLP_JSON)


def _rejects_summary(result: IngestResult) -> str:
    shown = result.sample_rejects[:_ERROR_MESSAGE_REJECTS]
    parts = [f"{r.location}: {r.reason}" for r in shown]
    more = result.rejected - len(shown)
    tail = f"; and {more} more" if more > 0 else ""
    return f"{result.rejected} span(s) rejected: " + "; ".join(parts) + tail


def otlp_status_response(status: int, message: str, *, protobuf: bool) -> HttpResponse:
    """An OTLP/HTTP error: a ``google.rpc.Status`` body in the request's encoding."""
    code = _GRPC_CODE.get(status, _GRPC_UNKNOWN)
    if protobuf:
        return HttpResponse(_rpc_status_bytes(code, message), status=status, content_type=OTLP_PROTOBUF)
    return HttpResponse(json.dumps({"code": code, "message": message}), status=status, content_type=OTLP_JSON)


def _rpc_status_bytes(code: int, message: str) -> bytes:
    # google.rpc.Status is `int32 code = 1; string message = 2;`. Encoded by hand because its
    # generated class lives in googleapis-common-protos, which the server does not otherwise need.
    text = message.encode("utf-8")
    return b"\x08" + varint(code) + b"\x12" + varint(len(text)) + text
