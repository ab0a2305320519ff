"""The quick start's report: the demo admin is subscribed (weekly, whole organisation) and last
week's report is planned at once, so the beat's next tick (at most five minutes) writes it to
``COSTCENTER_HOME/mail`` with the default file backend. Idempotent: a re-run plans nothing new."""

from __future__ import annotations

from django.utils import timezone

from costcenter.reports import delivery
from costcenter.reports.models import Scope, Subscription


def subscribe_and_plan(user) -> int:
    """Subscribe ``user`` if not yet subscribed; plan last week's report; how many are waiting."""
    Subscription.objects.get_or_create(user=user, email="", defaults={"scope": Scope.ORG, "time_zone": "UTC"})
    return len(delivery.plan(now=timezone.now(), usernames=[user.get_username()], ignore_due_time=True))
