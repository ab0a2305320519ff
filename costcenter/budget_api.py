"""REST API of budgets, alert rules and alert events (under /api/v1/).

Reads take any token or a session; writes take a signed-in session or an ``ingest``-scope token
(``read`` tokens only read). Budgets and rules of teams the caller cannot see answer 404, like
missing ones; visible ones the caller may not manage answer 403 to writes.
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.response import Response
from rest_framework.views import APIView

from costcenter import budgets as svc
from costcenter.access import visible_teams
from costcenter.api import MONEY
from costcenter.models import (
    AlertEvent,
    AlertRule,
    AlertRuleKind,
    Budget,
    BudgetPeriodKind,
    TokenScope,
)


class ReadOrManage(BasePermission):
    """GET for any authenticated caller; writes for sessions and ingest-scope tokens."""

    message = "Changing budgets and alert rules needs a signed-in session or an 'ingest'-scope token."

    def has_permission(self, request, view) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        if request.method in SAFE_METHODS:
            return True
        token = request.auth
        return token is None or getattr(token, "scope", None) == TokenScope.INGEST


# --- Fields shared by budgets and rules --------------------------------------------------------------
class _Cleaned(serializers.Field):
    def __init__(self, cleaner, **kwargs):
        self.cleaner = cleaner
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        try:
            return self.cleaner(data)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None

    def to_representation(self, value):
        return value


def _typed(cleaner, schema):
    """A ``_Cleaned`` field with its OpenAPI type (the cleaner decides what it accepts)."""

    @extend_schema_field(schema)
    class Typed(_Cleaned):
        pass

    def make(**kwargs):
        return Typed(cleaner, **kwargs)

    return make


_STRINGS = {"type": "array", "items": {"type": "string"}}
ScopeField = _typed(svc.clean_scope, {"type": "object", "additionalProperties": _STRINGS})
RuleScopeField = _typed(
    lambda value: svc.clean_scope(value, extra=("source",)),
    {"type": "object", "additionalProperties": _STRINGS},
)
EmailsField = _typed(svc.clean_emails, {"type": "array", "items": {"type": "string", "format": "email"}})
WebhooksField = _typed(
    svc.clean_webhooks,
    {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "url": {"type": "string"},
                "format": {"type": "string", "enum": ["json", "slack"]},
            },
        },
        "description": "URLs, or {url, format: json|slack}",
    },
)
TimeZoneField = _typed(svc.clean_time_zone, {"type": "string", "example": "Europe/Berlin"})
ThresholdsField = _typed(svc.clean_thresholds, {"type": "array", "items": {"type": "integer"}})


class _OwnedSerializer(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    name = serializers.CharField(max_length=200)
    team = serializers.CharField(
        allow_null=True, required=False, default=None, help_text="team slug; null = all teams"
    )
    scope = ScopeField(required=False, default=dict)
    emails = EmailsField(required=False, default=list)
    webhooks = WebhooksField(required=False, default=list)
    signing_secret = serializers.CharField(read_only=True)
    created_at = serializers.DateTimeField(read_only=True)

    def validate_team(self, slug):
        if slug in (None, ""):
            return None
        team = visible_teams(self.context["request"].user).filter(slug=slug).first()
        if team is None:
            raise serializers.ValidationError(f"unknown team {slug!r}")
        return team

    def to_representation(self, instance):
        data = super().to_representation(instance)
        data["team"] = instance.team.slug if instance.team_id else None
        if not svc.can_manage(self.context["request"].user, instance.team):
            data.pop("signing_secret", None)  # only those who manage it see the secret
        return data


class BudgetSerializer(_OwnedSerializer):
    period = serializers.ChoiceField(choices=BudgetPeriodKind.choices, default=BudgetPeriodKind.MONTH)
    time_zone = TimeZoneField(required=False, default="UTC")
    # numeric(30, 12) in the database: at most 18 digits before the point.
    amount = serializers.DecimalField(max_digits=30, decimal_places=12, coerce_to_string=True, min_value=0)
    thresholds = ThresholdsField(required=False, default=svc.clean_thresholds(None))
    forecast_alert = serializers.BooleanField(required=False, default=True)
    from_catalog = serializers.BooleanField(read_only=True)

    def validate_amount(self, value):
        if value <= 0:
            raise serializers.ValidationError("must be positive")
        return value

    def validate_name(self, value):
        clash = Budget.objects.filter(name=value.strip())
        if self.instance is not None:
            clash = clash.exclude(pk=self.instance.pk)
        if clash.exists():
            raise serializers.ValidationError("a budget with this name exists")
        return value.strip()


class AlertRuleSerializer(_OwnedSerializer):
    kind = serializers.ChoiceField(choices=AlertRuleKind.choices)
    threshold = serializers.DecimalField(max_digits=24, decimal_places=9, coerce_to_string=True)
    window_hours = serializers.IntegerField(min_value=1, max_value=24 * 31, default=24)
    enabled = serializers.BooleanField(default=True)
    scope = RuleScopeField(required=False, default=dict)
    state = serializers.CharField(read_only=True)
    state_since = serializers.DateTimeField(read_only=True)
    last_value = serializers.JSONField(read_only=True)


def _save(request, model, serializer, instance=None):
    serializer.is_valid(raise_exception=True)
    values = dict(serializer.validated_data)
    team = values.get("team", instance.team if instance is not None else None)
    if not svc.can_manage(request.user, team):
        raise PermissionDenied("Only the team's editors and admins (org admins for all teams) manage these.")
    obj = instance or model(created_by=request.user, signing_secret=svc.new_signing_secret())
    for name, value in values.items():
        setattr(obj, name, value)
    with transaction.atomic():
        obj.save()
    return obj


class _OwnedListApi(APIView):
    permission_classes = [ReadOrManage]
    model: type = Budget
    serializer_class: type = BudgetSerializer

    def get(self, request):
        rows = svc.visible_owned(request.user, self.model.objects.select_related("team")).order_by("name")
        return Response(self.serializer_class(rows, many=True, context={"request": request}).data)

    def post(self, request):
        serializer = self.serializer_class(data=request.data, context={"request": request})
        obj = _save(request, self.model, serializer)
        return Response(
            self.serializer_class(obj, context={"request": request}).data, status=status.HTTP_201_CREATED
        )


class _OwnedDetailApi(APIView):
    permission_classes = [ReadOrManage]
    model: type = Budget
    serializer_class: type = BudgetSerializer

    def get_object(self, request, pk):
        obj = svc.visible_owned(request.user, self.model.objects.select_related("team")).filter(pk=pk).first()
        if obj is None:
            raise NotFound()  # hidden and missing look alike
        return obj

    def get(self, request, pk: int):
        obj = self.get_object(request, pk)
        return Response(self.serializer_class(obj, context={"request": request}).data)

    def _update(self, request, pk, partial):
        obj = self.get_object(request, pk)
        if not svc.can_manage(request.user, obj.team):
            raise PermissionDenied("Only the team's editors and admins manage these.")
        serializer = self.serializer_class(
            obj, data=request.data, partial=partial, context={"request": request}
        )
        obj = _save(request, self.model, serializer, instance=obj)
        return Response(self.serializer_class(obj, context={"request": request}).data)

    def put(self, request, pk: int):
        return self._update(request, pk, partial=False)

    def patch(self, request, pk: int):
        return self._update(request, pk, partial=True)

    def delete(self, request, pk: int):
        obj = self.get_object(request, pk)
        if not svc.can_manage(request.user, obj.team):
            raise PermissionDenied("Only the team's editors and admins manage these.")
        obj.delete()
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema(
    request=BudgetSerializer,
    responses=BudgetSerializer(many=True),
    description="Budgets you can see; create one.",
)
class BudgetListApi(_OwnedListApi):
    model, serializer_class = Budget, BudgetSerializer


@extend_schema(
    request=BudgetSerializer,
    responses=BudgetSerializer,
    description="One budget: read, replace, update, delete.",
)
class BudgetDetailApi(_OwnedDetailApi):
    model, serializer_class = Budget, BudgetSerializer


@extend_schema(
    request=AlertRuleSerializer,
    responses=AlertRuleSerializer(many=True),
    description="Alert rules you can see; create one.",
)
class AlertRuleListApi(_OwnedListApi):
    model, serializer_class = AlertRule, AlertRuleSerializer


@extend_schema(request=AlertRuleSerializer, responses=AlertRuleSerializer, description="One alert rule.")
class AlertRuleDetailApi(_OwnedDetailApi):
    model, serializer_class = AlertRule, AlertRuleSerializer


class BudgetStatusOutput(serializers.Serializer):
    budget = serializers.IntegerField(source="budget_id")
    name = serializers.CharField()
    currency = serializers.CharField()
    period_start = serializers.DateTimeField()
    period_end = serializers.DateTimeField()
    amount = serializers.DecimalField(**MONEY)
    spent = serializers.DecimalField(**MONEY)
    remaining = serializers.DecimalField(**MONEY)
    percent = serializers.DecimalField(max_digits=40, decimal_places=4, coerce_to_string=True)
    state = serializers.CharField()
    level = serializers.IntegerField(help_text="highest threshold (percent) reached; 0 = none")
    projected = serializers.DecimalField(**MONEY, allow_null=True)
    projected_low = serializers.DecimalField(**MONEY, allow_null=True)
    projected_high = serializers.DecimalField(**MONEY, allow_null=True)
    projected_exceed_at = serializers.DateTimeField(allow_null=True)
    forecast_exceeds = serializers.BooleanField()
    cost_complete = serializers.BooleanField(
        help_text="false when the scope has unpriced usage: spent is a lower bound"
    )
    unpriced_attempts = serializers.IntegerField()
    unpriced_tokens = serializers.IntegerField()
    as_of = serializers.DateTimeField()


@extend_schema(
    responses=BudgetStatusOutput,
    description="The current period's spend, remaining, percent, forecast and state.",
)
class BudgetStatusApi(APIView):
    permission_classes = [ReadOrManage]

    def get(self, request, pk: int):
        budget = svc.visible_owned(request.user, Budget.objects.select_related("team")).filter(pk=pk).first()
        if budget is None:
            raise NotFound()
        st = svc.budget_status(budget, now=timezone.now())
        data = {
            "budget_id": budget.pk,
            "name": budget.name,
            "currency": settings.CURRENCY,
            "period_start": st.period_start,
            "period_end": st.period_end,
            "amount": st.amount,
            "spent": st.spent,
            "remaining": st.remaining,
            "percent": st.percent.quantize(Decimal("0.0001")),
            "state": st.state,
            "level": st.level,
            "projected": st.projected,
            "projected_low": st.forecast.low if st.forecast else None,
            "projected_high": st.forecast.high if st.forecast else None,
            "projected_exceed_at": st.projected_exceed_at if st.forecast_exceeds else None,
            "forecast_exceeds": st.forecast_exceeds,
            "cost_complete": st.cost_complete,
            "unpriced_attempts": st.unpriced_attempts,
            "unpriced_tokens": st.unpriced_tokens,
            "as_of": st.as_of,
        }
        for name in ("projected", "projected_low", "projected_high"):
            if data[name] is not None:
                data[name] = data[name].quantize(Decimal(1).scaleb(-12))
        return Response(BudgetStatusOutput(data).data)


class NotificationOutput(serializers.Serializer):
    channel = serializers.CharField()
    target = serializers.CharField()
    status = serializers.CharField()
    attempts = serializers.IntegerField()
    sent_at = serializers.DateTimeField(allow_null=True)
    next_attempt_at = serializers.DateTimeField()
    last_error = serializers.CharField()


class AlertEventOutput(serializers.Serializer):
    id = serializers.IntegerField()
    kind = serializers.CharField()
    budget = serializers.IntegerField(source="budget_id", allow_null=True)
    rule = serializers.IntegerField(source="rule_id", allow_null=True)
    team = serializers.SerializerMethodField()
    title = serializers.CharField()
    from_state = serializers.CharField()
    to_state = serializers.CharField()
    level = serializers.IntegerField(allow_null=True)
    firing = serializers.BooleanField()
    details = serializers.JSONField()
    created_at = serializers.DateTimeField()
    resolved_at = serializers.DateTimeField(allow_null=True)
    acknowledged_by = serializers.SerializerMethodField()
    acknowledged_at = serializers.DateTimeField(allow_null=True)
    notifications = NotificationOutput(many=True, source="notifications.all")

    @extend_schema_field({"type": "string", "nullable": True})
    def get_team(self, event) -> str | None:
        return event.team.slug if event.team_id else None

    @extend_schema_field({"type": "string", "nullable": True})
    def get_acknowledged_by(self, event) -> str | None:
        return event.acknowledged_by.get_username() if event.acknowledged_by_id else None


class AlertEventFilter(serializers.Serializer):
    state = serializers.ChoiceField(choices=["firing", "resolved", "all"], default="all")
    budget = serializers.IntegerField(required=False, min_value=1, max_value=2**63 - 1)
    rule = serializers.IntegerField(required=False, min_value=1, max_value=2**63 - 1)
    limit = serializers.IntegerField(min_value=1, max_value=1000, default=200)


@extend_schema(
    parameters=[AlertEventFilter],
    responses=AlertEventOutput(many=True),
    description="Alert events (transitions) with their notifications, newest first.",
)
class AlertEventListApi(APIView):
    permission_classes = [ReadOrManage]

    def get(self, request):
        params = AlertEventFilter(data=request.query_params)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        events = svc.visible_owned(request.user, AlertEvent.objects.all()).select_related(
            "team", "acknowledged_by"
        )
        if data["state"] == "firing":
            events = events.filter(firing=True, resolved_at__isnull=True)
        elif data["state"] == "resolved":
            events = events.filter(resolved_at__isnull=False)
        if "budget" in data:
            events = events.filter(budget_id=data["budget"])
        if "rule" in data:
            events = events.filter(rule_id=data["rule"])
        events = events.prefetch_related("notifications").order_by("-created_at", "-pk")[: data["limit"]]
        return Response(AlertEventOutput(events, many=True).data)


@extend_schema(
    request=None, responses=AlertEventOutput, description="Acknowledge an alert (members of its team)."
)
class AlertAcknowledgeApi(APIView):
    permission_classes = [ReadOrManage]

    def post(self, request, pk: int):
        event = svc.visible_owned(request.user, AlertEvent.objects.all()).filter(pk=pk).first()
        if event is None:
            raise NotFound()
        if not svc.can_acknowledge(request.user, event):
            raise PermissionDenied("Only members of the team acknowledge its alerts.")
        AlertEvent.objects.filter(pk=pk, acknowledged_at__isnull=True).update(
            acknowledged_by=request.user, acknowledged_at=timezone.now()
        )
        event = get_object_or_404(AlertEvent.objects.select_related("team", "acknowledged_by"), pk=pk)
        return Response(AlertEventOutput(event).data)
