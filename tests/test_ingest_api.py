"""POST /api/v1/usage/: auth and scopes, counts, idempotency, NDJSON rejects, gzip, size cap, teams."""

from __future__ import annotations

import gzip
import json

import pytest
from django.db import connection
from django.urls import reverse
from rest_framework.test import APIClient

from costcenter.models import Team, TokenScope
from costcenter.tokens import api_token_create
from ingest.models import Attempt, IngestRun, RejectedRecord, Source, SourceKind
from tests.ingest_helpers import canonical

pytestmark = pytest.mark.django_db

URL = "/api/v1/usage/"


@pytest.fixture(autouse=True)
def no_attempts_from_other_tests(django_db_setup, django_db_blocker):
    """``ingest_attempt`` is unmanaged, so transactional tests' flushes leave its rows behind."""

    def clear():
        with django_db_blocker.unblock(), connection.cursor() as cursor:
            cursor.execute("DELETE FROM ingest_attempt")

    clear()
    yield
    clear()


def test_the_url_is_named():
    assert reverse("cc-api-usage") == URL


def client_for(user, scope=TokenScope.INGEST) -> APIClient:
    _, raw = api_token_create(user=user, scope=scope)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return api


def post(api: APIClient, body: bytes | list, content_type="application/json", **extra):
    if isinstance(body, list):
        body = json.dumps(body).encode()
    return api.post(URL, body, content_type=content_type, **extra)


def ndjson(lines: list[dict | str]) -> bytes:
    return "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines).encode()


def netops(count: int, start: int = 0) -> list[dict]:
    # canonical(i) cycles through three teams; i multiple of 3 is netops, alice's team.
    return [canonical(3 * i) for i in range(start, start + count)]


@pytest.fixture
def alice(people):
    return client_for(people["alice"])


def test_anonymous_is_401_and_read_tokens_are_403(people):
    anonymous = post(APIClient(), netops(1))
    assert anonymous.status_code == 401 and anonymous["WWW-Authenticate"].startswith("Bearer")
    read_only = post(client_for(people["alice"], TokenScope.READ), netops(1))
    assert read_only.status_code == 403
    assert read_only.json() == {"detail": "Writing usage needs an API token with the 'ingest' scope."}
    assert Attempt.objects.count() == 0


def test_a_browser_session_cannot_write_usage(client, people):
    from tests.conftest import PASSWORD

    assert client.login(username="root", password=PASSWORD)
    response = client.post(URL, json.dumps(netops(1)), content_type="application/json")
    assert response.status_code == 401  # sessions are not an authenticator here
    assert Attempt.objects.count() == 0


def test_an_ingest_token_writes_records_and_counts_them(alice):
    response = post(alice, netops(5))
    assert response.status_code == 200
    assert response.json() == {
        "accepted": 5,
        "duplicate": 0,
        "rejected": 0,
        "rejects": [],
        "rejects_not_shown": 0,
        "reasons": {},
    }
    assert Attempt.objects.count() == 5
    netops_id = Team.objects.get(slug="netops").pk
    assert set(Attempt.objects.values_list("team_id", flat=True)) == {netops_id}
    source = Source.objects.get(name="api")
    assert source.kind == SourceKind.HTTP
    run = IngestRun.objects.get(source=source)
    assert (run.accepted, run.rejected) == (5, 0)
    assert run.origin.startswith("request POST /api/v1/usage/ by alice (token cc_")


def test_resending_the_same_body_adds_nothing(alice):
    body = netops(4)
    assert post(alice, body).json()["accepted"] == 4
    again = post(alice, body).json()
    assert (again["accepted"], again["duplicate"], again["rejected"]) == (0, 4, 0)
    assert Attempt.objects.count() == 4


def test_the_source_query_parameter(alice):
    assert (
        alice.post(URL + "?source=gateway-eu", json.dumps(netops(2)), content_type="application/json").json()[
            "accepted"
        ]
        == 2
    )
    # Another source is another key space: the same records count again.
    assert post(alice, netops(2)).json()["accepted"] == 2
    assert set(Source.objects.values_list("name", flat=True)) == {"gateway-eu", "api"}
    bad = alice.post(URL + "?source=../etc", b"[]", content_type="application/json")
    assert bad.status_code == 400 and "source" in bad.json()["detail"]


def test_ndjson_with_a_malformed_line_keeps_the_good_ones(alice):
    good = netops(3)
    body = ndjson(
        [good[0], '{"task_id": "t-9", "attempt": ', good[1], {"task_id": "t-10", "attempt": 1}, good[2]]
    )
    response = post(alice, body, content_type="application/x-ndjson")
    assert response.status_code == 200
    result = response.json()
    assert (result["accepted"], result["duplicate"], result["rejected"]) == (3, 0, 2)
    by_location = {reject["location"]: reject for reject in result["rejects"]}
    assert by_location["line 2"]["reason"].startswith("not valid JSON")
    assert by_location["line 4"]["reason"]  # a well-formed object missing required fields
    assert '"task_id":"t-10"' in by_location["line 4"]["excerpt"]
    assert result["rejects_not_shown"] == 0
    assert Attempt.objects.count() == 3
    assert RejectedRecord.objects.count() == 2


def test_a_json_array_with_a_bad_record_names_it(alice):
    records = netops(3)
    records[1] = {**records[1], "usage": {"prompt_tokens": -5, "completion_tokens": 1}}
    result = post(alice, records).json()
    assert (result["accepted"], result["rejected"]) == (2, 1)
    [reject] = result["rejects"]
    assert reject["location"] == "item 2 of line 1"
    assert reject["reason"].startswith("usage.prompt_tokens")


def test_a_body_that_is_not_json_at_all_is_400(alice):
    for body in (b"hello", b"", b"   \n", b"\x00\x01binary", b'"just a string"'):
        response = post(alice, body)
        assert response.status_code == 400, body
        assert "JSON" in response.json()["detail"]
    assert not IngestRun.objects.exists()


def test_other_content_types_are_415(alice):
    response = post(alice, ndjson(netops(1)), content_type="text/csv")
    assert response.status_code == 415
    assert "application/x-ndjson" in response.json()["detail"]


def test_a_gzip_body(alice):
    body = gzip.compress(ndjson(netops(20)))
    response = post(alice, body, content_type="application/x-ndjson", HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 200 and response.json()["accepted"] == 20
    assert Attempt.objects.count() == 20


def test_corrupt_gzip_and_unknown_encodings(alice):
    truncated = gzip.compress(ndjson(netops(20)))[:-30]
    response = post(alice, truncated, HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 400 and "gzip" in response.json()["detail"]
    assert post(alice, b"[]", HTTP_CONTENT_ENCODING="br").status_code == 415
    assert Attempt.objects.count() == 0


def test_a_body_over_the_cap_is_413(alice, settings):
    settings.INGEST_MAX_BODY_BYTES = 2000
    body = ndjson(netops(20))
    assert len(body) > 2000
    response = post(alice, body, content_type="application/x-ndjson")
    assert response.status_code == 413
    assert "larger than 2,000 bytes" in response.json()["detail"]
    # A small gzip that inflates past the cap is refused too (no decompression bombs).
    bomb = gzip.compress(b"[" + b" " * 100_000 + b"]")
    assert len(bomb) < 2000
    response = post(alice, bomb, HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 413 and "decompressed" in response.json()["detail"]
    assert Attempt.objects.count() == 0


def test_bodies_above_djangos_upload_limit_are_read(alice, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000  # HttpRequest.body would refuse this body
    response = post(alice, ndjson(netops(30)), content_type="application/x-ndjson")
    assert response.status_code == 200 and response.json()["accepted"] == 30


def test_a_team_token_cannot_write_another_teams_usage(alice):
    records = [
        canonical(0),
        canonical(1),
        canonical(2),
        canonical(3, team=None),
    ]  # netops, support, search, none
    records[3].pop("team")
    result = post(alice, records).json()
    assert (result["accepted"], result["rejected"]) == (1, 3)
    reasons = [reject["reason"] for reject in result["rejects"]]
    assert all(reason.startswith("team: this token may write usage of teams netops") for reason in reasons)
    assert any("'support'" in reason for reason in reasons) and any(
        "(no team)" in reason for reason in reasons
    )
    assert Attempt.objects.count() == 1
    assert set(Attempt.objects.values_list("team_id", flat=True)) == {Team.objects.get(slug="netops").pk}


def test_an_org_admin_writes_any_team(people):
    records = [canonical(i) for i in range(6)]
    records.append({**canonical(6, request_id="req-no-team"), "team": None})
    result = post(client_for(people["root"]), records).json()
    assert (result["accepted"], result["rejected"]) == (7, 0)
    assert Attempt.objects.values("team_id").distinct().count() == 4  # three teams and "no team"


def test_an_org_viewer_reads_all_but_writes_nothing(people):
    result = post(client_for(people["carol"]), netops(2)).json()
    assert (result["accepted"], result["rejected"]) == (0, 2)


def test_the_rejects_list_is_capped(alice):
    body = ndjson(['{"task_id": "t",, "attempt": 1}'] * 130)
    result = post(alice, body, content_type="application/x-ndjson").json()
    assert result["rejected"] == 130
    assert len(result["rejects"]) == 100 and result["rejects_not_shown"] == 30
    assert sum(result["reasons"].values()) == 130


def test_throttling_per_token(people, monkeypatch):
    from costcenter.api_auth import TokenRateThrottle

    monkeypatch.setattr(TokenRateThrottle, "THROTTLE_RATES", {"api_token": "2/min"})
    first, second = client_for(people["alice"]), client_for(people["alice"])
    assert [post(first, []).status_code for _ in range(3)] == [200, 200, 429]
    assert post(second, []).status_code == 200  # each token has its own budget
    monkeypatch.setattr(TokenRateThrottle, "THROTTLE_RATES", {"api_token": "lots"})
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="API_THROTTLE_RATE"):
        post(second, [])
