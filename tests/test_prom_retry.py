"""Retries: 503 and other 5xx and timeouts are retried with backoff; 400/422 are not and become a
visible source error. A tiny HTTP server on 127.0.0.1 plays Prometheus."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ingest.models import MetricCheckpoint, PrometheusSource
from ingest.prometheus import (
    PrometheusQueryError,
    PrometheusUnavailable,
    client_for,
    pull_source,
    query_range,
)

OK = {
    "status": "success",
    "data": {
        "resultType": "matrix",
        "result": [{"metric": {"model_name": "m"}, "values": [[1767574800, "42"]]}],
    },
}


class FakePrometheus:
    """Answers query_range with the scripted (status, body, delay) replies, then 200 forever."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.requests: list[tuple[float, str]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                fake.requests.append((time.monotonic(), self.path))
                status, body, delay = fake.replies.pop(0) if fake.replies else (200, OK, 0)
                time.sleep(delay)
                payload = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake():
    servers = []

    def make(*replies):
        server = FakePrometheus(replies)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()


def error(kind, message):
    return {"status": "error", "errorType": kind, "error": message}


T = datetime(2026, 1, 5, 1, tzinfo=UTC)


def client(url):
    return client_for(PrometheusSource(name="t", url=url))


def test_503_then_200_is_retried_with_backoff(fake):
    server = fake((503, error("unavailable", "busy"), 0), (502, error("x", "bad gateway"), 0))
    sleeps = []
    result = query_range(client(server.url), "up", T, T, 3600, sleep=sleeps.append)
    assert result[0]["values"] == [[1767574800, "42"]]
    assert len(server.requests) == 3
    assert sleeps == [0.03, 0.06]


def test_real_sleeps_are_short_first(fake):
    server = fake((503, error("unavailable", "busy"), 0), (500, error("internal", "oops"), 0))
    query_range(client(server.url), "up", T, T, 3600)
    (t0, _), (t1, _), (t2, _) = server.requests
    assert 0.025 <= t1 - t0 < 1 and 0.05 <= t2 - t1 < 1


@pytest.mark.parametrize("status", [400, 422])
def test_400_and_422_are_not_retried(fake, status):
    message = (
        "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution"
    )
    server = fake((status, error("bad_data", message), 0))
    sleeps = []
    with pytest.raises(PrometheusQueryError, match=f"HTTP {status}: exceeded maximum resolution"):
        query_range(client(server.url), "up", T, T, 3600, sleep=sleeps.append)
    assert len(server.requests) == 1 and sleeps == []


def test_timeouts_are_retried(fake, settings):
    settings.PROMETHEUS_TIMEOUT_SECONDS = 0.2
    server = fake((200, OK, 0.6))
    sleeps = []
    result = query_range(client(server.url), "up", T, T, 3600, sleep=sleeps.append)
    assert result and len(server.requests) == 2 and sleeps == [0.03]


def test_retries_run_out(fake):
    server = fake(*[(503, error("unavailable", "busy"), 0)] * 4)
    sleeps = []
    with pytest.raises(PrometheusUnavailable, match="503"):
        query_range(client(server.url), "up", T, T, 3600, retries=3, sleep=sleeps.append)
    assert len(server.requests) == 4 and sleeps == [0.03, 0.06, 0.12]


def test_connection_refused_is_retried_then_unavailable():
    url = "http://127.0.0.1:9"  # discard port: nothing listens on loopback
    sleeps = []
    with pytest.raises(PrometheusUnavailable):
        query_range(client(url), "up", T, T, 3600, retries=2, sleep=sleeps.append)
    assert sleeps == [0.03, 0.06]


@pytest.mark.django_db
def test_a_400_becomes_the_source_error_and_the_checkpoint_stays(fake):
    server = fake((400, error("bad_data", 'parse error: unexpected character "{"'), 0))
    source = PrometheusSource.objects.create(name="p", url=server.url, initial_backfill_hours=1)
    result = pull_source(source, now=T + timedelta(hours=1, minutes=5), sleep=lambda s: None)
    source.refresh_from_db()
    assert not result.ok
    assert (
        'parse error: unexpected character \\"{\\"' in source.last_error or "parse error" in source.last_error
    )
    assert source.last_success_at is None and source.last_pull_at is not None
    # Only the refused query is held back; the others went on and committed their window.
    (failed_key,) = [e.split(":")[0] + ":" + e.split(":")[1] for e in result.errors]
    keys = set(MetricCheckpoint.objects.filter(source=source).values_list("query_key", flat=True))
    assert failed_key not in keys and len(keys) == result.requests - 1


@pytest.mark.django_db
def test_auth_headers_come_from_the_environment(fake, monkeypatch):
    seen = {}
    server = fake()
    original = server.server.RequestHandlerClass.do_GET

    def do_get(handler):
        seen["authorization"] = handler.headers.get("Authorization")
        original(handler)

    server.server.RequestHandlerClass.do_GET = do_get
    source = PrometheusSource.objects.create(
        name="auth", url=server.url, auth_header_env={"Authorization": "CC_TEST_PROM_AUTH"}
    )
    assert "CC_TEST_PROM_AUTH" in str(pytest.raises(PrometheusQueryError, client_for, source).value)
    monkeypatch.setenv("CC_TEST_PROM_AUTH", "Bearer t0k3n")
    query_range(client_for(source), "up", T, T, 3600)
    assert seen["authorization"] == "Bearer t0k3n"
