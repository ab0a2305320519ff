"""Django database backend: the stock PostgreSQL backend, started on demand through pgserver."""

from __future__ import annotations

from pathlib import Path

from django.db.backends.postgresql import base

from . import ensure_server


class DatabaseWrapper(base.DatabaseWrapper):
    def get_connection_params(self):
        # The server is started on the first connection, not when settings are imported, so
        # commands that never touch the database (ruff, --help, collectstatic) stay instant.
        settings = self.settings_dict
        socket_dir = ensure_server(Path(settings["OPTIONS_PGDATA"]), settings["EMBEDDED_MAIN_DB"])
        params = super().get_connection_params()
        params["host"] = socket_dir
        params["user"] = "postgres"
        params.pop("port", None)
        return params
