"""Why did spend move? An exact, additive decomposition of the change of total spend.

Total spend of a period (as ``selectors.cost_totals`` defines it) is the cost of the priced
attempts plus unallocated pool cost: ``T = Σ_m C_m + U``. The change ``T₁ − T₀`` is split into
seven effects that add up to it *exactly* (Decimal, to the 12th decimal place):

``volume``          successful tasks S (all models together)
``mix``             share of successful tasks by model, s_m = S_m / S
``unit_price``      cost per token of each model (price-book changes, pool cost per token, a move
                    of a model between endpoints), p_mj = C_mj / K_mj
``prompt_length``   prompt tokens per attempt, k_m,in = K_m,in / A_m
``output_length``   completion tokens per attempt, k_m,out = K_m,out / A_m
``retries``         attempts per successful task, r_m = A_m / S_m (retries, fallbacks, failures)
``idle_unallocated`` the change of unallocated pool cost U (pool-hours that served nothing)

**Identity.** Each model's cost is split by token kind j ∈ {input, output, flat}:
``C_mj = S · s_m · r_m · k_mj · p_mj``. Input cost includes cached input; output cost of a
token-priced row is completion tokens × the output price it used, the rest is input; a pool row's
allocated cost is split by the pool's input/output weights, exactly as the allocation was made.
"flat" is cost that no token explains (a pool-hour whose attempts reported zero tokens, which the
engine splits evenly): its k is 1 attempt per attempt, so it moves only with S, s, r and price.

**Method: exact Shapley value over the five factors, per (model, kind) cell.** Each factor's
effect is the average, over all orders of switching factors from period 0 to period 1, of the
change it causes. Unlike a sequential (chained) decomposition it does not depend on an arbitrary
order of factors, and unlike LMDI it needs no logarithms, so zero cells need no special limit
and arithmetic stays rational. We compute it with ``fractions.Fraction`` (no rounding at all), so
the effects of a cell add up to ``C_mj,1 − C_mj,0`` exactly by the Shapley efficiency property.
Only the final conversion of each effect to 12 decimal places rounds; the few 1e-12 units this
leaves are given to the model's largest effect, so each model's effects add up to its change,
and the effects add up to the change of total spend, both to the last digit.

**Zero cells.** A factor that is undefined in one period takes its value from the other period,
so it contributes nothing: a model absent in one period has share 0 there (its whole cost is
volume and mix, split by Shapley); a kind with zero tokens in one period has k = 0 there (its
cost appears or vanishes as a length effect). A model with attempts but no successful task in a
period (it only failed, e.g. the first leg of a fallback) has an infinite r, so for that model
the identity ``C_mj = A_m · k_mj · p_mj`` is used instead and the attempts effect is
``retries``: attempts that completed nothing are failure cost. Any cost of a kind with zero
tokens of that kind is moved to "flat" first, so no price per token is ever infinite.

**Unpriced usage** (cost unknown, not zero) is left out of every factor and reported beside the
result (attempts and tokens per period); the result says it is incomplete. Rows that are only
partly priced (a price began mid-hour) keep their known cost and all their tokens.

Reads only the rollups — the daily ones for whole-day periods (the page's), where
``costing.rebuild_day`` has summed the cost split and the priced-only counts per day, else the
hourly ones — scoped exactly like ``cost_rows`` (``selectors.usage_queryset``) and
``cost_totals`` (unallocated cost is included for org-wide viewers of unfiltered scopes).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction
from itertools import combinations

from django.conf import settings
from django.db import connection

from costcenter.cost_split import FLAT_COST_SQL, OUTPUT_COST_SQL
from costcenter.money import AMOUNT_DECIMAL_PLACES, round_for_display
from costcenter.selectors import CostQuery, cost_totals, usage_queryset

QUANTUM = Decimal(1).scaleb(-AMOUNT_DECIMAL_PLACES)

EFFECTS: tuple[tuple[str, str], ...] = (
    ("volume", "Volume (successful tasks)"),
    ("mix", "Model mix"),
    ("unit_price", "Unit price (cost per token)"),
    ("prompt_length", "Prompt length (tokens per attempt)"),
    ("output_length", "Output length (tokens per attempt)"),
    ("retries", "Retries and failures (attempts per successful task)"),
    ("idle_unallocated", "Idle and unallocated pool cost"),
)
_LABELS = dict(EFFECTS)
_MODEL_EFFECTS = tuple(name for name, _ in EFFECTS if name != "idle_unallocated")
KINDS = ("input", "output", "flat")


# The cost split (input / output / flat) lives in ``cost_split``: ``rebuild_day`` sums the same
# expressions per day, so whole-day ranges read them from the daily rollups.
ROW_COLUMNS = (
    "id",
    "hour",
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
    "cost",
    "unpriced_attempts",
    "unpriced_tokens",
    "token_price_ids",
    "latency_histogram",
    "ttft_histogram",
    "output_tps_histogram",
)
ROW_JOINS = """
JOIN costcenter_llmmodel m ON m.id = h.model_id
LEFT JOIN costcenter_endpoint e ON e.id = h.endpoint_id
LEFT JOIN costcenter_pool p ON p.id = e.pool_id AND e.kind = 'gpu_pool'"""


def scoped_hourly_sql(*, user, start: datetime, end: datetime, filters=()) -> tuple[str, list]:
    """SQL (and parameters) of the hourly rollup rows the user may see in [start, end) under
    ``filters``: the same scoping as ``cost_rows``, usable as a derived table ``h``."""
    rows, _ = usage_queryset(user=user, query=CostQuery(start, end, (), "hour", tuple(filters)))
    sql, params = rows.values(*ROW_COLUMNS).query.sql_with_params()
    return f"({sql}) h", list(params)


# --- Results -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Effect:
    name: str
    label: str
    amount: Decimal


@dataclass(frozen=True)
class Unpriced:
    attempts: int
    tokens: int


@dataclass(frozen=True)
class ModelPeriod:
    """One model's priced usage in one period (the inputs of its factors)."""

    successful_tasks: int = 0
    attempts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: Decimal = Decimal(0)
    input_cost: Decimal = Decimal(0)
    output_cost: Decimal = Decimal(0)
    flat_cost: Decimal = Decimal(0)
    unpriced_attempts: int = 0
    unpriced_tokens: int = 0

    @property
    def present(self) -> bool:
        return self.attempts > 0 or self.cost != 0

    def tokens(self, kind: str) -> int:
        return {"input": self.prompt_tokens, "output": self.completion_tokens, "flat": self.attempts}[kind]

    def kind_cost(self, kind: str) -> Decimal:
        return {"input": self.input_cost, "output": self.output_cost, "flat": self.flat_cost}[kind]


@dataclass(frozen=True)
class ModelChange:
    """A model's change of cost and its effects (they add up to ``change`` exactly)."""

    model: str
    before: ModelPeriod
    after: ModelPeriod
    effects: tuple[Effect, ...]
    # Per (kind, factor) effects before rounding, for the explanation's choice of words.
    detail: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def change(self) -> Decimal:
        return self.after.cost - self.before.cost

    def effect(self, name: str) -> Decimal:
        return next((e.amount for e in self.effects if e.name == name), Decimal(0))


@dataclass(frozen=True)
class CostChange:
    before_spend: Decimal  # total spend: priced attempt cost + unallocated pool cost
    after_spend: Decimal
    change: Decimal
    change_ratio: float | None  # change / before_spend; None when before was 0
    effects: tuple[Effect, ...]  # in EFFECTS order; they add up to ``change`` exactly
    models: tuple[ModelChange, ...]  # per-model drill-down, largest |change| first
    before_successful_tasks: int
    after_successful_tasks: int
    before_unallocated: Decimal
    after_unallocated: Decimal
    unallocated_included: bool  # False for team-scoped users or usage-filtered queries
    unpriced_before: Unpriced
    unpriced_after: Unpriced
    explanation: str
    method: str = "shapley"

    @property
    def complete(self) -> bool:
        """False when either period has usage with no price: its cost is not in the numbers."""
        return self.unpriced_before.attempts == 0 and self.unpriced_after.attempts == 0

    def effect(self, name: str) -> Decimal:
        return next(e.amount for e in self.effects if e.name == name)


# --- Reading --------------------------------------------------------------------------------------
_DAILY_COLUMNS = (
    "model_id",
    "priced_successful_tasks",
    "priced_attempts",
    "priced_prompt_tokens",
    "priced_completion_tokens",
    "cost",
    "output_cost",
    "flat_cost",
    "unpriced_attempts",
    "unpriced_tokens",
)


def _period_models_sql(*, user, query: CostQuery) -> tuple[str, list]:
    """Per model: priced successful tasks, attempts, prompt and completion tokens; cost and its
    output and flat parts; unpriced attempts and tokens."""
    scoped, time_field = usage_queryset(
        user=user, query=CostQuery(query.start, query.end, (), "total", query.filters)
    )
    if time_field == "day":
        # Whole days: ``costing.rebuild_day`` summed the split and the priced-only counts per day.
        sql, params = scoped.values(*_DAILY_COLUMNS).query.sql_with_params()
        sums = ", ".join(f"coalesce(sum(h.{column}), 0)" for column in _DAILY_COLUMNS[1:8])
        return (
            f"""SELECT m.name, {sums}, sum(h.unpriced_attempts), sum(h.unpriced_tokens)
                FROM ({sql}) h JOIN costcenter_llmmodel m ON m.id = h.model_id
                GROUP BY m.name""",  # noqa: S608 - constants and Django's compiled, parameterised scope
            list(params),
        )
    table, params = scoped_hourly_sql(user=user, start=query.start, end=query.end, filters=query.filters)
    priced = "FILTER (WHERE h.cost IS NOT NULL)"
    sql = f"""
        SELECT m.name,
               coalesce(sum(h.successful_tasks) {priced}, 0), coalesce(sum(h.attempts) {priced}, 0),
               coalesce(sum(h.prompt_tokens) {priced}, 0), coalesce(sum(h.completion_tokens) {priced}, 0),
               coalesce(sum(h.cost), 0), coalesce(sum({OUTPUT_COST_SQL}), 0), coalesce(sum({FLAT_COST_SQL}), 0),
               sum(h.unpriced_attempts), sum(h.unpriced_tokens)
        FROM {table} {ROW_JOINS}
        GROUP BY m.name
    """  # noqa: S608 - built from constants and Django's compiled, parameterised scope
    return sql, params


def _period_models(*, user, query: CostQuery) -> dict[str, ModelPeriod]:
    sql, params = _period_models_sql(user=user, query=query)
    result = {}
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for name, succ, attempts, prompt, completion, cost, out, flat, un_att, un_tok in cursor.fetchall():
            cost, out, flat = Decimal(cost), Decimal(out), Decimal(flat)
            inp = cost - out - flat
            # A kind with cost but no tokens would have an infinite price per token: flat instead.
            if prompt == 0 and inp != 0:
                flat, inp = flat + inp, Decimal(0)
            if completion == 0 and out != 0:
                flat, out = flat + out, Decimal(0)
            result[name] = ModelPeriod(
                successful_tasks=int(succ),
                attempts=int(attempts),
                prompt_tokens=int(prompt),
                completion_tokens=int(completion),
                cost=cost,
                input_cost=inp,
                output_cost=out,
                flat_cost=flat,
                unpriced_attempts=int(un_att),
                unpriced_tokens=int(un_tok),
            )
    return result


# --- Shapley ---------------------------------------------------------------------------------------
def shapley(before: list[Fraction], after: list[Fraction]) -> list[Fraction]:
    """Exact Shapley effects of switching each factor of a product from ``before`` to ``after``.

    effect_i = Σ over subsets T of the other factors of |T|!(n−|T|−1)!/n! ×
    (f(T ∪ {i} switched) − f(T switched)), f = the product with switched factors from ``after``.
    The effects add up to Π after − Π before exactly.
    """
    n = len(before)
    effects = [Fraction(0)] * n

    def product(switched: set[int]) -> Fraction:
        value = Fraction(1)
        for index in range(n):
            value *= after[index] if index in switched else before[index]
        return value

    for i in range(n):
        others = [j for j in range(n) if j != i]
        for size in range(n):
            weight = Fraction(math.factorial(size) * math.factorial(n - size - 1), math.factorial(n))
            for subset in combinations(others, size):
                switched = set(subset)
                effects[i] += weight * (product(switched | {i}) - product(switched))
    return effects


def _ratio(numerator, denominator) -> Fraction | None:
    return Fraction(numerator) / Fraction(denominator) if denominator else None


def _fill(a: Fraction | None, b: Fraction | None) -> tuple[Fraction, Fraction]:
    """A factor undefined in one period takes the other period's value (it then has no effect)."""
    if a is None and b is None:
        return Fraction(0), Fraction(0)
    return (b if a is None else a), (a if b is None else b)


def _cell_effects(
    model_periods: tuple[ModelPeriod, ModelPeriod], totals: tuple[int, int]
) -> dict[tuple[str, str], Fraction]:
    """Effects of one model, per (kind, effect name), as exact fractions."""
    m0, m1 = model_periods
    regular = all(
        not period.present or (total > 0 and period.successful_tasks > 0)
        for period, total in zip(model_periods, totals, strict=True)
    )
    out: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
    for kind in KINDS:
        c0, c1 = Fraction(m0.kind_cost(kind)), Fraction(m1.kind_cost(kind))
        if c0 == 0 and c1 == 0:
            continue
        # k and p of a period where the model is absent, or has no tokens of this kind, are
        # undefined there; absent → its share (or attempts) is 0, no tokens → k is 0.
        k0 = _ratio(m0.tokens(kind), m0.attempts) if m0.present else None
        k1 = _ratio(m1.tokens(kind), m1.attempts) if m1.present else None
        p0, p1 = _fill(_ratio(c0, m0.tokens(kind)), _ratio(c1, m1.tokens(kind)))
        k0, k1 = _fill(k0, k1)
        length = {"input": "prompt_length", "output": "output_length", "flat": "retries"}[kind]
        if regular:
            s_tot0, s_tot1 = Fraction(totals[0]), Fraction(totals[1])
            share0 = _ratio(m0.successful_tasks, totals[0]) if totals[0] else None
            share1 = _ratio(m1.successful_tasks, totals[1]) if totals[1] else None
            share0, share1 = _fill(share0, share1)
            r0 = _ratio(m0.attempts, m0.successful_tasks) if m0.present else None
            r1 = _ratio(m1.attempts, m1.successful_tasks) if m1.present else None
            r0, r1 = _fill(r0, r1)
            names = ("volume", "mix", "retries", length, "unit_price")
            effects = shapley([s_tot0, share0, r0, k0, p0], [s_tot1, share1, r1, k1, p1])
        else:
            names = ("retries", length, "unit_price")
            effects = shapley([Fraction(m0.attempts), k0, p0], [Fraction(m1.attempts), k1, p1])
        for name, value in zip(names, effects, strict=True):
            out[(kind, name)] += value
    return out


def _round_exactly(values: dict[str, Fraction], total: Decimal) -> dict[str, Decimal]:
    """Round each value to 12 places and give the remainder to the largest, so they add to ``total``."""
    rounded = {name: Decimal(value.numerator) / Decimal(value.denominator) for name, value in values.items()}
    rounded = {name: value.quantize(QUANTUM, rounding=ROUND_HALF_EVEN) for name, value in rounded.items()}
    remainder = total - sum(rounded.values(), Decimal(0))
    if remainder:
        order = list(values)  # a fixed order, so ties always go the same way
        largest = max(order, key=lambda name: (abs(values[name]), -order.index(name)))
        rounded[largest] += remainder
    return rounded


# --- The selector ----------------------------------------------------------------------------------
def cost_change(*, user, before: CostQuery, after: CostQuery) -> CostChange:
    """Decompose the change of total spend from ``before`` to ``after`` into additive effects.

    Both queries must have the same filters (the scope); their ranges may differ in length (a
    longer period simply shows as volume). Effects are in ``EFFECTS`` order and add up to
    ``change`` exactly; ``models`` holds each model's effects, which add up to its change.
    """
    if tuple(before.filters) != tuple(after.filters):
        raise ValueError("both periods must have the same filters (the same scope)")
    periods = (before, after)
    models = [_period_models(user=user, query=query) for query in periods]
    totals = [cost_totals(user=user, query=query) for query in periods]
    unallocated = [row["unallocated_cost"] for row in totals]
    included = all(value is not None for value in unallocated)
    unallocated = [value or Decimal(0) for value in unallocated] if included else [Decimal(0)] * 2
    spend = [
        sum((m.cost for m in period.values()), Decimal(0)) + u
        for period, u in zip(models, unallocated, strict=True)
    ]
    for period_spend, row, u in zip(spend, totals, unallocated, strict=True):
        # The decomposition must cover exactly the spend every other page shows.
        expected = (row["cost"] or Decimal(0)) + u
        if period_spend != expected:
            raise RuntimeError(f"cost change does not reconcile: {period_spend} != {expected}")
    successes = tuple(sum(m.successful_tasks for m in period.values()) for period in models)

    model_changes = []
    for name in sorted(set(models[0]) | set(models[1])):
        pair = (models[0].get(name, ModelPeriod()), models[1].get(name, ModelPeriod()))
        detail = _cell_effects(pair, successes)
        by_name: dict[str, Fraction] = {effect: Fraction(0) for effect in _MODEL_EFFECTS}
        for (_, effect), value in detail.items():
            by_name[effect] += value
        amounts = _round_exactly(by_name, pair[1].cost - pair[0].cost)
        model_changes.append(
            ModelChange(
                model=name,
                before=pair[0],
                after=pair[1],
                effects=tuple(Effect(e, _LABELS[e], amounts[e]) for e in _MODEL_EFFECTS),
                detail=dict(detail),
            )
        )
    # Totals are sums of the rounded per-model effects, so rows and columns both add up exactly.
    amounts = {name: sum((m.effect(name) for m in model_changes), Decimal(0)) for name in _MODEL_EFFECTS} | {
        "idle_unallocated": unallocated[1] - unallocated[0]
    }
    effects = tuple(Effect(name, label, amounts[name]) for name, label in EFFECTS)
    change = spend[1] - spend[0]
    assert sum(e.amount for e in effects) == change  # by construction
    unpriced = [
        Unpriced(
            attempts=sum(m.unpriced_attempts for m in period.values()),
            tokens=sum(m.unpriced_tokens for m in period.values()),
        )
        for period in models
    ]
    model_changes.sort(key=lambda m: (-abs(m.change), m.model))
    result = CostChange(
        before_spend=spend[0],
        after_spend=spend[1],
        change=change,
        change_ratio=float(change / spend[0]) if spend[0] else None,
        effects=effects,
        models=tuple(model_changes),
        before_successful_tasks=successes[0],
        after_successful_tasks=successes[1],
        before_unallocated=unallocated[0],
        after_unallocated=unallocated[1],
        unallocated_included=included,
        unpriced_before=unpriced[0],
        unpriced_after=unpriced[1],
        explanation="",
    )
    return _with_explanation(result)


# --- The sentence ----------------------------------------------------------------------------------
def money(amount: Decimal) -> str:
    """An amount for a sentence: rounded half-even to the currency's minor unit, with separators."""
    currency = settings.CURRENCY
    shown = round_for_display(abs(amount), currency)
    places = max(0, -shown.as_tuple().exponent)
    text = f"{shown:,.{places}f}"
    return f"${text}" if currency == "USD" else f"{text} {currency}"


def _percent(ratio: float) -> str:
    return f"{ratio:+.0%}"


def _moved(before: Fraction | None, after: Fraction | None, noun: str, *, as_share: bool = False) -> str:
    if as_share:
        return f"{noun} {'rose' if after > before else 'fell'} from {float(before):.0%} to {float(after):.0%}"
    if not before:
        return f"{noun} appeared"
    ratio = float(after / before - 1)
    return f"{noun} {'grew' if ratio > 0 else 'fell'} {abs(ratio):.0%}"


def _reason(result: CostChange, effect: str) -> str:
    if effect == "idle_unallocated":
        verb = "rose" if result.after_unallocated > result.before_unallocated else "fell"
        return f"unallocated (idle) GPU-pool cost {verb} from {money(result.before_unallocated)} to {money(result.after_unallocated)}"
    if effect == "volume":
        return _moved(
            Fraction(result.before_successful_tasks),
            Fraction(result.after_successful_tasks),
            "successful tasks",
        )
    # The model that carries most of this effect names it.
    model = max(result.models, key=lambda m: (abs(m.effect(effect)), m.model))
    m0, m1 = model.before, model.after
    if effect == "mix":
        share0 = _ratio(m0.successful_tasks, result.before_successful_tasks) or Fraction(0)
        share1 = _ratio(m1.successful_tasks, result.after_successful_tasks) or Fraction(0)
        return _moved(share0, share1, f"the share of successful tasks on {model.model}", as_share=True)
    if effect == "retries":
        r0, r1 = _ratio(m0.attempts, m0.successful_tasks), _ratio(m1.attempts, m1.successful_tasks)
        if r0 is None or r1 is None:
            return (
                f"attempts on {model.model} that completed no task went from {m0.attempts} to {m1.attempts}"
            )
        return f"attempts per successful task on {model.model} went from {float(r0):.2f} to {float(r1):.2f}"
    if effect in ("prompt_length", "output_length"):
        kind, noun = ("input", "prompt") if effect == "prompt_length" else ("output", "output")
        k0, k1 = _ratio(m0.tokens(kind), m0.attempts), _ratio(m1.tokens(kind), m1.attempts)
        return _moved(k0, k1, f"{noun} tokens per attempt on {model.model}")
    # unit_price: the token kind whose price moved the most money.
    kind = max(KINDS, key=lambda k: abs(model.detail.get((k, "unit_price"), Fraction(0))))
    p0 = _ratio(m0.kind_cost(kind), m0.tokens(kind))
    p1 = _ratio(m1.kind_cost(kind), m1.tokens(kind))
    noun = {"input": "cost per input token", "output": "cost per output token", "flat": "cost per attempt"}[
        kind
    ]
    return _moved(p0, p1, f"the {noun} of {model.model}")


def _with_explanation(result: CostChange) -> CostChange:
    from dataclasses import replace

    if result.change == 0:
        sentence = f"Spend was unchanged at {money(result.after_spend)}."
    else:
        verb = "rose" if result.change > 0 else "fell"
        head = f"Spend {verb} {money(result.change)}"
        if result.change_ratio is not None:
            head += f" ({_percent(result.change_ratio)})"
        largest = max(result.effects, key=lambda e: abs(e.amount))
        reason = _reason(result, largest.name)
        if (largest.amount > 0) == (result.change > 0):
            sentence = f"{head}, mostly because {reason}."
        else:
            sign = "+" if largest.amount > 0 else "-"
            sentence = f"{head}; the largest single effect ({sign}{money(largest.amount)}) is that {reason}."
    missing = [p for p in (result.unpriced_before, result.unpriced_after) if p.attempts]
    if missing:
        attempts = sum(p.attempts for p in missing)
        tokens = sum(p.tokens for p in missing)
        sentence += f" Incomplete: {attempts:,} unpriced attempts ({tokens:,} tokens) are not counted."
    return replace(result, explanation=sentence)
