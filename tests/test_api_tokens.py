"""API tokens: create/verify/revoke, hashed storage, the command, the page, Bearer auth on DRF."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied
from django.core.management import call_command
from django.db import connection
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from costcenter.api_auth import writable_teams
from costcenter.models import ApiToken, Membership, Team, TeamRole, TokenScope
from costcenter.tokens import (
    LAST_USED_RESOLUTION,
    api_token_check,
    api_token_create,
    api_token_revoke,
    api_token_verify,
)
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


# --- services ----------------------------------------------------------------------------------


def test_a_new_token_is_returned_once_and_only_its_hash_is_stored(people):
    token, raw = api_token_create(user=people["alice"], scope=TokenScope.INGEST, name="gateway")
    assert raw.startswith("cc_") and len(raw) >= 40
    assert token.token_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert raw.startswith(token.prefix) and len(token.prefix) < 16
    assert (token.scope, token.name, token.user) == (TokenScope.INGEST, "gateway", people["alice"])
    # The token text appears nowhere in the table.
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM costcenter_apitoken")
        stored = " ".join(str(value) for row in cursor.fetchall() for value in row)
    assert raw not in stored
    assert raw[len(token.prefix) :] not in stored
    # Two tokens never collide.
    assert api_token_create(user=people["alice"], scope=TokenScope.READ)[1] != raw


def test_unknown_scopes_are_refused(people):
    with pytest.raises(ValueError, match="scope"):
        api_token_create(user=people["alice"], scope="admin")


def test_verify_accepts_the_token_and_refuses_anything_else(people):
    token, raw = api_token_create(user=people["alice"], scope=TokenScope.READ)
    assert api_token_verify(raw) == token
    for bad in ["", None, raw + "x", raw[:-1], "cc_nope", raw.replace("cc_", "xx_"), "cc_" + "a" * 500]:
        assert api_token_verify(bad) is None


def test_revoked_and_expired_tokens_are_refused_with_a_reason(people):
    revoked, revoked_raw = api_token_create(user=people["alice"], scope=TokenScope.READ)
    api_token_revoke(token=revoked, by_user=people["alice"])
    assert api_token_check(revoked_raw) == (None, "This API token has been revoked.")

    soon = timezone.now() + timedelta(hours=1)
    expiring, expiring_raw = api_token_create(user=people["alice"], scope=TokenScope.READ, expires_at=soon)
    assert api_token_verify(expiring_raw) == expiring
    later = soon + timedelta(seconds=1)
    assert api_token_check(expiring_raw, now=later) == (None, "This API token has expired.")

    people["bob"].is_active = False
    people["bob"].save()
    _, bobs = api_token_create(user=people["bob"], scope=TokenScope.READ)
    assert api_token_verify(bobs) is None


def test_revoking_is_for_the_owner_or_an_org_admin_and_keeps_the_first_time(people):
    token, _ = api_token_create(user=people["alice"], scope=TokenScope.READ)
    with pytest.raises(PermissionDenied):
        api_token_revoke(token=token, by_user=people["carol"])  # org-wide viewer, not admin
    api_token_revoke(token=token, by_user=people["root"])
    first = ApiToken.objects.get(pk=token.pk).revoked_at
    assert first is not None
    api_token_revoke(token=token, by_user=people["alice"])
    assert ApiToken.objects.get(pk=token.pk).revoked_at == first


def test_last_used_is_written_at_most_once_a_minute(people, django_assert_num_queries):
    token, raw = api_token_create(user=people["alice"], scope=TokenScope.READ)
    now = timezone.now()
    api_token_check(raw, now=now)
    assert ApiToken.objects.get(pk=token.pk).last_used_at == now
    # Within the minute: a lookup, no write.
    with django_assert_num_queries(1):
        api_token_check(raw, now=now + LAST_USED_RESOLUTION - timedelta(seconds=1))
    assert ApiToken.objects.get(pk=token.pk).last_used_at == now
    later = now + LAST_USED_RESOLUTION
    api_token_check(raw, now=later)
    assert ApiToken.objects.get(pk=token.pk).last_used_at == later


def test_writable_teams(people):
    assert writable_teams(people["alice"]) == {"netops"}
    assert writable_teams(people["bob"]) == {"support"}
    assert writable_teams(people["carol"]) == set()  # an org-wide viewer reads all, writes none
    assert writable_teams(people["dave"]) == set()
    assert writable_teams(people["root"]) is None
    people["carol"].profile.org_role = "admin"
    people["carol"].profile.save()
    people["carol"].refresh_from_db()
    assert writable_teams(people["carol"]) is None
    Membership.objects.create(
        user=people["alice"], team=Team.objects.get(slug="support"), role=TeamRole.VIEWER
    )
    assert writable_teams(people["alice"]) == {"netops", "support"}


# --- the command -------------------------------------------------------------------------------


def test_the_command_prints_the_token_once(people, capsys):
    call_command("create_api_token", "alice", "--scope", "ingest", "--name", "ci", "--expires-days", "30")
    out, err = capsys.readouterr()
    raw = out.strip()
    token = ApiToken.objects.get(user=people["alice"])
    assert api_token_verify(raw) == token
    assert (token.scope, token.name) == ("ingest", "ci")
    assert timedelta(days=29) < token.expires_at - timezone.now() <= timedelta(days=30)
    assert token.prefix in err and "only this once" in err and raw not in err


def test_the_command_defaults_to_a_read_token_without_expiry(people, capsys):
    call_command("create_api_token", "bob")
    token = ApiToken.objects.get(user=people["bob"])
    assert (token.scope, token.expires_at) == ("read", None)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nobody"], "create_api_token: no user named 'nobody'"),
        (["alice", "--expires-days", "0"], "create_api_token: --expires-days must be at least 1"),
    ],
)
def test_the_command_fails_with_one_line(people, capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        call_command("create_api_token", *args)
    assert exit_info.value.code == 1
    out, err = capsys.readouterr()
    assert out == "" and err.strip() == message
    assert not ApiToken.objects.exists()


def test_the_command_refuses_an_unknown_scope(people):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="invalid choice"):
        call_command("create_api_token", "alice", "--scope", "write")


# --- the page ----------------------------------------------------------------------------------


@pytest.fixture
def alice_client(client, people):
    assert client.login(username="alice", password=PASSWORD)
    return client


def test_the_page_requires_login(client, people):
    url = reverse("cc-tokens")
    response = client.get(url)
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    response = client.post(url, {"scope": "read"})
    assert response.status_code == 302
    assert not ApiToken.objects.exists()


def test_the_page_is_in_the_navigation(alice_client):
    html = alice_client.get(reverse("cc-overview")).content.decode()
    assert f'href="{reverse("cc-tokens")}"' in html and "API tokens" in html


def test_creating_a_token_shows_it_exactly_once(alice_client, people):
    url = reverse("cc-tokens")
    response = alice_client.post(url, {"name": "gateway", "scope": "ingest", "expires_days": "90"})
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    raw = response.context["new_token"]
    token = api_token_verify(raw)
    assert token is not None and token.user == people["alice"] and token.scope == "ingest"
    assert timedelta(days=89) < token.expires_at - timezone.now() <= timedelta(days=90)
    html = response.content.decode()
    assert raw in html and "shown only this once" in html
    # Afterwards the list shows its prefix, never the token.
    html = alice_client.get(url).content.decode()
    assert raw not in html
    assert f"{token.prefix}…" in html and "gateway" in html and "Ingest" in html


def test_a_token_without_expiry_and_bad_input(alice_client):
    url = reverse("cc-tokens")
    alice_client.post(url, {"scope": "read", "expires_days": ""})
    assert ApiToken.objects.get().expires_at is None
    response = alice_client.post(url, {"scope": "superuser"})
    assert response.status_code == 400 and response.context["new_token"] is None
    assert ApiToken.objects.count() == 1


def test_the_form_needs_the_csrf_token(people):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.login(username="alice", password=PASSWORD)
    assert client.post(reverse("cc-tokens"), {"scope": "read"}).status_code == 403
    assert not ApiToken.objects.exists()


def test_revoking_from_the_page(alice_client, people):
    token, raw = api_token_create(user=people["alice"], scope=TokenScope.READ, name="old")
    response = alice_client.post(reverse("cc-tokens"), {"revoke": token.pk}, follow=True)
    assert response.redirect_chain[-1][0] == reverse("cc-tokens")
    assert api_token_verify(raw) is None
    html = response.content.decode()
    assert "revoked" in html and f"{token.prefix}…" in html


def test_users_see_and_revoke_only_their_own_tokens(alice_client, people):
    bobs, bobs_raw = api_token_create(user=people["bob"], scope=TokenScope.INGEST, name="bobs-secret-name")
    html = alice_client.get(reverse("cc-tokens")).content.decode()
    assert bobs.prefix not in html and "bobs-secret-name" not in html
    for token_id in (bobs.pk, 999_999_999, "nope"):
        assert alice_client.post(reverse("cc-tokens"), {"revoke": token_id}).status_code == 404
    assert api_token_verify(bobs_raw) == bobs


# --- Bearer authentication on DRF --------------------------------------------------------------


def test_bearer_errors_are_401_with_a_challenge(people):
    api = APIClient()
    _, raw = api_token_create(user=people["alice"], scope=TokenScope.INGEST)
    revoked, revoked_raw = api_token_create(user=people["alice"], scope=TokenScope.INGEST)
    api_token_revoke(token=revoked, by_user=people["alice"])
    _, expired_raw = api_token_create(
        user=people["alice"], scope=TokenScope.INGEST, expires_at=timezone.now() - timedelta(seconds=1)
    )
    url = reverse("cc-api-usage")
    cases = {
        f"Bearer {revoked_raw}": "This API token has been revoked.",
        f"Bearer {expired_raw}": "This API token has expired.",
        "Bearer cc_wrong": "Invalid API token.",
        "Bearer": "Invalid Authorization header: expected 'Bearer TOKEN'.",
        f"Bearer {raw} extra": "Invalid Authorization header: expected 'Bearer TOKEN'.",
    }
    for header, message in cases.items():
        response = api.post(url, b"[]", content_type="application/json", HTTP_AUTHORIZATION=header)
        assert response.status_code == 401, header
        assert response.json() == {"detail": message}
        assert response["WWW-Authenticate"].startswith("Bearer")
    anonymous = api.post(url, b"[]", content_type="application/json")
    assert anonymous.status_code == 401 and anonymous["WWW-Authenticate"].startswith("Bearer")


def test_read_scope_accepts_tokens_and_sessions(people, rf):
    from django.contrib.auth.models import AnonymousUser
    from rest_framework.response import Response
    from rest_framework.views import APIView

    from costcenter.api_auth import ReadScope

    class Whoami(APIView):
        permission_classes = [ReadScope]

        def get(self, request):
            return Response({"user": request.user.username, "token": getattr(request.auth, "pk", None)})

    view = Whoami.as_view()
    for scope in (TokenScope.READ, TokenScope.INGEST):
        token, raw = api_token_create(user=people["bob"], scope=scope)
        response = view(rf.get("/whoami", HTTP_AUTHORIZATION=f"Bearer {raw}"))
        assert response.status_code == 200 and response.data == {"user": "bob", "token": token.pk}
    signed_in = rf.get("/whoami")
    signed_in.user = people["carol"]  # what the session middleware sets for a browser
    assert view(signed_in).data == {"user": "carol", "token": None}
    anonymous = rf.get("/whoami")
    anonymous.user = AnonymousUser()
    assert view(anonymous).status_code == 401
