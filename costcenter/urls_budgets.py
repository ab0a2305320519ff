"""Budgets and alerts pages."""

urlpatterns: list = []
