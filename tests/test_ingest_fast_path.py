"""The plain-record fast path of ``build_record`` accepts only what the full checks accept, and
builds the very same record: a property test over values of every plausible type and range."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.formats import _FAIL
from ingest.validate import InvalidRecord, _build_plain_record, build_checked_record

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)

texts = st.one_of(
    st.none(),
    st.sampled_from(["netops", " netops ", "", "t-1", "a\\nb", "x" * 201, "y" * 257, "\\t", "gpt-4o"]),
    st.text(max_size=12),
    st.integers(-5, 5),
)
counts = st.one_of(
    st.none(),
    st.integers(-3, 12_000_000),
    st.sampled_from([0, 1, 37, 2**31 - 1, 2**31, 10_000_000, True]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.just("12"),
)
moments = st.one_of(
    st.none(),
    st.datetimes(
        min_value=datetime(2010, 1, 1), max_value=datetime(2030, 1, 1), timezones=st.sampled_from([UTC, None])
    ),
    st.just(datetime(2026, 11, 2, 10, tzinfo=timezone(timedelta(hours=2)))),
    st.just("2026-11-02T10:00:00Z"),
)


FIELDS = {
    "task_id": texts,
    "attempt": counts,
    "request_id": texts,
    "ts": moments,
    "model": texts,
    "model_version": texts,
    "endpoint": texts,
    "workload": texts,
    "team": texts,
    "status": st.one_of(
        st.sampled_from(["success", "failure", "ok", "Success", "maybe", ""]), st.none(), st.integers()
    ),
    "http_status": st.one_of(st.none(), st.integers(0, 700), st.just("200")),
    "error_type": texts,
    "latency_ms": counts,
    "ttft_ms": counts,
    "queue_wait_ms": counts,
    "prompt_tokens": counts,
    "completion_tokens": counts,
    "cached_tokens": counts,
    "reasoning_tokens": counts,
}

# Plain values, near their limits, so that whole records often take the fast path.
PLAIN = {
    "task_id": st.sampled_from(["t-1", " t-2 ", "x" * 256]),
    "attempt": st.sampled_from([1, 2, 2**31 - 1]),
    "request_id": st.sampled_from([None, "r-1", " ", "r" * 256]),
    "ts": st.sampled_from(
        [datetime(2026, 11, 2, 10, tzinfo=UTC), datetime(2015, 1, 1, tzinfo=UTC), NOW + timedelta(days=1)]
    ),
    "model": st.sampled_from(["llama", "m" * 200, " gpt "]),
    "model_version": st.sampled_from([None, "", "2026-10-01"]),
    "endpoint": st.sampled_from([None, "vllm-h100-a"]),
    "workload": st.sampled_from([None, "summarize", "w" * 200]),
    "team": st.sampled_from([None, "netops"]),
    "status": st.sampled_from(["success", "failure", "ok", "completed", "error"]),
    "http_status": st.sampled_from([None, 100, 200, 599]),
    "error_type": st.sampled_from([None, "", "timeout", "e" * 300]),
    "latency_ms": st.sampled_from([None, 0, 812, 2**31 - 1]),
    "ttft_ms": st.sampled_from([None, 95]),
    "queue_wait_ms": st.sampled_from([None, 12]),
    "prompt_tokens": st.sampled_from([0, 900, 5_000_000]),
    "completion_tokens": st.sampled_from([0, 120, 5_000_000]),
    "cached_tokens": st.sampled_from([None, 0, 100, 900]),
    "reasoning_tokens": st.sampled_from([None, 0, 64, 120]),
}


@st.composite
def records(draw):
    """A plain record with up to two fields replaced by arbitrary values."""
    values = {name: draw(strategy) for name, strategy in PLAIN.items()}
    for name in draw(st.lists(st.sampled_from(sorted(FIELDS)), max_size=2, unique=True)):
        values[name] = draw(FIELDS[name])
    return values


TAKEN = {"fast": 0}


@settings(max_examples=3000, deadline=None)
@given(values=records())
def test_the_fast_path_agrees_with_the_full_checks(values):
    fast = _build_plain_record(*values.values(), NOW)
    try:
        checked = build_checked_record(**values, now=NOW, labels=None)
    except InvalidRecord as exc:
        assert fast is None, f"fast path accepted what the checks reject: {exc.reason}"
        return
    if fast is not None:
        TAKEN["fast"] += 1
        assert fast == checked


def test_the_property_test_exercised_the_fast_path():
    # Guards against a generator drift that would make the property above vacuous.
    test_the_fast_path_agrees_with_the_full_checks()
    assert TAKEN["fast"] > 300


def test_the_fast_path_takes_the_common_record():
    record = _build_plain_record(
        "t-1", 1, "r-1", datetime(2026, 11, 2, 10, tzinfo=UTC), "llama", "", "vllm-h100-a", "summarize",
        "netops", "success", 200, None, 812, 95, 12, 900, 120, 0, None, NOW,
    )  # fmt: skip
    assert record is not None and record.idempotency_key == "r-1" and record.prompt_tokens == 900


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=1500, deadline=None)
@given(data=st.one_of(json_values.map(lambda v: json.dumps(v).encode()), st.binary(max_size=60)))
def test_the_reader_parses_every_line_exactly_as_json_does(data):
    from ingest.formats import _loads

    try:
        expected = json.loads(data)
    except (ValueError, RecursionError):
        expected = "refused"
    got = _loads(data)
    assert (got if got is not _FAIL else "refused") == expected
    assert type(got) is type(expected) or expected == "refused"
