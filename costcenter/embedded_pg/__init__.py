"""An embedded PostgreSQL for machines with nothing installed but Python.

Used when ``DATABASE_URL`` is unset: the first connection starts (or joins) a PostgreSQL server
from the ``pgserver`` package with its data under ``COSTCENTER_HOME/pgdata``. The server listens
on a Unix socket only, and stops when the last process using it exits.
"""

from __future__ import annotations

import atexit
import json
import os
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
            # Registered after pgserver's own exit handler, so it runs first (atexit is LIFO).
            atexit.register(_forget_dead_handles, server)
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


def _forget_dead_handles(server) -> None:
    """Drop processes that died without saying so from pgserver's list of server users.

    pgserver stops the server when the last process in its list exits, but a process killed
    by a signal (or a forked worker leaving through ``os._exit``) never removes itself, and
    the server would then outlive everyone. Pruning the dead lets the last live one stop it.
    """
    path = Path(server.pgdata) / ".handle_pids.json"
    with type(server)._lock:
        try:
            pids = json.loads(path.read_text())
        except (OSError, ValueError):
            return
        alive = [pid for pid in pids if _alive(pid)]
        if alive != pids:
            path.write_text(json.dumps(alive))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
