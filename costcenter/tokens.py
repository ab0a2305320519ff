"""Personal API tokens: create, verify, revoke.

A token is ``cc_`` + 43 URL-safe characters (256 random bits). Only its SHA-256 is stored, plus
the first characters in clear so a user can tell tokens apart; the token itself is shown once.
Looking a token up by its hash is timing-safe without extra work: an attacker controls the
token, not its hash, so how long the index lookup takes says nothing about stored hashes.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime, timedelta

from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.utils import timezone

from costcenter.access import org_role
from costcenter.models import ApiToken, OrgRole, TokenScope

TOKEN_PREFIX = "cc_"  # noqa: S105 - the public marker of our tokens, not a secret
# "cc_" + 8 characters: enough to tell a user's tokens apart, far too little to guess the rest.
SHOWN_PREFIX_CHARS = 11
# A token is never longer than this; longer input is refused before hashing.
MAX_TOKEN_CHARS = 200
# ``last_used_at`` is a hint for humans ("is this token still in use?"), so one write per token
# per minute is plenty; writing on every request would turn each API read into a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def token_hash(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def api_token_create(
    *, user, scope: str, name: str = "", expires_at: datetime | None = None
) -> tuple[ApiToken, str]:
    """A new token for ``user``; returns the row and the token text (the only time it exists)."""
    if scope not in TokenScope.values:
        raise ValueError(f"scope: must be one of {', '.join(TokenScope.values)}, not {scope!r}")
    if expires_at is not None and timezone.is_naive(expires_at):
        raise ValueError("expires_at: must be timezone-aware")
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user,
        name=name.strip()[:100],
        scope=scope,
        prefix=raw[:SHOWN_PREFIX_CHARS],
        token_hash=token_hash(raw),
        expires_at=expires_at,
    )
    return token, raw


def api_token_check(raw: str | None, *, now: datetime | None = None) -> tuple[ApiToken | None, str]:
    """``(token, "")`` for a usable token, else ``(None, why)`` with a message for the caller."""
    if not raw or len(raw) > MAX_TOKEN_CHARS or not raw.startswith(TOKEN_PREFIX):
        return None, "Invalid API token."
    digest = token_hash(raw)
    token = ApiToken.objects.select_related("user").filter(token_hash=digest).first()
    # The database compared the hashes already; compare again in constant time so that no code
    # path ever depends on a non-constant-time comparison of secret-derived values.
    if token is None or not hmac.compare_digest(token.token_hash, digest):
        return None, "Invalid API token."
    now = now or timezone.now()
    if token.revoked_at is not None:
        return None, "This API token has been revoked."
    if token.expires_at is not None and token.expires_at <= now:
        return None, "This API token has expired."
    if not token.user.is_active:
        return None, "The user of this API token is inactive."
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
        # Conditional UPDATE: concurrent requests with the same token write at most once.
        ApiToken.objects.filter(pk=token.pk).filter(
            Q(last_used_at__isnull=True) | Q(last_used_at__lte=now - LAST_USED_RESOLUTION)
        ).update(last_used_at=now)
        token.last_used_at = now
    return token, ""


def api_token_verify(raw: str | None) -> ApiToken | None:
    """The usable token for ``raw`` (not revoked, not expired, active user), else None."""
    return api_token_check(raw)[0]


def api_token_revoke(*, token: ApiToken, by_user) -> ApiToken:
    """Revoke ``token``. Its owner or an org admin may; revoking twice keeps the first time."""
    if token.user_id != by_user.pk and org_role(by_user) != OrgRole.ADMIN:
        raise PermissionDenied("Only the token's owner or an org admin can revoke it.")
    if token.revoked_at is None:
        ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
        token.refresh_from_db(fields=["revoked_at"])
    return token
