"""REST API of the catalog, prices, ingestion, raw attempts (drill-down), GPU aggregates, the
model × hardware matrix and the cost-change decomposition. One view per endpoint.

Who sees what:

* Catalog objects (models, pools, endpoints) and prices are org-wide reference data: every
  signed-in caller reads them (any token or session); only org admins write them, and only
  through a signed-in browser session (with CSRF). No API token writes the catalog: ``read``
  tokens read and ``ingest`` tokens write usage, so a leaked gateway token can never change
  prices. Price writes and deletes mark the affected hours for recomputation
  (``costcenter.reprice`` signals), like the admin and the YAML loader.
* Teams, raw attempts, the matrix and the cost change are scoped to the caller's teams (org-wide
  viewers see all); another team's object answers 404, exactly like a missing one.
* Ingestion sources and rejects, and GPU aggregates, describe shared infrastructure: org-wide
  viewers only (others get empty lists and 404s), as ``selectors.pool_cost_rows`` does.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import UTC, datetime, timedelta

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.db.models import Avg, Count, Max, Q, Sum
from django.db.models.functions import Trunc
from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_field
from drf_spectacular.views import SpectacularSwaggerSplitView
from rest_framework import serializers, status
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.response import Response
from rest_framework.views import APIView

from costcenter import cost_change, matrix, selectors
from costcenter.access import org_role, sees_all_teams, visible_teams
from costcenter.api import MONEY, CommaListField, MomentField
from costcenter.api_auth import ReadScope
from costcenter.api_export import ErrorOutput
from costcenter.models import (
    ApiToken,
    Endpoint,
    GpuHourPrice,
    LlmModel,
    OrgRole,
    Pool,
    Team,
    TokenPrice,
    Workload,
)

UTC_ERRORS = {400: OpenApiResponse(ErrorOutput, description="invalid input")}
NOT_FOUND = {404: OpenApiResponse(ErrorOutput, description="no such object, or not yours to see")}
# Object ids in paths are non-negative (the URL converter matches digits only).
ID = OpenApiParameter("id", {"type": "integer", "minimum": 0}, OpenApiParameter.PATH)


class AdminWrite(BasePermission):
    """Reads: any signed-in caller. Writes: org admins signed in with a session, never a token.

    Token scopes are ``read`` and ``ingest`` (usage); neither covers the price book, whoever owns
    the token — an org admin's gateway token that leaks must not be able to reprice history.
    Session writes go through DRF's CSRF check.
    """

    message = (
        "Changing the catalog needs an org admin signed in to the web app; "
        "API tokens only read it ('ingest' tokens write usage, not prices)."
    )

    def has_permission(self, request, view) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        if request.method in SAFE_METHODS:
            return True
        if isinstance(request.auth, ApiToken):
            return False
        return org_role(request.user) == OrgRole.ADMIN


class OrgWideRead(BasePermission):
    """Shared infrastructure: the rows exist for org-wide viewers; others see none (not 403)."""

    def has_permission(self, request, view) -> bool:
        return bool(request.user and request.user.is_authenticated)


def _save(instance):
    """Validate like the admin does (model ``clean``, constraints, overlaps), then save."""
    try:
        with transaction.atomic():
            instance.full_clean()
            instance.save()
    except DjangoValidationError as error:
        raise serializers.ValidationError(
            error.message_dict if hasattr(error, "error_dict") else {"non_field_errors": error.messages}
        ) from None
    return instance


def _object(queryset, **lookup):
    found = queryset.filter(**lookup).first()
    if found is None:
        raise Http404
    return found


# --- Teams ------------------------------------------------------------------------------------------
class TeamOutput(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    member_count = serializers.IntegerField()
    role = serializers.CharField(allow_null=True, help_text="your own role in the team, if any")


@extend_schema(responses=TeamOutput(many=True), description="The teams you may see.")
class TeamListApi(APIView):
    permission_classes = [ReadScope]

    def get(self, request):
        rows = selectors.team_rows(user=request.user)
        return Response(TeamOutput([row.__dict__ for row in rows], many=True).data)


class TeamDetailOutput(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    members = serializers.ListField(child=serializers.DictField(child=serializers.CharField()))


@extend_schema(
    parameters=[OpenApiParameter("slug", str, OpenApiParameter.PATH, pattern="^[-a-zA-Z0-9_]+$")],
    responses={200: TeamDetailOutput, **NOT_FOUND},
    description="A team you may see, with members.",
)
class TeamDetailApi(APIView):
    permission_classes = [ReadScope]

    def get(self, request, slug: str):
        found = selectors.team_detail(user=request.user, slug=slug)
        if found is None:
            raise Http404
        team, members = found
        data = {
            "slug": team.slug,
            "name": team.name,
            "members": [{"username": m.user.username, "role": m.role} for m in members],
        }
        return Response(TeamDetailOutput(data).data)


# --- Catalog objects ---------------------------------------------------------------------------------
class CatalogApi(APIView):
    """Base of the catalog endpoints: a queryset, an output and an input serializer."""

    permission_classes = [AdminWrite]
    model: type
    Output: type[serializers.Serializer]
    Input: type[serializers.Serializer]

    def queryset(self):
        return self.model.objects.all()


class CatalogListApi(CatalogApi):
    def get(self, request):
        return Response(self.Output(self.queryset(), many=True).data)

    def post(self, request):
        params = self.Input(data=request.data)
        params.is_valid(raise_exception=True)
        instance = _save(self.model(**params.validated_data))
        return Response(self.Output(instance).data, status=status.HTTP_201_CREATED)


class CatalogDetailApi(CatalogApi):
    def get(self, request, pk: int):
        return Response(self.Output(_object(self.queryset(), pk=pk)).data)

    def patch(self, request, pk: int):
        instance = _object(self.queryset(), pk=pk)
        params = self.Input(instance, data=request.data, partial=True)
        params.is_valid(raise_exception=True)
        for name, value in params.validated_data.items():
            setattr(instance, name, value)
        return Response(self.Output(_save(instance)).data)


class DeletableDetailApi(CatalogDetailApi):
    def delete(self, request, pk: int):
        _object(self.queryset(), pk=pk).delete()
        return Response(status=status.HTTP_204_NO_CONTENT)


WRITE_RULE = (
    "Org admins signed in to the web app (a session, with CSRF) only; API tokens cannot write the catalog."
)


def _list_schema(output, input_):
    return extend_schema(
        methods=["GET"], responses=output(many=True), description="Read: any signed-in caller."
    ), extend_schema(
        methods=["POST"],
        request=input_,
        responses={201: output, **UTC_ERRORS},
        description=WRITE_RULE,
    )


def _detail_schema(output, input_, *, delete=False):
    schemas = [
        extend_schema(methods=["GET"], parameters=[ID], responses={200: output, **NOT_FOUND}),
        extend_schema(
            methods=["PATCH"],
            parameters=[ID],
            request=input_,
            responses={200: output, **UTC_ERRORS, **NOT_FOUND},
            description=WRITE_RULE,
        ),
    ]
    if delete:
        schemas.append(
            extend_schema(
                methods=["DELETE"],
                parameters=[ID],
                responses={204: None, **NOT_FOUND},
                description=WRITE_RULE,
            )
        )
    return schemas


def _decorate(cls, schemas):
    for schema in schemas:
        cls = schema(cls)
    return cls


class ModelOutput(serializers.ModelSerializer):
    class Meta:
        model = LlmModel
        fields = ["id", "name", "version", "family", "auto_registered"]


class ModelInput(serializers.ModelSerializer):
    class Meta:
        model = LlmModel
        fields = ["name", "version", "family"]


class ModelListApi(CatalogListApi):
    model, Output, Input = LlmModel, ModelOutput, ModelInput


class ModelDetailApi(CatalogDetailApi):
    model, Output, Input = LlmModel, ModelOutput, ModelInput


@extend_schema_field({"type": "object", "additionalProperties": {"type": "string"}})
class LabelMatchField(serializers.JSONField):
    """Prometheus label matchers: ``{LABEL: REGEX}``."""

    def to_internal_value(self, data):
        import re

        value = super().to_internal_value(data)
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise serializers.ValidationError("must be an object of label name → regular expression")
        for label, pattern in value.items():
            if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", label):
                raise serializers.ValidationError(f"{label!r} is not a valid Prometheus label name")
            try:
                re.compile(pattern)
            except re.error as error:
                raise serializers.ValidationError(f"{label}: invalid regular expression ({error})") from None
        return value


class PoolOutput(serializers.ModelSerializer):
    endpoints = serializers.SlugRelatedField(slug_field="name", many=True, read_only=True)
    prometheus_match = LabelMatchField()

    class Meta:
        model = Pool
        fields = [
            "id",
            "name",
            "vendor",
            "gpu_model",
            "gpu_count",
            "kwh_price",
            "input_weight",
            "output_weight",
            "prometheus_match",
            "endpoints",
        ]


class PoolInput(serializers.ModelSerializer):
    prometheus_match = LabelMatchField(required=False)

    class Meta:
        model = Pool
        fields = [
            "name",
            "vendor",
            "gpu_model",
            "gpu_count",
            "kwh_price",
            "input_weight",
            "output_weight",
            "prometheus_match",
        ]


class PoolListApi(CatalogListApi):
    model, Output, Input = Pool, PoolOutput, PoolInput

    def queryset(self):
        return Pool.objects.prefetch_related("endpoints")


class PoolDetailApi(CatalogDetailApi):
    model, Output, Input = Pool, PoolOutput, PoolInput

    def queryset(self):
        return Pool.objects.prefetch_related("endpoints")


class EndpointOutput(serializers.ModelSerializer):
    pool = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    vendor = serializers.CharField(read_only=True)

    class Meta:
        model = Endpoint
        fields = ["id", "name", "kind", "provider", "pool", "vendor", "auto_registered"]


class EndpointInput(serializers.ModelSerializer):
    pool = serializers.SlugRelatedField(
        slug_field="name", queryset=Pool.objects.all(), allow_null=True, required=False
    )

    class Meta:
        model = Endpoint
        fields = ["name", "kind", "provider", "pool"]


class EndpointListApi(CatalogListApi):
    model, Output, Input = Endpoint, EndpointOutput, EndpointInput

    def queryset(self):
        return Endpoint.objects.select_related("pool")


class EndpointDetailApi(CatalogDetailApi):
    model, Output, Input = Endpoint, EndpointOutput, EndpointInput

    def queryset(self):
        return Endpoint.objects.select_related("pool")


class TokenPriceOutput(serializers.ModelSerializer):
    model_name = serializers.CharField(source="model.name", read_only=True)
    model_version = serializers.CharField(source="model.version", read_only=True)
    endpoint = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)

    class Meta:
        model = TokenPrice
        fields = [
            "id",
            "model",
            "model_name",
            "model_version",
            "endpoint",
            "effective_from",
            "effective_to",
            "input_per_mtok",
            "cached_input_per_mtok",
            "output_per_mtok",
        ]


class TokenPriceInput(serializers.ModelSerializer):
    endpoint = serializers.SlugRelatedField(
        slug_field="name", queryset=Endpoint.objects.all(), allow_null=True, required=False
    )

    class Meta:
        model = TokenPrice
        fields = [
            "model",
            "endpoint",
            "effective_from",
            "effective_to",
            "input_per_mtok",
            "cached_input_per_mtok",
            "output_per_mtok",
        ]
        validators = []  # overlaps and duplicates are checked by the model's clean(), with clear messages


class TokenPriceListApi(CatalogListApi):
    model, Output, Input = TokenPrice, TokenPriceOutput, TokenPriceInput

    def queryset(self):
        return TokenPrice.objects.select_related("model", "endpoint")


class TokenPriceDetailApi(DeletableDetailApi):
    model, Output, Input = TokenPrice, TokenPriceOutput, TokenPriceInput

    def queryset(self):
        return TokenPrice.objects.select_related("model", "endpoint")


class GpuHourPriceOutput(serializers.ModelSerializer):
    pool = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = GpuHourPrice
        fields = ["id", "pool", "effective_from", "effective_to", "gpu_hour_price"]


class GpuHourPriceInput(serializers.ModelSerializer):
    pool = serializers.SlugRelatedField(slug_field="name", queryset=Pool.objects.all())

    class Meta:
        model = GpuHourPrice
        fields = ["pool", "effective_from", "effective_to", "gpu_hour_price"]
        validators = []


class GpuHourPriceListApi(CatalogListApi):
    model, Output, Input = GpuHourPrice, GpuHourPriceOutput, GpuHourPriceInput

    def queryset(self):
        return GpuHourPrice.objects.select_related("pool")


class GpuHourPriceDetailApi(DeletableDetailApi):
    model, Output, Input = GpuHourPrice, GpuHourPriceOutput, GpuHourPriceInput

    def queryset(self):
        return GpuHourPrice.objects.select_related("pool")


for _cls in (ModelListApi, PoolListApi, EndpointListApi, TokenPriceListApi, GpuHourPriceListApi):
    _decorate(_cls, _list_schema(_cls.Output, _cls.Input))
for _cls in (ModelDetailApi, PoolDetailApi, EndpointDetailApi):
    _decorate(_cls, _detail_schema(_cls.Output, _cls.Input))
for _cls in (TokenPriceDetailApi, GpuHourPriceDetailApi):
    _decorate(_cls, _detail_schema(_cls.Output, _cls.Input, delete=True))


# --- Ingestion: sources and rejects (org-wide viewers) -----------------------------------------------
class SourceOutput(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    kind = serializers.CharField()
    path = serializers.CharField()
    options = serializers.DictField()
    created_at = serializers.DateTimeField()
    last_run_at = serializers.DateTimeField(allow_null=True)
    last_success_at = serializers.DateTimeField(allow_null=True)
    last_error = serializers.CharField(allow_blank=True)
    runs = serializers.IntegerField(source="run_count")
    accepted = serializers.IntegerField()
    duplicate = serializers.IntegerField()
    rejected = serializers.IntegerField()


def _sources(user):
    from ingest.models import Source

    if not sees_all_teams(user):
        return Source.objects.none()
    return Source.objects.annotate(
        run_count=Count("runs"),
        accepted=Sum("runs__accepted", default=0),
        duplicate=Sum("runs__duplicate", default=0),
        rejected=Sum("runs__rejected", default=0),
    ).order_by("name")


@extend_schema(
    responses=SourceOutput(many=True),
    description="Ingestion sources with their run totals (org-wide viewers; others get an empty list).",
)
class SourceListApi(APIView):
    permission_classes = [OrgWideRead]

    def get(self, request):
        return Response(SourceOutput(_sources(request.user), many=True).data)


@extend_schema(parameters=[ID], responses={200: SourceOutput, **NOT_FOUND})
class SourceDetailApi(APIView):
    permission_classes = [OrgWideRead]

    def get(self, request, pk: int):
        return Response(SourceOutput(_object(_sources(request.user), pk=pk)).data)


def _encode_cursor(values: list) -> str:
    return base64.urlsafe_b64encode(json.dumps(values).encode()).decode().rstrip("=")


def _decode_cursor(text: str, size: int) -> list:
    try:
        values = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (ValueError, binascii.Error):
        values = None
    if not isinstance(values, list) or len(values) != size:
        raise serializers.ValidationError(
            {"cursor": "invalid cursor: use the 'next' link of a previous page"}
        )
    return values


def _next_link(request, cursor: str | None) -> str | None:
    if cursor is None:
        return None
    query = request.query_params.copy()
    query["cursor"] = cursor
    return request.build_absolute_uri(request.path) + "?" + query.urlencode()


class PageInput(serializers.Serializer):
    cursor = serializers.CharField(required=False, help_text="from the 'next' link of the previous page")
    page_size = serializers.IntegerField(min_value=1, max_value=1000, default=100)


class RejectsInput(PageInput):
    source = serializers.CharField(required=False, help_text="a source name")


class RejectOutput(serializers.Serializer):
    id = serializers.IntegerField()
    source = serializers.CharField()
    run = serializers.IntegerField(allow_null=True)
    location = serializers.CharField()
    reason = serializers.CharField()
    excerpt = serializers.CharField(allow_blank=True)
    created_at = serializers.DateTimeField()


class RejectPageOutput(serializers.Serializer):
    next = serializers.CharField(allow_null=True)
    results = RejectOutput(many=True)


@extend_schema(
    parameters=[RejectsInput],
    responses={200: RejectPageOutput, **UTC_ERRORS},
    description="Rejected records, newest first, with cursor pagination (org-wide viewers).",
)
class RejectListApi(APIView):
    permission_classes = [OrgWideRead]

    def get(self, request):
        from ingest.models import RejectedRecord

        params = RejectsInput(data=request.query_params)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        rows = RejectedRecord.objects.none()
        if sees_all_teams(request.user):
            rows = RejectedRecord.objects.all()
        if data.get("source"):
            rows = rows.filter(source__name=data["source"])
        if data.get("cursor"):
            (after,) = _decode_cursor(data["cursor"], 1)
            if not isinstance(after, int):
                raise serializers.ValidationError({"cursor": "invalid cursor"})
            rows = rows.filter(id__lt=after)
        page = list(
            rows.order_by("-id").values(
                "id", "source__name", "run_id", "location", "reason", "excerpt", "created_at"
            )[: data["page_size"] + 1]
        )
        more = len(page) > data["page_size"]
        page = page[: data["page_size"]]
        results = [{**row, "source": row.pop("source__name"), "run": row.pop("run_id")} for row in page]
        cursor = _encode_cursor([page[-1]["id"]]) if more else None
        return Response(RejectPageOutput({"next": _next_link(request, cursor), "results": results}).data)


# --- Raw attempts (drill-down) ------------------------------------------------------------------------
ATTEMPTS_MAX_RANGE = timedelta(days=7)


class AttemptsInput(PageInput):
    start = MomentField(help_text="inclusive; the range may span at most 7 days")
    end = MomentField(help_text="exclusive")
    team = CommaListField(required=False, help_text="team slugs")
    workload = CommaListField(required=False)
    model = CommaListField(required=False, help_text="model names (any version)")
    endpoint = CommaListField(required=False)
    task_id = serializers.CharField(required=False, max_length=256)
    status = serializers.ChoiceField(choices=["success", "failure"], required=False)

    def validate(self, attrs):
        if attrs["end"] <= attrs["start"]:
            raise serializers.ValidationError({"end": "must be after start"})
        if attrs["end"] - attrs["start"] > ATTEMPTS_MAX_RANGE:
            raise serializers.ValidationError({"end": "the range may span at most 7 days"})
        return attrs


class AttemptOutput(serializers.Serializer):
    ts = serializers.DateTimeField()
    task_id = serializers.CharField()
    attempt = serializers.IntegerField()
    status = serializers.CharField()
    http_status = serializers.IntegerField(allow_null=True)
    error_type = serializers.CharField(allow_null=True)
    team = serializers.CharField(allow_null=True)
    workload = serializers.CharField(allow_null=True)
    model = serializers.CharField()
    model_version = serializers.CharField(allow_blank=True)
    endpoint = serializers.CharField(allow_null=True)
    source = serializers.CharField(allow_null=True)
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    cached_tokens = serializers.IntegerField()
    reasoning_tokens = serializers.IntegerField(allow_null=True)
    latency_ms = serializers.IntegerField(allow_null=True)
    ttft_ms = serializers.IntegerField(allow_null=True)
    queue_wait_ms = serializers.IntegerField(allow_null=True)


class AttemptPageOutput(serializers.Serializer):
    next = serializers.CharField(allow_null=True)
    results = AttemptOutput(many=True)


_ATTEMPT_FIELDS = (
    "ts",
    "source_id",
    "key_hash",
    "task_id",
    "attempt",
    "succeeded",
    "http_status",
    "error_type_id",
    "team_id",
    "workload_id",
    "model_id",
    "endpoint_id",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "reasoning_tokens",
    "latency_ms",
    "ttft_ms",
    "queue_wait_ms",
)


def _ids(rows, field: str, values) -> list[int]:
    rows = rows.objects.all() if isinstance(rows, type) else rows
    return list(rows.filter(**{f"{field}__in": values}).values_list("pk", flat=True))


def attempt_rows(*, user, data: dict) -> tuple[list[dict], list | None]:
    """One page of raw attempts the user may see, newest first, and the cursor of the next page.

    Keyset pagination on (ts, source, key) — the table's identity — so pages never skip or repeat
    rows however many arrive meanwhile, and each page is one indexed range read.
    """
    from costcenter.pg import hash64
    from ingest.models import Attempt, ErrorType, Source

    rows = Attempt.objects.filter(ts__gte=data["start"], ts__lt=data["end"])
    if not sees_all_teams(user):
        rows = rows.filter(team_id__in=list(visible_teams(user).values_list("pk", flat=True)))
    if data.get("team") is not None:
        rows = rows.filter(team_id__in=_ids(visible_teams(user), "slug", data["team"]))
    if data.get("workload") is not None:
        rows = rows.filter(workload_id__in=_ids(Workload, "name", data["workload"]))
    if data.get("model") is not None:
        rows = rows.filter(model_id__in=_ids(LlmModel, "name", data["model"]))
    if data.get("endpoint") is not None:
        rows = rows.filter(endpoint_id__in=_ids(Endpoint, "name", data["endpoint"]))
    if data.get("task_id"):
        rows = rows.filter(task_hash=hash64(data["task_id"]), task_id=data["task_id"])
    if data.get("status"):
        rows = rows.filter(succeeded=data["status"] == "success")
    if data.get("cursor"):
        ts_text, source_id, key_hash = _decode_cursor(data["cursor"], 3)
        try:
            ts = datetime.fromisoformat(ts_text)
            source_id, key_hash = int(source_id), int(key_hash)
        except (TypeError, ValueError):
            raise serializers.ValidationError({"cursor": "invalid cursor"}) from None
        rows = rows.filter(
            Q(ts__lt=ts)
            | Q(ts=ts, source_id__lt=source_id)
            | Q(ts=ts, source_id=source_id, key_hash__lt=key_hash)
        )
    size = data["page_size"]
    page = list(rows.order_by("-ts", "-source_id", "-key_hash").values(*_ATTEMPT_FIELDS)[: size + 1])
    more = len(page) > size
    page = page[:size]

    def names(model, field: str, attribute: str) -> dict:
        wanted = {row[field] for row in page if row[field] is not None}
        return dict(model.objects.filter(pk__in=wanted).values_list("pk", attribute)) if wanted else {}

    teams, workloads = names(Team, "team_id", "slug"), names(Workload, "workload_id", "name")
    endpoints, errors = names(Endpoint, "endpoint_id", "name"), names(ErrorType, "error_type_id", "name")
    sources = names(Source, "source_id", "name")
    wanted_models = {row["model_id"] for row in page}
    models = {
        pk: (name, version)
        for pk, name, version in LlmModel.objects.filter(pk__in=wanted_models).values_list(
            "pk", "name", "version"
        )
    }
    results = []
    for row in page:
        model_name, version = models.get(row["model_id"], ("?", ""))
        results.append(
            {
                "ts": row["ts"],
                "task_id": row["task_id"],
                "attempt": row["attempt"],
                "status": "success" if row["succeeded"] else "failure",
                "http_status": row["http_status"],
                "error_type": errors.get(row["error_type_id"]),
                "team": teams.get(row["team_id"]),
                "workload": workloads.get(row["workload_id"]),
                "model": model_name,
                "model_version": version,
                "endpoint": endpoints.get(row["endpoint_id"]),
                "source": sources.get(row["source_id"]),
                **{
                    name: row[name]
                    for name in (
                        "prompt_tokens",
                        "completion_tokens",
                        "cached_tokens",
                        "reasoning_tokens",
                        "latency_ms",
                        "ttft_ms",
                        "queue_wait_ms",
                    )
                },
            }
        )
    cursor = None
    if more:
        last = page[-1]
        cursor = [last["ts"].isoformat(), last["source_id"], last["key_hash"]]
    return results, cursor


@extend_schema(
    parameters=[AttemptsInput],
    responses={200: AttemptPageOutput, **UTC_ERRORS},
    description="Raw attempts for drill-down, newest first, scoped to your teams; cursor pagination "
    "(follow 'next'). Never a prompt or an output: only ids, counts and timings.",
)
class AttemptListApi(APIView):
    permission_classes = [ReadScope]

    def get(self, request):
        params = AttemptsInput(data=request.query_params)
        params.is_valid(raise_exception=True)
        results, cursor = attempt_rows(user=request.user, data=params.validated_data)
        next_link = _next_link(request, _encode_cursor(cursor) if cursor else None)
        return Response(AttemptPageOutput({"next": next_link, "results": results}).data)


# --- GPU aggregates (org-wide viewers) ----------------------------------------------------------------
class GpuInput(serializers.Serializer):
    start = MomentField()
    end = MomentField()
    granularity = serializers.ChoiceField(choices=["hour", "day", "total"], default="total")
    pool = CommaListField(required=False)

    def validate(self, attrs):
        if attrs["end"] <= attrs["start"]:
            raise serializers.ValidationError({"end": "must be after start"})
        limit = timedelta(days=31) if attrs["granularity"] == "hour" else timedelta(days=3 * 366)
        if attrs["end"] - attrs["start"] > limit:
            raise serializers.ValidationError({"end": f"the range may span at most {limit.days} days"})
        return attrs


class GpuPoolOutput(serializers.Serializer):
    pool = serializers.CharField()
    vendor = serializers.CharField()
    period = serializers.DateTimeField(required=False)
    gpu_hours = serializers.IntegerField()
    mean_utilisation = serializers.FloatField(allow_null=True, help_text="0–1; mean over the pool's GPUs")
    energy_kwh = serializers.DecimalField(max_digits=30, decimal_places=9, allow_null=True)
    mean_memory_used_mib = serializers.FloatField(allow_null=True)
    mean_memory_total_mib = serializers.FloatField(allow_null=True)
    max_memory_used_mib = serializers.FloatField(allow_null=True)
    pool_cost = serializers.DecimalField(**MONEY, allow_null=True)
    idle_cost = serializers.DecimalField(**MONEY, allow_null=True)
    hours_with_metrics = serializers.IntegerField()


def gpu_pool_rows(*, user, start: datetime, end: datetime, granularity: str, pools=None) -> list[dict]:
    """Per pool (and period): GPU-hours, utilisation, energy, memory and cost from the pool-hour facts.

    Pools are shared by every team, so only org-wide viewers get rows (like ``pool_cost_rows``).
    """
    from costcenter.models import PoolHour

    if not sees_all_teams(user):
        return []
    rows = PoolHour.objects.filter(hour__gte=start, hour__lt=end)
    if pools is not None:
        rows = rows.filter(pool__name__in=pools)
    keys = ["pool__name", "pool__vendor"]
    if granularity != "total":
        rows = rows.annotate(period=Trunc("hour", granularity, tzinfo=UTC))
        keys.append("period")
    aggregated = (
        rows.values(*keys)
        .annotate(
            agg_gpu_hours=Sum("gpu_count"),
            agg_mean_utilisation=Avg("mean_utilisation"),
            agg_energy_kwh=Sum("energy_kwh"),
            agg_mean_memory_used_mib=Avg("memory_used_mib"),
            agg_mean_memory_total_mib=Avg("memory_total_mib"),
            agg_max_memory_used_mib=Max("memory_used_mib"),
            agg_pool_cost=Sum("pool_cost"),
            agg_idle_cost=Sum("idle_cost"),
            agg_hours_with_metrics=Count("id", filter=Q(mean_utilisation__isnull=False)),
        )
        .order_by(*keys)
    )
    # Aggregates get their own names: Django refuses an annotation named like a field it reads.
    result = []
    for row in aggregated:
        out = {"pool": row["pool__name"], "vendor": row["pool__vendor"]}
        if "period" in row:
            out["period"] = row["period"]
        out.update({name[4:]: value for name, value in row.items() if name.startswith("agg_")})
        if out["mean_utilisation"] is not None:
            out["mean_utilisation"] = float(out["mean_utilisation"])
        result.append(out)
    return result


@extend_schema(
    parameters=[GpuInput],
    responses={200: GpuPoolOutput(many=True), **UTC_ERRORS},
    description="GPU aggregates per pool: GPU-hours, mean utilisation, energy, memory, pool and idle cost "
    "(org-wide viewers; pools are shared by every team).",
)
class GpuPoolListApi(APIView):
    permission_classes = [OrgWideRead]

    def get(self, request):
        params = GpuInput(data=request.query_params)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        rows = gpu_pool_rows(
            user=request.user,
            start=data["start"],
            end=data["end"],
            granularity=data["granularity"],
            pools=data.get("pool"),
        )
        return Response(GpuPoolOutput(rows, many=True).data)


# --- The model × hardware matrix ------------------------------------------------------------------------
class MatrixInput(serializers.Serializer):
    start = MomentField()
    end = MomentField()
    workload = serializers.CharField(required=False, help_text="one workload; all when omitted")

    def validate(self, attrs):
        if attrs["end"] <= attrs["start"]:
            raise serializers.ValidationError({"end": "must be after start"})
        if attrs["end"] - attrs["start"] > timedelta(days=3 * 366):
            raise serializers.ValidationError({"end": "the range may span at most 1098 days"})
        return attrs


class MatrixRowOutput(serializers.Serializer):
    model = serializers.CharField()
    pool = serializers.CharField(allow_null=True)
    vendor = serializers.CharField(allow_null=True)
    endpoint = serializers.CharField(allow_null=True)
    provider = serializers.CharField(allow_null=True)
    attempts = serializers.IntegerField()
    successful_attempts = serializers.IntegerField()
    failed_attempts = serializers.IntegerField()
    tasks = serializers.IntegerField()
    successful_tasks = serializers.IntegerField()
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    success_rate = serializers.FloatField(allow_null=True)
    attempt_failure_rate = serializers.FloatField(allow_null=True)
    retry_rate = serializers.FloatField(allow_null=True)
    ttft_p50_ms = serializers.FloatField(allow_null=True)
    ttft_p95_ms = serializers.FloatField(allow_null=True)
    latency_p95_ms = serializers.FloatField(allow_null=True)
    output_tokens_per_s_p50 = serializers.FloatField(allow_null=True)
    mean_gpu_utilisation = serializers.FloatField(allow_null=True)
    mean_memory_used_mib = serializers.FloatField(allow_null=True)
    mean_memory_total_mib = serializers.FloatField(allow_null=True)
    cost = serializers.DecimalField(**MONEY, allow_null=True)
    cost_per_1m_input_tokens = serializers.DecimalField(max_digits=60, decimal_places=24, allow_null=True)
    cost_per_1m_output_tokens = serializers.DecimalField(max_digits=60, decimal_places=24, allow_null=True)
    cost_per_successful_task = serializers.DecimalField(max_digits=60, decimal_places=24, allow_null=True)
    cost_complete = serializers.BooleanField()
    unpriced_attempts = serializers.IntegerField()
    unpriced_tokens = serializers.IntegerField()


@extend_schema(
    parameters=[MatrixInput],
    responses={200: MatrixRowOutput(many=True), **UTC_ERRORS},
    description="The model × hardware evaluation matrix (docs/cost-change.md), scoped to your teams.",
)
class MatrixApi(APIView):
    permission_classes = [ReadScope]

    def get(self, request):
        params = MatrixInput(data=request.query_params)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        rows = matrix.evaluation_matrix(
            user=request.user, workload=data.get("workload"), start=data["start"], end=data["end"]
        )
        return Response(MatrixRowOutput([row.__dict__ for row in rows], many=True).data)


# --- The cost-change decomposition ---------------------------------------------------------------------
class CostChangeInput(serializers.Serializer):
    before_start = MomentField()
    before_end = MomentField()
    after_start = MomentField()
    after_end = MomentField()
    team = CommaListField(required=False)
    model = CommaListField(required=False)
    workload = CommaListField(required=False)
    endpoint = CommaListField(required=False)
    vendor = CommaListField(required=False)
    pool = CommaListField(required=False)

    def validate(self, attrs):
        for period in ("before", "after"):
            start, end = attrs[f"{period}_start"], attrs[f"{period}_end"]
            if end <= start:
                raise serializers.ValidationError({f"{period}_end": f"must be after {period}_start"})
            if end - start > timedelta(days=366):
                raise serializers.ValidationError({f"{period}_end": "a period may span at most 366 days"})
        return attrs


class EffectOutput(serializers.Serializer):
    name = serializers.CharField()
    label = serializers.CharField()
    amount = serializers.DecimalField(**MONEY)


class ModelChangeOutput(serializers.Serializer):
    model = serializers.CharField()
    before_cost = serializers.DecimalField(**MONEY)
    after_cost = serializers.DecimalField(**MONEY)
    change = serializers.DecimalField(**MONEY)
    effects = EffectOutput(many=True)


class CostChangeOutput(serializers.Serializer):
    before_spend = serializers.DecimalField(**MONEY)
    after_spend = serializers.DecimalField(**MONEY)
    change = serializers.DecimalField(**MONEY)
    change_ratio = serializers.FloatField(allow_null=True)
    effects = EffectOutput(many=True, help_text="they add up to change exactly")
    models = ModelChangeOutput(many=True)
    before_successful_tasks = serializers.IntegerField()
    after_successful_tasks = serializers.IntegerField()
    before_unallocated = serializers.DecimalField(**MONEY)
    after_unallocated = serializers.DecimalField(**MONEY)
    unallocated_included = serializers.BooleanField()
    unpriced_before_attempts = serializers.IntegerField()
    unpriced_after_attempts = serializers.IntegerField()
    complete = serializers.BooleanField()
    explanation = serializers.CharField()
    method = serializers.CharField()


@extend_schema(
    parameters=[CostChangeInput],
    responses={200: CostChangeOutput, **UTC_ERRORS},
    description="Why spend moved between two periods: an exact additive decomposition (docs/cost-change.md).",
)
class CostChangeApi(APIView):
    permission_classes = [ReadScope]

    def get(self, request):
        params = CostChangeInput(data=request.query_params)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        filters = tuple(
            (dimension, data[dimension])
            for dimension in ("team", "model", "workload", "endpoint", "vendor", "pool")
            if data.get(dimension) is not None
        )
        result = cost_change.cost_change(
            user=request.user,
            before=selectors.CostQuery(data["before_start"], data["before_end"], (), "total", filters),
            after=selectors.CostQuery(data["after_start"], data["after_end"], (), "total", filters),
        )
        effects = [e.__dict__ for e in result.effects]
        out = {
            **{
                name: getattr(result, name)
                for name in (
                    "before_spend",
                    "after_spend",
                    "change",
                    "change_ratio",
                    "before_successful_tasks",
                    "after_successful_tasks",
                    "before_unallocated",
                    "after_unallocated",
                    "unallocated_included",
                    "explanation",
                    "method",
                    "complete",
                )
            },
            "effects": effects,
            "models": [
                {
                    "model": m.model,
                    "before_cost": m.before.cost,
                    "after_cost": m.after.cost,
                    "change": m.change,
                    "effects": [e.__dict__ for e in m.effects],
                }
                for m in result.models
            ],
            "unpriced_before_attempts": result.unpriced_before.attempts,
            "unpriced_after_attempts": result.unpriced_after.attempts,
        }
        return Response(CostChangeOutput(out).data)


# --- The browsable schema (/api/docs/) ----------------------------------------------------------------
def _sidecar_url(filepath: str) -> str:
    """A same-origin URL of a Swagger UI file shipped by ``drf-spectacular-sidecar`` (no CDN)."""
    from django.conf import settings
    from django.templatetags.static import static

    path = f"drf_spectacular_sidecar/swagger-ui-dist/{filepath}"
    try:
        return static(path)
    except ValueError:  # a manifest storage without the sidecar collected: the plain static URL
        return settings.STATIC_URL.rstrip("/") + "/" + path


class ApiDocsView(SpectacularSwaggerSplitView):
    """Swagger UI over ``/api/schema/`` that works offline and under our strict CSP.

    Its files come from the ``drf_spectacular_sidecar`` app's static files whatever
    ``SPECTACULAR_SETTINGS`` says (drf-spectacular's default is a CDN), and the split view
    serves the init script as a file (``?script``), since our CSP forbids inline scripts.
    """

    url_name = "cc-api-schema"

    @staticmethod
    def _swagger_ui_resource(filename):
        return _sidecar_url(filename)

    @staticmethod
    def _swagger_ui_favicon():
        return _sidecar_url("favicon-32x32.png")
