"""Schemathesis over /api/schema/ against the running app: generated requests to every GET
operation, as two users of different teams (and an org-wide viewer), find no server error and no
response that breaks the schema (status, content type, body).

Bounded so that it runs in CI in well under a minute: a few examples per operation and user.
"""

from __future__ import annotations

import pytest
import requests
from hypothesis import HealthCheck, Phase, given, settings

from tests.test_api_support import bearer, build_people, build_world

pytestmark = pytest.mark.django_db(transaction=True)

EXAMPLES = 12
CHECKS_NAMES = ("not_a_server_error", "response_schema_conformance", "content_type_conformance")


def _operations(schema):
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.method.upper() == "GET":
            yield operation


def test_generated_requests_find_no_server_error_and_no_schema_violation(live_server):
    import schemathesis
    from schemathesis import checks

    build_world()
    people = build_people()
    tokens = {who: bearer(people[who])["HTTP_AUTHORIZATION"] for who in ("alice", "bob", "carol")}
    raw = requests.get(
        f"{live_server.url}/api/schema/?format=json", headers={"Authorization": tokens["carol"]}, timeout=30
    )
    assert raw.status_code == 200
    schema = schemathesis.openapi.from_dict(raw.json())
    schema.config.update(base_url=live_server.url)
    chosen = [getattr(checks, name) for name in CHECKS_NAMES]
    operations = list(_operations(schema))
    assert len(operations) >= 20
    failures = []

    def exercise(operation, token):
        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        def run(case):
            response = case.call(headers={"Authorization": token}, timeout=30)
            case.validate_response(response, checks=chosen)

        run()

    for operation in operations:
        for who, token in tokens.items():
            try:
                exercise(operation, token)
            except Exception as error:  # noqa: BLE001 - collect every operation's failure, then report
                failures.append(f"{operation.method.upper()} {operation.path} as {who}: {error}")
    assert not failures, "\n\n".join(failures)
