"""Names in usage records → small integer ids, registering what the catalog does not know yet.

Unknown teams, workloads, models and endpoints are registered on the fly (flagged
``auto_registered``: the model is unpriced, the endpoint of unknown kind) rather than rejected,
so no usage is lost while the catalog catches up. A per-source cardinality guard stops a
mis-mapped field (a user id written into ``workload``) from flooding the dimension tables.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from django.conf import settings

from costcenter.models import Endpoint, EndpointKind, LlmModel, Team, Workload
from ingest.models import Dimension, ErrorType, Source, SourceDimensionValue

_SLUG = re.compile(r"^[-a-zA-Z0-9_]{1,64}$")


class DimensionRejected(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass
class DimensionIds:
    """Caches name → id for one ingest run, and the source's distinct values per dimension."""

    source: Source
    limit: int = 0
    teams: dict[str, int] = field(default_factory=dict)
    workloads: dict[str, int] = field(default_factory=dict)
    models: dict[tuple[str, str], int] = field(default_factory=dict)
    endpoints: dict[str, int] = field(default_factory=dict)
    error_types: dict[str, int] = field(default_factory=dict)
    seen: dict[str, set[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.limit = self.source.dimension_limit or settings.INGEST_DIMENSION_LIMIT
        self.teams = dict(Team.objects.values_list("slug", "pk"))
        self.workloads = dict(Workload.objects.values_list("name", "pk"))
        self.models = {
            (name, version): pk for name, version, pk in LlmModel.objects.values_list("name", "version", "pk")
        }
        self.endpoints = dict(Endpoint.objects.values_list("name", "pk"))
        self.error_types = dict(ErrorType.objects.values_list("name", "pk"))
        self.seen = {dimension: set() for dimension in Dimension.values}
        for dimension, value_id in SourceDimensionValue.objects.filter(source=self.source).values_list(
            "dimension", "value_id"
        ):
            self.seen[dimension].add(value_id)

    # Each lookup is a dict hit for known names; only a new name costs a round trip.
    def team(self, slug: str) -> int | None:
        if not slug:
            return None
        pk = self.teams.get(slug)
        if pk is None:
            if not _SLUG.match(slug):
                raise DimensionRejected(
                    f"team: {slug[:80]!r} is not in the catalog and cannot become a team slug "
                    "(use up to 64 letters, digits, '-' or '_')"
                )
            pk = Team.objects.get_or_create(slug=slug, defaults={"name": slug, "auto_registered": True})[0].pk
            self.teams[slug] = pk
        return self._guard(Dimension.TEAM, pk, slug)

    def workload(self, name: str) -> int | None:
        if not name:
            return None
        pk = self.workloads.get(name)
        if pk is None:
            pk = self.workloads[name] = Workload.objects.get_or_create(name=name)[0].pk
        return self._guard(Dimension.WORKLOAD, pk, name)

    def model(self, name: str, version: str) -> int:
        key = (name, version)
        pk = self.models.get(key)
        if pk is None:
            pk = LlmModel.objects.get_or_create(
                name=name, version=version, defaults={"auto_registered": True}
            )[0].pk
            self.models[key] = pk
        return self._guard(Dimension.MODEL, pk, f"{name}@{version}" if version else name)

    def endpoint(self, name: str) -> int | None:
        if not name:
            return None
        pk = self.endpoints.get(name)
        if pk is None:
            pk = Endpoint.objects.get_or_create(
                name=name, defaults={"kind": EndpointKind.UNKNOWN, "auto_registered": True}
            )[0].pk
            self.endpoints[name] = pk
        return self._guard(Dimension.ENDPOINT, pk, name)

    def error_type(self, name: str | None) -> int | None:
        if not name:
            return None
        pk = self.error_types.get(name)
        if pk is None:
            pk = self.error_types[name] = ErrorType.objects.get_or_create(name=name)[0].pk
        return pk

    def _guard(self, dimension: str, pk: int, shown: str) -> int:
        seen = self.seen[dimension]
        if pk in seen:
            return pk
        if len(seen) >= self.limit:
            raise DimensionRejected(
                f"{dimension}: source {self.source.name!r} already has {len(seen):,} distinct {dimension} values "
                f"(limit {self.limit:,}); {shown[:60]!r} would be one more — is an id being written into "
                f"{dimension}? Raise the source's dimension limit if this is intended"
            )
        SourceDimensionValue.objects.get_or_create(source=self.source, dimension=dimension, value_id=pk)
        seen.add(pk)
        return pk
