"""Dashboard pages (Explorer, Models × Hardware, GPU fleet, Cost change, Ingestion)."""

from django.urls import path

from costcenter import page_views

urlpatterns: list = [
    path("explorer/", page_views.explorer, name="cc-explorer"),
    path("models-hardware/", page_views.models_hardware, name="cc-models-hardware"),
    path("fleet/", page_views.fleet, name="cc-fleet"),
    path("cost-change/", page_views.cost_change_page, name="cc-cost-change"),
    path("ingestion/", page_views.ingestion, name="cc-ingestion"),
]
