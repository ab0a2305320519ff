"""Environment defaults for the test suite, loaded by pytest before Django reads its settings.

pytest-django imports the settings before any conftest runs, so these defaults live in a plugin
named in ``addopts`` (``-p costcenter.pytest_defaults``). Each is only a default: CI or a
developer may point the tests at another database with ``DATABASE_URL``.
"""

from __future__ import annotations

import os
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent

os.environ.setdefault("SECRET_KEY", "tests-only-secret-key-not-for-production-use-0123456789")
os.environ.setdefault("COSTCENTER_HOME", str(_ROOT / ".costcenter-test"))
os.environ.setdefault("STATIC_MANIFEST", "false")
os.environ.setdefault("WHITENOISE_USE_FINDERS", "true")
os.environ.setdefault("DEBUG", "false")
# Live-server threads would otherwise keep connections open and block dropping the test database.
os.environ.setdefault("DATABASE_CONN_MAX_AGE", "0")
