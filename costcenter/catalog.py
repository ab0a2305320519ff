"""Catalog as code: read the YAML catalog, validate all of it, then apply it in one transaction.

``catalog_parse`` checks the whole file and collects every problem as one line naming the field
path (``pools[1].prices[0].gpu_hour: must be a non-negative decimal``); nothing is written unless
the file is entirely valid. ``catalog_apply`` updates objects in place, keyed by their names, so
loading the same file twice changes nothing. Prices listed for a model or pool replace that
series' rows; objects the file does not mention are left alone (the admin may have made them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any

import yaml
from django.conf import settings
from django.db import transaction

from costcenter.models import (
    Endpoint,
    EndpointKind,
    GpuHourPrice,
    LlmModel,
    Pool,
    Team,
    TokenPrice,
    Vendor,
)
from costcenter.money import fits_rate, parse_decimal
from costcenter.pricing import overlap_problem


class CatalogError(Exception):
    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


# --- YAML reading ----------------------------------------------------------------------------
class _CatalogLoader(yaml.SafeLoader):
    """Safe YAML that keeps decimals and dates as the text the user wrote.

    Plain YAML would turn ``2.50`` into a float (money must never pass through float) and
    ``2026-01-01`` into a date; we parse both ourselves with clear messages.
    """

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_CatalogLoader.yaml_implicit_resolvers = {
    first: [
        (tag, regexp)
        for tag, regexp in resolvers
        if tag not in {"tag:yaml.org,2002:float", "tag:yaml.org,2002:timestamp"}
    ]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_CatalogLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _CatalogLoader.construct_mapping
)


# --- The validated catalog -------------------------------------------------------------------
@dataclass
class PriceSpec:
    effective_from: datetime
    effective_to: datetime | None
    values: dict[str, Decimal | None]
    endpoint: str | None = None


@dataclass
class CatalogSpec:
    currency: str
    teams: list[dict[str, Any]] = field(default_factory=list)
    pools: list[dict[str, Any]] = field(default_factory=list)
    endpoints: list[dict[str, Any]] = field(default_factory=list)
    models: list[dict[str, Any]] = field(default_factory=list)
    budgets: list[dict[str, Any]] = field(default_factory=list)


_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_SLUG = re.compile(r"^[-a-zA-Z0-9_]+$")


class _Checker:
    """Collects problems as ``path: message`` lines while reading a parsed YAML tree."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def problem(self, path: str, message: str) -> None:
        self.problems.append(f"{path}: {message}")

    def mapping(self, value: Any, path: str, required: set[str], optional: set[str]) -> dict | None:
        if not isinstance(value, dict):
            self.problem(path, "must be a mapping of keys to values")
            return None
        allowed = required | optional
        for key in value:
            if key not in allowed:
                self.problem(f"{path}.{key}", f"unknown key (expected one of: {', '.join(sorted(allowed))})")
        for key in sorted(required):
            if key not in value or value[key] is None:
                self.problem(f"{path}.{key}", "required")
        return value

    def items(self, value: Any, path: str) -> list:
        if value is None:
            return []
        if not isinstance(value, list):
            self.problem(path, "must be a list")
            return []
        return value

    def text(
        self, value: Any, path: str, *, max_length: int = 200, pattern: re.Pattern | None = None
    ) -> str | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, str | int):
            self.problem(path, "must be a string")
            return None
        text = str(value).strip()
        if not text:
            self.problem(path, "must not be empty")
            return None
        if len(text) > max_length:
            self.problem(path, f"must be at most {max_length} characters")
            return None
        if pattern is not None and not pattern.match(text):
            self.problem(path, "may contain only letters, digits, '-' and '_'")
            return None
        return text

    def choice(self, value: Any, path: str, choices: list[str]) -> str | None:
        if value is None:
            return None
        if value not in choices:
            self.problem(path, f"must be one of: {', '.join(choices)}")
            return None
        return value

    def positive_int(self, value: Any, path: str) -> int | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            self.problem(path, "must be a positive integer")
            return None
        return value

    def decimal(self, value: Any, path: str, *, positive: bool = False) -> Decimal | None:
        if value is None:
            return None
        number = parse_decimal(value)
        kind = "positive" if positive else "non-negative"
        if number is None or number < 0 or (positive and number == 0):
            self.problem(path, f"must be a {kind} decimal")
            return None
        if not fits_rate(number):
            self.problem(path, "has too many digits (at most 11 before and 9 after the decimal point)")
            return None
        return number

    def moment(self, value: Any, path: str) -> datetime | None:
        """A date (midnight UTC) or an ISO 8601 datetime (UTC unless it carries an offset)."""
        if value is None:
            return None
        text = str(value).strip() if isinstance(value, str | int) and not isinstance(value, bool) else ""
        try:
            if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
                return datetime.combine(date.fromisoformat(text), time(0), tzinfo=UTC)
            if not re.fullmatch(
                r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?", text
            ):
                raise ValueError
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            self.problem(path, "must be a date (YYYY-MM-DD) or an ISO 8601 datetime (YYYY-MM-DDTHH:MM:SSZ)")
            return None
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def catalog_parse(text: str, *, source: str = "catalog") -> CatalogSpec:
    """Validate a whole catalog file; raise ``CatalogError`` listing every problem."""
    try:
        tree = yaml.load(text, Loader=_CatalogLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        reason = getattr(exc, "problem", None) or str(exc)
        raise CatalogError([f"{where}: YAML syntax error: {reason}"]) from None
    check = _Checker()
    root = check.mapping(
        tree, "catalog", set(), {"currency", "teams", "pools", "endpoints", "models", "budgets"}
    )
    if root is None:
        raise CatalogError(check.problems)

    currency = check.text(root.get("currency"), "currency", max_length=3) or settings.CURRENCY
    if currency.upper() != settings.CURRENCY:
        check.problem(
            "currency",
            f"this installation keeps its books in {settings.CURRENCY}; the catalog says {currency} "
            f"(set CURRENCY={currency.upper()} for a new installation in that currency)",
        )
    spec = CatalogSpec(currency=currency.upper())

    for i, raw in enumerate(check.items(root.get("teams"), "teams")):
        path = f"teams[{i}]"
        if check.mapping(raw, path, {"slug"}, {"name"}) is None:
            continue
        slug = check.text(raw.get("slug"), f"{path}.slug", max_length=64, pattern=_SLUG)
        name = check.text(raw.get("name"), f"{path}.name") or slug
        if slug:
            spec.teams.append({"slug": slug, "name": name})

    for i, raw in enumerate(check.items(root.get("pools"), "pools")):
        path = f"pools[{i}]"
        keys = {"name", "vendor", "gpu_model", "gpu_count"}
        if check.mapping(raw, path, keys, {"kwh_price", "weights", "prometheus", "prices"}) is None:
            continue
        pool = {
            "name": check.text(raw.get("name"), f"{path}.name", max_length=100),
            "vendor": check.choice(raw.get("vendor"), f"{path}.vendor", list(Vendor.values)),
            "gpu_model": check.text(raw.get("gpu_model"), f"{path}.gpu_model", max_length=100),
            "gpu_count": check.positive_int(raw.get("gpu_count"), f"{path}.gpu_count"),
            "kwh_price": check.decimal(raw.get("kwh_price"), f"{path}.kwh_price"),
            "input_weight": Decimal(1),
            "output_weight": Decimal(1),
            "prometheus_match": {},
        }
        weights = raw.get("weights")
        if weights is not None and check.mapping(weights, f"{path}.weights", set(), {"input", "output"}):
            for side in ("input", "output"):
                if side in weights:
                    value = check.decimal(weights[side], f"{path}.weights.{side}")
                    if value is not None:
                        pool[f"{side}_weight"] = value
            if pool["input_weight"] == 0 and pool["output_weight"] == 0:
                check.problem(f"{path}.weights", "input and output weights cannot both be 0")
        prometheus = raw.get("prometheus")
        if prometheus is not None and check.mapping(prometheus, f"{path}.prometheus", set(), {"match"}):
            pool["prometheus_match"] = _label_matchers(
                check, prometheus.get("match"), f"{path}.prometheus.match"
            )
        pool["prices"] = _prices(
            check, raw.get("prices"), f"{path}.prices", {"gpu_hour": True}, endpoint_key=False
        )
        spec.pools.append(pool)

    for i, raw in enumerate(check.items(root.get("endpoints"), "endpoints")):
        path = f"endpoints[{i}]"
        if check.mapping(raw, path, {"name", "kind"}, {"provider", "pool"}) is None:
            continue
        endpoint = {
            "name": check.text(raw.get("name"), f"{path}.name"),
            "kind": check.choice(raw.get("kind"), f"{path}.kind", list(EndpointKind.values)),
            "provider": check.text(raw.get("provider"), f"{path}.provider", max_length=100) or "",
            "pool": check.text(raw.get("pool"), f"{path}.pool", max_length=100),
        }
        if endpoint["kind"] == EndpointKind.GPU_POOL and raw.get("pool") is None:
            check.problem(f"{path}.pool", "required for a gpu_pool endpoint")
        if endpoint["kind"] == EndpointKind.TOKEN_PRICED:
            if raw.get("pool") is not None:
                check.problem(
                    f"{path}.pool", "a token_priced endpoint has no pool (did you mean kind: gpu_pool?)"
                )
            if raw.get("provider") is None:
                check.problem(f"{path}.provider", "required for a token_priced endpoint")
        spec.endpoints.append(endpoint)

    for i, raw in enumerate(check.items(root.get("models"), "models")):
        path = f"models[{i}]"
        if check.mapping(raw, path, {"name"}, {"version", "family", "prices"}) is None:
            continue
        model = {
            "name": check.text(raw.get("name"), f"{path}.name"),
            "version": check.text(raw.get("version"), f"{path}.version", max_length=100) or "",
            "family": check.text(raw.get("family"), f"{path}.family", max_length=100) or "",
            "prices": _prices(
                check,
                raw.get("prices"),
                f"{path}.prices",
                {"input": True, "cached_input": False, "output": True},
            ),
        }
        spec.models.append(model)

    for i, raw in enumerate(check.items(root.get("budgets"), "budgets")):
        budget = _budget(check, raw, f"budgets[{i}]")
        if budget is not None:
            spec.budgets.append(budget)
    _check_names_unique(check, spec)
    _check_references(check, spec)
    if check.problems:
        raise CatalogError(check.problems)
    return spec


_BUDGET_KEYS = {"scope", "period", "time_zone", "thresholds", "forecast", "notify"}


def _cleaned(check: _Checker, cleaner, value: Any, path: str, default: Any) -> Any:
    """Run one of ``costcenter.budgets``' validators (shared with the form and the API)."""
    try:
        return cleaner(value)
    except ValueError as exc:
        check.problem(path, str(exc))
        return default


def _budget(check: _Checker, raw: Any, path: str) -> dict | None:
    """One ``budgets[]`` entry: ``{name, amount, scope?, period?, time_zone?, thresholds?,
    forecast?, notify?: {emails?, webhooks?}}``; ``scope.team`` names one team."""
    from costcenter import budgets as budget_rules
    from costcenter.models import BudgetPeriodKind

    if check.mapping(raw, path, {"name", "amount"}, _BUDGET_KEYS) is None:
        return None
    budget = {
        "name": check.text(raw.get("name"), f"{path}.name"),
        "amount": check.decimal(raw.get("amount"), f"{path}.amount", positive=True),
        "period": check.choice(raw.get("period", "month"), f"{path}.period", list(BudgetPeriodKind.values)),
        "time_zone": _cleaned(
            check, budget_rules.clean_time_zone, raw.get("time_zone", "UTC"), f"{path}.time_zone", "UTC"
        ),
        "thresholds": _cleaned(
            check, budget_rules.clean_thresholds, raw.get("thresholds"), f"{path}.thresholds", [50, 80, 100]
        ),
        "forecast_alert": True,
        "team": None,
        "scope": {},
        "emails": [],
        "webhooks": [],
    }
    forecast = raw.get("forecast", True)
    if not isinstance(forecast, bool):
        check.problem(f"{path}.forecast", "must be true or false")
    else:
        budget["forecast_alert"] = forecast
    scope = raw.get("scope")
    if scope is not None:
        if not isinstance(scope, dict):
            check.problem(f"{path}.scope", "must be a mapping of dimensions to values")
        else:
            scope = dict(scope)
            if "team" in scope:
                budget["team"] = check.text(
                    scope.pop("team"), f"{path}.scope.team", max_length=64, pattern=_SLUG
                )
            budget["scope"] = _cleaned(check, budget_rules.clean_scope, scope, f"{path}.scope", {})
    notify = raw.get("notify")
    if notify is not None and check.mapping(notify, f"{path}.notify", set(), {"emails", "webhooks"}):
        budget["emails"] = _cleaned(
            check, budget_rules.clean_emails, notify.get("emails"), f"{path}.notify.emails", []
        )
        budget["webhooks"] = _cleaned(
            check, budget_rules.clean_webhooks, notify.get("webhooks"), f"{path}.notify.webhooks", []
        )
    return budget


def _label_matchers(check: _Checker, match: Any, path: str) -> dict[str, str]:
    if match is None:
        return {}
    if not isinstance(match, dict):
        check.problem(path, "must map label names to regular expressions")
        return {}
    matchers = {}
    for label, pattern in match.items():
        if not isinstance(label, str) or not _LABEL_NAME.match(label):
            check.problem(f"{path}.{label}", "is not a valid Prometheus label name")
            continue
        if not isinstance(pattern, str):
            check.problem(f"{path}.{label}", "must be a regular expression in quotes")
            continue
        try:
            re.compile(pattern)
        except re.error as exc:
            check.problem(f"{path}.{label}", f"is not a valid regular expression ({exc})")
            continue
        matchers[label] = pattern
    return matchers


def _prices(check: _Checker, raw_list: Any, path: str, columns: dict[str, bool], endpoint_key: bool = True):
    """Price rows with ``columns`` ({name: required}); checks each series for overlaps."""
    optional = {"effective_to"} | {name for name, required in columns.items() if not required}
    if endpoint_key:
        optional.add("endpoint")
    required = {"effective_from"} | {name for name, required in columns.items() if required}
    rows: list[PriceSpec] = []
    for j, raw in enumerate(check.items(raw_list, path)):
        row_path = f"{path}[{j}]"
        if check.mapping(raw, row_path, required, optional) is None:
            continue
        start = check.moment(raw.get("effective_from"), f"{row_path}.effective_from")
        end = check.moment(raw.get("effective_to"), f"{row_path}.effective_to")
        values = {name: check.decimal(raw.get(name), f"{row_path}.{name}") for name in columns}
        if start and end and end <= start:
            check.problem(f"{row_path}.effective_to", "must be after effective_from")
            continue
        if start is None:
            continue
        endpoint = check.text(raw.get("endpoint"), f"{row_path}.endpoint") if endpoint_key else None
        rows.append(PriceSpec(start, end, values, endpoint))
    for endpoint in {row.endpoint for row in rows}:
        series = [(row.effective_from, row.effective_to) for row in rows if row.endpoint == endpoint]
        problem = overlap_problem(series)
        if problem:
            on = f" on endpoint {endpoint}" if endpoint else ""
            check.problem(path, f"overlapping price periods{on}: {problem}")
    return rows


def _check_names_unique(check: _Checker, spec: CatalogSpec) -> None:
    for section, key in (("teams", "slug"), ("pools", "name"), ("endpoints", "name"), ("budgets", "name")):
        seen: dict[str, int] = {}
        for i, item in enumerate(getattr(spec, section)):
            name = item.get(key)
            if name in seen:
                check.problem(
                    f"{section}[{i}].{key}", f"{name!r} is already defined at {section}[{seen[name]}]"
                )
            elif name:
                seen[name] = i
    seen_models: dict[tuple[str, str], int] = {}
    for i, model in enumerate(spec.models):
        key = (model["name"], model["version"])
        if key in seen_models:
            check.problem(f"models[{i}].name", f"{key[0]!r} is already defined at models[{seen_models[key]}]")
        elif key[0]:
            seen_models[key] = i


def _check_references(check: _Checker, spec: CatalogSpec) -> None:
    """Endpoints name pools and prices name endpoints: each must be in the file or the database."""
    pools = {pool["name"] for pool in spec.pools} | set(Pool.objects.values_list("name", flat=True))
    endpoints = {endpoint["name"] for endpoint in spec.endpoints}
    known_endpoints = endpoints | set(Endpoint.objects.values_list("name", flat=True))
    for i, endpoint in enumerate(spec.endpoints):
        if endpoint["pool"] and endpoint["pool"] not in pools:
            check.problem(f"endpoints[{i}].pool", f"unknown pool {endpoint['pool']!r}")
    for i, model in enumerate(spec.models):
        for j, price in enumerate(model["prices"]):
            if price.endpoint and price.endpoint not in known_endpoints:
                check.problem(f"models[{i}].prices[{j}].endpoint", f"unknown endpoint {price.endpoint!r}")
    if spec.budgets:
        teams = {team["slug"] for team in spec.teams} | set(Team.objects.values_list("slug", flat=True))
        for i, budget in enumerate(spec.budgets):
            if budget["team"] and budget["team"] not in teams:
                check.problem(f"budgets[{i}].scope.team", f"unknown team {budget['team']!r}")


# --- Applying --------------------------------------------------------------------------------
@dataclass
class ApplyReport:
    created: dict[str, int] = field(default_factory=dict)
    updated: dict[str, int] = field(default_factory=dict)
    deleted: dict[str, int] = field(default_factory=dict)

    def count(self, kind: str, outcome: str) -> None:
        bucket = getattr(self, outcome, None)
        if bucket is not None:
            bucket[kind] = bucket.get(kind, 0) + 1

    @property
    def changed(self) -> bool:
        return any(self.created.values()) or any(self.updated.values()) or any(self.deleted.values())

    def summary(self) -> str:
        kinds = ["teams", "pools", "endpoints", "models", "prices", "budgets"]
        parts = []
        for kind in kinds:
            figures = [f"{getattr(self, o).get(kind, 0)} {o}" for o in ("created", "updated", "deleted")]
            parts.append(f"{kind}: {', '.join(figures)}")
        return "; ".join(parts) if self.changed else "catalog unchanged"


def _upsert(report: ApplyReport, kind: str, model, lookup: dict, values: dict):
    """Create or update one row, saving only when a value differs (so a re-load writes nothing)."""
    obj = model.objects.filter(**lookup).first()
    if obj is None:
        obj = model.objects.create(**lookup, **values)
        report.count(kind, "created")
        return obj
    changed = [name for name, value in values.items() if getattr(obj, name) != value]
    if changed:
        for name in changed:
            setattr(obj, name, values[name])
        obj.save(update_fields=changed)
        report.count(kind, "updated")
    return obj


def _sync_prices(report: ApplyReport, model, parent: dict, rows: list[tuple[dict, dict]]) -> None:
    """Make a price series equal ``rows`` (lookup, values); rows not listed are removed.

    Deletions run first so a row moved to a new start cannot collide with the old one.
    """
    wanted = {tuple(sorted(lookup.items())) for lookup, _ in rows}
    for existing in model.objects.filter(**parent):
        key = tuple(sorted({"effective_from": existing.effective_from, **_series_key(existing)}.items()))
        if key not in wanted:
            existing.delete()
            report.count("prices", "deleted")
    for lookup, values in rows:
        _upsert(report, "prices", model, {**parent, **lookup}, values)


def _series_key(price) -> dict:
    return {"endpoint_id": price.endpoint_id} if isinstance(price, TokenPrice) else {}


@transaction.atomic
def catalog_apply(spec: CatalogSpec) -> ApplyReport:
    report = ApplyReport()
    for team in spec.teams:
        _upsert(report, "teams", Team, {"slug": team["slug"]}, {"name": team["name"]})
    for pool in spec.pools:
        values = {
            key: pool[key] for key in ("vendor", "gpu_model", "gpu_count", "kwh_price", "prometheus_match")
        }
        values |= {"input_weight": pool["input_weight"], "output_weight": pool["output_weight"]}
        obj = _upsert(report, "pools", Pool, {"name": pool["name"]}, values)
        if pool["prices"]:
            rows = [
                (
                    {"effective_from": p.effective_from},
                    {"effective_to": p.effective_to, "gpu_hour_price": p.values["gpu_hour"]},
                )
                for p in pool["prices"]
            ]
            _sync_prices(report, GpuHourPrice, {"pool_id": obj.pk}, rows)
    pools_by_name = dict(Pool.objects.values_list("name", "pk"))
    for endpoint in spec.endpoints:
        values = {
            "kind": endpoint["kind"],
            "provider": endpoint["provider"],
            "pool_id": pools_by_name.get(endpoint["pool"]) if endpoint["pool"] else None,
        }
        _upsert(report, "endpoints", Endpoint, {"name": endpoint["name"]}, values)
    endpoints_by_name = dict(Endpoint.objects.values_list("name", "pk"))
    for model in spec.models:
        obj = _upsert(
            report,
            "models",
            LlmModel,
            {"name": model["name"], "version": model["version"]},
            {"family": model["family"]},
        )
        if model["prices"]:
            rows = [
                (
                    {"effective_from": p.effective_from, "endpoint_id": endpoints_by_name.get(p.endpoint)},
                    {
                        "effective_to": p.effective_to,
                        "input_per_mtok": p.values["input"],
                        "cached_input_per_mtok": p.values["cached_input"],
                        "output_per_mtok": p.values["output"],
                    },
                )
                for p in model["prices"]
            ]
            _sync_prices(report, TokenPrice, {"model_id": obj.pk}, rows)
    _apply_budgets(report, spec.budgets)
    return report


def _apply_budgets(report: ApplyReport, budgets: list[dict]) -> None:
    """Budgets are matched by name; their signing secret is made once and kept on reloads."""
    from costcenter.budgets import new_signing_secret
    from costcenter.models import Budget

    teams_by_slug = dict(Team.objects.values_list("slug", "pk"))
    for budget in budgets:
        values = {
            key: budget[key] for key in ("period", "time_zone", "amount", "thresholds", "forecast_alert")
        }
        values |= {
            "team_id": teams_by_slug.get(budget["team"]) if budget["team"] else None,
            "scope": budget["scope"],
            "emails": budget["emails"],
            "webhooks": budget["webhooks"],
            "from_catalog": True,
        }
        if not Budget.objects.filter(name=budget["name"]).exists():
            values["signing_secret"] = new_signing_secret()
        _upsert(report, "budgets", Budget, {"name": budget["name"]}, values)


def catalog_load(text: str, *, source: str = "catalog") -> ApplyReport:
    """Validate then apply; raises ``CatalogError`` and writes nothing if the file has any problem."""
    return catalog_apply(catalog_parse(text, source=source))
