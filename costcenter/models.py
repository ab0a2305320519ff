"""The domain catalog: teams and roles, models, endpoints, GPU pools and the price book.

Models hold fields, constraints and choices only; reads live in ``selectors``, pricing rules in
``pricing`` and catalog loading in ``catalog``.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

from costcenter.money import rate_field, weight_field


class Team(models.Model):
    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    # Set when ingestion met the team in usage before anyone put it in the catalog.
    auto_registered = models.BooleanField(default=False)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.name


class TeamRole(models.TextChoices):
    VIEWER = "viewer", "Viewer"
    EDITOR = "editor", "Editor"
    ADMIN = "admin", "Admin"


class Membership(models.Model):
    """A user's role in one team: viewers read, editors manage budgets, admins manage members."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=TeamRole.choices, default=TeamRole.VIEWER)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "team"], name="membership_user_team_unique")]
        ordering = ["team__slug", "user__username"]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class OrgRole(models.TextChoices):
    NONE = "", "Team member only"
    VIEWER = "viewer", "Org-wide viewer"
    ADMIN = "admin", "Org admin"


class UserProfile(models.Model):
    """Org-wide role (managers see every team) and the time zone pages and reports use."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="profile")
    org_role = models.CharField(max_length=16, choices=OrgRole.choices, default=OrgRole.NONE, blank=True)
    time_zone = models.CharField(max_length=64, default="UTC")

    def __str__(self) -> str:
        return f"profile of {self.user}"

    def clean(self) -> None:
        from zoneinfo import available_timezones

        if self.time_zone not in available_timezones():
            raise ValidationError({"time_zone": f"unknown time zone {self.time_zone!r}"})


class Vendor(models.TextChoices):
    NVIDIA = "nvidia", "NVIDIA"
    AMD = "amd", "AMD"
    OTHER = "other", "Other"


class LlmModel(models.Model):
    """A model as usage records name it. ``version`` "" stands for any version of ``name``."""

    name = models.CharField(max_length=200)
    version = models.CharField(max_length=100, blank=True, default="")
    family = models.CharField(max_length=100, blank=True, default="")
    auto_registered = models.BooleanField(default=False)

    class Meta:
        verbose_name = "model"
        constraints = [
            models.UniqueConstraint(fields=["name", "version"], name="llmmodel_name_version_unique")
        ]
        ordering = ["name", "version"]

    def __str__(self) -> str:
        return f"{self.name}@{self.version}" if self.version else self.name


class Pool(models.Model):
    """A self-run GPU pool; its Prometheus series are found by ``prometheus_match`` label regexes."""

    name = models.CharField(max_length=100, unique=True)
    vendor = models.CharField(max_length=16, choices=Vendor.choices)
    gpu_model = models.CharField(max_length=100)
    gpu_count = models.PositiveIntegerField()
    # Price of energy per kWh; null means energy is not charged separately.
    kwh_price = rate_field(null=True, blank=True)
    prometheus_match = models.JSONField(default=dict, blank=True)
    input_weight = weight_field(default=1)
    output_weight = weight_field(default=1)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(gpu_count__gt=0), name="pool_gpu_count_positive"),
            models.CheckConstraint(
                condition=Q(kwh_price__isnull=True) | Q(kwh_price__gte=0), name="pool_kwh_price_non_negative"
            ),
            models.CheckConstraint(
                condition=Q(input_weight__gte=0)
                & Q(output_weight__gte=0)
                & (Q(input_weight__gt=0) | Q(output_weight__gt=0)),
                name="pool_weights_valid",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class EndpointKind(models.TextChoices):
    TOKEN_PRICED = "token_priced", "Token-priced (hosted API)"
    GPU_POOL = "gpu_pool", "GPU pool (self-run)"
    # Named by usage but not (yet) in the catalog: its attempts are counted and unpriced.
    UNKNOWN = "unknown", "Unknown (not in the catalog)"


class Endpoint(models.Model):
    name = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=16, choices=EndpointKind.choices)
    provider = models.CharField(max_length=100, blank=True, default="")
    pool = models.ForeignKey(Pool, on_delete=models.PROTECT, null=True, blank=True, related_name="endpoints")
    auto_registered = models.BooleanField(default=False)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=(
                    Q(kind__in=[EndpointKind.TOKEN_PRICED, EndpointKind.UNKNOWN]) & Q(pool__isnull=True)
                )
                | (Q(kind=EndpointKind.GPU_POOL) & Q(pool__isnull=False)),
                name="endpoint_pool_matches_kind",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if self.kind == EndpointKind.GPU_POOL and self.pool_id is None:
            raise ValidationError({"pool": "a gpu_pool endpoint needs a pool"})
        if self.kind == EndpointKind.TOKEN_PRICED:
            if self.pool_id is not None:
                raise ValidationError({"pool": "a token_priced endpoint has no pool"})
            if not self.provider:
                raise ValidationError({"provider": "a token_priced endpoint needs a provider"})

    @property
    def vendor(self) -> str:
        return self.pool.vendor if self.pool_id else Vendor.OTHER


class PricePeriod(models.Model):
    """A price row: in force from ``effective_from`` (inclusive) until ``effective_to`` (exclusive)
    or, when that is empty, until the next row of the same series begins."""

    effective_from = models.DateTimeField()
    effective_to = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True

    def series_filter(self) -> Q:
        raise NotImplementedError

    def clean(self) -> None:
        from costcenter.pricing import overlap_problem

        if self.effective_to is not None and self.effective_to <= self.effective_from:
            raise ValidationError({"effective_to": "must be after effective_from"})
        siblings = type(self).objects.filter(self.series_filter()).exclude(pk=self.pk)
        periods = [(row.effective_from, row.effective_to) for row in siblings]
        problem = overlap_problem([*periods, (self.effective_from, self.effective_to)])
        if problem:
            raise ValidationError(problem)


class TokenPrice(PricePeriod):
    """Per-1M-token prices of a model, optionally only on one endpoint (which then wins)."""

    model = models.ForeignKey(LlmModel, on_delete=models.CASCADE, related_name="prices")
    endpoint = models.ForeignKey(
        Endpoint, on_delete=models.CASCADE, null=True, blank=True, related_name="prices"
    )
    input_per_mtok = rate_field()
    # Null means cached input tokens cost the same as other input tokens.
    cached_input_per_mtok = rate_field(null=True, blank=True)
    output_per_mtok = rate_field()

    class Meta:
        ordering = ["model__name", "endpoint__name", "effective_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["model", "endpoint", "effective_from"],
                nulls_distinct=False,
                name="tokenprice_series_start_unique",
            ),
            models.CheckConstraint(
                condition=Q(input_per_mtok__gte=0)
                & Q(output_per_mtok__gte=0)
                & (Q(cached_input_per_mtok__isnull=True) | Q(cached_input_per_mtok__gte=0)),
                name="tokenprice_non_negative",
            ),
            models.CheckConstraint(
                condition=Q(effective_to__isnull=True) | Q(effective_to__gt=models.F("effective_from")),
                name="tokenprice_period_ordered",
            ),
        ]

    def __str__(self) -> str:
        where = f" on {self.endpoint}" if self.endpoint_id else ""
        return f"{self.model}{where} from {self.effective_from:%Y-%m-%d %H:%M}"

    def series_filter(self) -> Q:
        return Q(model_id=self.model_id, endpoint_id=self.endpoint_id)

    @property
    def effective_cached_input_per_mtok(self):
        return self.input_per_mtok if self.cached_input_per_mtok is None else self.cached_input_per_mtok


class GpuHourPrice(PricePeriod):
    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="prices")
    gpu_hour_price = rate_field()

    class Meta:
        ordering = ["pool__name", "effective_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["pool", "effective_from"], name="gpuhourprice_series_start_unique"
            ),
            models.CheckConstraint(condition=Q(gpu_hour_price__gte=0), name="gpuhourprice_non_negative"),
            models.CheckConstraint(
                condition=Q(effective_to__isnull=True) | Q(effective_to__gt=models.F("effective_from")),
                name="gpuhourprice_period_ordered",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.pool} from {self.effective_from:%Y-%m-%d %H:%M}"

    def series_filter(self) -> Q:
        return Q(pool_id=self.pool_id)


class Workload(models.Model):
    """A kind of business task (summarize, classify …), named by usage records."""

    name = models.CharField(max_length=200, unique=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class TokenScope(models.TextChoices):
    READ = "read", "Read"
    INGEST = "ingest", "Ingest"


class ApiToken(models.Model):
    """A personal API token. Only its SHA-256 is stored; the token is shown once, at creation.

    A token acts for its user with that user's team visibility; ``ingest`` tokens may write usage
    only for the user's teams (org admins: any team), ``read`` tokens may only read.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, blank=True, default="")
    scope = models.CharField(max_length=16, choices=TokenScope.choices, default=TokenScope.READ)
    # The first characters of the token, kept in clear so a user can tell tokens apart.
    prefix = models.CharField(max_length=16)
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.scope}) of {self.user}"


# --- Costed rollups ----------------------------------------------------------------------------
# Written only by ``costcenter.costing`` (whole buckets, never increments); read only through
# ``costcenter.selectors``. Dimension references are plain ids without database constraints, as
# in the raw attempts table, so rollups can be rebuilt in any order.


def _amount(**kwargs) -> models.DecimalField:
    from costcenter.money import AMOUNT_DECIMAL_PLACES, AMOUNT_MAX_DIGITS

    return models.DecimalField(max_digits=AMOUNT_MAX_DIGITS, decimal_places=AMOUNT_DECIMAL_PLACES, **kwargs)


def _histogram() -> ArrayField:
    return ArrayField(models.BigIntegerField(), default=list, blank=True)


# The additive columns of a usage rollup: a coarser bucket is the sum of finer ones.
ROLLUP_SUM_FIELDS = (
    "attempts",
    "successful_attempts",
    "tasks",
    "successful_tasks",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "reasoning_tokens",
    "unpriced_attempts",
    "unpriced_tokens",
)


class UsageRollupFields(models.Model):
    """Counts, tokens, cost and histograms of one group in one time bucket."""

    team = models.ForeignKey(
        Team, null=True, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    workload = models.ForeignKey(
        Workload, null=True, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    model = models.ForeignKey(LlmModel, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    endpoint = models.ForeignKey(
        Endpoint, null=True, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    attempts = models.BigIntegerField()
    successful_attempts = models.BigIntegerField()
    # Distinct task ids with an attempt (a successful attempt) in this bucket and group.
    tasks = models.BigIntegerField()
    successful_tasks = models.BigIntegerField()
    prompt_tokens = models.BigIntegerField()
    completion_tokens = models.BigIntegerField()
    cached_tokens = models.BigIntegerField()
    reasoning_tokens = models.BigIntegerField()
    # Known cost of the group's priced attempts; null when none of them is priced.
    cost = _amount(null=True)
    # The idle (unused GPU) share inside ``cost``; null when no utilisation arrived.
    idle_cost = _amount(null=True)
    unpriced_attempts = models.BigIntegerField()
    unpriced_tokens = models.BigIntegerField()
    latency_histogram = _histogram()
    ttft_histogram = _histogram()
    output_tps_histogram = _histogram()

    class Meta:
        abstract = True


class HourlyUsage(UsageRollupFields):
    hour = models.DateTimeField()
    # Price versions used by this group's attempts (token price rows, or the pool's GPU-hour price).
    token_price_ids = ArrayField(models.IntegerField(), default=list, blank=True)
    gpu_hour_price = models.ForeignKey(
        "GpuHourPrice", null=True, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    weighted_tokens = _amount(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["hour", "team", "workload", "model", "endpoint"],
                nulls_distinct=False,
                name="hourlyusage_bucket_unique",
            )
        ]
        indexes = [models.Index(fields=["hour"])]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H}:00 model {self.model_id}"


class ExactSumField(models.Field):
    """A ``numeric`` column without precision or scale, read and written as ``Decimal``.

    For sums of exact quotients (a cost split by token weights): Postgres keeps every digit, so a
    sum of such per-day sums equals the sum of the per-hour quotients to the last digit.
    """

    description = "Decimal without a fixed scale"

    def db_type(self, connection) -> str:
        return "numeric"

    def to_python(self, value):
        from decimal import Decimal

        return value if value is None or isinstance(value, Decimal) else Decimal(str(value))


class DailyUsage(UsageRollupFields):
    """Hourly buckets added up per UTC day, for long ranges (task counts are sums of hours).

    Besides the sums of the hourly columns it keeps what the matrix and cost change would
    otherwise compute from every hourly row of a range (``costing.rebuild_day`` writes them):
    the split of ``cost`` into its output and flat parts (``cost_split``) and the pool metrics
    weighted by attempts (Σ attempts × the pool-hour's value and Σ attempts, over the hours
    whose pool reported the value), and the counts of the hours whose cost is known.
    """

    day = models.DateTimeField()
    # The counts above over the day's hours whose cost is known (a day-row can mix priced and
    # unpriced hours; per-token prices divide priced cost by priced tokens only).
    priced_attempts = models.BigIntegerField(default=0)
    priced_successful_tasks = models.BigIntegerField(default=0)
    priced_prompt_tokens = models.BigIntegerField(default=0)
    priced_completion_tokens = models.BigIntegerField(default=0)
    # Σ over the day's hours of cost_split.OUTPUT_COST_SQL / FLAT_COST_SQL; null when no hour is priced.
    output_cost = ExactSumField(null=True)
    flat_cost = ExactSumField(null=True)
    utilisation_x_attempts = models.FloatField(null=True)
    utilisation_attempts = models.BigIntegerField(default=0)
    memory_used_x_attempts = models.FloatField(null=True)
    memory_used_attempts = models.BigIntegerField(default=0)
    memory_total_x_attempts = models.FloatField(null=True)
    memory_total_attempts = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["day", "team", "workload", "model", "endpoint"],
                nulls_distinct=False,
                name="dailyusage_bucket_unique",
            )
        ]
        indexes = [models.Index(fields=["day"])]

    def __str__(self) -> str:
        return f"{self.day:%Y-%m-%d} model {self.model_id}"


class PoolHour(models.Model):
    """One GPU pool in one hour: what it cost, to whom it was allocated, what was idle."""

    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="hours")
    hour = models.DateTimeField()
    gpu_count = models.PositiveIntegerField()
    gpu_hour_price = models.ForeignKey(
        "GpuHourPrice", null=True, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    energy_kwh = models.DecimalField(max_digits=24, decimal_places=9, null=True)
    energy_cost = _amount(null=True)
    # gpu_count × GPU-hour price + energy cost; null when no GPU-hour price is in force.
    pool_cost = _amount(null=True)
    allocated_cost = _amount(null=True)
    unallocated_cost = _amount(null=True)
    idle_cost = _amount(null=True)
    mean_utilisation = models.DecimalField(max_digits=12, decimal_places=9, null=True)
    memory_used_mib = models.FloatField(null=True)
    memory_total_mib = models.FloatField(null=True)
    attempts = models.BigIntegerField(default=0)
    weighted_tokens = _amount(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["pool", "hour"], name="poolhour_unique")]
        indexes = [models.Index(fields=["hour"])]

    def __str__(self) -> str:
        return f"{self.pool} {self.hour:%Y-%m-%d %H}:00"


class RollupState(models.Model):
    """How far the hourly rollups have been carried forward (hours before it are complete)."""

    name = models.CharField(max_length=50, unique=True)
    done_until = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} until {self.done_until:%Y-%m-%d %H}:00"


class RepriceHour(models.Model):
    """An hour to recompute because the price book changed (not because new usage arrived).

    New usage marks ``ingest.DirtyHour``; price, pool and endpoint changes mark this, so hours
    without usage can be recosted in bulk without looking for attempts.
    """

    hour = models.DateTimeField(primary_key=True)

    def __str__(self) -> str:
        return f"reprice {self.hour:%Y-%m-%d %H}:00"


# --- Budgets and alerts ------------------------------------------------------------------------
# Decisions live in ``costcenter.budgets`` (status, forecast), ``costcenter.alerts`` (evaluation,
# transitions) and ``costcenter.notify`` (delivery). Every state change is a row; a change is
# claimed once by a conditional UPDATE, so overlapping workers never notify twice.

# Dimensions a budget or rule may be narrowed to, besides its team (the selectors' filters).
SCOPE_DIMENSIONS = ("workload", "model", "vendor", "endpoint", "pool")


def default_thresholds() -> list[int]:
    return [50, 80, 100]


class BudgetPeriodKind(models.TextChoices):
    DAY = "day", "Day"
    WEEK = "week", "Week (Monday to Sunday)"
    MONTH = "month", "Month"
    QUARTER = "quarter", "Quarter"


class BudgetState(models.TextChoices):
    OK = "ok", "OK"
    WARNING = "warning", "Warning"
    EXCEEDED = "exceeded", "Exceeded"


class Budget(models.Model):
    """An amount of spend per period for a scope (a team, and optionally workloads, models …).

    ``team`` is both the owner (its editors and admins manage the budget) and the team filter;
    without a team the budget covers every team and only org admins manage it.
    """

    name = models.CharField(max_length=200, unique=True)
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.CASCADE, related_name="budgets")
    # {dimension: [values]} for the dimensions of SCOPE_DIMENSIONS; empty = the whole team (or all).
    scope = models.JSONField(default=dict, blank=True)
    period = models.CharField(max_length=16, choices=BudgetPeriodKind.choices, default=BudgetPeriodKind.MONTH)
    # Period boundaries (midnight, Monday, the 1st) are taken in this zone.
    time_zone = models.CharField(max_length=64, default="UTC")
    amount = _amount()
    # Percentages of the amount; each one crossed notifies once per period.
    thresholds = ArrayField(models.PositiveSmallIntegerField(), default=default_thresholds)
    forecast_alert = models.BooleanField(default=True)
    emails = ArrayField(models.CharField(max_length=254), default=list, blank=True)
    # [{"url": "https://…", "format": "json" | "slack"}]
    webhooks = models.JSONField(default=list, blank=True)
    # Webhook bodies are signed with this (HMAC-SHA256); shown to those who manage the budget.
    signing_secret = models.CharField(max_length=64)
    from_catalog = models.BooleanField(default=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.CheckConstraint(condition=Q(amount__gt=0), name="budget_amount_positive")]

    def __str__(self) -> str:
        return self.name


class BudgetPeriod(models.Model):
    """A budget's state in one period: the highest threshold crossed and the last evaluation.

    A new period starts at level 0 (state ok): that is the visible reset.
    """

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="periods")
    start = models.DateTimeField()
    end = models.DateTimeField()
    # Highest threshold (percent) crossed in this period; 0 = none. Changed only by a claimed UPDATE.
    level = models.PositiveSmallIntegerField(default=0)
    state = models.CharField(max_length=16, choices=BudgetState.choices, default=BudgetState.OK)
    forecast_fired_at = models.DateTimeField(null=True, blank=True)
    spent = _amount(null=True, blank=True)
    unpriced_attempts = models.BigIntegerField(default=0)
    projected = _amount(null=True, blank=True)
    projected_exceed_at = models.DateTimeField(null=True, blank=True)
    evaluated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["budget", "-start"]
        constraints = [models.UniqueConstraint(fields=["budget", "start"], name="budgetperiod_unique")]

    def __str__(self) -> str:
        return f"{self.budget} from {self.start:%Y-%m-%d %H:%M}"


class AlertRuleKind(models.TextChoices):
    COST_PER_TASK_ABOVE = "cost_per_task_above", "Cost per successful task above a value"
    COST_PER_TASK_INCREASE = "cost_per_task_increase", "Cost per successful task up N % on the baseline"
    FAILURE_RATE_ABOVE = "failure_rate_above", "Task failure rate above a value"
    RETRY_RATE_ABOVE = "retry_rate_above", "Retry rate above a value"
    GPU_IDLE = "gpu_idle", "Mean GPU utilisation of a pool below a value for N hours"
    UNPRICED_USAGE = "unpriced_usage", "New unpriced usage"
    INGESTION_LAG = "ingestion_lag", "Ingestion lag above N minutes"
    SPEND_ANOMALY = "spend_anomaly", "Spend anomaly against the same hours of previous weeks"


class AlertRuleState(models.TextChoices):
    OK = "ok", "OK"
    FIRING = "firing", "Firing"


class AlertRule(models.Model):
    """A condition over the rollups (or ingestion) that fires and resolves; see ``alerts``."""

    name = models.CharField(max_length=200)
    team = models.ForeignKey(
        Team, null=True, blank=True, on_delete=models.CASCADE, related_name="alert_rules"
    )
    kind = models.CharField(max_length=32, choices=AlertRuleKind.choices)
    scope = models.JSONField(default=dict, blank=True)
    # The value compared with: money, a ratio (0.05), a percentage, minutes or a deviation factor.
    threshold = models.DecimalField(max_digits=24, decimal_places=9)
    window_hours = models.PositiveIntegerField(default=24)
    enabled = models.BooleanField(default=True)
    emails = ArrayField(models.CharField(max_length=254), default=list, blank=True)
    webhooks = models.JSONField(default=list, blank=True)
    signing_secret = models.CharField(max_length=64)
    # Changed only by a claimed UPDATE (ok → firing → ok).
    state = models.CharField(max_length=16, choices=AlertRuleState.choices, default=AlertRuleState.OK)
    state_since = models.DateTimeField(null=True, blank=True)
    last_value = models.JSONField(null=True, blank=True)
    last_evaluated_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(window_hours__gt=0), name="alertrule_window_positive")
        ]

    def __str__(self) -> str:
        return self.name


class AlertEventKind(models.TextChoices):
    THRESHOLD = "threshold", "Budget threshold"
    FORECAST = "forecast", "Budget forecast"
    RESET = "reset", "Budget period reset"
    RULE = "rule", "Alert rule"


class AlertEvent(models.Model):
    """One state transition of a budget or a rule; the thing that notifies.

    Firing events (a threshold crossed, a forecast, a rule firing) stay open until resolved:
    by the next period (budgets) or the condition clearing (rules).
    """

    kind = models.CharField(max_length=16, choices=AlertEventKind.choices)
    budget = models.ForeignKey(Budget, null=True, blank=True, on_delete=models.CASCADE, related_name="events")
    period = models.ForeignKey(
        BudgetPeriod, null=True, blank=True, on_delete=models.CASCADE, related_name="events"
    )
    rule = models.ForeignKey(
        AlertRule, null=True, blank=True, on_delete=models.CASCADE, related_name="events"
    )
    # The owning team (null: org-wide), copied for scoping the alerts page.
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    from_state = models.CharField(max_length=16)
    to_state = models.CharField(max_length=16)
    level = models.PositiveSmallIntegerField(null=True, blank=True)
    firing = models.BooleanField(default=False)
    title = models.CharField(max_length=300)
    details = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    acknowledged_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["created_at"])]

    def __str__(self) -> str:
        return self.title


class NotificationChannel(models.TextChoices):
    EMAIL = "email", "E-mail"
    WEBHOOK = "webhook", "Webhook (JSON)"
    SLACK = "slack", "Webhook (Slack)"


class NotificationStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    SENT = "sent", "Sent"
    FAILED = "failed", "Failed"


class Notification(models.Model):
    """One message of one event to one recipient (an address or a URL): the delivery outbox.

    Created in the transaction that claims the event, so each exists once; sent by a worker that
    claims it with a conditional UPDATE (a lease), retried with backoff for 24 hours.
    """

    event = models.ForeignKey(AlertEvent, on_delete=models.CASCADE, related_name="notifications")
    channel = models.CharField(max_length=16, choices=NotificationChannel.choices)
    target = models.CharField(max_length=2000)
    status = models.CharField(
        max_length=16, choices=NotificationStatus.choices, default=NotificationStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()
    next_attempt_at = models.DateTimeField()
    claimed_until = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["event", "channel", "target"], name="notification_unique")
        ]
        indexes = [models.Index(fields=["status", "next_attempt_at"])]

    def __str__(self) -> str:
        return f"{self.channel} to {self.target} ({self.status})"


class DeliveryAttempt(models.Model):
    """One try at sending a notification: the delivery log shown in the UI."""

    notification = models.ForeignKey(Notification, on_delete=models.CASCADE, related_name="delivery_attempts")
    at = models.DateTimeField()
    ok = models.BooleanField()
    status_code = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    duration_ms = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{'ok' if self.ok else 'failed'} at {self.at:%Y-%m-%d %H:%M:%S}"
