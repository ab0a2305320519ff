"""The cost-change decomposition against hand-computed effects (docs/cost-change.md).

Two one-hour periods a day apart. Per successful attempt, unless a test says otherwise: 1,000,000
prompt and 100,000 completion tokens, so on ``cheap`` (1 / 2 per 1M) an attempt costs
1.00 + 0.20 = 1.20 and on ``pricey`` (10 / 30 per 1M) 10.00 + 3.00 = 13.00.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from itertools import permutations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from costcenter.catalog import catalog_load
from costcenter.cost_change import EFFECTS, cost_change, shapley
from costcenter.costing import recompute
from costcenter.models import TeamRole
from costcenter.selectors import CostQuery, cost_totals
from tests.conftest import make_user
from tests.cost_world import attempt, load

pytestmark = pytest.mark.django_db

H0 = datetime(2026, 11, 2, 10, tzinfo=UTC)
H1 = H0 + timedelta(days=1)
BEFORE, AFTER = CostQuery(H0, H0 + timedelta(hours=1)), CostQuery(H1, H1 + timedelta(hours=1))
M, K = 1_000_000, 100_000

CATALOG = """
teams: [{slug: a, name: A}, {slug: b, name: B}]
endpoints:
  - {name: api, kind: token_priced, provider: openai}
models:
  - name: cheap
    prices: [{effective_from: 2026-01-01, input: "1", output: "2"}%(cheap_change)s]
  - {name: pricey, prices: [{effective_from: 2026-01-01, input: "10", output: "30"}]}
  - {name: llama}
%(pools)s
"""
POOLS = """
pools:
  - {name: h100, vendor: nvidia, gpu_model: H100, gpu_count: 1, prices: [{effective_from: 2026-01-01, gpu_hour: "2"}]}
  - {name: spare, vendor: amd, gpu_model: MI300X, gpu_count: 1,
     prices: [{effective_from: "2026-11-03T00:00:00Z", gpu_hour: "3"}]}
"""
POOL_ENDPOINTS = "  - {name: vllm, kind: gpu_pool, pool: h100}\n"


def world(*, cheap_change: str = "", pools: bool = False) -> None:
    text = CATALOG % {"cheap_change": cheap_change, "pools": POOLS if pools else ""}
    if pools:
        text = text.replace("models:", POOL_ENDPOINTS + "models:", 1)
    catalog_load(text)


_counter = iter(range(1, 10_000))


def task(hour: datetime, model: str = "cheap", *, tries: int = 1, prompt: int = M, completion: int = K, **kw):
    """One task on ``model``: ``tries − 1`` failed attempts (same usage), then a success."""
    task_id = f"t-{next(_counter)}"
    records = []
    for number in range(1, tries + 1):
        failed = number < tries
        records.append(
            attempt(
                next(_counter),
                hour=hour,
                minute=number,
                task=task_id,
                attempt_no=number,
                model=model,
                endpoint=kw.get("endpoint", "api"),
                team=kw.get("team", "a"),
                status="failure" if failed else "success",
                http_status=500 if failed else 200,
                prompt_tokens=prompt,
                completion_tokens=completion,
            )
        )
    return records


def run(*tasks, user=None):
    load(*[record for records in tasks for record in records])
    recompute(now=H1 + timedelta(hours=2), since=H0)
    user = user or make_user("carol", org_role="viewer")
    return cost_change(user=user, before=BEFORE, after=AFTER)


def effects(result) -> dict[str, Decimal]:
    return {effect.name: effect.amount for effect in result.effects}


def only(result, name: str, amount: str) -> None:
    """The change is exactly ``amount`` and all of it is the effect ``name``."""
    expected = {key: Decimal(0) for key, _ in EFFECTS} | {name: Decimal(amount)}
    assert effects(result) == expected
    assert result.change == Decimal(amount)


def test_pure_volume_change():
    world()
    result = run(task(H0), task(H0), task(H1), task(H1), task(H1))
    # 2 → 3 successful tasks on cheap at 1.20 each: +1.20, all volume.
    only(result, "volume", "1.2")
    assert (result.before_spend, result.after_spend) == (Decimal("2.4"), Decimal("3.6"))
    assert result.explanation == "Spend rose $1.20 (+50%), mostly because successful tasks grew 50%."


def test_pure_price_change():
    # cheap doubles its prices from 2026-11-03: 2.40 per task instead of 1.20.
    world(cheap_change=', {effective_from: "2026-11-03T00:00:00Z", input: "2", output: "4"}')
    result = run(task(H0), task(H0), task(H1), task(H1))
    only(result, "unit_price", "2.4")
    assert result.explanation == (
        "Spend rose $2.40 (+100%), mostly because the cost per input token of cheap grew 100%."
    )


def test_mix_shift_from_a_cheap_to_an_expensive_model():
    world()
    # Before: 3 cheap + 1 pricey = 3.60 + 13.00 = 16.60. After: 1 cheap + 3 pricey = 1.20 + 39.00 = 40.20.
    result = run(
        *[task(H0) for _ in range(3)],
        task(H0, "pricey"),
        task(H1),
        *[task(H1, "pricey") for _ in range(3)],
    )
    only(result, "mix", "23.6")
    by_model = {m.model: m for m in result.models}
    assert by_model["pricey"].effect("mix") == Decimal("26") and by_model["cheap"].effect("mix") == Decimal(
        "-2.4"
    )
    assert [m.model for m in result.models] == ["pricey", "cheap"]  # largest change first
    assert result.explanation == (
        "Spend rose $23.60 (+142%), mostly because the share of successful tasks on pricey rose from 25% to 75%."
    )


def test_longer_outputs():
    world()
    # Output doubles from 100,000 to 200,000 tokens: +100,000 × 2 / 1M = +0.20 a task, two tasks.
    result = run(task(H0), task(H0), task(H1, completion=2 * K), task(H1, completion=2 * K))
    only(result, "output_length", "0.4")
    assert result.explanation == (
        "Spend rose $0.40 (+17%), mostly because output tokens per attempt on cheap grew 100%."
    )


def test_more_retries():
    world()
    # One of the two tasks needs a failed attempt first; the failure reported usage, so it costs 1.20.
    result = run(task(H0), task(H0), task(H1), task(H1, tries=2))
    only(result, "retries", "1.2")
    assert "attempts per successful task on cheap went from 1.00 to 1.50" in result.explanation


def test_more_idle_pool_time():
    # Same usage in both hours (one task on the h100 pool: 2.00 allocated). The spare pool comes
    # into service on 2026-11-03 and serves nothing: 3.00 an hour unallocated.
    world(pools=True)
    result = run(task(H0, "llama", endpoint="vllm"), task(H1, "llama", endpoint="vllm"))
    only(result, "idle_unallocated", "3")
    assert (result.before_unallocated, result.after_unallocated) == (Decimal(0), Decimal(3))
    assert result.explanation == (
        "Spend rose $3.00 (+150%), mostly because unallocated (idle) GPU-pool cost rose from $0.00 to $3.00."
    )


def test_a_model_only_in_one_period():
    world()
    # Before: 2 cheap (2.40). After: 2 cheap + 1 new pricey (15.40). S: 2 → 3.
    # pricey: S·s goes 2·0 → 3·(1/3); Shapley over (S, s) with the rest 13:
    #   volume = ½[(3−2)·0 + (3−2)·⅓]·13 = 13/6, mix = ½[(⅓−0)·2 + (⅓−0)·3]·13 = 65/6.
    # cheap: S·s goes 2·1 → 3·⅔ (unchanged cost 2.40); rest 1.20:
    #   volume = ½[1·1 + 1·⅔]·1.2 = 1, mix = ½[(−⅓)·2 + (−⅓)·3]·1.2 = −1.
    result = run(task(H0), task(H0), task(H1), task(H1), task(H1, "pricey"))
    by_model = {m.model: m for m in result.models}
    assert by_model["pricey"].effect("volume") == Decimal("2.166666666667")
    assert by_model["pricey"].effect("mix") == Decimal("10.833333333333")
    assert by_model["cheap"].effect("volume") == Decimal(1) and by_model["cheap"].effect("mix") == Decimal(-1)
    assert effects(result)["volume"] == Decimal("3.166666666667")  # 19/6
    assert effects(result)["mix"] == Decimal("9.833333333333")  # 59/6
    assert sum(effects(result).values()) == result.change == Decimal(13)
    assert by_model["pricey"].before.attempts == 0


def test_a_model_that_only_failed_is_retry_cost():
    world()
    # Before: a task fails on pricey, then succeeds on cheap (a fallback). After: cheap alone.
    load(
        attempt(9001, hour=H0, task="f", model="pricey", endpoint="api", status="failure", http_status=500,
                prompt_tokens=M, completion_tokens=K),
        attempt(9002, hour=H0, task="f", attempt_no=2, minute=6, model="cheap", endpoint="api",
                prompt_tokens=M, completion_tokens=K),
    )  # fmt: skip
    result = run(task(H1))
    # pricey completed nothing: its 13.00 vanishing is a retries/failures effect.
    only(result, "retries", "-13")
    assert result.explanation == (
        "Spend fell $13.00 (-92%), mostly because attempts on pricey that completed no task went from 1 to 0."
    )


def test_unpriced_usage_is_reported_not_decomposed():
    world()
    unpriced = task(H1, "mystery", endpoint="mystery-api", prompt=1000, completion=500)
    result = run(task(H0), task(H1), task(H1), unpriced)
    only(result, "volume", "1.2")  # the unpriced task is in no factor
    assert result.after_successful_tasks == 2
    assert (result.unpriced_before.attempts, result.unpriced_after.attempts) == (0, 1)
    assert result.unpriced_after.tokens == 1500 and not result.complete
    assert result.explanation.endswith("Incomplete: 1 unpriced attempts (1,500 tokens) are not counted.")


def permutation_shapley(before: list, after: list) -> list[Fraction]:
    """Shapley by its definition: the mean over all orders of each factor's marginal change."""
    n = len(before)
    total = [Fraction(0)] * n
    for order in permutations(range(n)):
        current = list(before)
        for index in order:
            old = math.prod(current)
            current[index] = after[index]
            total[index] += math.prod(current) - old
    return [value / math.factorial(n) for value in total]


def test_subset_formula_equals_the_permutation_definition():
    before = [Fraction(3), Fraction(1, 4), Fraction(5, 3), Fraction(0), Fraction(7, 2)]
    after = [Fraction(4), Fraction(2, 5), Fraction(1), Fraction(9), Fraction(7, 3)]
    assert shapley(before, after) == permutation_shapley(before, after)
    assert sum(shapley(before, after)) == math.prod(after) - math.prod(before)


def test_everything_at_once_sums_exactly_to_the_change():
    world(cheap_change=', {effective_from: "2026-11-03T00:00:00Z", input: "2", output: "4"}', pools=True)
    result = run(
        # Before: 2 cheap, 1 pricey, 1 llama on the h100 pool (which it fills: 2.00).
        task(H0), task(H0), task(H0, "pricey"), task(H0, "llama", endpoint="vllm", prompt=1000, completion=1000),
        # After: cheap's price doubles, one cheap task retries, pricey answers twice as long
        # and gets a second task, llama is unchanged, the spare pool idles (3.00).
        task(H1), task(H1, tries=2), task(H1, "pricey", completion=2 * K), task(H1, "pricey", completion=2 * K),
        task(H1, "llama", endpoint="vllm", prompt=1000, completion=1000),
    )  # fmt: skip
    # Spend: before 2.40 + 13.00 + 2.00 = 17.40; after 3 × 2.40 + 2 × 16.00 + 2.00 + 3.00 = 44.20.
    assert (result.before_spend, result.after_spend, result.change) == (
        Decimal("17.4"),
        Decimal("44.2"),
        Decimal("26.8"),
    )
    carol_totals = cost_totals(user=make_user("dora", org_role="viewer"), query=AFTER)
    assert carol_totals["total_spend"] == result.after_spend  # the same number every page shows
    assert sum(e.amount for e in result.effects) == result.change
    for model in result.models:
        assert sum(e.amount for e in model.effects) == model.change, model.model
    assert result.effect("idle_unallocated") == Decimal(3)
    # Independent check: the definition of Shapley over each model's factors
    # (S, share, attempts/success, tokens/attempt, cost/token) per token kind, written out by hand.
    # S: 4 → 5. cheap: share 2/4 → 2/5, attempts/success 1 → 3/2, input 1M/attempt at 1 → 2 per 1M,
    # output 100k/attempt at 2 → 4 per 1M. pricey: share 1/4 → 2/5, input 1M at 10, output 100k → 200k at 30.
    # llama: share 1/4 → 1/5; 2.00 split 1:1 by its 1000 prompt and 1000 completion tokens.
    cells = [
        ([4, Fraction(2, 4), 1, M, Fraction(1, M)], [5, Fraction(2, 5), Fraction(3, 2), M, Fraction(2, M)]),
        ([4, Fraction(2, 4), 1, K, Fraction(2, M)], [5, Fraction(2, 5), Fraction(3, 2), K, Fraction(4, M)]),
        ([4, Fraction(1, 4), 1, M, Fraction(10, M)], [5, Fraction(2, 5), 1, M, Fraction(10, M)]),
        ([4, Fraction(1, 4), 1, K, Fraction(30, M)], [5, Fraction(2, 5), 1, 2 * K, Fraction(30, M)]),
        ([4, Fraction(1, 4), 1, 1000, Fraction(1, 1000)], [5, Fraction(1, 5), 1, 1000, Fraction(1, 1000)]),
        ([4, Fraction(1, 4), 1, 1000, Fraction(1, 1000)], [5, Fraction(1, 5), 1, 1000, Fraction(1, 1000)]),
    ]
    names = ["volume", "mix", "retries", None, "unit_price"]
    lengths = ["prompt_length", "output_length"] * 3
    expected = {name: Fraction(0) for name, _ in EFFECTS}
    for (before, after), length in zip(cells, lengths, strict=True):
        for name, value in zip(names, permutation_shapley(before, after), strict=True):
            expected[name or length] += value
    expected["idle_unallocated"] = Fraction(3)
    for name, value in expected.items():
        # Effects are rounded to 12 places per model (the remainder to the largest): a few 1e-12.
        assert abs(Fraction(result.effect(name)) - value) <= Fraction(1, 10**11), name
    cheap = next(m for m in result.models if m.model == "cheap")
    assert cheap.change == Decimal("4.8")  # 3 attempts × 2.40 − 2 × 1.20


def test_a_team_member_sees_only_their_team_and_no_unallocated_cost():
    world(pools=True)
    alice = make_user("alice", teams={"a": TeamRole.VIEWER})
    result = run(task(H0), task(H1), task(H1, team="b"), user=alice)
    assert result.unallocated_included is False and result.before_unallocated == 0
    assert result.change == 0 and result.explanation == "Spend was unchanged at $1.20."


def test_periods_must_share_their_scope():
    user = make_user("erin", org_role="viewer")
    with pytest.raises(ValueError, match="same filters"):
        cost_change(user=user, before=BEFORE, after=CostQuery(H1, H1, filters=(("team", ("a",)),)))


def test_the_worked_example_of_the_docs():
    # docs/cost-change.md: A 80 → 90 tasks at 1.00, B 20 → 30 tasks at 10.00 → 11.00,
    # an idle pool costing 20.00 → 30.00 an hour. Spend 300 → 450.
    catalog_load("""
teams: [{slug: a, name: A}]
pools:
  - {name: spare, vendor: nvidia, gpu_model: H100, gpu_count: 10,
     prices: [{effective_from: 2026-01-01, gpu_hour: "2"}, {effective_from: "2026-11-03T00:00:00Z", gpu_hour: "3"}]}
endpoints: [{name: api, kind: token_priced, provider: openai}]
models:
  - {name: A, prices: [{effective_from: 2026-01-01, input: "1", output: "1"}]}
  - name: B
    prices: [{effective_from: 2026-01-01, input: "10", output: "10"},
             {effective_from: "2026-11-03T00:00:00Z", input: "11", output: "11"}]
""")
    result = run(
        *[task(H0, "A", completion=0) for _ in range(80)],
        *[task(H0, "B", completion=0) for _ in range(20)],
        *[task(H1, "A", completion=0) for _ in range(90)],
        *[task(H1, "B", completion=0) for _ in range(30)],
    )
    assert (result.before_spend, result.after_spend) == (Decimal(300), Decimal(450))
    by_model = {m.model: m for m in result.models}
    assert (by_model["A"].effect("volume"), by_model["A"].effect("mix")) == (Decimal("15.5"), Decimal("-5.5"))
    b = by_model["B"]
    assert (b.effect("volume"), b.effect("mix"), b.effect("unit_price")) == (
        Decimal("47.333333333333"),
        Decimal("57.833333333334"),  # 347/6 rounded, plus the 1e-12 B's rounding left over
        Decimal("24.833333333333"),
    )
    assert effects(result) == {
        "volume": Decimal("62.833333333333"),
        "mix": Decimal("52.333333333334"),
        "unit_price": Decimal("24.833333333333"),
        "prompt_length": Decimal(0),
        "output_length": Decimal(0),
        "retries": Decimal(0),
        "idle_unallocated": Decimal(10),
    }
    assert result.explanation == "Spend rose $150.00 (+50%), mostly because successful tasks grew 20%."


def test_zero_output_tokens_in_one_period_is_an_output_length_effect():
    world()
    # Before, no output at all (k_out = 0, its price undefined: it takes the after price, 2 per 1M).
    result = run(task(H0, completion=0), task(H0, completion=0), task(H1), task(H1))
    only(result, "output_length", "0.4")
    assert "output tokens per attempt on cheap appeared" in result.explanation


def test_whole_days_reconcile_with_the_daily_rollups():
    world(pools=True)
    load(*task(H0), *task(H1), *task(H1), *task(H1, "llama", endpoint="vllm"))
    recompute(now=H1 + timedelta(days=1), since=H0.replace(hour=0))
    day0 = H0.replace(hour=0)
    before, after = (
        CostQuery(day0, day0 + timedelta(days=1)),
        CostQuery(day0 + timedelta(days=1), day0 + timedelta(days=2)),
    )
    user = make_user("carol", org_role="viewer")
    result = cost_change(user=user, before=before, after=after)
    # h100 costs 2.00 an hour for 24 hours a day; the spare pool (3.00) is in service from day 2.
    # Day 1: 1.20 + 48.00 unallocated. Day 2: 2.40 + 2.00 llama + 46.00 + 72.00 unallocated.
    assert result.before_spend == cost_totals(user=user, query=before)["total_spend"] == Decimal("49.2")
    assert result.after_spend == cost_totals(user=user, query=after)["total_spend"] == Decimal("122.4")
    assert result.effect("idle_unallocated") == Decimal(70)
    assert sum(e.amount for e in result.effects) == result.change


def test_whole_days_read_the_daily_rollups_and_agree_with_the_hourly_rows():
    """Whole-day periods (the page's) read the cost split and priced-only counts that
    ``rebuild_day`` summed per day; the result is the one the hourly rows give, to the last digit,
    also after a price change is recomputed."""
    late = '  - {name: late, prices: [{effective_from: "2026-11-03T12:00:00Z", input: "%s", output: "7"}]}\n'
    cheap_change = ', {effective_from: "2026-11-03T00:00:00Z", input: "2", output: "4"}'

    def catalog(late_input: str) -> None:
        text = CATALOG % {"cheap_change": cheap_change, "pools": POOLS}
        catalog_load(text.replace("models:\n", POOL_ENDPOINTS + "models:\n" + late % late_input, 1))

    catalog("5")
    day0, day1, day2 = H0.replace(hour=0), H1.replace(hour=0), H1.replace(hour=0) + timedelta(days=1)
    afternoon = H1.replace(hour=14)
    load(
        *[record for records in (
            task(H0), task(H0, "pricey"), task(H0, "llama", endpoint="vllm", prompt=1000, completion=1000),
            task(H0, "late"),  # before late's price: unpriced
            task(H1, tries=2), task(H1, "late"),  # cheap's new price; late still unpriced at 10:00
            task(afternoon, "late"),  # priced from 12:00: late's day row mixes priced and unpriced hours
            task(afternoon, "llama", endpoint="vllm", prompt=0, completion=0),  # no tokens: flat cost
        ) for record in records]
    )  # fmt: skip
    recompute(now=day2, since=day0)
    user = make_user("carol", org_role="viewer")
    tick = timedelta(microseconds=1)  # off whole days by 1 µs: the hourly rows of the same hours

    def both() -> tuple:
        with CaptureQueriesContext(connection) as queries:
            daily = cost_change(user=user, before=CostQuery(day0, day1), after=CostQuery(day1, day2))
        sql = " ".join(query["sql"] for query in queries.captured_queries)
        assert "costcenter_dailyusage" in sql and "costcenter_hourlyusage" not in sql
        hourly = cost_change(
            user=user, before=CostQuery(day0 - tick, day1 - tick), after=CostQuery(day1 - tick, day2 - tick)
        )
        assert daily == hourly
        return daily

    result = both()
    late_after = next(m for m in result.models if m.model == "late").after
    # Only the 14:00 attempt is priced: 1M × 5 + 100k × 7 per 1M = 5.70, its tokens alone.
    assert (late_after.attempts, late_after.successful_tasks, late_after.prompt_tokens) == (1, 1, M)
    assert late_after.cost == Decimal("5.7") and late_after.output_cost == Decimal("0.7")
    assert (late_after.unpriced_attempts, late_after.unpriced_tokens) == (1, M + K)
    llama_after = next(m for m in result.models if m.model == "llama").after
    assert llama_after.flat_cost == Decimal(2)  # the 14:00 pool-hour with zero tokens

    catalog("6")  # late's input price changes: its hours are marked, recomputed, their day rebuilt
    recompute(now=day2)
    repriced = both()
    assert next(m for m in repriced.models if m.model == "late").after.cost == Decimal("6.7")
    assert repriced.change == result.change + 1


@pytest.mark.parametrize("whole_days", [False, True])
def test_a_user_in_no_team_sees_an_empty_decomposition(whole_days):
    # Hourly and whole-day ranges take different SQL paths; neither may leak or fail for no team.
    world(pools=True)
    nobody = make_user("nobody")
    before, after = BEFORE, AFTER
    if whole_days:
        day = datetime(2026, 11, 2, tzinfo=UTC)
        next_day = day + timedelta(days=1)
        before, after = CostQuery(day, next_day), CostQuery(next_day, next_day + timedelta(days=1))
    load(*task(H0), *task(H1))
    recompute(now=H1 + timedelta(days=2), since=H0 - timedelta(hours=10))
    assert cost_totals(user=make_user("carol", org_role="viewer"), query=before)["cost"] > 0  # data exists
    result = cost_change(user=nobody, before=before, after=after)
    assert result.change == 0 and result.models == () and result.after_spend == 0
    assert all(effect.amount == 0 for effect in result.effects)
