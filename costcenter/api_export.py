"""BI exports: FinOps FOCUS 1.2 and cost rows as CSV, JSON, NDJSON or Parquet, streamed.

``GET /api/v1/export/focus/`` and ``GET /api/v1/export/costs/`` validate their input, refuse
ranges and sizes above the caps with a 400 *before* sending anything (a stream cannot change
its status later), then stream rows from a server-side cursor through ``costcenter.export``:
memory stays flat whatever the range. Rows are scoped to the caller's teams by the selectors;
requests are throttled per token like every API call.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal, localcontext

from django.conf import settings
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import APIException
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.views import APIView

from costcenter import export, focus, selectors
from costcenter.api import CommaListField, CostsInput, MomentField
from costcenter.api_auth import ReadScope

DEFAULT_MAX_ROWS = 25_000_000
# Longest range per export, by bucket size (hourly rows of a month are already many).
FOCUS_MAX_RANGE = {
    "hour": timedelta(days=31),
    "day": timedelta(days=3 * 366),
    "month": timedelta(days=5 * 366),
}


def max_rows() -> int:
    """The size cap: ``EXPORT_MAX_ROWS`` (default 25 M rows)."""
    return int(getattr(settings, "EXPORT_MAX_ROWS", DEFAULT_MAX_ROWS))


class ExportTooLarge(APIException):
    status_code = status.HTTP_400_BAD_REQUEST
    default_code = "export_too_large"


class FormatBlindNegotiation(BaseContentNegotiation):
    """Exports choose their format with ``format=``, not with DRF's renderer negotiation (which
    would answer 404 to ``format=csv``); errors are always JSON."""

    def select_parser(self, request, parsers):
        return parsers[0] if parsers else None

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class ErrorOutput(serializers.Serializer):
    detail = serializers.CharField(required=False)


def columns_serializer(
    name: str, columns: list[export.Column], *, optional=()
) -> type[serializers.Serializer]:
    """An output serializer describing one JSON row of an export (for the OpenAPI schema)."""
    fields = {}
    for column in columns:
        options = {"allow_null": column.nullable, "required": column.name not in optional}
        if column.description:
            options["help_text"] = column.description
        if column.type == "decimal":
            fields[column.name] = serializers.DecimalField(max_digits=40, decimal_places=12, **options)
        elif column.type == "datetime":
            fields[column.name] = serializers.DateTimeField(**options)
        elif column.type == "int":
            fields[column.name] = serializers.IntegerField(**options)
        elif column.type == "float":
            fields[column.name] = serializers.FloatField(**options)
        elif column.type == "bool":
            fields[column.name] = serializers.BooleanField(**options)
        elif column.type == "json":
            fields[column.name] = serializers.DictField(child=serializers.CharField(), **options)
        else:
            fields[column.name] = serializers.CharField(**options)
    return type(name, (serializers.Serializer,), fields)


def export_responses(row_serializer) -> dict:
    return {
        (200, "text/csv"): OpenApiResponse(
            OpenApiTypes.STR, description="CSV with a header row (format=csv)"
        ),
        (200, "application/json"): OpenApiResponse(row_serializer(many=True), description="format=json"),
        (200, "application/x-ndjson"): OpenApiResponse(
            OpenApiTypes.STR, description="one JSON object per line (format=jsonl or ndjson)"
        ),
        (200, "application/vnd.apache.parquet"): OpenApiResponse(
            OpenApiTypes.BINARY, description="Parquet (format=parquet)"
        ),
        400: OpenApiResponse(ErrorOutput, description="invalid input, range or size over the caps"),
    }


def _filename(kind: str, start: datetime, end: datetime, fmt: str) -> str:
    return f"{kind}-{start:%Y%m%dT%H%M}-{end:%Y%m%dT%H%M}.{export.EXTENSIONS[fmt]}"


def streamed(fmt: str, columns: list[export.Column], rows, filename: str) -> StreamingHttpResponse:
    response = StreamingHttpResponse(
        export.stream(fmt, columns, rows), content_type=export.CONTENT_TYPES[fmt]
    )
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["Cache-Control"] = "no-store"
    return response


def check_size(rows: int) -> None:
    limit = max_rows()
    if rows > limit:
        raise ExportTooLarge(
            f"the export would have {rows:,} rows, more than the limit of {limit:,}: "
            "shorten the range (start, end), choose a coarser granularity or filter"
        )


class ExportApi(APIView):
    permission_classes = [ReadScope]
    content_negotiation_class = FormatBlindNegotiation


FILTER_DIMENSIONS = ("team", "model", "workload", "endpoint", "vendor", "pool")


def _filters(data: dict) -> tuple:
    return tuple(
        (dimension, data[dimension]) for dimension in FILTER_DIMENSIONS if data.get(dimension) is not None
    )


class FocusExportInput(serializers.Serializer):
    start = MomentField(help_text="a date (midnight UTC) or an ISO 8601 datetime; inclusive")
    end = MomentField(help_text="exclusive")
    granularity = serializers.ChoiceField(choices=focus.GRANULARITIES, default="day")
    format = serializers.ChoiceField(choices=export.FORMATS, default="csv")
    team = CommaListField(required=False)
    model = CommaListField(required=False)
    workload = CommaListField(required=False)
    endpoint = CommaListField(required=False)
    vendor = CommaListField(required=False)
    pool = CommaListField(required=False)

    def validate(self, attrs):
        if attrs["end"] <= attrs["start"]:
            raise serializers.ValidationError({"end": "must be after start"})
        limit = FOCUS_MAX_RANGE[attrs["granularity"]]
        if attrs["end"] - attrs["start"] > limit:
            raise serializers.ValidationError(
                {"end": f"the range may span at most {limit.days} days at granularity {attrs['granularity']}"}
            )
        return attrs


FocusRowOutput = columns_serializer("FocusRowOutput", focus.COLUMNS)


@extend_schema(
    parameters=[FocusExportInput],
    responses=export_responses(FocusRowOutput),
    description="FinOps FOCUS 1.2 rows (token-priced usage, allocated GPU-pool cost and unallocated pool "
    "cost in one dataset) with x_ columns; BilledCost sums to total spend. Streamed.",
)
class FocusExportApi(ExportApi):
    def get(self, request):
        params = FocusExportInput(data=request.query_params)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        scope = {
            "user": request.user,
            "start": data["start"],
            "end": data["end"],
            "granularity": data["granularity"],
            "filters": _filters(data),
        }
        check_size(focus.usage_row_count(**scope))
        return streamed(
            data["format"],
            focus.COLUMNS,
            focus.focus_rows(**scope),
            _filename("focus", data["start"], data["end"], data["format"]),
        )


# The costs export: the columns of GET /api/v1/costs/, in a fixed order.
COST_KEY_COLUMNS = [export.Column(dimension, "string") for dimension in selectors.GROUP_FIELDS] + [
    export.Column("period", "datetime", False)
]
COST_VALUE_COLUMNS = [
    export.Column("attempts", "int", False),
    export.Column("successful_attempts", "int", False),
    export.Column("failed_attempts", "int", False),
    export.Column("tasks", "int", False),
    export.Column("successful_tasks", "int", False),
    export.Column("prompt_tokens", "int", False),
    export.Column("completion_tokens", "int", False),
    export.Column("cached_tokens", "int", False),
    export.Column("reasoning_tokens", "int", False),
    export.Column("cost", "decimal", True, "known cost; null when nothing is priced"),
    export.Column("cost_complete", "bool", False),
    export.Column("cost_per_successful_task", "decimal", True, "rounded half-even to 12 decimal places"),
    export.Column("success_rate", "float"),
    export.Column("attempt_success_rate", "float"),
    export.Column("retry_rate", "float"),
    export.Column("unpriced_attempts", "int", False),
    export.Column("unpriced_tokens", "int", False),
    export.Column("idle_cost", "decimal"),
]
CostExportRowOutput = columns_serializer(
    "CostExportRowOutput", COST_KEY_COLUMNS + COST_VALUE_COLUMNS, optional=[c.name for c in COST_KEY_COLUMNS]
)
_TWELVE_PLACES = Decimal(1).scaleb(-12)


class CostsExportInput(CostsInput):
    format = serializers.ChoiceField(choices=export.FORMATS, default="csv")


def _cost_row(row: dict) -> dict:
    per_task = row["cost_per_successful_task"]
    if per_task is not None:
        with localcontext(prec=80):
            row["cost_per_successful_task"] = per_task.quantize(_TWELVE_PLACES, rounding=ROUND_HALF_EVEN)
    for name in ("success_rate", "attempt_success_rate", "retry_rate"):
        if row[name] is not None:
            row[name] = float(row[name])
    return row


@extend_schema(
    parameters=[CostsExportInput],
    responses=export_responses(CostExportRowOutput),
    description="The rows of GET /api/v1/costs/ (same parameters) as a streamed file: the group keys "
    "asked for, period unless granularity=total, then the sums and ratios.",
)
class CostsExportApi(ExportApi):
    def get(self, request):
        params = CostsExportInput(data=request.query_params)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        query = selectors.CostQuery(
            data["start"], data["end"], data["group_by"], data["granularity"], _filters(data)
        )
        grouped = export.cost_row_queryset(user=request.user, query=query)
        if grouped is not None:
            check_size(grouped.count())
        by_name = {column.name: column for column in COST_KEY_COLUMNS}
        keys = [by_name[dimension] for dimension in query.group_by]
        if query.granularity != "total":
            keys.append(COST_KEY_COLUMNS[-1])
        rows = (_cost_row(row) for row in export.cost_rows_stream(user=request.user, query=query))
        return streamed(
            data["format"],
            keys + COST_VALUE_COLUMNS,
            rows,
            _filename("costs", data["start"], data["end"], data["format"]),
        )
