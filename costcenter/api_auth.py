"""API authentication and permissions: ``Authorization: Bearer TOKEN`` and token scopes.

A token acts for its user with that user's visibility. ``read`` tokens (and signed-in browser
sessions) may read; writing usage needs an ``ingest`` token, never a session, so a logged-in
browser tab can never be tricked into posting usage. The reverse holds for the catalog: only an
org admin's session writes it, never a token (``api_catalog.AdminWrite``).
"""

from __future__ import annotations

import functools
import logging
import re

from django.conf import settings
from django.core.cache import cache as default_cache
from django.core.cache.backends.redis import RedisCache
from django.core.exceptions import ImproperlyConfigured
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import BasePermission
from rest_framework.throttling import SimpleRateThrottle

from costcenter.access import org_role
from costcenter.models import ApiToken, Membership, OrgRole, TokenScope
from costcenter.tokens import api_token_check

try:
    from redis.exceptions import RedisError
except ImportError:  # redis is a production extra; without it there is no shared throttle cache
    RedisError = OSError

logger = logging.getLogger(__name__)

BEARER_CHALLENGE = 'Bearer realm="costcenter"'


class BearerTokenAuthentication(BaseAuthentication):
    """``Authorization: Bearer cc_…``; sets ``request.user`` to the owner, ``request.auth`` to the token.

    Requests without a Bearer header pass through to the next authenticator (the session). Being
    first in the list also makes DRF answer unauthenticated API calls with 401 and this class's
    ``WWW-Authenticate: Bearer`` challenge instead of 403.
    """

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != b"bearer":
            return None
        if len(parts) != 2:
            raise AuthenticationFailed("Invalid Authorization header: expected 'Bearer TOKEN'.")
        try:
            raw = parts[1].decode("ascii")
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid API token.") from None
        token, why = api_token_check(raw)
        if token is None:
            raise AuthenticationFailed(why)
        return token.user, token

    def authenticate_header(self, request) -> str:
        return BEARER_CHALLENGE


def _token(request) -> ApiToken | None:
    return request.auth if isinstance(request.auth, ApiToken) else None


class ReadScope(BasePermission):
    """Any valid token (read or ingest) or a signed-in session."""

    message = "Authentication required: send 'Authorization: Bearer TOKEN' or sign in."

    def has_permission(self, request, view) -> bool:
        return bool(request.user and request.user.is_authenticated)


class IngestScope(BasePermission):
    """Only a token with the ``ingest`` scope; sessions and read tokens are refused (403)."""

    message = "Writing usage needs an API token with the 'ingest' scope."

    def has_permission(self, request, view) -> bool:
        token = _token(request)
        return token is not None and token.scope == TokenScope.INGEST


def writable_teams(user) -> set[str] | None:
    """Team slugs ``user`` may write usage for; None means any team (org admins, superusers)."""
    if org_role(user) == OrgRole.ADMIN:
        return None
    if not user.is_authenticated:
        return set()
    return set(Membership.objects.filter(user=user).values_list("team__slug", flat=True))


_RATE = re.compile(r"^\d+/(s|sec|second|m|min|minute|h|hour|d|day)$")


@functools.cache
def _shared_cache(url: str) -> RedisCache:
    """One Redis cache client per URL and process (it pools its connections)."""
    return RedisCache(url, {"KEY_PREFIX": "costcenter-throttle"})


class TokenRateThrottle(SimpleRateThrottle):
    """Requests per API token (per user for sessions), rate from ``API_THROTTLE_RATE``.

    The counters live in the Redis that ``API_THROTTLE_CACHE_URL`` names, shared by every web
    process, so the rate is per token whatever the number of processes. Without it they live in
    Django's default cache — local memory, per process — and the effective limit is the rate
    times the number of web processes. ``API_THROTTLE_RATE=off`` disables throttling.

    If that Redis cannot be reached the request is let through (and logged): a throttle outage
    must not stop usage ingestion. DRF reads and writes a counter without a lock, so concurrent
    requests of one token may overshoot the rate by a few; it is a guard, not a quota.
    """

    scope = "api_token"

    @property
    def cache(self):
        url = getattr(settings, "API_THROTTLE_CACHE_URL", None)
        return _shared_cache(url) if url else default_cache

    def allow_request(self, request, view) -> bool:
        try:
            return super().allow_request(request, view)
        except RedisError as error:
            logger.warning("API throttle skipped: its Redis cannot be reached (%s)", error)
            return True

    def get_rate(self) -> str | None:
        rate = super().get_rate()
        if rate is None or rate.strip().lower() in {"off", "none", "0"}:
            return None
        if not _RATE.match(rate.strip()):
            raise ImproperlyConfigured(
                f"API_THROTTLE_RATE={rate!r}: expected REQUESTS/PERIOD, e.g. 600/min (period s, min, h, day)"
            )
        return rate.strip()

    def get_cache_key(self, request, view) -> str | None:
        token = _token(request)
        if token is not None:
            ident = f"token-{token.pk}"
        elif request.user and request.user.is_authenticated:
            ident = f"user-{request.user.pk}"
        else:
            ident = f"ip-{self.get_ident(request)}"
        return self.cache_format % {"scope": self.scope, "ident": ident}


class BearerTokenScheme(OpenApiAuthenticationExtension):
    """Describes the Bearer token in the OpenAPI schema (``/api/schema/``)."""

    target_class = "costcenter.api_auth.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return build_bearer_security_scheme_object(header_name="Authorization", token_prefix="Bearer")  # noqa: S106 - a scheme name
