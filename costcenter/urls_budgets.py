"""Budgets and alerts pages, and their REST API (under api/v1/)."""

from django.urls import path

from costcenter import budget_api, budget_views

urlpatterns = [
    path("budgets/", budget_views.budget_list, name="cc-budgets"),
    path("budgets/new/", budget_views.budget_create, name="cc-budget-new"),
    path("budgets/<int:pk>/", budget_views.budget_detail, name="cc-budget"),
    path("budgets/<int:pk>/edit/", budget_views.budget_edit, name="cc-budget-edit"),
    path("budgets/<int:pk>/delete/", budget_views.budget_delete, name="cc-budget-delete"),
    path("alerts/", budget_views.alert_list, name="cc-alerts"),
    path("alerts/<int:pk>/acknowledge/", budget_views.alert_acknowledge, name="cc-alert-ack"),
    path("alerts/rules/new/", budget_views.rule_create, name="cc-alert-rule-new"),
    path("alerts/rules/<int:pk>/edit/", budget_views.rule_edit, name="cc-alert-rule-edit"),
    path("alerts/rules/<int:pk>/delete/", budget_views.rule_delete, name="cc-alert-rule-delete"),
    path("api/v1/budgets/", budget_api.BudgetListApi.as_view(), name="cc-api-budgets"),
    path("api/v1/budgets/<int:pk>/", budget_api.BudgetDetailApi.as_view(), name="cc-api-budget"),
    path(
        "api/v1/budgets/<int:pk>/status/", budget_api.BudgetStatusApi.as_view(), name="cc-api-budget-status"
    ),
    path("api/v1/alert-rules/", budget_api.AlertRuleListApi.as_view(), name="cc-api-alert-rules"),
    path("api/v1/alert-rules/<int:pk>/", budget_api.AlertRuleDetailApi.as_view(), name="cc-api-alert-rule"),
    path("api/v1/alerts/", budget_api.AlertEventListApi.as_view(), name="cc-api-alerts"),
    path(
        "api/v1/alerts/<int:pk>/acknowledge/",
        budget_api.AlertAcknowledgeApi.as_view(),
        name="cc-api-alert-ack",
    ),
]
