"""Schemathesis against the live OpenAPI schema: the schema as a real HTTP server
(pytest-django's live_server) serves it, and every operation in it fuzzed from it, as a user in
all three roles over a brief with a revision. Every response must be no server error and conform
to the schema (status code, content type, headers, body). `-s` prints how many requests were sent.

(schemathesis.pytest's parametrize needs pytest < 9, so the test walks the operations itself.)
"""

from __future__ import annotations

import pytest
import schemathesis
from django.db import transaction
from hypothesis import HealthCheck, given, settings

from publishing.actions.briefs import check_create_brief
from publishing.actions.revisions import check_create_revision
from publishing.roles import Role
from tests.publishing.api.support import token_for

EXAMPLES_PER_OPERATION = 40
# Rules no schema states, so that a schema-valid request may still be refused: the domain's own
# 400s (a body longer than GALLEY_MAX_BODY_CHARS, a decision on a brief with no such revision) and
# 422 for an Idempotency-Key the fuzzer reuses with another body. Every response is still checked
# against the schema, and every refusal must be one the schema declares.
NOT_SCHEMA_RULES = [schemathesis.checks.positive_data_acceptance]


@pytest.mark.django_db(transaction=True)
def test_api_conforms_to_its_live_openapi_schema__no_server_error(live_server, make_user, capsys):
    user = make_user("fuzz", Role.EDITOR, Role.APPROVER, Role.OPERATOR)
    with transaction.atomic(durable=True):
        brief = check_create_brief(title="Harbour strike", source_material="Dockers walked out.", acting_user=user)
        check_create_revision(brief.public_id, base_number=0, title="Strike", body="Dockers.", acting_user=user)
    headers = {"Authorization": f"Bearer {token_for(user)}"}
    schema = schemathesis.openapi.from_url(f"{live_server.url}/api/v1/openapi.json")
    sent: dict[str, int] = {}
    failures: list[str] = []

    def fuzz(operation: schemathesis.APIOperation) -> None:
        label = operation.label
        sent[label] = 0

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        )
        def run(case: schemathesis.Case) -> None:
            sent[label] += 1
            case.call_and_validate(base_url=live_server.url, headers=headers, excluded_checks=NOT_SCHEMA_RULES)

        try:
            run()
        except BaseException as exc:  # collect every operation's failure, then fail once
            if isinstance(exc, KeyboardInterrupt):
                raise
            failures.append(f"{label}: {exc}")

    for result in schema.get_all_operations():
        fuzz(result.ok())

    with capsys.disabled():
        print(f"\nschemathesis: {sum(sent.values())} generated requests over {len(sent)} operations")
    assert len(sent) >= 15
    assert not failures, "\n\n".join(failures)
