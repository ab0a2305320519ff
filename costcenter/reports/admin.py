"""Admin: subscribe a distribution list (a ``Subscription`` with ``email`` set) and see deliveries."""

from django.contrib import admin

from costcenter.reports.models import ReportDelivery, Subscription
from ingest.admin import ReadOnlyAdmin


@admin.register(Subscription)
class SubscriptionAdmin(admin.ModelAdmin):
    list_display = (
        "recipient",
        "user",
        "frequency",
        "scope",
        "time_zone",
        "send_weekday",
        "send_hour",
        "active",
    )
    list_filter = ("frequency", "scope", "active")
    search_fields = ("email", "user__username", "user__email")
    filter_horizontal = ("teams",)
    readonly_fields = ("created_at", "unsubscribed_at")
    fieldsets = (
        (None, {"fields": ("user", "email", "active")}),
        ("What", {"fields": ("frequency", "scope", "teams"),
                  "description": "The report shows what the user may see; a distribution list in "
                                 "'email' receives that view (narrowed to 'teams' when chosen)."}),
        ("When", {"fields": ("time_zone", "send_weekday", "send_hour")}),
        ("History", {"fields": ("created_at", "unsubscribed_at")}),
    )  # fmt: skip


@admin.register(ReportDelivery)
class ReportDeliveryAdmin(ReadOnlyAdmin):  # the delivery log: written by the sender only
    list_display = ("recipient", "period_start", "status", "attempts", "sent_at", "next_attempt_at")
    list_filter = ("status",)
    search_fields = ("recipient",)
