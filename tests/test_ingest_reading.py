"""The reading layer: plain/gzip files, line limits, invalid UTF-8, truncated gzip, JSON documents,
and constant memory whatever the input size."""

from __future__ import annotations

import gzip
import io
import json
import tracemalloc
import zlib
from datetime import UTC, datetime

from ingest.formats import iter_json_values, iter_lines, iter_path_records, open_stream, parser_for
from ingest.records import FileDefaults, Reject, UsageRecord

NOW = datetime(2026, 11, 3, tzinfo=UTC)


def canonical_line(n: int) -> bytes:
    record = {
        "task_id": f"t-{n}",
        "attempt": 1,
        "ts": "2026-11-02T10:15:00Z",
        "model": "m",
        "status": "success",
        "usage": {"prompt_tokens": n % 5000, "completion_tokens": 7},
    }
    return json.dumps(record).encode() + b"\n"


def test_lines_offsets_crlf_bom_and_missing_final_newline():
    data = b"\xef\xbb\xbfa\r\n\nbb\nccc"
    assert list(iter_lines(io.BytesIO(data))) == [(1, b"a", 6), (2, b"", 7), (3, b"bb", 10), (4, b"ccc", 13)]


def test_an_oversized_line_is_rejected_and_skipped_in_constant_memory():
    data = b"first\n" + b"x" * 5000 + b"\nlast\n"
    out = list(iter_lines(io.BytesIO(data), max_line_bytes=100))
    assert out[0] == (1, b"first", 6)
    line_no, rej, offset = out[1]
    assert (line_no, offset) == (2, 6 + 5001)
    assert isinstance(rej, Reject) and rej.location == "line 2"
    assert rej.reason == "line is longer than 100 bytes"
    assert len(rej.excerpt) <= 200
    assert out[2] == (3, b"last", 6 + 5001 + 5)


def test_a_line_of_exactly_the_limit_is_fine():
    assert list(iter_lines(io.BytesIO(b"x" * 100 + b"\n"), max_line_bytes=100)) == [(1, b"x" * 100, 101)]


def test_invalid_utf8_is_a_reject_for_that_line_only():
    out = list(iter_lines(io.BytesIO(b"ok\nbad \xff\xfe here\nok2\n")))
    assert [p for _, p, _ in out if isinstance(p, bytes)] == [b"ok", b"ok2"]
    rej = out[1][1]
    assert isinstance(rej, Reject)
    assert (rej.location, rej.reason) == ("line 2", "line is not valid UTF-8 (bad byte at column 5)")


def test_oversized_and_non_utf8_lines_in_a_usage_file_keep_the_good_records():
    data = canonical_line(1) + b'{"task_id": "' + b"y" * 1_100_000 + b'"}\n' + canonical_line(2)
    data += b'{"task_id": "\xc3\x28"}\n' + canonical_line(3)
    out = list(parser_for("canonical")(io.BytesIO(data), defaults=FileDefaults(), now=NOW))
    assert [r.task_id for r in out if isinstance(r, UsageRecord)] == ["t-1", "t-2", "t-3"]
    assert [(r.location, r.reason) for r in out if isinstance(r, Reject)] == [
        ("line 2", "line is longer than 1,000,000 bytes"),
        ("line 4", "line is not valid UTF-8 (bad byte at column 14)"),
    ]


def _big_gzip(lines: int) -> bytes:
    # Incompressible-ish content so that truncating the compressed bytes cuts real lines.
    return gzip.compress(b"".join(canonical_line(n) for n in range(lines)))


def test_a_truncated_gzip_keeps_the_lines_before_the_cut(tmp_path):
    whole = _big_gzip(20_000)
    path = tmp_path / "usage.jsonl.gz"
    path.write_bytes(whole[: len(whole) // 2])
    out = list(iter_path_records(path, defaults=FileDefaults(), now=NOW))
    good = [r for r in out if isinstance(r, UsageRecord)]
    rejects = [r for r in out if isinstance(r, Reject)]
    assert 1000 < len(good) < 20_000
    assert [r.task_id for r in good[:3]] == ["t-0", "t-1", "t-2"]
    assert good[-1].task_id == f"t-{len(good) - 1}"  # no line lost before the cut
    (rej,) = rejects
    assert rej is out[-1]
    assert "compressed stream is truncated or corrupt" in rej.reason
    # the partial last line is the one that could not be read
    assert rej.location == f"line {len(good) + 1}"


def test_a_corrupt_gzip_is_a_reject_not_an_exception(tmp_path):
    whole = bytearray(_big_gzip(2000))
    whole[-8] ^= 0xFF  # break the CRC32 in the trailer
    path = tmp_path / "usage.gz"
    path.write_bytes(bytes(whole))
    out = list(iter_path_records(path, "canonical", defaults=FileDefaults(), now=NOW))
    assert isinstance(out[-1], Reject) and "CRC" in out[-1].reason
    assert sum(isinstance(r, UsageRecord) for r in out) > 0


def test_open_stream_detects_gzip_by_content_not_name(tmp_path):
    disguised = tmp_path / "plain-name.jsonl"
    disguised.write_bytes(gzip.compress(b"hello\n"))
    with open_stream(disguised) as stream:
        assert stream.read() == b"hello\n"
    plain = tmp_path / "not-really.gz"
    plain.write_bytes(b"hello\n")
    with open_stream(plain) as stream:
        assert stream.read() == b"hello\n"


def test_pretty_printed_json_documents_and_arrays():
    data = b'{\n  "a": 1\n}\n[\n  {"b": 2},\n  {"c": 3}\n]\n{"d": 4}\n'
    assert list(iter_json_values(io.BytesIO(data))) == [
        ("document at line 1", {"a": 1}),
        ("item 1 of document at line 4", {"b": 2}),
        ("item 2 of document at line 4", {"c": 3}),
        ("line 8", {"d": 4}),
    ]


def test_a_cut_short_jsonl_line_does_not_swallow_the_next_ones():
    data = b'{"a": 1, "b": {\n{"c": 3}\n{"d": 4}\n'
    out = list(iter_json_values(io.BytesIO(data)))
    assert isinstance(out[0], Reject) and out[0].location == "line 1"
    assert out[1:] == [("line 2", {"c": 3}), ("line 3", {"d": 4})]


def test_an_oversized_document_is_rejected_and_reading_resyncs():
    data = b"{\n" + b'  "k": "v",\n' * 100 + b'  "z": 0\n}\n{"after": 1}\n'
    out = list(iter_json_values(io.BytesIO(data), max_document_bytes=300))
    assert isinstance(out[0], Reject) and out[0].location == "document at line 1"
    assert "larger than 300 bytes" in out[0].reason
    assert out[1:] == [("line 104", {"after": 1})]


class _GeneratedStream(io.RawIOBase):
    """A large usage file produced on the fly, so the test itself holds no big buffer."""

    def __init__(self, lines: int) -> None:
        self._lines = iter(range(lines))
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while len(self._pending) < len(buffer):
            n = next(self._lines, None)
            if n is None:
                break
            self._pending += canonical_line(n)
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


def test_parsing_runs_in_constant_memory():
    lines = 40_000  # ~6 MB of JSONL
    parse = parser_for("canonical")
    tracemalloc.start()
    try:
        count = 0
        for item in parse(io.BufferedReader(_GeneratedStream(lines)), defaults=FileDefaults(), now=NOW):
            assert isinstance(item, UsageRecord)
            count += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == lines
    assert peak < 1_000_000, peak  # far below the input size: nothing accumulates


def test_zlib_sanity_for_the_detector_sample():
    # detect_format gets a prefix of a gzip file: partial decompression must work
    data = _big_gzip(100)
    assert zlib.decompressobj(wbits=31).decompress(data[:200]).startswith(b'{"task_id": "t-0"')
