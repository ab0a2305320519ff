"""Who receives which report (``Subscription``) and each report sent (``ReportDelivery``)."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from costcenter.models import Team


class Frequency(models.TextChoices):
    WEEKLY = "weekly", "Weekly"
    MONTHLY = "monthly", "Monthly"


class Scope(models.TextChoices):
    TEAMS = "teams", "My teams"
    ORG = "org", "The whole organisation"


WEEKDAYS = [(0, "Monday"), (1, "Tuesday"), (2, "Wednesday"), (3, "Thursday"), (4, "Friday"), (5, "Saturday"), (6, "Sunday")]  # fmt: skip


def validate_time_zone(name: str) -> None:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValidationError(f"{name!r} is not a time zone (e.g. Europe/Berlin)") from None


class Subscription(models.Model):
    """One recipient of one report.

    ``user`` is whose view the report shows: every figure is scoped to the teams this user may
    see. With ``email`` empty the report goes to the user's own address; an admin may set
    ``email`` to a distribution list, which then receives that user's view (``teams`` narrows
    it to some teams).
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="report_subscriptions"
    )
    email = models.EmailField(
        blank=True, default="", help_text="A distribution list; empty: the user's own address."
    )
    frequency = models.CharField(max_length=16, choices=Frequency.choices, default=Frequency.WEEKLY)
    scope = models.CharField(max_length=16, choices=Scope.choices, default=Scope.TEAMS)
    teams = models.ManyToManyField(
        Team,
        blank=True,
        related_name="+",
        help_text="Scope 'teams': these teams; none: the user's own teams.",
    )
    time_zone = models.CharField(max_length=64, default="UTC", validators=[validate_time_zone])
    send_weekday = models.PositiveSmallIntegerField(
        choices=WEEKDAYS, default=0, help_text="Weekly reports: the day they are sent."
    )
    send_hour = models.PositiveSmallIntegerField(default=9, help_text="Local hour (0–23) the report is sent.")
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    unsubscribed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "email"], name="reports_one_subscription_per_address"),
            # A distribution list gets one report per period, whoever subscribed it.
            models.UniqueConstraint(
                fields=["email"], condition=~models.Q(email=""), name="reports_one_subscription_per_list"
            ),
            models.CheckConstraint(condition=models.Q(send_hour__lte=23), name="reports_send_hour_in_day"),
            models.CheckConstraint(
                condition=models.Q(send_weekday__lte=6), name="reports_send_weekday_in_week"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.frequency} report to {self.recipient} ({self.scope})"

    @property
    def recipient(self) -> str:
        return self.email or self.user.email

    @property
    def is_list(self) -> bool:
        return bool(self.email)


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    SENT = "sent", "Sent"
    FAILED = "failed", "Failed"  # retried while next_attempt_at is set; given up when it is not
    CANCELLED = "cancelled", "Cancelled"  # unsubscribed (or no address) before it went out


class ReportDelivery(models.Model):
    """One report for one subscription and period; the unique key makes every re-run a no-op."""

    subscription = models.ForeignKey(Subscription, on_delete=models.CASCADE, related_name="deliveries")
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    # The period as planned: a later change of the subscription's zone does not move this report.
    frequency = models.CharField(max_length=16, choices=Frequency.choices)
    time_zone = models.CharField(max_length=64)
    recipient = models.CharField(max_length=254)
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    claimed_until = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["subscription", "period_start"], name="reports_one_delivery_per_period"
            )
        ]
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="reports_due_idx")]

    def __str__(self) -> str:
        return f"report {self.period_start:%Y-%m-%d} to {self.recipient}: {self.status}"
