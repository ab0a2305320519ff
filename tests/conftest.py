"""Shared fixtures: the example catalog, and users with known roles.

alice edits netops, bob views support, carol is an org-wide viewer (a manager), dave belongs to
no team, and root is a superuser. Their password is PASSWORD.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from costcenter.catalog import catalog_load
from costcenter.models import Membership, OrgRole, Team, TeamRole, UserProfile

# The browser fixture (``browser_page``) lives in its own module.
pytest_plugins = ["tests.browser"]

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_CATALOG = ROOT / "examples" / "catalog.yaml"
PASSWORD = "correct-horse-battery-staple"


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    # Real hashing costs ~0.2 s per user; the hasher is not what these tests are about.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def example_catalog(db):
    return catalog_load(EXAMPLE_CATALOG.read_text(), source=str(EXAMPLE_CATALOG))


def make_user(username: str, *, teams: dict[str, str] | None = None, org_role: str = OrgRole.NONE, **extra):
    user = get_user_model().objects.create_user(username, f"{username}@example.com", PASSWORD, **extra)
    UserProfile.objects.create(user=user, org_role=org_role)
    for slug, role in (teams or {}).items():
        team, _ = Team.objects.get_or_create(slug=slug, defaults={"name": slug.title()})
        Membership.objects.create(user=user, team=team, role=role)
    return user


@pytest.fixture
def people(example_catalog):
    return {
        "alice": make_user("alice", teams={"netops": TeamRole.EDITOR}),
        "bob": make_user("bob", teams={"support": TeamRole.VIEWER}),
        "carol": make_user("carol", org_role=OrgRole.VIEWER),
        "dave": make_user("dave"),
        "root": make_user("root", is_superuser=True, is_staff=True),
    }


@pytest.fixture(autouse=True)
def _empty_unmanaged_tables(request, django_db_blocker):
    """Empty the raw attempts table after tests that commit for real.

    Django flushes the tables of managed models after ``transaction=True`` tests; the partitioned
    ``ingest_attempt`` is created in SQL (unmanaged), so without this its rows would leak into
    later tests.
    """
    yield
    marker = request.node.get_closest_marker("django_db")
    committed = (
        marker is not None and marker.kwargs.get("transaction")
    ) or "live_server" in request.fixturenames
    if committed:
        from django.db import connection

        with django_db_blocker.unblock(), connection.cursor() as cursor:
            cursor.execute("TRUNCATE ingest_attempt")
