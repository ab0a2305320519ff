"""Page-level selectors: what each dashboard shows, composed from the core selectors.

No cost number is computed here: spend, tasks, tokens, idle and unallocated cost come from
``selectors.cost_rows`` / ``cost_totals`` / ``pool_cost_rows``, the evaluation matrix from
``matrix.evaluation_matrix`` and the decomposition from ``cost_change.cost_change``, so a page
and the API always show the same numbers. This module only parses what a page asks for (periods,
scope, grouping), adds rows up, ranks them and derives display ratios (changes, per-unit figures).

Periods are whole UTC days, half-open ``[start, end)``, so long ranges read the daily rollups.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal

from django.db.models import Avg, Count, Max, Min, Sum
from django.http import Http404, QueryDict

from costcenter.access import sees_all_teams, visible_teams
from costcenter.models import Endpoint, LlmModel, Pool, Vendor, Workload
from costcenter.selectors import GRANULARITIES, CostQuery, cost_rows, cost_totals, pool_cost_rows

DIMENSIONS = ("model", "vendor", "workload", "team", "endpoint", "pool")
DIMENSION_LABELS = {
    "model": "Model",
    "vendor": "Accelerator vendor",
    "workload": "Workload",
    "team": "Team",
    "endpoint": "Endpoint",
    "pool": "GPU pool",
}
# How a missing dimension value (hosted APIs have no vendor or pool; usage without a team …) is
# written in URLs and shown; the selectors take "" for it.
NONE_VALUE = "-"
NONE_LABELS = {
    "vendor": "hosted API",
    "pool": "hosted API",
    "team": "(no team)",
    "workload": "(no workload)",
    "endpoint": "(no endpoint)",
    "model": "(no model)",
}
VENDOR_LABELS = dict(Vendor.choices)
UNDER_USED = 0.4  # pools below this mean utilisation are highlighted
MAX_TABLE_ROWS = 500  # the explorer shows at most this many rows; the CSV has them all


class BadRequest(ValueError):
    """A parameter the page cannot use; the page shows the message and falls back to a default."""


# --- Periods -------------------------------------------------------------------------------------

PERIOD_CHOICES = (
    ("7d", "Last 7 days"),
    ("30d", "Last 30 days"),
    ("90d", "Last 90 days"),
    ("mtd", "Month to date"),
    ("custom", "Custom"),
)
MAX_DAYS = 400


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(0), tzinfo=UTC)


@dataclass(frozen=True)
class Period:
    """Whole UTC days [start, end); ``last_day`` is the inclusive end shown to people."""

    key: str
    start: datetime
    end: datetime

    @property
    def days(self) -> int:
        return (self.end - self.start).days

    @property
    def first_day(self) -> date:
        return self.start.date()

    @property
    def last_day(self) -> date:
        return (self.end - timedelta(days=1)).date()

    @property
    def label(self) -> str:
        if self.days == 1:
            return f"{self.first_day:%d %b %Y}"
        return f"{self.first_day:%d %b} – {self.last_day:%d %b %Y}"

    def previous(self) -> Period:
        """The period of the same length just before this one (the comparison period)."""
        return Period("previous", self.start - (self.end - self.start), self.start)

    def hourly(self) -> bool:
        return self.days <= 3


def _parse_day(text: str, name: str) -> date:
    try:
        return date.fromisoformat(text.strip())
    except ValueError:
        raise BadRequest(f"{name}: {text!r} is not a date (YYYY-MM-DD)") from None


def parse_period(params: QueryDict, *, now: datetime, default: str = "30d") -> Period:
    """``period`` = 7d | 30d | 90d | mtd | custom (with ``start`` and ``end``, both inclusive days).

    Rolling periods end with today (UTC), so today's partial day is included.
    """
    key = params.get("period") or ("custom" if params.get("start") and params.get("end") else default)
    today = now.astimezone(UTC).date()
    tomorrow = _midnight(today + timedelta(days=1))
    preset = None
    if key in ("7d", "30d", "90d"):
        preset = Period(key, tomorrow - timedelta(days=int(key[:-1])), tomorrow)
    elif key == "mtd":
        preset = Period(key, _midnight(today.replace(day=1)), tomorrow)
    if preset is not None:
        # Dates edited in the form (without JavaScript the picker still says "Last 30 days") win.
        shown = (preset.first_day.isoformat(), preset.last_day.isoformat())
        asked = (params.get("start") or shown[0], params.get("end") or shown[1])
        if asked == shown:
            return preset
        key = "custom"
        params = {"start": asked[0], "end": asked[1]}
    if key == "custom":
        first = _parse_day(params.get("start", ""), "start")
        last = _parse_day(params.get("end", ""), "end")
        if last < first:
            raise BadRequest("end: the last day must not be before the first")
        if (last - first).days >= MAX_DAYS:
            raise BadRequest(f"the period may span at most {MAX_DAYS} days")
        return Period(key, _midnight(first), _midnight(last + timedelta(days=1)))
    raise BadRequest(f"period: unknown value {key!r}")


def period_or_default(params: QueryDict, *, now: datetime, default: str = "30d") -> tuple[Period, str]:
    """The asked period, or the default with the reason the asked one could not be used."""
    try:
        return parse_period(params, now=now, default=default), ""
    except BadRequest as problem:
        return parse_period(QueryDict(), now=now, default=default), str(problem)


# --- Scope (filters) -----------------------------------------------------------------------------


def parse_filters(
    params: QueryDict, *, user, dimensions=DIMENSIONS
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Filters from repeated parameters (``team=a&team=b``), in ``CostQuery`` form.

    A team the user may not see — or that does not exist — is a 404, like a hidden team's page:
    editing the URL to another team's slug shows nothing of it.
    """
    filters = []
    for dimension in dimensions:
        values = [value for value in params.getlist(dimension) if value != ""]
        if not values:
            continue
        values = sorted({"" if value == NONE_VALUE else value for value in values})
        if dimension == "team":
            named = [value for value in values if value]
            if named:
                visible = set(visible_teams(user).filter(slug__in=named).values_list("slug", flat=True))
                if set(named) - visible:
                    raise Http404("No such team")
            if "" in values and not sees_all_teams(user):
                values.remove("")  # usage without a team is not any member's to see
                if not values:
                    raise Http404("No such team")
        filters.append((dimension, tuple(values)))
    return tuple(filters)


def label_of(dimension: str, value) -> str:
    if value is None or value == "":
        return NONE_LABELS[dimension]
    if dimension == "vendor":
        return VENDOR_LABELS.get(value, value)
    return str(value)


def url_value(value) -> str:
    return NONE_VALUE if value is None or value == "" else str(value)


@dataclass(frozen=True)
class Option:
    value: str
    label: str


def filter_options(*, user) -> dict[str, list[Option]]:
    """Values offered by each filter: the user's teams and the catalog's names (five queries)."""
    return {
        "team": [
            Option(slug, name)
            for slug, name in visible_teams(user).order_by("slug").values_list("slug", "name")
        ],
        "workload": [
            Option(name, name) for name in Workload.objects.order_by("name").values_list("name", flat=True)
        ],
        "model": [
            Option(name, name)
            for name in LlmModel.objects.order_by("name").values_list("name", flat=True).distinct()
        ],
        "endpoint": [
            Option(name, name) for name in Endpoint.objects.order_by("name").values_list("name", flat=True)
        ],
        "pool": [Option(name, name) for name in Pool.objects.order_by("name").values_list("name", flat=True)]
        + [Option(NONE_VALUE, NONE_LABELS["pool"])],
        "vendor": [Option(value, label) for value, label in Vendor.choices]
        + [Option(NONE_VALUE, NONE_LABELS["vendor"])],
    }


def filters_as_params(filters) -> list[tuple[str, str]]:
    return [(dimension, url_value(value)) for dimension, values in filters for value in values]


# --- Small arithmetic on rows (no cost rules here: sums and ratios for display) -------------------


def change_ratio(current, previous) -> float | None:
    """(current − previous) / previous; None when either is unknown or previous is zero."""
    if current is None or previous is None or previous == 0:
        return None
    return float((Decimal(current) - Decimal(previous)) / abs(Decimal(previous)))


def _sum(values) -> Decimal | None:
    known = [value for value in values if value is not None]
    return sum(known, Decimal(0)) if known else None


def _div(numerator, denominator):
    if numerator is None or not denominator:
        return None
    return Decimal(numerator) / Decimal(denominator)


# --- Overview ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kpi:
    key: str
    label: str
    value: object
    previous: object
    kind: str  # money | money_precise | count | pct | tokens
    better: str = ""  # "up", "down" or "" (neutral): colours the change
    note: str = ""
    incomplete: bool = False

    @property
    def change(self) -> float | None:
        if self.kind == "pct":
            if self.value is None or self.previous is None:
                return None
            return float(self.value) - float(self.previous)  # percentage points, as a ratio
        return change_ratio(self.value, self.previous)

    @property
    def tone(self) -> str:
        change = self.change
        if not self.better or change is None or abs(change) < 1e-9:
            return "neutral"
        return "good" if (change > 0) == (self.better == "up") else "bad"


@dataclass
class Mover:
    value: object
    label: str
    current: Decimal | None
    previous: Decimal | None

    @property
    def delta(self) -> Decimal:
        return (self.current or Decimal(0)) - (self.previous or Decimal(0))

    @property
    def ratio(self) -> float | None:
        return change_ratio(self.current, self.previous)


@dataclass
class Overview:
    period: Period
    previous: Period
    stack_by: str
    totals: dict
    previous_totals: dict
    kpis: list[Kpi]
    series_rows: list[dict]  # cost_rows by day and stack dimension, current period
    unallocated_by_day: dict[datetime, Decimal] | None  # None: not part of this viewer's spend
    movers: list[Mover]
    has_usage: bool


def total_tokens(row: dict) -> int:
    return int(row["prompt_tokens"] or 0) + int(row["completion_tokens"] or 0)


def rank_movers(dimension: str, costs: dict[object, list], limit: int) -> list[Mover]:
    """``costs``: value -> [previous cost, current cost]; the ``limit`` that changed most."""
    movers = [
        Mover(value, label_of(dimension, value), current, prior)
        for value, (prior, current) in costs.items()
        if (current or 0) != (prior or 0)
    ]
    movers.sort(key=lambda mover: (-abs(mover.delta), mover.label))
    return movers[:limit]


def overview(*, user, period: Period, stack_by: str = "model", filters=()) -> Overview:
    """KPIs of ``period`` against the period before, spend per day stacked by ``stack_by``, top movers.

    Queries: the totals of both periods (``cost_totals``, 1–2 queries each), one ``cost_rows`` by day
    over both periods, and for org-wide viewers one ``pool_cost_rows`` by day over both periods.
    """
    previous = period.previous()
    totals = cost_totals(user=user, query=CostQuery(period.start, period.end, (), "total", filters))
    before = cost_totals(user=user, query=CostQuery(previous.start, previous.end, (), "total", filters))
    daily = cost_rows(user=user, query=CostQuery(previous.start, period.end, (stack_by,), "day", filters))
    current_rows = [row for row in daily if row["period"] >= period.start]
    with_unallocated = totals["unallocated_cost"] is not None
    unallocated_by_day = None
    idle, idle_before = totals["idle_cost"], before["idle_cost"]
    idle_note = "the idle share inside your teams' cost"
    if with_unallocated:
        pools = pool_cost_rows(
            user=user, start=previous.start, end=period.end, granularity="day", filters=filters
        )
        unallocated_by_day = defaultdict(Decimal)
        for row in pools:
            if row["period"] >= period.start and row["unallocated_cost"] is not None:
                unallocated_by_day[row["period"]] += row["unallocated_cost"]
        # Org-wide: the whole pools' idle cost, in allocated and unallocated hours alike.
        idle = _sum(row["idle_cost"] for row in pools if row["period"] >= period.start)
        idle_before = _sum(row["idle_cost"] for row in pools if row["period"] < period.start)
        idle_note = "GPU pools' cost × (1 − utilisation)"

    by_group: dict[object, list[Decimal | None]] = defaultdict(lambda: [None, None])
    for row in daily:
        slot = 1 if row["period"] >= period.start else 0
        if row["cost"] is not None:
            by_group[row[stack_by]][slot] = (by_group[row[stack_by]][slot] or Decimal(0)) + row["cost"]

    unpriced_note = (
        f"{totals['unpriced_tokens']:,} tokens without a price" if totals["unpriced_attempts"] else ""
    )
    kpis = [
        Kpi("spend", "Spend", totals["total_spend"], before["total_spend"], "money", "",
            "attempt cost + unallocated pool cost" if with_unallocated else "your teams' attempt cost",
            incomplete=bool(totals["unpriced_attempts"])),
        Kpi("successful_tasks", "Successful tasks", totals["successful_tasks"], before["successful_tasks"], "count", "up"),
        Kpi("cost_per_successful_task", "Cost per successful task", totals["cost_per_successful_task"],
            before["cost_per_successful_task"], "money_precise", "down",
            "failed attempts and retries included", incomplete=bool(totals["unpriced_attempts"])),
        Kpi("success_rate", "Task success rate", totals["success_rate"], before["success_rate"], "pct", "up"),
        Kpi("retry_rate", "Retry rate", totals["retry_rate"], before["retry_rate"], "pct", "down",
            "(attempts − tasks) / tasks"),
        Kpi("tokens", "Tokens", total_tokens(totals), total_tokens(before), "tokens", "", "prompt + completion"),
        Kpi("idle_cost", "Idle GPU cost", idle, idle_before, "money", "down", idle_note),
        Kpi("unallocated_cost", "Unallocated cost", totals["unallocated_cost"], before["unallocated_cost"], "money",
            "down", "pool-hours that served nothing" if with_unallocated else "shown to org-wide viewers"),
        Kpi("unpriced_attempts", "Unpriced attempts", totals["unpriced_attempts"], before["unpriced_attempts"],
            "count", "down", unpriced_note or "every attempt has a price"),
    ]  # fmt: skip
    return Overview(
        period=period,
        previous=previous,
        stack_by=stack_by,
        totals=totals,
        previous_totals=before,
        kpis=kpis,
        series_rows=current_rows,
        unallocated_by_day=dict(unallocated_by_day) if unallocated_by_day is not None else None,
        movers=rank_movers(stack_by, by_group, 8),
        has_usage=bool(totals["attempts"] or before["attempts"] or totals["total_spend"]),
    )


# --- Budgets at a glance -------------------------------------------------------------------------
MAX_BUDGETS = 8


def budget_glance(*, user, now: datetime) -> tuple[list[tuple], int]:
    """The user's budgets (up to ``MAX_BUDGETS``, tightest first) with their current period's status,
    from ``costcenter.budgets.budget_status`` (the alerts' own numbers), and how many there are.

    One query for the budgets, then the status of each (one or two rollup totals per budget).
    """
    from costcenter import budgets as budget_service
    from costcenter.models import Budget

    rows = list(budget_service.visible_owned(user, Budget.objects.select_related("team")).order_by("name"))
    statuses = [
        (budget, budget_service.budget_status(budget, now=now, with_forecast=False))
        for budget in rows[:MAX_BUDGETS]
    ]
    statuses.sort(key=lambda item: (-item[1].percent, item[0].name))
    return [
        (
            budget,
            status,
            budget_service.budget_scope_text(budget),
            min(100, max(0, round(float(status.percent)))),
        )
        for budget, status in statuses
    ], len(rows)


# --- Explorer ------------------------------------------------------------------------------------

EXPLORER_METRICS = (
    ("cost", "Cost"),
    ("successful_tasks", "Successful tasks"),
    ("cost_per_successful_task", "Cost per successful task"),
    ("attempts", "Attempts"),
    ("tokens", "Tokens (prompt + completion)"),
    ("success_rate", "Task success rate"),
    ("retry_rate", "Retry rate"),
    ("idle_cost", "Idle cost"),
    ("unpriced_attempts", "Unpriced attempts"),
)
SORTABLE = {
    "attempts",
    "tasks",
    "successful_tasks",
    "tokens",
    "cost",
    "cost_per_successful_task",
    "success_rate",
    "retry_rate",
    "idle_cost",
    "unpriced_attempts",
    "period",
    *DIMENSIONS,
}


@dataclass(frozen=True)
class ExplorerQuery:
    period: Period
    group_by: tuple[str, ...]
    granularity: str
    filters: tuple
    metric: str = "cost"
    sort: str = "-cost"

    def cost_query(self) -> CostQuery:
        return CostQuery(self.period.start, self.period.end, self.group_by, self.granularity, self.filters)


def parse_explorer(params: QueryDict, *, user, now: datetime) -> tuple[ExplorerQuery, list[str]]:
    """The explorer's state from its URL; unusable parameters fall back to defaults, with messages."""
    problems = []
    period, problem = period_or_default(params, now=now)
    if problem:
        problems.append(problem)
    group_by: list[str] = []
    for raw in params.getlist("group_by"):
        for value in raw.split(","):
            value = value.strip()
            if value and value not in group_by:
                if value in DIMENSIONS:
                    group_by.append(value)
                else:
                    problems.append(f"group_by: unknown dimension {value!r}")
    if len(group_by) > 2:
        problems.append("group_by: at most two dimensions; the first two are used")
        group_by = group_by[:2]
    if not params.getlist("group_by"):
        group_by = ["model"]
    granularity = params.get("granularity") or "day"
    if granularity not in GRANULARITIES:
        problems.append(f"granularity: unknown value {granularity!r}")
        granularity = "day"
    if granularity == "hour" and period.days > 31:
        problems.append("granularity: hourly buckets need a period of at most 31 days; showing days")
        granularity = "day"
    metric = params.get("metric") or "cost"
    if metric not in dict(EXPLORER_METRICS):
        problems.append(f"metric: unknown value {metric!r}")
        metric = "cost"
    sort = params.get("sort") or "-cost"
    if sort.lstrip("-") not in SORTABLE:
        problems.append(f"sort: unknown column {sort.lstrip('-')!r}")
        sort = "-cost"
    filters = parse_filters(params, user=user)
    return ExplorerQuery(period, tuple(group_by), granularity, filters, metric, sort), problems


def row_value(row: dict, name: str):
    if name == "tokens":
        return total_tokens(row)
    return row.get(name)


def sort_rows(rows: list[dict], sort: str, group_by) -> list[dict]:
    """Sorted by one column; rows without a value (—) always last."""
    name = sort.lstrip("-")
    descending = sort.startswith("-")

    def key(row):
        value = row_value(row, name)
        if name in DIMENSIONS:
            value = label_of(name, value).lower()
        return value

    present = [row for row in rows if key(row) is not None]
    missing = [row for row in rows if key(row) is None]
    present.sort(key=lambda row: tuple(label_of(d, row[d]) for d in group_by))
    present.sort(key=key, reverse=descending)
    return present + missing


@dataclass
class Explorer:
    query: ExplorerQuery
    rows: list[dict]
    totals: dict
    truncated: bool = False
    all_rows: list[dict] = field(default_factory=list)


def explorer(*, user, query: ExplorerQuery) -> Explorer:
    """The explorer's rows (``cost_rows``, exactly the API's) and the range's totals (``cost_totals``)."""
    rows = cost_rows(user=user, query=query.cost_query())
    totals = cost_totals(user=user, query=query.cost_query())
    ordered = sort_rows(rows, query.sort, query.group_by)
    return Explorer(
        query=query,
        rows=ordered[:MAX_TABLE_ROWS],
        totals=totals,
        truncated=len(ordered) > MAX_TABLE_ROWS,
        all_rows=rows,
    )


def group_label(row: dict, group_by) -> str:
    return " · ".join(label_of(dimension, row[dimension]) for dimension in group_by) or "All usage"


# --- Models × hardware ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MatrixColumn:
    attr: str
    label: str
    group: str
    kind: str  # pct | ms | rate | mib | money_precise | money | count
    better: str = ""  # "up", "down" or "": only directed columns are heat-mapped
    help: str = ""


MATRIX_COLUMNS = (
    MatrixColumn("success_rate", "Task success", "Quality", "pct", "up", "successful tasks / tasks"),
    MatrixColumn("attempt_failure_rate", "Attempt failures", "Quality", "pct", "down", "failed attempts / attempts"),
    MatrixColumn("retry_rate", "Retry rate", "Quality", "pct", "down", "(attempts − tasks) / tasks"),
    MatrixColumn("ttft_p50_ms", "TTFT p50", "Speed", "ms", "down", "time to first token, median (±9 %)"),
    MatrixColumn("ttft_p95_ms", "TTFT p95", "Speed", "ms", "down", "time to first token, 95th percentile"),
    MatrixColumn("latency_p95_ms", "Latency p95", "Speed", "ms", "down", "request latency, 95th percentile"),
    MatrixColumn("output_tokens_per_s_p50", "Output tok/s p50", "Speed", "rate", "up", "decode speed, median"),
    MatrixColumn("mean_gpu_utilisation", "GPU utilisation", "Resources", "pct", "up", "pool's mean while this model ran"),
    MatrixColumn("mean_memory_used_mib", "GPU memory used", "Resources", "mib", "", "pool's mean, all GPUs"),
    MatrixColumn("cost_per_1m_input_tokens", "Cost / 1M input", "Cost", "money_precise", "down"),
    MatrixColumn("cost_per_1m_output_tokens", "Cost / 1M output", "Cost", "money_precise", "down"),
    MatrixColumn("cost_per_successful_task", "Cost / successful task", "Cost", "money_precise", "down"),
    MatrixColumn("cost", "Cost", "Cost", "money", ""),
    MatrixColumn("attempts", "Attempts", "Operations", "count", ""),
    MatrixColumn("successful_tasks", "Successful tasks", "Operations", "count", ""),
    MatrixColumn("unpriced_attempts", "Unpriced attempts", "Operations", "count", ""),
)  # fmt: skip
HEAT_LEVELS = 5


@dataclass(frozen=True)
class MatrixCell:
    value: object
    kind: str
    heat: int | None  # 0 (worst) … 4 (best); None: not compared
    best: bool


@dataclass
class MatrixLine:
    row: object  # matrix.MatrixRow
    where: str  # "h100-a (NVIDIA)" or "openai-gpt-4o-mini (openai)"
    cells: list[MatrixCell]


def matrix_lines(rows) -> list[MatrixLine]:
    """Each row's cells with a heat level per directed column (min–max scaled) and the best marked."""
    heat: dict[tuple[int, str], int] = {}
    best: set[tuple[int, str]] = set()
    for column in MATRIX_COLUMNS:
        if not column.better:
            continue
        values = [(index, float(getattr(row, column.attr))) for index, row in enumerate(rows)
                  if getattr(row, column.attr) is not None]  # fmt: skip
        if len(values) < 2:
            continue
        low, high = min(v for _, v in values), max(v for _, v in values)
        for index, value in values:
            position = 0.5 if high == low else (value - low) / (high - low)
            goodness = position if column.better == "up" else 1 - position
            heat[(index, column.attr)] = min(HEAT_LEVELS - 1, int(goodness * HEAT_LEVELS))
        target = high if column.better == "up" else low
        if high != low:
            best.update((index, column.attr) for index, value in values if value == target)
    lines = []
    for index, row in enumerate(rows):
        if row.pool:
            where = f"{row.pool} ({VENDOR_LABELS.get(row.vendor, row.vendor)})"
        else:
            where = f"{row.endpoint} ({row.provider or 'unknown provider'})"
        cells = [
            MatrixCell(
                getattr(row, column.attr),
                column.kind,
                heat.get((index, column.attr)),
                (index, column.attr) in best,
            )
            for column in MATRIX_COLUMNS
        ]
        lines.append(MatrixLine(row, where, cells))
    return lines


# --- GPU fleet -----------------------------------------------------------------------------------


@dataclass
class PoolLine:
    name: str
    vendor: str
    gpu_model: str
    gpu_count: int
    pool_cost: Decimal | None = None
    idle_cost: Decimal | None = None
    unallocated_cost: Decimal | None = None
    energy_kwh: Decimal | None = None
    mean_utilisation: Decimal | None = None
    gpu_hours: int = 0
    hours: int = 0
    unpriced_hours: int = 0
    tokens: int = 0
    cost: Decimal | None = None  # team view: the team's allocated cost on the pool
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    power_w: float | None = None
    gpus: list[dict] = field(default_factory=list)

    @property
    def vendor_label(self) -> str:
        return VENDOR_LABELS.get(self.vendor, self.vendor)

    @property
    def cost_per_gpu_hour(self):
        return _div(self.pool_cost, self.gpu_hours)

    @property
    def effective_cost_per_gpu_hour(self):
        """Pool cost per *busy* GPU-hour: what a fully used GPU-hour really cost."""
        if self.mean_utilisation is None or not self.gpu_hours:
            return None
        return _div(self.pool_cost, Decimal(self.gpu_hours) * Decimal(self.mean_utilisation))

    @property
    def tokens_per_kwh(self):
        return _div(self.tokens, self.energy_kwh) if self.tokens else None

    @property
    def tokens_per_gpu_hour(self):
        return _div(self.tokens, self.gpu_hours) if self.tokens else None

    @property
    def under_used(self) -> bool:
        return self.mean_utilisation is not None and float(self.mean_utilisation) < UNDER_USED

    @property
    def memory_share(self) -> float | None:
        if not self.memory_total_mib or self.memory_used_mib is None:
            return None
        return self.memory_used_mib / self.memory_total_mib


@dataclass
class Fleet:
    pools: list[PoolLine]
    org_wide: bool
    series: list[dict]  # pool_cost_rows by hour or day (org-wide viewers)
    granularity: str


def _gpu_rows(*, start: datetime, end: datetime, pool_names) -> list[dict]:
    """Per GPU over [start, end): mean utilisation, memory and power, energy, hours reported.

    Reads the per-interval GPU aggregates (``ingest.GpuInterval``; their count depends on GPUs ×
    hours, never on attempts) grouped in the database: one query.
    """
    from ingest.models import GpuInterval

    rows = (
        GpuInterval.objects.filter(
            interval_start__gte=start, interval_start__lt=end, pool__name__in=pool_names
        )
        .values(
            "pool__name", "gpu_id", "gpu__hostname", "gpu__gpu_index", "gpu__device_key", "gpu__gpu_model"
        )
        .annotate(
            utilisation=Avg("utilisation"),
            memory_used_mib=Avg("memory_used_mib"),
            memory_total_mib=Avg("memory_total_mib"),
            memory_free_mib=Avg("memory_free_mib"),
            power_w=Avg("power_w"),
            energy_j=Sum("energy_j"),
            seconds=Sum("step_seconds"),
            first=Min("interval_start"),
            last=Max("interval_start"),
        )
        .order_by("pool__name", "gpu__hostname", "gpu__gpu_index", "gpu__device_key")
    )
    out = []
    for row in rows:
        total = row["memory_total_mib"]
        if total is None and row["memory_used_mib"] is not None and row["memory_free_mib"] is not None:
            total = row["memory_used_mib"] + row["memory_free_mib"]
        energy_kwh = row["energy_j"] / 3_600_000 if row["energy_j"] is not None else None
        if energy_kwh is None and row["power_w"] is not None:
            energy_kwh = row["power_w"] * row["seconds"] / 3_600_000
        hours = (row["seconds"] or 0) / 3600
        out.append(
            {
                "pool": row["pool__name"],
                "hostname": row["gpu__hostname"],
                "gpu_index": row["gpu__gpu_index"],
                "device_key": row["gpu__device_key"],
                "gpu_model": row["gpu__gpu_model"],
                "utilisation": row["utilisation"],
                "memory_used_mib": row["memory_used_mib"],
                "memory_total_mib": total,
                "memory_share": row["memory_used_mib"] / total
                if total and row["memory_used_mib"] is not None
                else None,
                "power_w": row["power_w"],
                "energy_kwh": energy_kwh,
                "hours": hours,
                "idle_gpu_hours": hours * (1 - row["utilisation"])
                if row["utilisation"] is not None
                else None,
                "under_used": row["utilisation"] is not None and row["utilisation"] < UNDER_USED,
            }
        )
    return out


def fleet(*, user, period: Period, filters=()) -> Fleet:
    """Per pool: cost, idle, energy, utilisation, memory, power, tokens and per-unit figures.

    Org-wide viewers see each pool's whole cost (``pool_cost_rows``) and its GPUs; team members see
    the pools their teams used and their own share of the cost (``cost_rows`` by pool).
    """
    pool_filter = dict(filters)
    pools_qs = Pool.objects.order_by("name")
    if "pool" in pool_filter:
        pools_qs = pools_qs.filter(name__in=pool_filter["pool"])
    if "vendor" in pool_filter:
        pools_qs = pools_qs.filter(vendor__in=pool_filter["vendor"])
    lines = {pool.name: PoolLine(pool.name, pool.vendor, pool.gpu_model, pool.gpu_count) for pool in pools_qs}
    usage = cost_rows(user=user, query=CostQuery(period.start, period.end, ("pool",), "total", filters))
    for row in usage:
        if row["pool"] in lines:
            lines[row["pool"]].tokens = total_tokens(row)
            lines[row["pool"]].cost = row["cost"]
            lines[row["pool"]].idle_cost = row["idle_cost"]
    org_wide = sees_all_teams(user)
    series: list[dict] = []
    granularity = "hour" if period.hourly() else "day"
    if org_wide:
        for row in pool_cost_rows(user=user, start=period.start, end=period.end, filters=filters):
            line = lines.get(row["pool"])
            if line is None:
                continue
            for name in ("pool_cost", "idle_cost", "unallocated_cost", "energy_kwh", "mean_utilisation"):
                setattr(line, name, row[name])
            line.gpu_hours, line.hours, line.unpriced_hours = (
                row["gpu_hours"],
                row["hours"],
                row["unpriced_hours"],
            )
        series = pool_cost_rows(
            user=user, start=period.start, end=period.end, granularity=granularity, filters=filters
        )
        for gpu in _gpu_rows(start=period.start, end=period.end, pool_names=list(lines)):
            lines[gpu["pool"]].gpus.append(gpu)
        for line in lines.values():
            reporting = [gpu for gpu in line.gpus if gpu["power_w"] is not None]
            line.power_w = sum(gpu["power_w"] for gpu in reporting) if reporting else None
            used = [gpu for gpu in line.gpus if gpu["memory_used_mib"] is not None]
            line.memory_used_mib = sum(gpu["memory_used_mib"] for gpu in used) if used else None
            totals = [gpu for gpu in line.gpus if gpu["memory_total_mib"] is not None]
            line.memory_total_mib = sum(gpu["memory_total_mib"] for gpu in totals) if totals else None
        shown = list(lines.values())
    else:
        shown = [line for line in lines.values() if line.tokens or line.cost is not None]
    return Fleet(pools=shown, org_wide=org_wide, series=series, granularity=granularity)


# --- Cost change ---------------------------------------------------------------------------------


def default_weeks(now: datetime) -> tuple[Period, Period]:
    """This week so far (Monday 00:00 UTC to the end of today) against the same days of last week."""
    today = now.astimezone(UTC).date()
    monday = today - timedelta(days=today.weekday())
    after = Period("custom", _midnight(monday), _midnight(today + timedelta(days=1)))
    before = Period("custom", after.start - timedelta(days=7), after.end - timedelta(days=7))
    return before, after


def parse_two_periods(params: QueryDict, *, now: datetime) -> tuple[Period, Period, str]:
    """``before_start``/``before_end`` and ``after_start``/``after_end`` (inclusive days)."""
    before, after = default_weeks(now)
    try:
        if any(params.get(name) for name in ("before_start", "before_end", "after_start", "after_end")):
            periods = []
            for prefix in ("before", "after"):
                first = _parse_day(params.get(f"{prefix}_start", ""), f"{prefix}_start")
                last = _parse_day(params.get(f"{prefix}_end", ""), f"{prefix}_end")
                if last < first or (last - first).days >= MAX_DAYS:
                    raise BadRequest(
                        f"{prefix}: the last day must be on or after the first (at most {MAX_DAYS} days)"
                    )
                periods.append(Period("custom", _midnight(first), _midnight(last + timedelta(days=1))))
            before, after = periods
    except BadRequest as problem:
        return before, after, str(problem)
    return before, after, ""


# --- Ingestion health ----------------------------------------------------------------------------


@dataclass
class SourceLine:
    name: str
    kind: str
    last_run_at: datetime | None
    last_success_at: datetime | None
    last_error: str
    lag_seconds: int | None
    accepted: int
    duplicate: int
    rejected: int


@dataclass
class Ingestion:
    sources: list[SourceLine]
    per_day: list[dict]
    reasons: list[dict]
    unpriced: list[dict]
    prometheus: list  # ingest.metrics_health.SourceHealth
    org_wide: bool


def ingestion(*, user, period: Period, now: datetime) -> Ingestion:
    """Sources and their runs, accepted/duplicate/rejected per day, reject reasons with an example,
    unpriced models (from the scoped cost rows), and Prometheus health (GPUs matching no pool).

    Sources, runs and rejects are not attributed to teams, so only org-wide viewers see them; team
    members see the unpriced usage of their own teams.
    """
    from django.db.models.functions import TruncDay

    from ingest.metrics_health import prometheus_health
    from ingest.models import IngestRun, RejectedRecord, Source

    unpriced = [
        row
        for row in cost_rows(
            user=user, query=CostQuery(period.start, period.end, ("model", "endpoint"), "total")
        )
        if row["unpriced_attempts"]
    ]
    unpriced.sort(key=lambda row: (-row["unpriced_tokens"], row["model"] or ""))
    if unpriced:
        ids = dict(
            LlmModel.objects.filter(name__in=[row["model"] for row in unpriced], version="").values_list(
                "name", "pk"
            )
        )
        for row in unpriced:
            row["model_id"] = ids.get(row["model"])
    if not sees_all_teams(user):
        return Ingestion([], [], [], unpriced, [], False)

    runs = IngestRun.objects.filter(started_at__gte=period.start, started_at__lt=period.end)
    totals = {
        row["source_id"]: row
        for row in runs.values("source_id").annotate(
            accepted=Sum("accepted"),
            duplicate=Sum("duplicate"),
            rejected=Sum("rejected"),
            last=Max("started_at"),
        )
    }
    sources = []
    for source in Source.objects.order_by("name"):
        sums = totals.get(source.pk, {})
        lag = int((now - source.last_success_at).total_seconds()) if source.last_success_at else None
        sources.append(
            SourceLine(
                name=source.name,
                kind=source.get_kind_display(),
                last_run_at=source.last_run_at,
                last_success_at=source.last_success_at,
                last_error=source.last_error,
                lag_seconds=lag,
                accepted=sums.get("accepted") or 0,
                duplicate=sums.get("duplicate") or 0,
                rejected=sums.get("rejected") or 0,
            )
        )
    per_day = list(
        runs.annotate(day=TruncDay("started_at", tzinfo=UTC))
        .values("day")
        .annotate(accepted=Sum("accepted"), duplicate=Sum("duplicate"), rejected=Sum("rejected"))
        .order_by("day")
    )
    rejects = RejectedRecord.objects.filter(created_at__gte=period.start, created_at__lt=period.end)
    reasons = list(
        rejects.values("reason")
        .annotate(count=Count("id"), example_id=Max("id"), last=Max("created_at"))
        .order_by("-count", "reason")[:50]
    )
    examples = {
        record.pk: record
        for record in RejectedRecord.objects.filter(
            pk__in=[row["example_id"] for row in reasons]
        ).select_related("source")
    }
    for row in reasons:
        row["example"] = examples.get(row["example_id"])
    return Ingestion(sources, per_day, reasons, unpriced, prometheus_health(now=now), True)
