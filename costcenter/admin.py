"""Admin for the catalog: the same objects that ``load_catalog`` writes."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin

from costcenter.models import (
    Endpoint,
    GpuHourPrice,
    LlmModel,
    Membership,
    Pool,
    Team,
    TokenPrice,
    UserProfile,
)


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["slug", "name"]
    search_fields = ["slug", "name"]
    inlines = [MembershipInline]


class UserProfileInline(admin.StackedInline):
    model = UserProfile
    can_delete = False
    verbose_name_plural = "Org-wide role and time zone"


class MembershipOfUserInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["team"]


User = get_user_model()
admin.site.unregister(User)


@admin.register(User)
class CostCenterUserAdmin(UserAdmin):
    inlines = [UserProfileInline, MembershipOfUserInline]


class GpuHourPriceInline(admin.TabularInline):
    model = GpuHourPrice
    extra = 1


@admin.register(Pool)
class PoolAdmin(admin.ModelAdmin):
    list_display = ["name", "vendor", "gpu_model", "gpu_count", "kwh_price"]
    list_filter = ["vendor"]
    search_fields = ["name", "gpu_model"]
    inlines = [GpuHourPriceInline]


@admin.register(Endpoint)
class EndpointAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "provider", "pool"]
    list_filter = ["kind"]
    search_fields = ["name", "provider"]


class TokenPriceInline(admin.TabularInline):
    model = TokenPrice
    extra = 1


@admin.register(LlmModel)
class LlmModelAdmin(admin.ModelAdmin):
    list_display = ["name", "version", "family"]
    search_fields = ["name", "family"]
    inlines = [TokenPriceInline]
