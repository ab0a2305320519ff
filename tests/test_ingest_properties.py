"""Property tests: whatever bytes arrive, every parser yields only UsageRecords and Rejects with a
reason, never raises, and never puts planted prompt/output text into an excerpt."""

from __future__ import annotations

import gzip
import io
import json
from datetime import UTC, datetime
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.formats import FORMAT_NAMES, iter_lines, parser_for
from ingest.formats.detect import UnknownFormat, detect_format
from ingest.formats.otlp import parse_otlp_json, parse_otlp_protobuf
from ingest.records import FileDefaults, Reject, UsageRecord
from ingest.validate import MAX_TOKENS_PER_ATTEMPT, excerpt_of_raw

DATA = Path(__file__).parent / "data"
NOW = datetime(2026, 11, 3, tzinfo=UTC)
DEFAULTS = FileDefaults(team="t", model="m", ts=datetime(2026, 11, 2, tzinfo=UTC))
SECRETS = ("PROMPT-SECRET-7f3a", "OUTPUT-SECRET-91bc")
FIXTURES = {
    "canonical": ["canonical.jsonl"],
    "openai-batch": [
        "vllm-run-batch.output.jsonl",
        "vllm-run-batch-legacy.output.jsonl",
        "openai-batch.output.jsonl",
        "openai-batch.errors.jsonl",
    ],
    "litellm": ["litellm-spendlogs.csv", "litellm-spendlogs.jsonl"],
    "otlp-json": ["otlp-genai.traces.jsonl"],
}
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check(items, *, secrets: bool = True) -> None:
    for item in items:
        assert isinstance(item, UsageRecord | Reject), item
        if isinstance(item, Reject):
            assert item.reason.strip() and item.location.strip()
            assert len(item.excerpt) <= 200
            if secrets:
                assert not any(s in item.excerpt + item.reason for s in SECRETS), item
            continue
        assert item.idempotency_key and item.task_id and item.model
        assert item.ts.tzinfo is UTC
        assert item.status in ("success", "failure")
        assert 0 <= item.cached_tokens <= item.prompt_tokens
        assert item.prompt_tokens + item.completion_tokens <= MAX_TOKENS_PER_ATTEMPT
        assert item.reasoning_tokens is None or 0 <= item.reasoning_tokens <= item.completion_tokens
        assert all(isinstance(v, int) for v in (item.prompt_tokens, item.completion_tokens, item.attempt))


def run(fmt: str, data: bytes) -> list:
    return list(parser_for(fmt)(io.BytesIO(data), defaults=DEFAULTS, now=NOW))


# --- arbitrary bytes -----------------------------------------------------------------------------

json_ish = st.lists(
    st.sampled_from([b"{", b"}", b"[", b"]", b'"', b":", b",", b"\n", b" ", b"1", b"-", b"null", b"\\"])
    | st.binary(max_size=8),
    max_size=60,
).map(b"".join)


@FAST
@given(data=st.binary(max_size=2000) | json_ish, fmt=st.sampled_from(FORMAT_NAMES))
def test_arbitrary_bytes_never_raise(data, fmt):
    check(run(fmt, data), secrets=False)
    try:
        assert detect_format(data[:4096], "x") in FORMAT_NAMES
    except UnknownFormat as exc:
        assert str(exc)


@FAST
@given(data=st.binary(max_size=2000))
def test_arbitrary_http_bodies_never_raise(data):
    check(list(parse_otlp_json(data, defaults=DEFAULTS, now=NOW)), secrets=False)
    check(list(parse_otlp_protobuf(data, defaults=DEFAULTS, now=NOW)), secrets=False)


@FAST
@given(data=st.binary(max_size=3000), limit=st.integers(min_value=1, max_value=64))
def test_iter_lines_accounts_for_every_byte(data, limit):
    out = list(iter_lines(io.BytesIO(data), max_line_bytes=limit))
    assert [n for n, _, _ in out] == list(range(1, len(out) + 1))
    assert (out[-1][2] if out else 0) == len(data)
    assert all(isinstance(p, Reject) or len(p) <= limit for _, p, _ in out)


@FAST
@given(data=st.binary(min_size=1, max_size=3000), cut=st.integers(min_value=0, max_value=4000))
def test_truncated_gzip_of_anything_never_raises(data, cut, tmp_path_factory):
    path = tmp_path_factory.mktemp("gz") / "x.gz"
    path.write_bytes(gzip.compress(data)[:cut])
    from ingest.formats import open_stream

    with open_stream(path) as stream:
        for _, payload, _ in iter_lines(stream):
            assert isinstance(payload, bytes | Reject)


# --- mutated valid records -----------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=20)
    | st.sampled_from(
        ["", "0", "12", "-1", "2026-11-02T10:00:00Z", "2014-01-01", "success", "STATUS_CODE_ERROR"]
    ),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=8,
)


def _paths(value, prefix=()):
    """Every path to a value inside a parsed JSON document."""
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _paths(child, (*prefix, index))


def _mutate(doc, path, new, delete):
    if not path:
        return new
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    if delete and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = new
    return doc


def _jsonl_docs(fmt: str) -> list[tuple[str, dict]]:
    docs = []
    for name in FIXTURES[fmt]:
        if name.endswith(".jsonl"):
            docs += [
                (fmt, json.loads(line)) for line in (DATA / name).read_text().splitlines() if line.strip()
            ]
    return docs


ALL_DOCS = [doc for fmt in FIXTURES for doc in _jsonl_docs(fmt)]


@FAST
@given(
    pick=st.integers(min_value=0, max_value=len(ALL_DOCS) - 1),
    choice=st.integers(min_value=0),
    new=json_values,
    delete=st.booleans(),
)
def test_mutated_valid_records_give_records_or_rejects_without_leaking_prompts(pick, choice, new, delete):
    fmt, original = ALL_DOCS[pick]
    doc = json.loads(json.dumps(original))
    paths = list(_paths(doc))
    mutated = _mutate(doc, paths[choice % len(paths)], new, delete)
    line = json.dumps(mutated).encode()
    # a good line before and after: the mutated one may not take them down with it
    good = json.dumps(original).encode()
    out = run(fmt, good + b"\n" + line + b"\n" + good + b"\n")
    check(out)
    assert len(out) >= 2 or fmt == "otlp-json"


@FAST
@given(
    name=st.sampled_from([n for names in FIXTURES.values() for n in names]),
    edits=st.lists(st.tuples(st.integers(min_value=0), st.binary(max_size=4), st.integers(0, 6)), max_size=6),
)
def test_byte_level_damage_to_fixtures_never_raises(name, edits):
    data = bytearray((DATA / name).read_bytes())
    for position, insert, delete in edits:
        at = position % (len(data) + 1)
        data[at : at + delete] = insert
    fmt = next(f for f, names in FIXTURES.items() if name in names)
    check(run(fmt, bytes(data)), secrets=False)  # damage can rename "messages", so no secret check


@FAST
@given(prefix=st.text(max_size=300), key=st.sampled_from(["content", "messages", "input", "gen_ai.prompt"]))
def test_raw_excerpts_cut_before_content(prefix, key):
    text = prefix + '"' + key + '":"' + SECRETS[0] + '"'
    assert SECRETS[0] not in excerpt_of_raw(text.encode("utf-8", errors="replace"))
