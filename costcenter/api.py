"""REST API of costs: thin views over ``costcenter.selectors`` (one view per endpoint).

Money is serialised as unrounded decimal strings; undefined ratios are null. Every row is scoped
to the caller's teams by the selectors.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from costcenter import selectors
from costcenter.api_auth import ReadScope

# Longest range per request, by bucket size: keeps every answer small and fast.
MAX_RANGE = {"hour": timedelta(days=31), "day": timedelta(days=3 * 366), "week": timedelta(days=3 * 366)}
DEFAULT_MAX_RANGE = timedelta(days=5 * 366)


@extend_schema_field(OpenApiTypes.STR)  # a date or a datetime: one string type in the schema
class MomentField(serializers.Field):
    """A date (midnight UTC) or an ISO 8601 datetime (UTC unless it has an offset)."""

    default_error_messages = {"invalid": "must be a date (YYYY-MM-DD) or an ISO 8601 datetime"}

    def to_internal_value(self, data):
        text = str(data).strip()
        try:
            if len(text) == 10:
                return datetime.combine(date.fromisoformat(text), time(0), tzinfo=UTC)
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            self.fail("invalid")
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)

    def to_representation(self, value):
        return value.isoformat()


@extend_schema_field(OpenApiTypes.STR)  # comma-separated values
class CommaListField(serializers.Field):
    def __init__(self, *, choices=None, **kwargs):
        self.choices = choices
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        values = tuple(value.strip() for value in str(data).split(",") if value.strip() or value == "")
        if self.choices is not None:
            unknown = [value for value in values if value not in self.choices]
            if unknown:
                raise serializers.ValidationError(
                    f"unknown value(s) {', '.join(unknown)}; expected some of {', '.join(self.choices)}"
                )
        return values

    def to_representation(self, value):
        return ",".join(value)


class RangeInput(serializers.Serializer):
    start = MomentField()
    end = MomentField()
    granularity = serializers.ChoiceField(choices=selectors.GRANULARITIES, default="total")

    def validate(self, attrs):
        if attrs["end"] <= attrs["start"]:
            raise serializers.ValidationError({"end": "must be after start"})
        limit = MAX_RANGE.get(attrs["granularity"], DEFAULT_MAX_RANGE)
        if attrs["end"] - attrs["start"] > limit:
            raise serializers.ValidationError(
                {"end": f"the range may span at most {limit.days} days at granularity {attrs['granularity']}"}
            )
        return attrs


class CostsInput(RangeInput):
    group_by = CommaListField(choices=tuple(selectors.GROUP_FIELDS), required=False, default=())
    team = CommaListField(required=False)
    model = CommaListField(required=False)
    workload = CommaListField(required=False)
    endpoint = CommaListField(required=False)
    vendor = CommaListField(required=False)
    pool = CommaListField(required=False)

    def validate_group_by(self, value):
        if len(set(value)) != len(value):
            raise serializers.ValidationError("a dimension appears twice")
        return value


MONEY = {"max_digits": 40, "decimal_places": 12, "coerce_to_string": True}


class CostRowOutput(serializers.Serializer):
    model = serializers.CharField(required=False, allow_null=True)
    vendor = serializers.CharField(required=False, allow_null=True)
    workload = serializers.CharField(required=False, allow_null=True)
    team = serializers.CharField(required=False, allow_null=True)
    endpoint = serializers.CharField(required=False, allow_null=True)
    pool = serializers.CharField(required=False, allow_null=True)
    period = serializers.DateTimeField(required=False)
    attempts = serializers.IntegerField()
    successful_attempts = serializers.IntegerField()
    failed_attempts = serializers.IntegerField()
    tasks = serializers.IntegerField()
    successful_tasks = serializers.IntegerField()
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    cached_tokens = serializers.IntegerField()
    reasoning_tokens = serializers.IntegerField()
    cost = serializers.DecimalField(**MONEY, allow_null=True)
    cost_complete = serializers.BooleanField()
    cost_per_successful_task = serializers.DecimalField(max_digits=60, decimal_places=24, allow_null=True)
    success_rate = serializers.FloatField(allow_null=True)
    attempt_success_rate = serializers.FloatField(allow_null=True)
    retry_rate = serializers.FloatField(allow_null=True)
    unpriced_attempts = serializers.IntegerField()
    unpriced_tokens = serializers.IntegerField()
    idle_cost = serializers.DecimalField(**MONEY, allow_null=True)


def _query(data) -> selectors.CostQuery:
    filters = tuple(
        (dimension, data[dimension])
        for dimension in selectors.GROUP_FIELDS
        if data.get(dimension) is not None
    )
    return selectors.CostQuery(data["start"], data["end"], data["group_by"], data["granularity"], filters)


def _plain(row: dict) -> dict:
    """Ratios as JSON numbers; Decimal sums stay Decimal for the serializer's string output."""
    for name in ("success_rate", "attempt_success_rate", "retry_rate"):
        if row.get(name) is not None:
            row[name] = float(row[name])
    return row


@extend_schema(
    parameters=[CostsInput],
    responses=CostRowOutput(many=True),
    description="Cost per successful task and its parts, grouped and bucketed (PRODUCT.md contract).",
)
class CostsApi(APIView):
    permission_classes = [ReadScope]

    def get(self, request):
        params = CostsInput(data=request.query_params)
        params.is_valid(raise_exception=True)
        rows = selectors.cost_rows(user=request.user, query=_query(params.validated_data))
        return Response(CostRowOutput([_plain(row) for row in rows], many=True).data)


class PoolCostInput(RangeInput):
    pass


class PoolCostOutput(serializers.Serializer):
    pool = serializers.CharField()
    vendor = serializers.CharField()
    period = serializers.DateTimeField(required=False)
    pool_cost = serializers.DecimalField(**MONEY, allow_null=True)
    allocated_cost = serializers.DecimalField(**MONEY, allow_null=True)
    unallocated_cost = serializers.DecimalField(**MONEY, allow_null=True)
    idle_cost = serializers.DecimalField(**MONEY, allow_null=True)
    energy_kwh = serializers.DecimalField(max_digits=30, decimal_places=9, allow_null=True)
    mean_utilisation = serializers.FloatField(allow_null=True)
    gpu_hours = serializers.IntegerField()
    hours = serializers.IntegerField()
    unpriced_hours = serializers.IntegerField()
    attempts = serializers.IntegerField()


@extend_schema(
    parameters=[PoolCostInput],
    responses=PoolCostOutput(many=True),
    description="Per GPU pool: pool, allocated, unallocated and idle cost, energy, utilisation, GPU-hours "
    "(org-wide viewers only: pools are shared by every team).",
)
class PoolCostsApi(APIView):
    permission_classes = [ReadScope]

    def get(self, request):
        params = PoolCostInput(data=request.query_params)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        rows = selectors.pool_cost_rows(
            user=request.user, start=data["start"], end=data["end"], granularity=data["granularity"]
        )
        for row in rows:
            if row["mean_utilisation"] is not None:
                row["mean_utilisation"] = float(row["mean_utilisation"])
        return Response(PoolCostOutput(rows, many=True).data)
