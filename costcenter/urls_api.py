"""REST API under /api/v1/ beyond the costs contract (exports, catalog, budgets, alerts …)."""

urlpatterns: list = []
