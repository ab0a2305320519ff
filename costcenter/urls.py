from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from costcenter import api, token_views, views
from costcenter.api_catalog import ApiDocsView
from ingest import api as ingest_api

admin.site.site_header = "CostCenter administration"
admin.site.site_title = "CostCenter"

urlpatterns = [
    path("", views.overview, name="cc-overview"),
    path("teams/", views.team_list, name="cc-teams"),
    path("teams/<slug:slug>/", views.team_detail, name="cc-team"),
    path("tokens/", token_views.token_list, name="cc-tokens"),
    path("api/v1/costs/", api.CostsApi.as_view(), name="cc-api-costs"),
    path("api/v1/pools/costs/", api.PoolCostsApi.as_view(), name="cc-api-pool-costs"),
    path("api/schema/", SpectacularAPIView.as_view(), name="cc-api-schema"),
    path("api/docs/", ApiDocsView.as_view(), name="cc-api-docs"),
    path("api/v1/usage/", ingest_api.UsageIngestView.as_view(), name="cc-api-usage"),
    # OTLP/HTTP's default traces path, so exporters need only the base URL as their endpoint.
    path("v1/traces", ingest_api.OtlpTracesView.as_view(), name="cc-otlp-traces"),
    path("accounts/login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    # Each feature area keeps its own routes.
    path("", include("costcenter.urls_pages")),
    path("", include("costcenter.urls_budgets")),
    path("api/v1/", include("costcenter.urls_api")),
    path("reports/", include("costcenter.reports.urls")),
]
