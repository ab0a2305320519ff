"""Typed readers for environment variables.

Each helper fails loudly with ``ImproperlyConfigured`` naming the variable and the bad value:
a typo in a deployment's environment must stop the process, not silently pick a default.
"""

from __future__ import annotations

import os
from urllib.parse import parse_qsl, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def env_str(name: str, default: str | None = None) -> str | None:
    """The variable's value; an empty value counts as unset."""
    value = os.environ.get(name, "").strip()
    return value if value else default


def env_bool(name: str, default: bool) -> bool:
    value = env_str(name)
    if value is None:
        return default
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r}: expected one of true/false, 1/0, yes/no, on/off")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    value = env_str(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r}: expected an integer") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={value!r}: must be at least {minimum}")
    return number


def env_list(name: str, default: list[str]) -> list[str]:
    """A comma-separated list; blanks between commas are dropped."""
    value = env_str(name)
    if value is None:
        return list(default)
    return [item.strip() for item in value.split(",") if item.strip()]


def database_from_url(url: str, *, variable: str = "DATABASE_URL") -> dict:
    """Django ``DATABASES`` entry for a ``postgres://user:pass@host:port/name?opt=v`` URL.

    Query parameters become libpq connection options (``sslmode``, ``connect_timeout`` …).
    """
    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql"}:
        raise ImproperlyConfigured(
            f"{variable}: scheme {parts.scheme!r} is not supported; use postgres://user:password@host:5432/db"
        )
    name = unquote(parts.path.lstrip("/"))
    if not name:
        raise ImproperlyConfigured(f"{variable}: the URL names no database (postgres://…/DBNAME)")
    options = dict(parse_qsl(parts.query))
    try:
        port = parts.port
    except ValueError:
        raise ImproperlyConfigured(f"{variable}: the port is not a number") from None
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        # A socket directory may be given as ?host=/path (libpq style).
        "HOST": options.pop("host", parts.hostname or ""),
        "PORT": str(port or ""),
        "OPTIONS": options,
    }
