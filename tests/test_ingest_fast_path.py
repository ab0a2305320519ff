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


# --- the canonical fast path (canonical_fast): a line straight to a binary COPY row --------------

FAKE_IDS = b"<ids>"  # stands for the encoded source and dimension ids, looked up at write time

json_texts = st.one_of(
    st.none(),
    st.sampled_from(["netops", " netops ", "", "  ", "t-1", "a\nb", "x" * 201, "y" * 257, "\t", "é", "\x7f"]),
    st.text(max_size=8),
    st.integers(-5, 5),
    st.booleans(),
)
json_counts = st.one_of(
    st.none(),
    st.integers(-3, 12_000_000),
    st.sampled_from([0, 1, 37, 2**15 - 1, 2**15, 2**31 - 1, 2**31, 2**64, 10_000_000, True, 37.0, 1e400]),
    st.just("12"),
)
json_moments = st.one_of(
    st.sampled_from(
        [
            "2026-11-02T10:15:00Z",
            "2026-11-02T10:15:00.123456Z",
            " 2026-11-02T10:15:00+02:00 ",
            "2026-11-02T10:15:00",
            "2026-11-02 10:15:00Z",
            "2014-12-31T23:59:59Z",
            "2026-11-30T12:00:00Z",
            "2026-11-30T12:00:01Z",
            "not a time",
            "",
        ]
    ),
    st.integers(1_400_000_000, 1_800_000_000),
    st.none(),
)
usage_objects = st.fixed_dictionaries(
    {},
    optional={
        "prompt_tokens": json_counts,
        "completion_tokens": json_counts,
        "input_tokens": json_counts,
        "output_tokens": json_counts,
        "total_tokens": json_counts,
        "prompt_tokens_details": st.one_of(
            st.none(), st.just(7), st.fixed_dictionaries({}, optional={"cached_tokens": json_counts})
        ),
        "completion_tokens_details": st.one_of(
            st.none(), st.just([]), st.fixed_dictionaries({}, optional={"reasoning_tokens": json_counts})
        ),
    },
)
PLAIN_LINE = {
    "task_id": st.sampled_from(["t-1", " t-2 ", "x" * 256]),
    "attempt": st.sampled_from([1, 2, 2**15 - 1]),
    "request_id": st.sampled_from(["r-1", " ", "r" * 256]),
    "ts": st.sampled_from(["2026-11-02T10:00:00Z", "2015-01-01T00:00:00Z", "2026-11-02T12:00:00.5+01:00"]),
    "model": st.sampled_from(["llama", "m" * 200, " gpt "]),
    "model_version": st.sampled_from(["", "2026-10-01"]),
    "endpoint": st.sampled_from(["vllm-h100-a", ""]),
    "workload": st.sampled_from(["summarize", "w" * 200]),
    "team": st.sampled_from(["netops", " "]),
    "status": st.sampled_from(["success", "failure", "ok", "error"]),
    "http_status": st.sampled_from([100, 200, 599]),
    "error_type": st.sampled_from(["", "timeout", "e" * 300]),
    "latency_ms": st.sampled_from([0, 812, 2**31 - 1]),
    "ttft_ms": st.sampled_from([95]),
    "queue_wait_ms": st.sampled_from([12]),
    "usage": st.sampled_from(
        [
            {"prompt_tokens": 900, "completion_tokens": 120, "prompt_tokens_details": {"cached_tokens": 100}},
            {"prompt_tokens": 5_000_000, "completion_tokens": 5_000_000},
            {
                "prompt_tokens": 3,
                "completion_tokens": 2,
                "completion_tokens_details": {"reasoning_tokens": 2},
            },
        ]
    ),
}
ANY_LINE = {
    **{name: json_texts for name in ("task_id", "request_id", "model", "model_version", "endpoint")},
    **{name: json_texts for name in ("workload", "team", "error_type")},
    "attempt": json_counts,
    "ts": json_moments,
    "status": st.one_of(st.sampled_from(["success", "Success", " ok", "maybe"]), json_texts),
    "http_status": st.one_of(json_counts, st.integers(0, 700)),
    "latency_ms": json_counts,
    "ttft_ms": json_counts,
    "queue_wait_ms": json_counts,
    "usage": st.one_of(st.none(), usage_objects, st.just([1])),
}


@st.composite
def canonical_lines(draw):
    """A plain canonical line with up to three fields replaced, removed or duplicated, written
    compact or spaced, escaped or not."""
    values = {name: draw(strategy) for name, strategy in PLAIN_LINE.items()}
    for name in draw(st.lists(st.sampled_from(sorted(ANY_LINE)), max_size=3, unique=True)):
        if draw(st.booleans()):
            values[name] = draw(ANY_LINE[name])
        else:
            del values[name]
    text = json.dumps(
        values,
        ensure_ascii=draw(st.booleans()),
        separators=draw(st.sampled_from([(",", ":"), (", ", ": ")])),
    )
    if values and draw(st.integers(0, 9)) == 0:  # a duplicated key: the last one counts
        name = draw(st.sampled_from(sorted(values)))
        text = text[:-1] + f', "{name}": {json.dumps(draw(ANY_LINE.get(name, json_texts)))}}}'
    if draw(st.integers(0, 9)) == 0:
        text = draw(st.sampled_from(["[" + text + "]", text + " ", " " + text, text[:-1]]))
    return text.encode()


def _fast_and_full(data: bytes, defaults):
    """Items of the fast path, block by block and (as for gzip) line by line, and of the full path."""
    import gzip
    import io

    from ingest.formats.canonical import iter_records

    blocks = list(iter_records(io.BytesIO(data), defaults=defaults, now=NOW, fast_rows=True))
    packed = gzip.GzipFile(fileobj=io.BytesIO(gzip.compress(data)))
    lines = list(iter_records(packed, defaults=defaults, now=NOW, fast_rows=True))
    full = list(iter_records(io.BytesIO(data), defaults=defaults, now=NOW))
    _assert_same_items(lines, full)
    return blocks, full


def _assert_same_items(fast: list, full: list) -> int:
    """Each fast row is the full path's record, byte for byte; every other item is identical."""
    from ingest.records import UsageRecord
    from ingest.services import _encode_record
    from ingest.writer import PG_EPOCH

    assert len(fast) == len(full)
    taken = 0
    for mine, theirs in zip(fast, full, strict=True):
        if type(mine) is not tuple:
            assert mine == theirs
            continue
        taken += 1
        assert isinstance(theirs, UsageRecord), f"fast path accepted what the full path refuses: {theirs}"
        names, head, tail, hour, ts, task_id, attempt, model = mine
        assert names == (
            theirs.team,
            theirs.workload,
            theirs.model,
            theirs.model_version,
            theirs.endpoint,
            theirs.error_type,
        )
        assert head + FAKE_IDS + tail == _encode_record(theirs, FAKE_IDS)
        assert (ts, task_id, attempt, model) == (theirs.ts, theirs.task_id, theirs.attempt, theirs.model)
        assert PG_EPOCH + timedelta(hours=hour) == theirs.ts.replace(minute=0, second=0, microsecond=0)
    return taken


FAST_ROWS = {"taken": 0}


@settings(max_examples=2000, deadline=None)
@given(line=canonical_lines(), defaults=st.sampled_from(["none", "some"]))
def test_a_fast_row_is_the_full_paths_record_byte_for_byte(line, defaults):
    from ingest.records import FileDefaults

    given_defaults = (
        FileDefaults() if defaults == "none" else FileDefaults(team="fallback", model="m0", endpoint="e0")
    )
    FAST_ROWS["taken"] += _assert_same_items(*_fast_and_full(line, given_defaults))


def test_the_fast_row_property_test_exercised_the_fast_path():
    test_a_fast_row_is_the_full_paths_record_byte_for_byte()
    assert FAST_ROWS["taken"] > 500


@settings(max_examples=300, deadline=None)
@given(
    block_bytes=st.sampled_from([64, 300, 2000, 1 << 18]),
    lines=st.lists(
        st.one_of(
            canonical_lines(),
            st.sampled_from(
                [b"", b"   ", b"{", b"}", b"  [", b"]", b'{"a":', b"\xef\xbb\xbf", b"\xff", b"\r"]
            ),
            st.sampled_from([b'{"task_id": "t", "x": 1} {"task_id": "u"}', b'{"attempt": 1}{"attempt": 2}']),
        ),
        max_size=10,
    ),
)
def test_files_mixing_fast_lines_documents_and_garbage_read_the_same(block_bytes, lines):
    """Whatever the block size (so blocks end mid-document, mid-array, on a bad line)."""
    from ingest.formats import canonical
    from ingest.records import FileDefaults

    real, canonical.BLOCK_BYTES = canonical.BLOCK_BYTES, block_bytes
    try:
        _assert_same_items(*_fast_and_full(b"\n".join(lines), FileDefaults()))
    finally:
        canonical.BLOCK_BYTES = real


def test_the_fast_path_takes_the_benchmarks_lines_and_escaped_lines_only_when_clean():
    from ingest.records import FileDefaults

    line = json.dumps(
        {
            "task_id": "task-1",
            "attempt": 1,
            "request_id": "req-1-1",
            "ts": "2026-10-30T00:00:00Z",
            "model": "gpt-4.1",
            "endpoint": "openai-gpt-4.1",
            "workload": "qa",
            "team": "growth",
            "status": "success",
            "http_status": 200,
            "error_type": None,
            "latency_ms": 900,
            "ttft_ms": 90,
            "queue_wait_ms": 3,
            "usage": {
                "prompt_tokens": 700,
                "completion_tokens": 90,
                "total_tokens": 790,
                "prompt_tokens_details": {"cached_tokens": 12},
            },
        }  # fmt: skip
    ).encode()
    fast, full = _fast_and_full(line, FileDefaults())
    assert _assert_same_items(fast, full) == 1
    escaped = line.replace(b'"qa"', b'"q\\u00e1"')  # an escape, but no control character: still fast
    assert _assert_same_items(*_fast_and_full(escaped, FileDefaults())) == 1
    control = line.replace(b'"qa"', b'"q\\ta"')  # a tab inside a name: the full path refuses it
    fast, full = _fast_and_full(control, FileDefaults())
    assert _assert_same_items(fast, full) == 0 and "control characters" in full[0].reason


def test_deeply_nested_lines_take_the_full_path():
    """msgspec raises RecursionError (not a decode error) past ~1,000 levels; orjson reads up to 1,024."""
    from ingest.records import FileDefaults

    for depth in (500, 1_000, 1_100, 20_000):
        line = json.dumps(
            dict(task_id="t", attempt=1, ts="2026-11-02T10:00:00Z", model="m", status="failure")
        )
        deep = line[:-1].encode() + b', "x": ' + b"[" * depth + b"]" * depth + b"}"
        _assert_same_items(*_fast_and_full(deep, FileDefaults()))


def test_a_block_is_fast_only_when_each_line_holds_exactly_one_object():
    """msgspec's decode_lines splits on any whitespace: two objects on one line and a blank line
    elsewhere give as many objects as lines, and must not pass for two plain lines."""
    from ingest.records import FileDefaults

    record = (
        '{"task_id": "t-%d", "attempt": 1, "ts": "2026-11-02T10:00:00Z", "model": "m", "status": "failure"}'
    )
    for middle in (" ", "", "\t"):
        data = f"{record % 1}{middle}{record % 2}\n   \n{record % 3}\n".encode()
        blocks, full = _fast_and_full(data, FileDefaults())
        assert [type(item).__name__ for item in full] == ["Reject", "UsageRecord"]
        _assert_same_items(blocks, full)


def test_a_stream_that_cannot_seek_is_read_line_by_line():
    import io

    from ingest.formats.canonical import iter_records
    from ingest.records import FileDefaults

    class Pipe(io.RawIOBase):  # like a named pipe: readable, not seekable
        def __init__(self, data: bytes) -> None:
            self.data = io.BytesIO(data)

        def readable(self) -> bool:
            return True

        def readinto(self, buffer) -> int:
            return self.data.readinto(buffer)

    line = '{"task_id": "t", "attempt": 1, "ts": "2026-11-02T10:00:00Z", "model": "m", "status": "failure"}'
    data = (line + "\n" + line.replace('"t"', '"u"') + "\n").encode()
    fast = list(iter_records(io.BufferedReader(Pipe(data)), defaults=FileDefaults(), now=NOW, fast_rows=True))
    full = list(iter_records(io.BytesIO(data), defaults=FileDefaults(), now=NOW))
    assert _assert_same_items(fast, full) == 2
