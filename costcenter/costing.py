"""The cost engine: attempts + price book + pool metrics → hourly rollups and pool-hour facts.

For one UTC hour ``H`` (``recompute_hour``), in one transaction:

1. price segments: for every (model, endpoint) with attempts in H, the token price in force on
   each stretch of the hour (``costcenter.pricing`` decides; a mid-hour price change splits it);
2. one SQL pass aggregates H's attempts per (team, workload, model, endpoint): counts, the
   bucket-distinct task counts, tokens, exact token cost (numeric, never float), unpriced counts,
   weighted tokens for pool allocation; a second pass builds the latency/TTFT/throughput histograms;
3. per GPU pool: pool cost = GPU count × GPU-hour price (in force at H) + energy kWh × kWh price,
   allocated to the hour's groups on the pool's endpoints in proportion to weighted tokens, exactly
   (largest remainder at 12 decimal places); idle cost = pool cost × (1 − mean utilisation),
   allocated with the same shares; a pool-hour without attempts is unallocated;
4. the hour's rows are replaced whole (never incremented), and the days touched are rebuilt.

Recomputing an hour twice gives identical rows; a crash mid-hour rolls its transaction back and
the hour stays dirty, so the next run redoes it.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import ROUND_DOWN, Decimal

from django.db import connection, transaction
from django.db.models import Min
from django.utils import timezone

from costcenter import histograms
from costcenter.cost_split import FLAT_COST_SQL, OUTPUT_COST_SQL
from costcenter.models import (
    ROLLUP_SUM_FIELDS,
    DailyUsage,
    Endpoint,
    EndpointKind,
    GpuHourPrice,
    HourlyUsage,
    LlmModel,
    Pool,
    PoolHour,
    RepriceHour,
    RollupState,
    TokenPrice,
)
from costcenter.money import AMOUNT_DECIMAL_PLACES
from costcenter.pg import session_lock
from costcenter.pricing import in_force, resolve_token_price, token_price_series

log = logging.getLogger(__name__)

HOUR = timedelta(hours=1)
QUANTUM = Decimal(1).scaleb(-AMOUNT_DECIMAL_PLACES)  # amounts are kept to 12 decimal places
STATE = "hourly"


def hour_floor(moment: datetime) -> datetime:
    moment = moment.astimezone(UTC)
    return moment.replace(minute=0, second=0, microsecond=0)


# --- Price book, loaded once per run ------------------------------------------------------------
@dataclass
class PriceBook:
    token_series: dict[tuple, list] = field(default_factory=dict)
    generic_model: dict[int, int | None] = field(default_factory=dict)
    models: dict[int, LlmModel] = field(default_factory=dict)
    endpoints: dict[int, Endpoint] = field(default_factory=dict)
    pools: list[Pool] = field(default_factory=list)
    gpu_prices: dict[int, list] = field(default_factory=dict)

    @classmethod
    def load(cls) -> PriceBook:
        book = cls()
        for price in TokenPrice.objects.order_by("-effective_from"):
            book.token_series.setdefault((price.model_id, price.endpoint_id), []).append(price)
        book.models = {model.pk: model for model in LlmModel.objects.all()}
        generic = {model.name: model.pk for model in book.models.values() if not model.version}
        book.generic_model = {pk: generic.get(model.name) for pk, model in book.models.items()}
        book.endpoints = {endpoint.pk: endpoint for endpoint in Endpoint.objects.all()}
        book.pools = list(Pool.objects.order_by("pk"))
        for price in GpuHourPrice.objects.order_by("-effective_from"):
            book.gpu_prices.setdefault(price.pool_id, []).append(price)
        return book

    def segments(self, model_id: int, endpoint_id: int | None, start: datetime, end: datetime) -> list[tuple]:
        """(segment start, segment end, price row) covering [start, end) where a token price is in force."""
        model = self.models.get(model_id)
        if model is None:
            return []
        keys = token_price_series(model, endpoint_id, self.generic_model.get(model_id))
        cuts = {start}
        for key in keys:
            for price in self.token_series.get(key, ()):
                for edge in (price.effective_from, price.effective_to):
                    if edge is not None and start < edge < end:
                        cuts.add(edge)
        ordered = sorted(cuts) + [end]
        pieces: list[tuple] = []
        for seg_start, seg_end in zip(ordered, ordered[1:], strict=False):
            price = resolve_token_price(self.token_series, keys, seg_start)
            if price is None:
                continue
            if pieces and pieces[-1][2].pk == price.pk and pieces[-1][1] == seg_start:
                pieces[-1] = (pieces[-1][0], seg_end, price)
            else:
                pieces.append((seg_start, seg_end, price))
        return pieces


# --- One hour ----------------------------------------------------------------------------------
_SEGMENTS_TABLE = "cc_price_segments"

_AGGREGATE = f"""
WITH a AS (
    SELECT a.team_id, a.workload_id, a.model_id, a.endpoint_id, a.task_hash, a.succeeded,
           a.prompt_tokens, a.completion_tokens, a.cached_tokens, coalesce(a.reasoning_tokens, 0) AS reasoning,
           (e.kind = 'gpu_pool') AS pool_priced,
           CASE WHEN e.kind = 'gpu_pool' THEN NULL ELSE s.price_id END AS price_id,
           CASE WHEN e.kind = 'gpu_pool' OR s.price_id IS NULL THEN NULL
                ELSE ((a.prompt_tokens - a.cached_tokens) * s.input_per_mtok
                      + a.cached_tokens * s.cached_input_per_mtok
                      + a.completion_tokens * s.output_per_mtok) / 1000000 END AS token_cost,
           a.prompt_tokens * coalesce(p.input_weight, 1) + a.completion_tokens * coalesce(p.output_weight, 1)
               AS weighted
    FROM ingest_attempt a
    LEFT JOIN costcenter_endpoint e ON e.id = a.endpoint_id
    LEFT JOIN costcenter_pool p ON p.id = e.pool_id AND e.kind = 'gpu_pool'
    LEFT JOIN {_SEGMENTS_TABLE} s
           ON s.model_id = a.model_id AND s.endpoint_id IS NOT DISTINCT FROM a.endpoint_id
          AND a.ts >= s.seg_start AND a.ts < s.seg_end
    WHERE a.ts >= %(start)s AND a.ts < %(end)s
)
SELECT team_id, workload_id, model_id, endpoint_id,
       count(*), count(*) FILTER (WHERE succeeded),
       count(DISTINCT task_hash), count(DISTINCT task_hash) FILTER (WHERE succeeded),
       sum(prompt_tokens), sum(completion_tokens), sum(cached_tokens), sum(reasoning),
       sum(token_cost),
       count(*) FILTER (WHERE NOT coalesce(pool_priced, false) AND price_id IS NULL),
       coalesce(sum(prompt_tokens + completion_tokens)
                FILTER (WHERE NOT coalesce(pool_priced, false) AND price_id IS NULL), 0),
       sum(weighted),
       coalesce(array_agg(DISTINCT price_id) FILTER (WHERE price_id IS NOT NULL), '{{}}')
FROM a
GROUP BY team_id, workload_id, model_id, endpoint_id
"""  # noqa: S608 - built from constants only

_TPS = (
    "CASE WHEN succeeded AND completion_tokens > 0 AND latency_ms > coalesce(ttft_ms, 0) "
    "THEN completion_tokens * 1000.0 / (latency_ms - coalesce(ttft_ms, 0)) END"
)
_HISTOGRAMS = f"""
WITH b AS (
    SELECT team_id, workload_id, model_id, endpoint_id,
           {histograms.LATENCY_MS.sql_bucket("latency_ms")} AS latency_b,
           {histograms.TTFT_MS.sql_bucket("ttft_ms")} AS ttft_b,
           {histograms.OUTPUT_TOKENS_PER_S.sql_bucket(_TPS)} AS tps_b
    FROM ingest_attempt
    WHERE ts >= %(start)s AND ts < %(end)s
)
SELECT team_id, workload_id, model_id, endpoint_id, latency_b, ttft_b, tps_b,
       GROUPING(latency_b, ttft_b, tps_b), count(*)
FROM b
GROUP BY GROUPING SETS ((team_id, workload_id, model_id, endpoint_id, latency_b),
                        (team_id, workload_id, model_id, endpoint_id, ttft_b),
                        (team_id, workload_id, model_id, endpoint_id, tps_b))
"""  # noqa: S608 - built from constants only


@dataclass
class Group:
    key: tuple  # (team_id, workload_id, model_id, endpoint_id)
    attempts: int
    successful_attempts: int
    tasks: int
    successful_tasks: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    reasoning_tokens: int
    token_cost: Decimal | None
    unpriced_attempts: int
    unpriced_tokens: int
    weighted_tokens: Decimal
    token_price_ids: list[int]
    cost: Decimal | None = None
    idle_cost: Decimal | None = None
    gpu_hour_price_id: int | None = None
    histograms: dict[str, list[int]] = field(default_factory=dict)


def allocate(total: Decimal, weights: list[Decimal]) -> list[Decimal]:
    """Split ``total`` (12 decimal places) in proportion to ``weights`` so the parts add up exactly.

    Each share is rounded down to 12 places and the few remaining quanta go to the largest
    remainders (ties to the earlier group), so no pool-hour gains or loses a fraction of a cent.
    """
    if not weights:
        return []
    weight_sum = sum(weights)
    if weight_sum == 0:
        weights, weight_sum = [Decimal(1)] * len(weights), Decimal(len(weights))
    exact = [total * weight / weight_sum for weight in weights]
    shares = [value.quantize(QUANTUM, rounding=ROUND_DOWN) for value in exact]
    left = int((total - sum(shares)) / QUANTUM)
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - shares[i]), i))
    for index in order[:left]:
        shares[index] += QUANTUM
    return shares


def _pool_metrics(pool_ids: list[int], hour: datetime) -> dict:
    return _pool_metrics_range(pool_ids, hour, hour + HOUR)


def _pool_metrics_range(pool_ids: list[int], start: datetime, end: datetime) -> dict:
    """Energy, utilisation and memory per (pool, hour), from the GPU metrics ingestor."""
    try:
        from ingest.gpu_metrics import pool_hour_metrics
    except ImportError:  # until GPU metrics ingestion lands: pool cost without energy or idle
        return {}
    return pool_hour_metrics(pool_ids=pool_ids, start=start, end=end)


def _load_segments(book: PriceBook, pairs: Iterable[tuple], start: datetime, end: datetime) -> None:
    rows = []
    for model_id, endpoint_id in pairs:
        for seg_start, seg_end, price in book.segments(model_id, endpoint_id, start, end):
            rows.append(
                (
                    model_id,
                    endpoint_id,
                    seg_start,
                    seg_end,
                    price.pk,
                    price.input_per_mtok,
                    price.effective_cached_input_per_mtok,
                    price.output_per_mtok,
                )
            )
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS {_SEGMENTS_TABLE} (model_id int, endpoint_id int, "
            "seg_start timestamptz, seg_end timestamptz, price_id int, input_per_mtok numeric, "
            "cached_input_per_mtok numeric, output_per_mtok numeric)"
        )
        cursor.execute(f"TRUNCATE {_SEGMENTS_TABLE}")
        if rows:
            with cursor.copy(f"COPY {_SEGMENTS_TABLE} FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)


def _aggregate(hour: datetime) -> dict[tuple, Group]:
    params = {"start": hour, "end": hour + HOUR}
    groups: dict[tuple, Group] = {}
    with connection.cursor() as cursor:
        cursor.execute(_AGGREGATE, params)
        for row in cursor.fetchall():
            key = tuple(row[:4])
            groups[key] = Group(
                key,
                *row[4:12],
                token_cost=row[12],
                unpriced_attempts=row[13],
                unpriced_tokens=row[14],
                weighted_tokens=Decimal(row[15]),
                token_price_ids=sorted(row[16]),
            )
        cursor.execute(_HISTOGRAMS, params)
        for *key_parts, latency_b, ttft_b, tps_b, grouping, count in cursor.fetchall():
            group = groups.get(tuple(key_parts))
            if group is None:
                continue
            # GROUPING(latency_b, ttft_b, tps_b) sets a bit (4, 2, 1) for each column that is *not*
            # in the row's grouping set: 3 = the latency set, 5 = TTFT, 6 = throughput.
            metric, bucket = {3: ("latency", latency_b), 5: ("ttft", ttft_b), 6: ("tps", tps_b)}[grouping]
            if bucket is None:
                continue  # no such measurement on these attempts
            counts = group.histograms.setdefault(metric, [0] * histograms.BUCKETS)
            counts[bucket] += count
    return groups


def _cost_hour(book: PriceBook, hour: datetime, groups: dict[tuple, Group], metrics=None) -> list[PoolHour]:
    """Price token groups, allocate pool-hours to pool groups; return the pool-hour facts."""
    by_pool: dict[int, list[Group]] = defaultdict(list)
    for group in groups.values():
        endpoint = book.endpoints.get(group.key[3])
        if endpoint is not None and endpoint.kind == EndpointKind.GPU_POOL:
            by_pool[endpoint.pool_id].append(group)
        else:
            group.cost = None if group.token_cost is None else group.token_cost.quantize(QUANTUM)
            group.idle_cost = Decimal(0)  # hosted APIs leave no GPU of ours idle
    if metrics is None:
        metrics = _pool_metrics([pool.pk for pool in book.pools], hour)
    facts = []
    for pool in book.pools:
        price = in_force(book.gpu_prices.get(pool.pk, ()), hour)
        pool_groups = by_pool.get(pool.pk, [])
        if price is None and not pool_groups:
            continue  # the pool is not in service (no price) and served nothing
        measured = metrics.get((pool.pk, hour))
        energy_kwh = measured.energy_kwh if measured else None
        utilisation = measured.mean_utilisation if measured else None
        fact = PoolHour(
            pool=pool,
            hour=hour,
            gpu_count=pool.gpu_count,
            gpu_hour_price_id=price.pk if price else None,
            energy_kwh=energy_kwh,
            mean_utilisation=utilisation,
            memory_used_mib=measured.memory_used_mib if measured else None,
            memory_total_mib=measured.memory_total_mib if measured else None,
            attempts=sum(group.attempts for group in pool_groups),
            weighted_tokens=sum((group.weighted_tokens for group in pool_groups), Decimal(0)),
        )
        if price is None:
            for group in pool_groups:  # served, but the pool has no price: unknown, not free
                group.cost, group.idle_cost = None, None
                group.unpriced_attempts = group.attempts
                group.unpriced_tokens = group.prompt_tokens + group.completion_tokens
            facts.append(fact)
            continue
        if energy_kwh is not None and pool.kwh_price is not None:
            fact.energy_cost = (energy_kwh * pool.kwh_price).quantize(QUANTUM)
        fact.pool_cost = (pool.gpu_count * price.gpu_hour_price + (fact.energy_cost or 0)).quantize(QUANTUM)
        if utilisation is not None:
            fact.idle_cost = (fact.pool_cost * (1 - utilisation)).quantize(QUANTUM)
        weights = [group.weighted_tokens for group in pool_groups]
        if sum(weights) == 0:
            # Only attempts without tokens (failures before any output): share by attempts.
            weights = [Decimal(group.attempts) for group in pool_groups]
        shares = allocate(fact.pool_cost, weights)
        idle_shares = (
            allocate(fact.idle_cost, weights) if fact.idle_cost is not None else [None] * len(weights)
        )
        for group, share, idle in zip(pool_groups, shares, idle_shares, strict=True):
            group.cost, group.idle_cost, group.gpu_hour_price_id = share, idle, price.pk
        fact.allocated_cost = sum(shares, Decimal(0))
        fact.unallocated_cost = fact.pool_cost - fact.allocated_cost
        facts.append(fact)
    return facts


_ROLLUP_COLUMNS = (
    "team_id",
    "workload_id",
    "model_id",
    "endpoint_id",
    "attempts",
    "successful_attempts",
    "tasks",
    "successful_tasks",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "reasoning_tokens",
    "cost",
    "idle_cost",
    "unpriced_attempts",
    "unpriced_tokens",
    "latency_histogram",
    "ttft_histogram",
    "output_tps_histogram",
)


def _trim(counts: list[int] | None) -> list[int]:
    """Histograms are stored without their trailing empty buckets (they merge the same)."""
    if not counts:
        return []
    end = len(counts)
    while end and counts[end - 1] == 0:
        end -= 1
    return list(counts[:end])


def _copy_rows(table: str, columns: tuple[str, ...], rows: list[tuple]) -> None:
    """COPY rows into a rollup table: Django's per-element preparation of array fields costs
    more than the rest of an hour's recompute, psycopg adapts lists and Decimals directly."""
    if not rows:
        return
    with connection.cursor() as cursor:
        with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)


def _hourly_rows(hour: datetime, groups: dict[tuple, Group]) -> list[tuple]:
    rows = []
    for group in groups.values():
        rows.append(
            (
                *group.key,
                group.attempts,
                group.successful_attempts,
                group.tasks,
                group.successful_tasks,
                group.prompt_tokens,
                group.completion_tokens,
                group.cached_tokens,
                group.reasoning_tokens,
                group.cost,
                group.idle_cost,
                group.unpriced_attempts,
                group.unpriced_tokens,
                _trim(group.histograms.get("latency")),
                _trim(group.histograms.get("ttft")),
                _trim(group.histograms.get("tps")),
                hour,
                group.token_price_ids,
                group.gpu_hour_price_id,
                group.weighted_tokens.quantize(QUANTUM),
            )
        )
    return rows


_HOURLY_COLUMNS = (*_ROLLUP_COLUMNS, "hour", "token_price_ids", "gpu_hour_price_id", "weighted_tokens")


def recompute_hour(hour: datetime, *, book: PriceBook | None = None, marks: dict | None = None) -> int:
    """Rebuild one hour's rollups and pool-hour facts; returns the number of groups.

    ``marks`` (from ``_read_marks``) are the hour's dirty marks as they were before the price book
    was loaded; they are cleared in the same transaction, and only if unchanged (see ``recompute``).
    """
    hour = hour_floor(hour)
    book = book or PriceBook.load()
    with transaction.atomic():
        with connection.cursor() as cursor:
            # Two writers of one hour would collide on its unique rows: take turns.
            cursor.execute(
                "SELECT pg_advisory_xact_lock(%s, %s)", [_HOUR_LOCK, int(hour.timestamp()) // 3600]
            )
            cursor.execute(
                "SELECT DISTINCT model_id, endpoint_id FROM ingest_attempt WHERE ts >= %s AND ts < %s",
                [hour, hour + HOUR],
            )
            pairs = cursor.fetchall()
        _load_segments(book, pairs, hour, hour + HOUR)
        groups = _aggregate(hour) if pairs else {}
        facts = _cost_hour(book, hour, groups)
        HourlyUsage.objects.filter(hour=hour).delete()
        PoolHour.objects.filter(hour=hour).delete()
        _copy_rows("costcenter_hourlyusage", _HOURLY_COLUMNS, _hourly_rows(hour, groups))
        PoolHour.objects.bulk_create(facts)
        _clear_marks(marks or {}, [hour])
    return len(groups)


_MARK_TABLES = ("ingest_dirtyhour", "costcenter_repricehour")


def _read_marks() -> dict[tuple[str, datetime], str]:
    """Every dirty mark with its row version (xmin), read before the price book is loaded."""
    marks = {}
    with connection.cursor() as cursor:
        for table in _MARK_TABLES:
            cursor.execute(f"SELECT hour, xmin::text FROM {table}")  # noqa: S608 - constant names
            marks.update({(table, hour): version for hour, version in cursor.fetchall()})
    return marks


def _clear_marks(marks: dict[tuple[str, datetime], str], hours: Iterable[datetime]) -> None:
    """Delete the hours' marks that still have the version read before costing started.

    A writer that marked an hour again since then (new usage, a price change) gave the mark a new
    version, so it survives and the hour is recomputed by the next run: nothing is left stale.
    A delete that meets a mark being rewritten waits for that writer, then re-checks the version.
    """
    with connection.cursor() as cursor:
        for hour in hours:
            for table in _MARK_TABLES:
                version = marks.get((table, hour))
                if version is not None:
                    cursor.execute(
                        f"DELETE FROM {table} WHERE hour = %s AND xmin::text = %s",  # noqa: S608
                        [hour, version],
                    )


def recompute_quiet_hours(hours: list[datetime], *, book: PriceBook, marks: dict | None = None) -> None:
    """Pool-hour facts for hours without usage (all their pool cost unallocated), in bulk."""
    if not hours:
        return
    metrics = _pool_metrics_range([pool.pk for pool in book.pools], hours[0], hours[-1] + HOUR)
    with transaction.atomic():
        facts = []
        for hour in hours:
            facts.extend(_cost_hour(book, hour, {}, metrics=metrics))
        PoolHour.objects.filter(hour__in=hours).delete()
        HourlyUsage.objects.filter(hour__in=hours).delete()
        PoolHour.objects.bulk_create(facts, batch_size=2000)
        _clear_marks(marks or {}, hours)


# --- Days --------------------------------------------------------------------------------------
_SUMMED = ROLLUP_SUM_FIELDS


def _weighted_metric(column: str) -> str:
    """Σ attempts × the pool-hour's value and Σ attempts, over the hours that reported it."""
    present = f"FILTER (WHERE ph.{column} IS NOT NULL)"
    return f"sum(h.attempts * ph.{column}::float8) {present}, coalesce(sum(h.attempts) {present}, 0)"


_PRICED = "FILTER (WHERE h.cost IS NOT NULL)"
# What the matrix and cost change read per day instead of per hourly row: the cost split and the
# pool metrics weighted by attempts, evaluated on each hourly row exactly as those readers would.
_DAY_EXTRAS = f"""
SELECT h.team_id, h.workload_id, h.model_id, h.endpoint_id,
       coalesce(sum(h.attempts) {_PRICED}, 0), coalesce(sum(h.successful_tasks) {_PRICED}, 0),
       coalesce(sum(h.prompt_tokens) {_PRICED}, 0), coalesce(sum(h.completion_tokens) {_PRICED}, 0),
       sum({OUTPUT_COST_SQL}), sum({FLAT_COST_SQL}) {_PRICED},
       {_weighted_metric("mean_utilisation")},
       {_weighted_metric("memory_used_mib")},
       {_weighted_metric("memory_total_mib")}
FROM costcenter_hourlyusage h
LEFT JOIN costcenter_endpoint e ON e.id = h.endpoint_id
LEFT JOIN costcenter_pool p ON p.id = e.pool_id AND e.kind = 'gpu_pool'
LEFT JOIN costcenter_poolhour ph ON ph.pool_id = p.id AND ph.hour = h.hour
WHERE h.hour >= %s AND h.hour < %s
GROUP BY 1, 2, 3, 4
"""  # noqa: S608 - built from constants only
_EXTRA_COLUMNS = (
    "priced_attempts",
    "priced_successful_tasks",
    "priced_prompt_tokens",
    "priced_completion_tokens",
    "output_cost",
    "flat_cost",
    "utilisation_x_attempts",
    "utilisation_attempts",
    "memory_used_x_attempts",
    "memory_used_attempts",
    "memory_total_x_attempts",
    "memory_total_attempts",
)
_DAILY_COLUMNS = (*_ROLLUP_COLUMNS, "day", *_EXTRA_COLUMNS)


def rebuild_day(day: datetime) -> None:
    """Replace a UTC day's daily rows by the sums of its hourly rows (and the extras above).

    Called by ``recompute`` after the day's hours are recomputed, under its one-run-at-a-time
    lock, so the hours do not change while they are read; the reads and the replace are one
    transaction, so readers see the old day or the new one, never a mix.
    """
    day = hour_floor(day).replace(hour=0)
    end = day + timedelta(days=1)
    sums: dict[tuple, dict] = {}
    with transaction.atomic():
        for row in HourlyUsage.objects.filter(hour__gte=day, hour__lt=end).iterator():
            key = (row.team_id, row.workload_id, row.model_id, row.endpoint_id)
            total = sums.get(key)
            if total is None:
                total = sums[key] = {name: 0 for name in _SUMMED} | {
                    "cost": None,
                    "idle_cost": None,
                    "latency_histogram": [],
                    "ttft_histogram": [],
                    "output_tps_histogram": [],
                }
            for name in _SUMMED:
                total[name] += getattr(row, name)
            for name in ("cost", "idle_cost"):
                value = getattr(row, name)
                if value is not None:
                    total[name] = value if total[name] is None else total[name] + value
            for name in ("latency_histogram", "ttft_histogram", "output_tps_histogram"):
                counts = getattr(row, name)
                if counts:
                    total[name] = _trim(histograms.merge([total[name], counts]))
        with connection.cursor() as cursor:
            cursor.execute(_DAY_EXTRAS, [day, end])
            for row in cursor.fetchall():
                sums[tuple(row[:4])].update(zip(_EXTRA_COLUMNS, row[4:], strict=True))
        DailyUsage.objects.filter(day=day).delete()
        _copy_rows(
            "costcenter_dailyusage",
            _DAILY_COLUMNS,
            [
                (
                    *key,
                    *(values[name] for name in _ROLLUP_COLUMNS[4:]),
                    day,
                    *(values[name] for name in _EXTRA_COLUMNS),
                )
                for key, values in sums.items()
            ],
        )


# --- Orchestration -----------------------------------------------------------------------------
def hours_to_recompute(*, now: datetime, since: datetime | None = None) -> list[datetime]:
    """Marked hours (new usage or a price change), plus every hour from the watermark to the
    last complete one: GPU pools cost money every hour, and an unused hour is unallocated cost."""
    from ingest.models import DirtyHour

    last_complete = hour_floor(now) - HOUR
    hours = set(DirtyHour.objects.filter(hour__lte=hour_floor(now)).values_list("hour", flat=True))
    hours |= set(RepriceHour.objects.filter(hour__lte=hour_floor(now)).values_list("hour", flat=True))
    state = RollupState.objects.filter(name=STATE).first()
    start = since or (state.done_until if state else _first_hour())
    if start is not None:
        moment = hour_floor(start)
        while moment <= last_complete:
            hours.add(moment)
            moment += HOUR
    return sorted(hours)


def _first_hour() -> datetime | None:
    """Where costing starts on a fresh installation: the first pool price or the first usage."""
    from ingest.models import DirtyHour

    candidates = [
        GpuHourPrice.objects.aggregate(first=Min("effective_from"))["first"],
        DirtyHour.objects.aggregate(first=Min("hour"))["first"],
    ]
    known = [moment for moment in candidates if moment is not None]
    return hour_floor(min(known)) if known else None


def recompute(*, now: datetime | None = None, since: datetime | None = None, progress=None) -> int:
    """Bring every rollup up to date; returns the number of hours recomputed.

    Marks are read first, then the price book: a change committed after either is caught by the
    mark's new version (``_clear_marks``). Each hour commits on its own, so a crash loses at most
    the hour in progress, which keeps its mark and is redone by the next run.
    """

    # One run at a time (beat ticks, the command, a second worker): a second run would only redo
    # the same hours.
    with session_lock("costing-recompute") as acquired:
        if not acquired:
            log.info("recompute already running elsewhere; skipped")
            return 0
        return _recompute(now=now, since=since, progress=progress)


_HOUR_LOCK = 7_301_003


def _recompute(*, now, since, progress) -> int:
    from ingest.models import DirtyHour

    now = now or timezone.now()
    marks = _read_marks()
    book = PriceBook.load()
    hours = hours_to_recompute(now=now, since=since)
    usage_marked = set(DirtyHour.objects.values_list("hour", flat=True))
    with_rows = set(HourlyUsage.objects.filter(hour__in=hours).values_list("hour", flat=True))
    # Hours with usage (new, or costed before) need the attempts; the rest only pool facts.
    busy = [hour for hour in hours if hour in usage_marked or hour in with_rows]
    quiet = [hour for hour in hours if hour not in usage_marked and hour not in with_rows]
    # The marks are cleared, and the watermark moved, only after the days are rebuilt too: a run
    # that dies half-way leaves them, and the next run redoes those hours and their days.
    for start in range(0, len(quiet), 24 * 31):
        recompute_quiet_hours(quiet[start : start + 24 * 31], book=book)
    for index, hour in enumerate(busy, start=1):
        recompute_hour(hour, book=book)
        if progress:
            progress(index, len(busy), hour)
    for day in sorted({hour.replace(hour=0) for hour in hours}):
        rebuild_day(day)
    with transaction.atomic():
        _clear_marks(marks, hours)
    last_complete = hour_floor(now)
    done = [hour for hour in hours if hour < last_complete]
    if done:
        state = RollupState.objects.filter(name=STATE).first()
        until = max(done[-1] + HOUR, state.done_until if state else done[-1] + HOUR)
        RollupState.objects.update_or_create(name=STATE, defaults={"done_until": until})
    return len(hours)
