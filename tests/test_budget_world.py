"""Helpers shared by the budget and alert tests: spend written as rollup rows, loopback
receivers (a real SMTP server and a small HTTP server).

Spend goes in as ``HourlyUsage`` rows (daily rows rebuilt by the cost engine's own
``rebuild_day``), so budgets read it through the same selectors as every page.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from costcenter.costing import rebuild_day
from costcenter.models import Endpoint, HourlyUsage, LlmModel, Team

HOUR = timedelta(hours=1)


def spend(
    amounts: dict,
    *,
    team: str | None = "netops",
    model="gpt-4o-mini",
    endpoint="openai-gpt-4o-mini",
    unpriced: int = 0,
    attempts: int = 10,
    successes: int = 10,
    tasks: int = 10,
    successful_tasks: int = 10,
) -> None:
    """Add ``amount`` of cost at each hour (one rollup row per hour and group)."""
    team_obj = Team.objects.get_or_create(slug=team, defaults={"name": team})[0] if team else None
    model_obj = LlmModel.objects.get_or_create(name=model, version="")[0]
    endpoint_obj = Endpoint.objects.get(name=endpoint) if endpoint else None
    rows, days = [], set()
    for hour, amount in amounts.items():
        days.add(hour.replace(hour=0, minute=0, second=0, microsecond=0))
        rows.append(
            HourlyUsage(
                hour=hour,
                team=team_obj,
                workload=None,
                model=model_obj,
                endpoint=endpoint_obj,
                attempts=attempts,
                successful_attempts=successes,
                tasks=tasks,
                successful_tasks=successful_tasks,
                prompt_tokens=1000,
                completion_tokens=100,
                cached_tokens=0,
                reasoning_tokens=0,
                cost=None if amount is None else Decimal(amount),
                idle_cost=None,
                unpriced_attempts=unpriced,
                unpriced_tokens=unpriced * 1100,
            )
        )
    HourlyUsage.objects.bulk_create(rows)
    for day in sorted(days):
        rebuild_day(day)


def every_hour(start: datetime, end: datetime, amount) -> dict[datetime, Decimal]:
    out, moment = {}, start
    while moment < end:
        out[moment] = Decimal(amount(moment) if callable(amount) else amount)
        moment += HOUR
    return out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- A webhook receiver on loopback --------------------------------------------------------------
@dataclass
class Received:
    path: str
    headers: dict
    body: bytes

    @property
    def json(self):
        return json.loads(self.body)


@dataclass
class WebhookReceiver:
    """A real HTTP server on 127.0.0.1 that records POSTs; ``stop()`` takes it down (connection
    refused), ``start()`` brings it back on the same port."""

    port: int = field(default_factory=free_port)
    received: list[Received] = field(default_factory=list)
    status: int = 200
    server: ThreadingHTTPServer | None = None
    thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> WebhookReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                if receiver.status < 300:
                    receiver.received.append(Received(self.path, self.headers, body))  # case-insensitive
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        class Server(ThreadingHTTPServer):
            allow_reuse_address = True
            daemon_threads = True

        self.server = Server(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.thread.join(timeout=5)
            self.server = None


# --- An SMTP server on loopback -----------------------------------------------------------------
class SmtpReceiver:
    """aiosmtpd's server on 127.0.0.1, keeping every message it accepts."""

    def __init__(self):
        from aiosmtpd.controller import Controller

        self.messages: list = []
        receiver = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd's naming
                import email
                from email import policy

                message = email.message_from_bytes(envelope.content, policy=policy.default)
                receiver.messages.append((list(envelope.rcpt_tos), message))
                return "250 OK"

        logging.getLogger("mail.log").setLevel(logging.WARNING)  # aiosmtpd logs every command
        self.port = free_port()
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)

    def __enter__(self) -> SmtpReceiver:
        self.controller.start()
        return self

    def __exit__(self, *exc) -> None:
        self.controller.stop()

    def use(self, settings) -> None:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST = "127.0.0.1"
        settings.EMAIL_PORT = self.port
        settings.EMAIL_USE_TLS = False
        settings.EMAIL_USE_SSL = False
        settings.EMAIL_HOST_USER = ""
        settings.EMAIL_HOST_PASSWORD = ""
        settings.EMAIL_TIMEOUT = 5


def test_the_spend_helper_writes_rollups_the_selectors_read(people):
    from costcenter.budgets import SYSTEM
    from costcenter.selectors import CostQuery, cost_totals

    spend(every_hour(datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 3, tzinfo=UTC), "1.5"))
    month = (datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))
    totals = cost_totals(user=SYSTEM, query=CostQuery(*month, (), "total", (("team", ("netops",)),)))
    assert totals["cost"] == Decimal("72")
