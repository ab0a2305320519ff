"""The navigation every page shows. Entries without a view yet are listed, disabled."""

from __future__ import annotations

from django.conf import settings
from django.urls import NoReverseMatch, reverse

NAVIGATION = [
    ("Overview", "cc-overview"),
    ("Explorer", "cc-explorer"),
    ("Models × Hardware", "cc-models-hardware"),
    ("GPU fleet", "cc-fleet"),
    ("Cost change", "cc-cost-change"),
    ("Budgets", "cc-budgets"),
    ("Alerts", "cc-alerts"),
    ("Ingestion", "cc-ingestion"),
    ("Teams", "cc-teams"),
    ("API tokens", "cc-tokens"),
]


def navigation(request) -> dict:
    if not getattr(request, "user", None) or not request.user.is_authenticated:
        return {"currency": settings.CURRENCY}
    items = []
    for label, url_name in NAVIGATION:
        try:
            url = reverse(url_name)
        except NoReverseMatch:
            url = None  # the page arrives with its feature
        items.append({"label": label, "url": url, "active": url is not None and request.path == url})
    if request.user.is_staff:
        items.append({"label": "Admin", "url": reverse("admin:index"), "active": False})
    return {"navigation": items, "currency": settings.CURRENCY}
