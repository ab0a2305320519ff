"""GET /api/v1/export/focus/ and /api/v1/export/costs/ over HTTP: formats, reconciliation with
/api/v1/costs/ to the cent, spreadsheet-safe CSV, caps, throttling, and real BI clients (pandas and
DuckDB) reading CSV and Parquet from a running server."""

from __future__ import annotations

import csv
import io
import json
from decimal import ROUND_HALF_EVEN, Decimal

import pyarrow.parquet as pq
import pytest
from django.core.cache import cache

from costcenter import focus
from tests import test_api_support as support
from tests.conftest import ROOT
from tests.test_api_support import EVIL, RANGE, bearer, body, build_people, build_world

world = support.world  # the shared fixture

pytestmark = pytest.mark.django_db

FOCUS = "/api/v1/export/focus/"
COSTS = "/api/v1/export/costs/"
CENT = Decimal("0.01")


def export(client, user, path=FOCUS, **params):
    response = client.get(path, {**RANGE, **params}, **bearer(user))
    return response, body(response)


def csv_rows(data: bytes) -> list[dict]:
    return list(csv.DictReader(io.StringIO(data.decode(), newline="")))


def cents(value: Decimal) -> Decimal:
    return value.quantize(CENT, rounding=ROUND_HALF_EVEN)


@pytest.mark.parametrize("who", ["carol", "alice", "bob"])
def test_billed_cost_reconciles_with_the_costs_api_to_the_cent(client, world, who):
    user = world[who]
    response, data = export(client, user)
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    billed = sum((Decimal(row["BilledCost"]) for row in csv_rows(data)), Decimal(0))
    costs = client.get("/api/v1/costs/", RANGE, **bearer(user)).json()
    pools = client.get("/api/v1/pools/costs/", RANGE, **bearer(user)).json()
    spend = sum((Decimal(row["cost"] or 0) for row in costs), Decimal(0)) + sum(
        (Decimal(pool["unallocated_cost"] or 0) for pool in pools), Decimal(0)
    )
    assert cents(billed) == cents(spend) and billed == spend  # exact, so to the cent too
    if who == "carol":
        assert cents(billed) == Decimal("22.00")  # 11.00 of attempts (+ 0.0019 of tokens) + 11 idle


@pytest.mark.parametrize("fmt", ["csv", "json", "jsonl", "ndjson", "parquet"])
def test_every_format_carries_the_same_rows(client, world, fmt):
    response, data = export(client, world["carol"], format=fmt)
    assert response.status_code == 200
    assert response["Content-Disposition"].startswith('attachment; filename="focus-')
    if fmt == "csv":
        rows = csv_rows(data)
    elif fmt == "json":
        rows = json.loads(data)
    elif fmt == "parquet":
        rows = pq.read_table(io.BytesIO(data)).to_pylist()
    else:
        rows = [json.loads(line) for line in data.splitlines()]
    assert len(rows) == 14 and list(rows[0]) == focus.COLUMN_NAMES
    assert sum(Decimal(str(row["BilledCost"])) for row in rows) == Decimal("22.0019")


def test_csv_cells_from_usage_cannot_run_as_formulas(client, world):
    _, data = export(client, world["bob"])
    workloads = {row["x_Workload"] for row in csv_rows(data)}
    assert {"'" + name for name in EVIL} <= workloads
    assert not any(
        value.startswith(("=", "+", "-", "@", "\t", "\r")) for row in csv_rows(data) for value in row.values()
    )
    # JSON is data, not a spreadsheet: the names come back exactly.
    _, as_json = export(client, world["bob"], format="json")
    assert set(EVIL) <= {row["x_Workload"] for row in json.loads(as_json)}


def test_the_costs_export_has_the_numbers_of_the_costs_api(client, world):
    params = {"group_by": "team,model", "granularity": "day"}
    api = client.get("/api/v1/costs/", {**RANGE, **params}, **bearer(world["carol"])).json()
    response, data = export(client, world["carol"], COSTS, format="json", **params)
    exported = json.loads(data)
    assert response.status_code == 200 and len(exported) == len(api)
    for mine, theirs in zip(exported, api, strict=True):
        assert list(mine)[:3] == ["team", "model", "period"]
        for key, value in theirs.items():
            if key not in mine:  # the costs API also lists the dimensions not grouped by, as null
                assert key in {"vendor", "workload", "endpoint", "pool"} and value is None, key
            elif key in {"cost", "idle_cost", "cost_per_successful_task"} and value is not None:
                assert Decimal(mine[key]) == Decimal(value).quantize(Decimal("1e-12")), key
            else:
                assert mine[key] == value, key
    _, as_csv = export(client, world["carol"], COSTS, **params)
    assert [row["model"] for row in csv_rows(as_csv)] == [row["model"] for row in api]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"format": "xlsx"}, "format"),
        ({"granularity": "week"}, "granularity"),
        ({"start": "2026-11-03", "end": "2026-11-02"}, "end"),
        ({"start": "2026-10-01", "end": "2026-11-02", "granularity": "hour"}, "at most 31 days"),
        ({"start": "2020-01-01", "end": "2026-01-01"}, "at most"),
        ({"start": "yesterday"}, "start"),
    ],
)
def test_bad_input_and_ranges_over_the_cap_are_a_clear_400(client, world, params, message):
    response, data = export(client, world["carol"], **params)
    assert response.status_code == 400 and response["Content-Type"] == "application/json"
    assert message in data.decode()


def test_an_export_over_the_size_cap_is_refused_before_streaming(client, world, settings):
    settings.EXPORT_MAX_ROWS = 3
    for path, params in ((FOCUS, {}), (COSTS, {"group_by": "team,model"})):
        response, data = export(client, world["carol"], path, **params)
        assert response.status_code == 400 and not response.streaming
        assert "more than the limit of 3" in json.loads(data)["detail"]
    assert export(client, world["carol"], COSTS)[0].status_code == 200  # one total row is always fine


def test_exports_are_throttled_per_token(client, world, monkeypatch):
    from costcenter.api_auth import TokenRateThrottle

    cache.clear()
    monkeypatch.setattr(TokenRateThrottle, "THROTTLE_RATES", {"api_token": "2/min"})
    headers = bearer(world["carol"])
    responses = [client.get(FOCUS, RANGE, **headers) for _ in range(3)]
    assert [response.status_code for response in responses] == [200, 200, 429]
    # The refusal says when to come back: the oldest of the two requests leaves the minute.
    assert 1 <= int(responses[2]["Retry-After"]) <= 60
    assert "throttled" in json.loads(responses[2].content)["detail"].lower()
    assert client.get(FOCUS, RANGE, **bearer(world["carol"])).status_code == 200
    cache.clear()


def test_with_a_shared_redis_the_throttle_counts_per_token_across_processes(
    client, world, monkeypatch, settings, tmp_path
):
    """API_THROTTLE_CACHE_URL: the counters live in a real redis-server on loopback, so a web
    process that has never seen the token (simulated by dropping everything this process holds:
    its local cache and its Redis client) still refuses the third request. Unreachable Redis:
    requests pass (a throttle outage must not stop ingestion)."""
    import redis

    from costcenter import api_auth
    from costcenter.api_auth import TokenRateThrottle
    from tests.drill_helpers import RedisServer, require_redis

    server = RedisServer(require_redis(), tmp_path / "redis").start()
    try:
        settings.API_THROTTLE_CACHE_URL = server.url
        monkeypatch.setattr(TokenRateThrottle, "THROTTLE_RATES", {"api_token": "2/min"})
        api_auth._shared_cache.cache_clear()
        headers = bearer(world["carol"])
        assert [client.get(FOCUS, RANGE, **headers).status_code for _ in range(2)] == [200, 200]
        keys = redis.Redis.from_url(server.url).keys("*throttle*")
        assert len(keys) == 1 and b"token-" in keys[0]  # one counter, in Redis, for that token
        cache.clear()
        api_auth._shared_cache.cache_clear()  # "another process": nothing local survives
        refused = client.get(FOCUS, RANGE, **headers)
        assert refused.status_code == 429 and int(refused["Retry-After"]) >= 1
    finally:
        server.stop()
    api_auth._shared_cache.cache_clear()
    assert client.get(FOCUS, RANGE, **headers).status_code == 200  # Redis gone: let through
    api_auth._shared_cache.cache_clear()
    cache.clear()


# --- Real BI clients against a running server ---------------------------------------------------------
@pytest.fixture
def live_world(live_server, transactional_db):
    build_world()
    people = build_people()
    headers = {"Authorization": bearer(people["carol"])["HTTP_AUTHORIZATION"]}
    return live_server.url, headers


def streamed_http_filesystem(headers: dict):
    """The README's ``StreamedHTTPFileSystem`` (run from the README itself, so the example there is
    the code tested here): fsspec's HTTP filesystem adapted so DuckDB reads a streamed export by
    its URL — no Content-Length and no byte ranges, so each URL is fetched once, whole."""
    readme = (ROOT / "README.md").read_text()
    block = next(
        part.split("```", 1)[0]
        for part in readme.split("```python\n")[1:]
        if "class StreamedHTTPFileSystem" in part
    )
    definitions = block.split("\ncon = duckdb.connect()", 1)[0]  # the class, not the example's queries
    namespace: dict = {}
    exec(compile(definitions, "README.md", "exec"), namespace)  # noqa: S102 - our own README
    return namespace["StreamedHTTPFileSystem"](headers=headers)


def test_pandas_and_duckdb_read_the_csv_and_parquet_exports(live_world):
    import duckdb
    import pandas as pd

    base, headers = live_world
    query = f"start={RANGE['start']}&end={RANGE['end']}"
    url = f"{base}{FOCUS}?{query}"
    csv_frame = pd.read_csv(f"{url}&format=csv", storage_options=headers)
    parquet_frame = pd.read_parquet(f"{url}&format=parquet", storage_options=headers)
    assert len(csv_frame) == len(parquet_frame) == 14
    assert list(parquet_frame.columns) == focus.COLUMN_NAMES
    assert round(csv_frame["BilledCost"].sum(), 5) == 22.0019
    assert sum(parquet_frame["BilledCost"], Decimal(0)) == Decimal("22.0019")  # exact decimals
    assert (
        str(parquet_frame["ChargePeriodStart"].dtype).startswith("datetime64")
        and str(parquet_frame["ChargePeriodStart"].dt.tz) == "UTC"
    )

    # DuckDB reads the server's URLs itself, through fsspec (its httpfs extension is a download).
    con = duckdb.connect()
    filesystem = streamed_http_filesystem(headers)
    con.register_filesystem(filesystem)
    for reader, fmt in (("read_csv", "csv"), ("read_parquet", "parquet")):
        team_spend = con.execute(
            f"SELECT coalesce(x_Team, '(unallocated)') AS team, sum(BilledCost) AS spend "  # noqa: S608
            f"FROM {reader}(?) GROUP BY 1 ORDER BY 1",
            [f"{url}&format={fmt}"],
        ).fetchall()
        assert [(team, round(float(spend), 5)) for team, spend in team_spend] == [
            ("(unallocated)", 11.0),
            ("a", 3.00036),
            ("b", 8.00154),
        ], reader
    assert sorted(filesystem.bodies) == [f"{url}&format=csv", f"{url}&format=parquet"]  # over HTTP
    exact = con.execute("SELECT sum(BilledCost) FROM read_parquet(?)", [f"{url}&format=parquet"]).fetchone()
    assert exact == (Decimal("22.001900000000"),)  # Parquet decimals stay exact in DuckDB
    kinds = con.execute("DESCRIBE SELECT * FROM read_parquet(?)", [f"{url}&format=parquet"]).fetchall()
    types = {name: kind for name, kind, *_ in kinds}
    assert (
        types["BilledCost"] == "DECIMAL(38,12)" and types["ChargePeriodStart"] == "TIMESTAMP WITH TIME ZONE"
    )
    # Without the token the server refuses, and so does DuckDB.
    anonymous = duckdb.connect()
    anonymous.register_filesystem(streamed_http_filesystem({}))
    with pytest.raises(duckdb.Error, match="401"):
        anonymous.execute("SELECT count(*) FROM read_csv(?)", [f"{url}&format=csv"]).fetchall()

    costs = pd.read_csv(f"{base}{COSTS}?{query}&group_by=team&format=csv", storage_options=headers)
    assert sorted(costs["team"]) == ["a", "b"]
