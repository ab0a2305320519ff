"""``python manage.py create_api_token USERNAME [--scope read|ingest] [--name N] [--expires-days D]``.

Prints the new token alone on stdout (so ``TOKEN=$(python manage.py create_api_token …)`` works)
and what was created on stderr. The token is never shown again: only its hash is stored.
"""

from __future__ import annotations

import sys
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.utils import timezone

from costcenter.models import TokenScope
from costcenter.tokens import api_token_create


class Command(BaseCommand):
    help = "Create an API token for a user and print it once (send it as 'Authorization: Bearer TOKEN')."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--scope", choices=TokenScope.values, default=TokenScope.READ)
        parser.add_argument("--name", default="", help="a label to tell tokens apart")
        parser.add_argument(
            "--expires-days", type=int, default=None, help="days until it expires (default: never)"
        )

    def handle(self, *args, username: str, scope: str, name: str, expires_days: int | None, **options):
        user_model = get_user_model()
        try:
            user = user_model.objects.get(**{user_model.USERNAME_FIELD: username})
        except user_model.DoesNotExist:
            self.stderr.write(f"create_api_token: no user named {username!r}")
            sys.exit(1)
        if not user.is_active:
            self.stderr.write(f"create_api_token: user {username!r} is inactive")
            sys.exit(1)
        if expires_days is not None and expires_days < 1:
            self.stderr.write("create_api_token: --expires-days must be at least 1")
            sys.exit(1)
        expires_at = timezone.now() + timedelta(days=expires_days) if expires_days else None
        token, raw = api_token_create(user=user, scope=scope, name=name, expires_at=expires_at)
        until = f"expires {expires_at:%Y-%m-%d %H:%M} UTC" if expires_at else "does not expire"
        self.stderr.write(
            f"Created a {scope} token {token.prefix}… for {username} ({until}). "
            "It is shown only this once; store it now."
        )
        self.stdout.write(raw)
