"""Dashboard pages (Explorer, Models × Hardware, GPU fleet, Cost change, Ingestion)."""

urlpatterns: list = []
