"""Read queries shared by pages, the API, alerts and e-mails. Each returns plain rows."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import Count, Prefetch

from costcenter.access import visible_teams
from costcenter.models import Endpoint, GpuHourPrice, LlmModel, Membership, Pool, Team, TokenPrice
from costcenter.pricing import in_force


@dataclass(frozen=True)
class PoolRow:
    name: str
    vendor: str
    vendor_label: str
    gpu_model: str
    gpu_count: int
    gpu_hour_price: Decimal | None  # in force now; None = unpriced
    kwh_price: Decimal | None
    prometheus_match: dict
    endpoint_names: list[str]


@dataclass(frozen=True)
class ModelRow:
    name: str
    version: str
    family: str
    input_per_mtok: Decimal | None  # generic (any-endpoint) price in force now
    cached_input_per_mtok: Decimal | None
    output_per_mtok: Decimal | None
    endpoint_price_count: int  # endpoint-specific series on top of the generic one
    auto_registered: bool  # first seen in usage, not (yet) described in the catalog

    @property
    def priced(self) -> bool:
        return self.input_per_mtok is not None


@dataclass(frozen=True)
class TeamRow:
    slug: str
    name: str
    member_count: int
    role: str | None  # the viewer's own membership role, if any


@dataclass(frozen=True)
class CatalogOverview:
    teams: list[TeamRow]
    pools: list[PoolRow]
    endpoints: list[Endpoint]
    models: list[ModelRow]


def team_rows(*, user) -> list[TeamRow]:
    """Teams the user may see, with member counts and the user's own role; two queries."""
    own_roles = dict(Membership.objects.filter(user=user).values_list("team_id", "role"))
    return [
        TeamRow(team.slug, team.name, team.member_count, own_roles.get(team.pk))
        for team in visible_teams(user)
        .annotate(member_count=Count("memberships", distinct=True))
        .order_by("slug")
    ]


def catalog_overview(*, user, at: datetime) -> CatalogOverview:
    """The catalog as the user may see it, with the prices in force at ``at``.

    Teams are scoped to the user; pools, endpoints and models are org-wide reference data.
    Runs a fixed number of queries whatever the catalog's size.
    """
    teams = team_rows(user=user)
    pools = []
    for pool in Pool.objects.prefetch_related(
        Prefetch("prices", queryset=GpuHourPrice.objects.order_by("-effective_from")),
        Prefetch("endpoints", queryset=Endpoint.objects.order_by("name")),
    ):
        price = in_force(pool.prices.all(), at)
        pools.append(
            PoolRow(
                name=pool.name,
                vendor=pool.vendor,
                vendor_label=pool.get_vendor_display(),
                gpu_model=pool.gpu_model,
                gpu_count=pool.gpu_count,
                gpu_hour_price=price.gpu_hour_price if price else None,
                kwh_price=pool.kwh_price,
                prometheus_match=pool.prometheus_match,
                endpoint_names=[endpoint.name for endpoint in pool.endpoints.all()],
            )
        )
    models = []
    for model in LlmModel.objects.prefetch_related(
        Prefetch("prices", queryset=TokenPrice.objects.order_by("-effective_from"))
    ):
        prices = list(model.prices.all())
        generic = in_force([p for p in prices if p.endpoint_id is None], at)
        models.append(
            ModelRow(
                name=model.name,
                version=model.version,
                family=model.family,
                input_per_mtok=generic.input_per_mtok if generic else None,
                cached_input_per_mtok=generic.effective_cached_input_per_mtok if generic else None,
                output_per_mtok=generic.output_per_mtok if generic else None,
                endpoint_price_count=len({p.endpoint_id for p in prices if p.endpoint_id is not None}),
                auto_registered=model.auto_registered,
            )
        )
    endpoints = list(Endpoint.objects.select_related("pool"))
    return CatalogOverview(teams=teams, pools=pools, endpoints=endpoints, models=models)


def team_detail(*, user, slug: str) -> tuple[Team, list[Membership]] | None:
    """A team the user may see, with its members; None when it does not exist *or* is hidden."""
    team = visible_teams(user).filter(slug=slug).first()
    if team is None:
        return None
    members = list(team.memberships.select_related("user").order_by("user__username"))
    return team, members
