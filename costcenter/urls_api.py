"""REST API under /api/v1/ beyond the costs contract: exports, catalog, prices, ingestion, raw
attempts, GPU aggregates, the matrix and the cost change (budgets and alerts have their own module)."""

from django.urls import path

from costcenter import api_catalog as catalog
from costcenter import api_export

urlpatterns: list = [
    path("export/focus/", api_export.FocusExportApi.as_view(), name="cc-api-export-focus"),
    path("export/costs/", api_export.CostsExportApi.as_view(), name="cc-api-export-costs"),
    path("catalog/teams/", catalog.TeamListApi.as_view(), name="cc-api-teams"),
    path("catalog/teams/<slug:slug>/", catalog.TeamDetailApi.as_view(), name="cc-api-team"),
    path("catalog/models/", catalog.ModelListApi.as_view(), name="cc-api-models"),
    path("catalog/models/<int:pk>/", catalog.ModelDetailApi.as_view(), name="cc-api-model"),
    path("catalog/pools/", catalog.PoolListApi.as_view(), name="cc-api-pools"),
    path("catalog/pools/<int:pk>/", catalog.PoolDetailApi.as_view(), name="cc-api-pool"),
    path("catalog/endpoints/", catalog.EndpointListApi.as_view(), name="cc-api-endpoints"),
    path("catalog/endpoints/<int:pk>/", catalog.EndpointDetailApi.as_view(), name="cc-api-endpoint"),
    path("catalog/prices/tokens/", catalog.TokenPriceListApi.as_view(), name="cc-api-token-prices"),
    path("catalog/prices/tokens/<int:pk>/", catalog.TokenPriceDetailApi.as_view(), name="cc-api-token-price"),
    path("catalog/prices/gpu-hours/", catalog.GpuHourPriceListApi.as_view(), name="cc-api-gpu-prices"),
    path(
        "catalog/prices/gpu-hours/<int:pk>/", catalog.GpuHourPriceDetailApi.as_view(), name="cc-api-gpu-price"
    ),
    path("ingest/sources/", catalog.SourceListApi.as_view(), name="cc-api-sources"),
    path("ingest/sources/<int:pk>/", catalog.SourceDetailApi.as_view(), name="cc-api-source"),
    path("ingest/rejects/", catalog.RejectListApi.as_view(), name="cc-api-rejects"),
    path("attempts/", catalog.AttemptListApi.as_view(), name="cc-api-attempts"),
    path("gpu/pools/", catalog.GpuPoolListApi.as_view(), name="cc-api-gpu-pools"),
    path("matrix/", catalog.MatrixApi.as_view(), name="cc-api-matrix"),
    path("cost-change/", catalog.CostChangeApi.as_view(), name="cc-api-cost-change"),
]
