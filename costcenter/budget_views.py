"""Budgets and alerts pages: thin views over ``budgets`` and ``alerts``; login everywhere.

Budgets and rules of teams the user cannot see answer 404, exactly like missing ones; seeing
but not managing (a viewer) answers 403 on the edit pages.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Prefetch
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from costcenter import budgets as svc
from costcenter.alerts import rule_scope_text
from costcenter.models import (
    SCOPE_DIMENSIONS,
    AlertEvent,
    AlertRule,
    AlertRuleKind,
    Budget,
    BudgetPeriodKind,
    DeliveryAttempt,
    Notification,
)
from costcenter.money import AMOUNT_DECIMAL_PLACES


# --- Forms -----------------------------------------------------------------------------------------
def _split(text: str) -> list[str]:
    return [part.strip() for part in text.replace("\n", ",").split(",") if part.strip()]


class _ChannelsScopeForm(forms.Form):
    team = forms.ModelChoiceField(queryset=None, required=False, empty_label="All teams (org admins only)")
    emails = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 2}), help_text="comma or newline separated"
    )
    webhooks = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="URLs receiving the generic JSON body",
    )
    slack_webhooks = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 2}), help_text="Slack incoming-webhook URLs"
    )

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user
        self.fields["team"].queryset = svc.manageable_teams(user)
        for dimension in SCOPE_DIMENSIONS:
            self.fields[f"scope_{dimension}"] = forms.CharField(
                required=False, label=f"Only {dimension}s", help_text="comma separated; empty = any"
            )

    def clean_team(self):
        team = self.cleaned_data.get("team")
        if not svc.can_manage(self.user, team):
            raise forms.ValidationError("You may not manage budgets or rules for all teams.")
        return team

    def clean_emails(self):
        try:
            return svc.clean_emails(_split(self.cleaned_data["emails"]))
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None

    def _hooks(self, name, fmt):
        try:
            return svc.clean_webhooks(
                [{"url": url, "format": fmt} for url in _split(self.cleaned_data[name])]
            )
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_webhooks(self):
        return self._hooks("webhooks", "json")

    def clean_slack_webhooks(self):
        return self._hooks("slack_webhooks", "slack")

    def scope(self) -> dict:
        return {
            dimension: _split(self.cleaned_data.get(f"scope_{dimension}") or "")
            for dimension in SCOPE_DIMENSIONS
            if _split(self.cleaned_data.get(f"scope_{dimension}") or "")
        }

    @classmethod
    def initial_for(cls, obj) -> dict:
        initial = {
            "team": obj.team_id,
            "emails": ", ".join(obj.emails),
            "webhooks": "\n".join(h["url"] for h in obj.webhooks if h.get("format") != "slack"),
            "slack_webhooks": "\n".join(h["url"] for h in obj.webhooks if h.get("format") == "slack"),
        }
        for dimension in SCOPE_DIMENSIONS:
            initial[f"scope_{dimension}"] = ", ".join((obj.scope or {}).get(dimension, []))
        return initial


class BudgetForm(_ChannelsScopeForm):
    name = forms.CharField(max_length=200)
    period = forms.ChoiceField(choices=BudgetPeriodKind.choices, initial=BudgetPeriodKind.MONTH)
    time_zone = forms.CharField(max_length=64, initial="UTC")
    amount = forms.DecimalField(
        min_value=Decimal("0.01"), decimal_places=AMOUNT_DECIMAL_PLACES, max_digits=30
    )
    thresholds = forms.CharField(
        initial="50, 80, 100", help_text="percentages of the amount, comma separated"
    )
    forecast_alert = forms.BooleanField(required=False, initial=True, label="Alert when the forecast exceeds")

    field_order = ["name", "team", "period", "time_zone", "amount", "thresholds", "forecast_alert"]

    def __init__(self, *args, instance=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.instance = instance

    def clean_name(self):
        name = self.cleaned_data["name"].strip()
        clash = Budget.objects.filter(name=name)
        if self.instance is not None:
            clash = clash.exclude(pk=self.instance.pk)
        if clash.exists():
            raise forms.ValidationError("A budget with this name exists.")
        return name

    def clean_time_zone(self):
        try:
            return svc.clean_time_zone(self.cleaned_data["time_zone"].strip())
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_thresholds(self):
        try:
            return svc.clean_thresholds(_split(self.cleaned_data["thresholds"]))
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None

    def values(self) -> dict:
        data = self.cleaned_data
        return {
            "name": data["name"],
            "team": data["team"],
            "period": data["period"],
            "time_zone": data["time_zone"],
            "amount": data["amount"],
            "thresholds": data["thresholds"],
            "forecast_alert": data["forecast_alert"],
            "scope": self.scope(),
            "emails": data["emails"],
            "webhooks": data["webhooks"] + data["slack_webhooks"],
        }

    @classmethod
    def initial_for(cls, budget) -> dict:
        return super().initial_for(budget) | {
            "name": budget.name,
            "period": budget.period,
            "time_zone": budget.time_zone,
            "amount": budget.amount.normalize(),
            "thresholds": ", ".join(map(str, budget.thresholds)),
            "forecast_alert": budget.forecast_alert,
        }


class RuleForm(_ChannelsScopeForm):
    name = forms.CharField(max_length=200)
    kind = forms.ChoiceField(choices=AlertRuleKind.choices)
    threshold = forms.DecimalField(
        decimal_places=9,
        max_digits=24,
        help_text="money per task; % for rates, increase and utilisation; minutes for lag; k for anomalies",
    )
    window_hours = forms.IntegerField(min_value=1, max_value=24 * 31, initial=24)
    enabled = forms.BooleanField(required=False, initial=True)

    field_order = ["name", "team", "kind", "threshold", "window_hours", "enabled"]

    def __init__(self, *args, instance=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.instance = instance

    def values(self) -> dict:
        data = self.cleaned_data
        return {
            "name": data["name"].strip(),
            "team": data["team"],
            "kind": data["kind"],
            "threshold": data["threshold"],
            "window_hours": data["window_hours"],
            "enabled": data["enabled"],
            "scope": self.scope(),
            "emails": data["emails"],
            "webhooks": data["webhooks"] + data["slack_webhooks"],
        }

    @classmethod
    def initial_for(cls, rule) -> dict:
        return super().initial_for(rule) | {
            "name": rule.name,
            "kind": rule.kind,
            "threshold": rule.threshold.normalize(),
            "window_hours": rule.window_hours,
            "enabled": rule.enabled,
        }


# --- Lookups ---------------------------------------------------------------------------------------
def _visible_budget(user, pk: int) -> Budget:
    budget = svc.visible_owned(user, Budget.objects.select_related("team")).filter(pk=pk).first()
    if budget is None:
        raise Http404("No such budget")  # hidden and missing look alike
    return budget


def _visible_rule(user, pk: int) -> AlertRule:
    rule = svc.visible_owned(user, AlertRule.objects.select_related("team")).filter(pk=pk).first()
    if rule is None:
        raise Http404("No such alert rule")
    return rule


def _notifications_prefetch():
    return Prefetch(
        "notifications",
        queryset=Notification.objects.order_by("pk").prefetch_related(
            Prefetch("delivery_attempts", queryset=DeliveryAttempt.objects.order_by("at", "pk"))
        ),
    )


# --- Charts ----------------------------------------------------------------------------------------
def burn_chart(budget: Budget, status: svc.BudgetStatus) -> dict:
    """Cumulative spend against the budget line, thresholds, and the forecast with its band."""
    now = status.as_of
    burn = svc.burn_series(budget, start=status.period_start, end=status.period_end, now=now)
    x_range = [status.period_start.isoformat(), status.period_end.isoformat()]
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": "Spent",
            "x": [moment.isoformat() for moment, _ in burn],
            "y": [float(value) for _, value in burn],
            "line": {"color": "#2456c7", "width": 3},
        },
        {
            "type": "scatter",
            "mode": "lines",
            "name": f"Budget ({budget.amount.normalize():,f})",
            "x": x_range,
            "y": [float(budget.amount)] * 2,
            "line": {"color": "#a61b1b", "dash": "solid"},
        },
        {
            "type": "scatter",
            "mode": "lines",
            "name": "Even pace",
            "x": x_range,
            "y": [0, float(budget.amount)],
            "line": {"color": "#9aa3b2", "dash": "dot"},
        },
    ]
    for threshold in budget.thresholds:
        if threshold != 100:
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": f"{threshold} %",
                    "x": x_range,
                    "y": [float(budget.amount * threshold / 100)] * 2,
                    "line": {"color": "#d9a400", "dash": "dash", "width": 1},
                }
            )
    fc = status.forecast
    if fc is not None:
        if fc.band_path:
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": "Forecast band (low)",
                    "x": [m.isoformat() for m, _, _ in fc.band_path],
                    "y": [float(low) for _, low, _ in fc.band_path],
                    "line": {"width": 0},
                    "showlegend": False,
                }
            )
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": "Forecast band",
                    "x": [m.isoformat() for m, _, _ in fc.band_path],
                    "y": [float(high) for _, _, high in fc.band_path],
                    "fill": "tonexty",
                    "fillcolor": "rgba(36,86,199,0.15)",
                    "line": {"width": 0},
                }
            )
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": "Forecast",
                "x": [m.isoformat() for m, _ in fc.path],
                "y": [float(value) for _, value in fc.path],
                "line": {"color": "#2456c7", "dash": "dash"},
            }
        )
    layout = {
        "margin": {"l": 60, "r": 20, "t": 10, "b": 40},
        "yaxis": {"title": {"text": "Spend"}, "rangemode": "tozero"},
        "xaxis": {"range": x_range},
        "legend": {"orientation": "h"},
        "height": 340,
    }
    return {"data": data, "layout": layout}


# --- Budgets ---------------------------------------------------------------------------------------
@login_required
def budget_list(request):
    now = timezone.now()
    rows = []
    for budget in svc.visible_owned(request.user, Budget.objects.select_related("team")).order_by("name"):
        rows.append(
            {
                "budget": budget,
                "status": svc.budget_status(budget, now=now),
                "scope": svc.budget_scope_text(budget),
            }
        )
    return render(
        request,
        "costcenter/budgets/list.html",
        {
            "rows": rows,
            "can_create": svc.manageable_teams(request.user).exists() or svc.can_manage(request.user, None),
        },
    )


@login_required
def budget_detail(request, pk: int):
    budget = _visible_budget(request.user, pk)
    now = timezone.now()
    status = svc.budget_status(budget, now=now)
    periods = list(budget.periods.order_by("-start")[:24])
    events = list(
        budget.events.select_related("acknowledged_by")
        .prefetch_related(_notifications_prefetch())
        .order_by("-created_at", "-pk")[:100]
    )
    return render(
        request,
        "costcenter/budgets/detail.html",
        {
            "budget": budget,
            "status": status,
            "scope": svc.budget_scope_text(budget),
            "periods": periods,
            "events": events,
            "chart": burn_chart(budget, status),
            "can_manage": svc.can_manage(request.user, budget.team),
        },
    )


def _save(obj, values: dict, user):
    for name, value in values.items():
        setattr(obj, name, value)
    if not obj.signing_secret:
        obj.signing_secret = svc.new_signing_secret()
    if obj.pk is None:
        obj.created_by = user
    obj.save()
    return obj


@login_required
def budget_create(request):
    if not svc.manageable_teams(request.user).exists() and not svc.can_manage(request.user, None):
        raise PermissionDenied("Only team editors and admins create budgets.")
    form = BudgetForm(request.POST or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        budget = _save(Budget(), form.values(), request.user)
        messages.success(request, f"Budget {budget.name} created.")
        return redirect("cc-budget", pk=budget.pk)
    return render(request, "costcenter/budgets/form.html", {"form": form, "title": "New budget"})


@login_required
def budget_edit(request, pk: int):
    budget = _visible_budget(request.user, pk)
    if not svc.can_manage(request.user, budget.team):
        raise PermissionDenied("Only the team's editors and admins change its budgets.")
    form = BudgetForm(
        request.POST or None, user=request.user, instance=budget, initial=BudgetForm.initial_for(budget)
    )
    if request.method == "POST" and form.is_valid():
        _save(budget, form.values(), request.user)
        messages.success(request, f"Budget {budget.name} saved.")
        return redirect("cc-budget", pk=budget.pk)
    return render(
        request,
        "costcenter/budgets/form.html",
        {"form": form, "title": f"Edit {budget.name}", "budget": budget},
    )


@login_required
@require_POST
def budget_delete(request, pk: int):
    budget = _visible_budget(request.user, pk)
    if not svc.can_manage(request.user, budget.team):
        raise PermissionDenied("Only the team's editors and admins delete its budgets.")
    budget.delete()
    messages.success(request, f"Budget {budget.name} deleted.")
    return redirect("cc-budgets")


# --- Alerts ----------------------------------------------------------------------------------------
@login_required
def alert_list(request):
    events = (
        svc.visible_owned(request.user, AlertEvent.objects.all())
        .select_related("budget", "rule", "team", "acknowledged_by")
        .prefetch_related(_notifications_prefetch())
    )
    firing = list(events.filter(firing=True, resolved_at__isnull=True).order_by("-created_at", "-pk"))
    since = timezone.now() - timedelta(days=90)
    history = list(
        events.exclude(pk__in=[e.pk for e in firing])
        .filter(created_at__gte=since)
        .order_by("-created_at", "-pk")[:200]
    )
    rules = list(svc.visible_owned(request.user, AlertRule.objects.select_related("team")).order_by("name"))
    for rule in rules:
        rule.scope_text = rule_scope_text(rule)
        rule.manageable = svc.can_manage(request.user, rule.team)
    for event in firing + history:
        event.can_ack = event.acknowledged_at is None and svc.can_acknowledge(request.user, event)
    return render(
        request,
        "costcenter/budgets/alerts.html",
        {
            "firing": firing,
            "history": history,
            "rules": rules,
            "can_create": svc.manageable_teams(request.user).exists() or svc.can_manage(request.user, None),
        },
    )


@login_required
@require_POST
def alert_acknowledge(request, pk: int):
    event = svc.visible_owned(request.user, AlertEvent.objects.all()).filter(pk=pk).first()
    if event is None:
        raise Http404("No such alert")
    if not svc.can_acknowledge(request.user, event):
        raise PermissionDenied("Only members of the team acknowledge its alerts.")
    # First acknowledgement wins; a second click changes nothing.
    AlertEvent.objects.filter(pk=pk, acknowledged_at__isnull=True).update(
        acknowledged_by=request.user, acknowledged_at=timezone.now()
    )
    return redirect(request.POST.get("next") if request.POST.get("next", "").startswith("/") else "cc-alerts")


@login_required
def rule_create(request):
    if not svc.manageable_teams(request.user).exists() and not svc.can_manage(request.user, None):
        raise PermissionDenied("Only team editors and admins create alert rules.")
    form = RuleForm(request.POST or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        rule = _save(AlertRule(), form.values(), request.user)
        messages.success(request, f"Alert rule {rule.name} created.")
        return redirect("cc-alerts")
    return render(request, "costcenter/budgets/form.html", {"form": form, "title": "New alert rule"})


@login_required
def rule_edit(request, pk: int):
    rule = _visible_rule(request.user, pk)
    if not svc.can_manage(request.user, rule.team):
        raise PermissionDenied("Only the team's editors and admins change its alert rules.")
    form = RuleForm(
        request.POST or None, user=request.user, instance=rule, initial=RuleForm.initial_for(rule)
    )
    if request.method == "POST" and form.is_valid():
        _save(rule, form.values(), request.user)
        messages.success(request, f"Alert rule {rule.name} saved.")
        return redirect("cc-alerts")
    return render(
        request, "costcenter/budgets/form.html", {"form": form, "title": f"Edit {rule.name}", "rule": rule}
    )


@login_required
@require_POST
def rule_delete(request, pk: int):
    rule = _visible_rule(request.user, pk)
    if not svc.can_manage(request.user, rule.team):
        raise PermissionDenied("Only the team's editors and admins delete its alert rules.")
    rule.delete()
    messages.success(request, f"Alert rule {rule.name} deleted.")
    return redirect("cc-alerts")
