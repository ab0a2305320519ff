"""An embedded PostgreSQL for machines with nothing installed but Python.

Used when ``DATABASE_URL`` is unset: the first connection starts (or joins) a PostgreSQL server
from the ``pgserver`` package with its data under ``COSTCENTER_HOME/pgdata``. The server listens
on a Unix socket only, and stops when the last process using it exits.
"""

from __future__ import annotations

import threading
import warnings
from pathlib import Path

import psycopg
from django.core.exceptions import ImproperlyConfigured

_lock = threading.Lock()
_servers: dict[Path, object] = {}


def ensure_server(pgdata: Path, database: str) -> str:
    """Start or join the embedded server; return its socket directory. Creates ``database``."""
    pgdata = pgdata.resolve()
    with _lock:
        server = _servers.get(pgdata)
        if server is None:
            try:
                pgdata.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ImproperlyConfigured(
                    f"COSTCENTER_HOME: cannot create {pgdata.parent} for the embedded database: {exc}"
                ) from exc
            with warnings.catch_warnings():
                # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI) and falls back
                # to /tmp, which is what we want for pgserver's lock file.
                warnings.simplefilter("ignore")
                import pgserver  # imported lazily: only the embedded mode needs it

            server = pgserver.get_server(pgdata, cleanup_mode="stop")
            _servers[pgdata] = server
            socket_dir = _socket_dir(server)
            _create_database(socket_dir, database)
        return _socket_dir(server)


def _socket_dir(server) -> str:
    info = server.get_postmaster_info()
    return str(info.socket_dir)


def _create_database(socket_dir: str, database: str) -> None:
    with psycopg.connect(host=socket_dir, user="postgres", dbname="postgres", autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{database}"')  # noqa: S608 - name comes from settings, not users
