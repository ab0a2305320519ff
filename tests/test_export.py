"""Export writers and FOCUS rows: spreadsheet-safe CSV, exact types in every format, FOCUS columns
typed and non-null where the spec requires, BilledCost reconciling with total spend, and the
streamed cost rows equal to ``selectors.cost_rows`` for every grouping."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from itertools import combinations

import pyarrow.parquet as pq
import pytest

from costcenter import export, focus
from costcenter.export import Column
from costcenter.selectors import GROUP_FIELDS, CostQuery, cost_rows, cost_totals
from tests import test_api_support as support
from tests.cost_world import H
from tests.test_api_support import EVIL

world = support.world  # the shared fixture

DAY = datetime(2026, 11, 2, tzinfo=UTC)
COLUMNS = [
    Column("name", "string"),
    Column("amount", "decimal"),
    Column("at", "datetime"),
    Column("n", "int"),
    Column("ok", "bool"),
    Column("tags", "json"),
]
ROWS = [
    {
        "name": "=1+2",
        "amount": Decimal("-0.000000000001"),
        "at": DAY,
        "n": 3,
        "ok": True,
        "tags": {"k": "=v"},
    },
    {"name": "plain", "amount": None, "at": DAY, "n": 0, "ok": False, "tags": None},
]


def _bytes(fmt, columns=COLUMNS, rows=ROWS) -> bytes:
    return b"".join(export.stream(fmt, columns, iter(rows)))


@pytest.mark.parametrize("text", ["=1+2", "+1", "-1", "@A1", "\tx", "\rx", '=HYPERLINK("http://x")'])
def test_it_neutralises_cells_a_spreadsheet_would_run(text):
    assert export.spreadsheet_safe(text) == "'" + text
    written = _bytes("csv", [Column("c", "string")], [{"c": text}]).decode()
    assert list(csv.reader(io.StringIO(written, newline="")))[1] == ["'" + text]


def test_it_leaves_harmless_text_and_negative_numbers_alone():
    assert export.spreadsheet_safe("mini") == "mini" and export.spreadsheet_safe("a=b") == "a=b"
    rows = list(csv.DictReader(io.StringIO(_bytes("csv").decode(), newline="")))
    assert rows[0]["amount"] == "-0.000000000001"  # a number, not a formula
    assert rows[0]["name"] == "'=1+2" and rows[0]["tags"] == '{"k":"=v"}'
    assert rows[0]["at"] == "2026-11-02T00:00:00Z" and rows[0]["ok"] == "true"
    assert rows[1]["amount"] == "" and rows[1]["tags"] == ""


def test_json_and_ndjson_keep_money_exact_and_values_typed():
    array = json.loads(_bytes("json"))
    lines = [json.loads(line) for line in _bytes("jsonl").splitlines()]
    assert array == lines
    assert array[0] == {
        "name": "=1+2",  # not a spreadsheet: left as it is
        "amount": "-0.000000000001",
        "at": "2026-11-02T00:00:00Z",
        "n": 3,
        "ok": True,
        "tags": {"k": "=v"},
    }
    assert json.loads(_bytes("json", rows=[])) == []
    assert _bytes("jsonl", rows=[]) == b""


def test_parquet_has_exact_decimals_and_utc_timestamps():
    table = pq.read_table(io.BytesIO(_bytes("parquet")))
    assert str(table.schema.field("amount").type) == "decimal128(38, 12)"
    assert str(table.schema.field("at").type) == "timestamp[us, tz=UTC]"
    assert table.column("amount").to_pylist() == [Decimal("-0.000000000001"), None]
    assert table.column("n").to_pylist() == [3, 0]
    empty = pq.read_table(io.BytesIO(_bytes("parquet", rows=[])))
    assert empty.num_rows == 0 and empty.schema.names == [c.name for c in COLUMNS]
    # Readers get these types: plain strings (no categoricals), UTC, decimals; JSON as its text.
    import pyarrow as pa

    table = pq.read_table(io.BytesIO(_bytes("parquet")))
    assert table.schema.remove_metadata().equals(
        pa.schema(
            [
                ("name", pa.string()),
                ("amount", pa.decimal128(38, 12)),
                ("at", pa.timestamp("us", tz="UTC")),
                ("n", pa.int64()),
                ("ok", pa.bool_()),
                ("tags", pa.string()),
            ]
        )
    )
    assert table.column("name").to_pylist() == ["=1+2", "plain"]
    assert table.column("tags").to_pylist() == ['{"k":"=v"}', None]
    assert str(table.to_pandas()["name"].dtype) != "category"


def test_parquet_streams_one_row_group_at_a_time(monkeypatch):
    monkeypatch.setattr(export, "PARQUET_ROW_GROUP", 10)
    rows = (
        {"name": f"r{i}", "amount": Decimal(i), "at": DAY, "n": i, "ok": True, "tags": {}} for i in range(35)
    )
    chunks = list(export.stream("parquet", COLUMNS, rows))
    assert len(chunks) == 4  # three full row groups sent as written, then the rest and the footer
    assert chunks[0].startswith(b"PAR1") and chunks[-1].endswith(b"PAR1")
    table = pq.ParquetFile(io.BytesIO(b"".join(chunks)))
    assert table.metadata.num_row_groups == 4 and table.metadata.num_rows == 35


# --- FOCUS ----------------------------------------------------------------------------------------
MANDATORY_NON_NULL = [
    "BilledCost", "EffectiveCost", "ListCost", "ContractedCost", "BillingAccountId", "BillingAccountName",
    "BillingCurrency", "BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd",
    "ChargeCategory", "ProviderName", "PublisherName", "InvoiceIssuerName", "ServiceCategory", "ServiceName",
    "PricingQuantity", "PricingUnit", "ConsumedQuantity", "ConsumedUnit",
]  # fmt: skip
EXTENSIONS = [
    "x_Team",
    "x_Workload",
    "x_Model",
    "x_AcceleratorVendor",
    "x_Pool",
    "x_Tasks",
    "x_SuccessfulTasks",
]


def _focus(user, granularity="day", start=DAY, end=DAY + timedelta(days=1), filters=()):
    return list(focus.focus_rows(user=user, start=start, end=end, granularity=granularity, filters=filters))


def test_focus_columns_are_present_typed_and_non_null_where_required(world):
    rows = _focus(world["carol"])
    assert {column.name for column in focus.COLUMNS} >= set(MANDATORY_NON_NULL) | set(EXTENSIONS) | {
        "ChargeClass",
        "ChargeDescription",
        "Tags",
        "ResourceId",
    }
    types = {column.name: column.type for column in focus.COLUMNS}
    for row in rows:
        assert list(row) == focus.COLUMN_NAMES or set(row) == set(focus.COLUMN_NAMES)
        for name in MANDATORY_NON_NULL:
            assert row[name] is not None, name
        for name, kind in types.items():
            value = row[name]
            expected = {"decimal": Decimal, "datetime": datetime, "int": int, "bool": bool, "json": dict}.get(
                kind, str
            )
            assert value is None or isinstance(value, expected), (name, value)
        assert row["ChargeCategory"] == "Usage" and row["BillingCurrency"] == "USD"
        assert row["ChargePeriodStart"] < row["ChargePeriodEnd"]
        assert row["BillingPeriodStart"] <= row["ChargePeriodStart"] < row["BillingPeriodEnd"]
        assert row["ServiceCategory"] in {"AI and Machine Learning", "Compute"}
        assert row["BilledCost"] == row["EffectiveCost"] == row["ListCost"] == row["ContractedCost"]
        assert row["x_SuccessfulTasks"] <= row["x_Tasks"]
    for column in focus.COLUMNS:
        if not column.nullable:
            assert all(row[column.name] is not None for row in rows), column.name


def test_focus_has_token_pool_and_unallocated_rows_with_hand_computed_costs(world):
    rows = _focus(world["carol"])
    kinds = {}
    for row in rows:
        kinds.setdefault(row["x_CostKind"], []).append(row)
    assert set(kinds) == {"token_priced", "gpu_pool", "unknown", "unallocated"}
    pool = {(r["x_Team"], r["x_Pool"]): r["BilledCost"] for r in kinds["gpu_pool"]}
    # h100's hour split 1200:800 between a and b; mi300's hour all b's (see tests/test_cost_api.py).
    assert pool == {("a", "h100"): Decimal(3), ("b", "h100"): Decimal(2), ("b", "mi300"): Decimal(6)}
    idle = {r["x_Pool"]: r for r in kinds["unallocated"]}
    # Hour H + 1 served nothing: 2 GPUs × 2.50 and 4 GPUs × 1.50, with no team.
    assert {name: r["BilledCost"] for name, r in idle.items()} == {"h100": Decimal(5), "mi300": Decimal(6)}
    assert idle["h100"]["x_IdleGpuHours"] == 2 and idle["h100"]["PricingUnit"] == "GPU-Hours"
    assert idle["h100"]["x_Team"] is None and idle["h100"]["ServiceCategory"] == "Compute"
    unpriced = kinds["unknown"][0]
    assert unpriced["BilledCost"] == 0 and unpriced["x_CostComplete"] is False
    assert (unpriced["x_UnpricedAttempts"], unpriced["x_UnpricedTokens"]) == (1, 350)
    assert "unpriced" in unpriced["ChargeDescription"]
    token = next(r for r in kinds["token_priced"] if r["x_Team"] == "a")
    assert token["BilledCost"] == Decimal("0.00036") and token["PricingQuantity"] == Decimal("2.1")
    assert token["ProviderName"] == "openai" and token["SubAccountId"] == "a"


@pytest.mark.parametrize("granularity", ["hour", "day", "month"])
@pytest.mark.parametrize("who", ["carol", "root", "alice", "bob", "dave"])
def test_billed_cost_sums_to_total_spend_for_every_viewer_and_bucket(world, who, granularity):
    user = world[who]
    start, end = H - timedelta(hours=3), H + timedelta(hours=20)
    rows = _focus(user, granularity, start, end)
    totals = cost_totals(user=user, query=CostQuery(start, end))
    expected = totals["total_spend"] or Decimal(0)
    assert sum((row["BilledCost"] for row in rows), Decimal(0)) == expected
    assert all(start <= row["ChargePeriodStart"] < row["ChargePeriodEnd"] <= end for row in rows)


def test_a_team_member_gets_only_their_teams_rows_and_no_unallocated_cost(world):
    for who, team in (("alice", "a"), ("bob", "b")):
        rows = _focus(world[who])
        assert rows and {row["x_Team"] for row in rows} == {team}
    assert _focus(world["dave"]) == []


def test_filters_narrow_focus_rows_and_drop_unallocated_cost(world):
    rows = _focus(world["carol"], filters=(("model", ("llama",)),))
    assert {row["x_Model"] for row in rows} == {"llama"}
    amd = _focus(world["carol"], filters=(("vendor", ("amd",)),))
    assert {(row["x_CostKind"], row["x_Pool"]) for row in amd} == {
        ("gpu_pool", "mi300"),
        ("unallocated", "mi300"),
    }


def test_names_from_usage_reach_the_rows_unchanged(world):
    workloads = {row["x_Workload"] for row in _focus(world["bob"])}
    assert workloads >= set(EVIL)


@pytest.mark.parametrize("granularity", ["total", "hour", "day", "month"])
def test_streamed_cost_rows_equal_the_selector_for_every_grouping(world, granularity):
    user = world["carol"]
    start, end = H - timedelta(hours=10), H + timedelta(hours=14)
    for size in (0, 1, 2):
        for group_by in combinations(GROUP_FIELDS, size):
            query = CostQuery(start, end, group_by, granularity)
            assert list(export.cost_rows_stream(user=user, query=query)) == cost_rows(user=user, query=query)


# --- The Parquet writer (costcenter.parquet) --------------------------------------------------------
def _parquet(columns, rows, **options) -> bytes:
    from costcenter.parquet import rows_to_parquet

    return b"".join(rows_to_parquet(columns, rows, **options))


def test_parquet_keeps_every_type_exact_with_nulls_across_row_groups(tmp_path):
    """Every kind, nulls anywhere (a whole row group of them too), 8- and 16-bit dictionaries,
    read back by pyarrow and DuckDB, value for value."""
    import zoneinfo

    import duckdb

    from costcenter.parquet import ParquetColumn

    berlin = datetime(2026, 11, 2, 1, 30, 0, 123456, tzinfo=zoneinfo.ZoneInfo("Europe/Berlin"))
    columns = [
        ParquetColumn("s", "string"),
        ParquetColumn("many", "string", nullable=False),
        ParquetColumn("i", "int"),
        ParquetColumn("f", "float"),
        ParquetColumn("b", "bool"),
        ParquetColumn("t", "datetime"),
        ParquetColumn("d", "decimal"),
        ParquetColumn("req", "int", nullable=False),
    ]
    texts = ["", "naïve — ☃", "=1+2", "x" * 1000]
    ints = [0, -(2**63), 2**63 - 1, 42]
    floats = [0.5, -1e300, 3.25]
    # 12 places kept as they are; more are rounded half-even; ints and 26-digit amounts fit.
    amounts = [
        (Decimal("-0.000000000001"), Decimal("-0.000000000001")),
        (Decimal("0.0000000000005"), Decimal("0E-12")),
        (Decimal("0.0000000000015"), Decimal("0.000000000002")),
        (7, Decimal("7.000000000000")),
        (Decimal("12345678901234567890123456.5"), Decimal("12345678901234567890123456.500000000000")),
        (Decimal("-98765432109876543210987654.25"), Decimal("-98765432109876543210987654.250000000000")),
    ]
    rows, expected = [], []
    for n in range(1_000):
        null = n % 7 == 3 or 300 <= n < 400  # rows 300–399: a whole row group of nulls
        row = {
            "s": None if null else texts[n % len(texts)],
            "many": f"value {n}",  # 300 distinct per row group: 16-bit dictionary indices
            "i": None if null else ints[n % len(ints)],
            "f": None if null else floats[n % len(floats)],
            "b": None if null else n % 3 == 0,
            "t": None if null else berlin + timedelta(hours=n),
            "d": None if null else amounts[n % len(amounts)][0],
            "req": n,
        }
        rows.append(row)
        expected.append(
            {
                **row,
                "t": None if null else (berlin + timedelta(hours=n)).astimezone(UTC),
                "d": None if null else amounts[n % len(amounts)][1],
            }
        )
    data = _parquet(columns, rows, row_group_size=300, batch_size=64)
    table = pq.read_table(io.BytesIO(data))
    assert pq.read_metadata(io.BytesIO(data)).num_row_groups == 4
    assert [str(field.type) for field in table.schema] == [
        "string", "string", "int64", "double", "bool", "timestamp[us, tz=UTC]", "decimal128(38, 12)", "int64",
    ]  # fmt: skip
    assert [field.nullable for field in table.schema] == [True, False, True, True, True, True, True, False]
    assert table.to_pylist() == expected
    path = tmp_path / "all.parquet"
    path.write_bytes(data)
    con = duckdb.connect()
    rows_read = con.execute(
        "SELECT s, many, i, f, b, t, d, req FROM read_parquet(?) ORDER BY req", [str(path)]
    )
    assert [
        dict(zip([column.name for column in columns], row, strict=True)) for row in rows_read.fetchall()
    ] == expected
    # No rows at all: a valid file with the schema and no row group.
    empty = pq.read_table(io.BytesIO(_parquet(columns, [])))
    assert empty.num_rows == 0 and empty.schema.names == [column.name for column in columns]


def test_parquet_refuses_a_null_in_a_required_column():
    from costcenter.parquet import ParquetColumn

    with pytest.raises(ValueError, match="req is not nullable"):
        _parquet([ParquetColumn("req", "int", nullable=False)], [{"req": 1}, {"req": None}])


def test_writing_parquet_imports_neither_pyarrow_nor_pandas(tmp_path):
    """A web worker that sends a Parquet export loads no Arrow (~40 MB resident for good) and no
    pandas: the writer is plain Python. In a fresh interpreter, since this test process has both."""
    import subprocess
    import sys

    out = tmp_path / "out.parquet"
    script = (
        "import sys\n"
        "from datetime import datetime, UTC\n"
        "from decimal import Decimal\n"
        "from costcenter.export import Column, stream\n"
        "columns = [Column('a', 'decimal'), Column('t', 'datetime'), Column('s', 'string'), Column('j', 'json')]\n"
        "rows = [{'a': Decimal('1.5'), 't': datetime(2026, 1, 1, tzinfo=UTC), 's': 'x', 'j': {'k': 1}}] * 5000\n"
        f"open({str(out)!r}, 'wb').write(b''.join(stream('parquet', columns, iter(rows))))\n"
        "loaded = sorted(name for name in sys.modules if name.split('.')[0] in ('pyarrow', 'pandas', 'numpy'))\n"
        "assert not loaded, loaded\n"
    )
    finished = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert finished.returncode == 0, finished.stderr[-2000:]
    table = pq.read_table(out)
    assert table.num_rows == 5000 and table.column("j")[0].as_py() == '{"k":1}'


def test_bits_pack_lsb_first_for_every_pattern():
    from itertools import product

    from costcenter.parquet import pack_bits

    for bits in product((0, 1), repeat=8):
        assert pack_bits(bytes(bits)) == bytes([sum(bit << i for i, bit in enumerate(bits))])
    # A length that is not a multiple of 8: the last byte holds the rest, high bits clear.
    assert pack_bits(bytes([1] * 8 + [0, 1, 1])) == b"\xff\x06"
