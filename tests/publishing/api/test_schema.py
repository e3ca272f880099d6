"""Schemathesis against the live OpenAPI schema: the schema as a real HTTP server
(pytest-django's live_server) serves it, and every operation in it fuzzed from it, as a user in
all three roles over a brief with a revision. Every response must be no server error and conform
to the schema (status code, content type, headers, body), and every problem detail must speak of
the API, not of a web page. A second run sends what the schema forbids (a body that is no object,
a field it does not name, a value outside its pattern): each must be refused with a 4xx, or the
schema does not state what the server accepts. `-s` prints how many requests were sent.

(schemathesis.pytest's parametrize needs pytest < 9, so the test walks the operations itself.)
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
import schemathesis
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from schemathesis.generation import GenerationMode

from publishing.actions.briefs import check_create_brief
from publishing.actions.revisions import check_create_revision
from publishing.roles import Role
from tests.publishing.api.support import WEB_PAGE_WORDS, token_for

EXAMPLES_PER_OPERATION = 40
NEGATIVE_EXAMPLES_PER_OPERATION = 25
# Rules no schema states, so that a schema-valid request may still be refused: the domain's own
# 400s (a body longer than GALLEY_MAX_BODY_CHARS, a decision on a brief with no such revision) and
# 422 for an Idempotency-Key the fuzzer reuses with another body. Every response is still checked
# against the schema, and every refusal must be one the schema declares.
NOT_SCHEMA_RULES = [schemathesis.checks.positive_data_acceptance]


def problem_details_speak_api(ctx: Any, response: schemathesis.Response, case: schemathesis.Case) -> None:
    if response.headers.get("content-type", [""])[0].startswith("application/problem+json"):
        detail = str(json.loads(response.content).get("detail", "")).lower()
        spoken = [word for word in WEB_PAGE_WORDS if word in detail]
        assert not spoken, f"the problem detail speaks of a web page ({spoken[0]!r}): {detail}"


@pytest.mark.django_db(transaction=True)
def test_api_conforms_to_its_live_openapi_schema__no_server_error(live_server, make_user, capsys):
    sent, failures = fuzz_every_operation(live_server, make_user, GenerationMode.POSITIVE, EXAMPLES_PER_OPERATION)

    with capsys.disabled():
        print(f"\nschemathesis: {sum(sent.values())} generated requests over {len(sent)} operations")
    assert len(sent) >= 15
    assert not failures, "\n\n".join(failures)


@pytest.mark.django_db(transaction=True)
def test_api_refuses_what_its_schema_forbids__a_body_that_is_no_object_included(live_server, make_user, capsys):
    # Schemathesis' negative mode: bodies of another type than the schema's object (the string that
    # made a brief "Hello World Source?"), fields it does not name, values outside its patterns and
    # bounds; negative_data_rejection (on by default) fails any of them answered 2xx.
    sent, failures = fuzz_every_operation(
        live_server, make_user, GenerationMode.NEGATIVE, NEGATIVE_EXAMPLES_PER_OPERATION
    )

    with capsys.disabled():
        print(f"\nschemathesis (negative): {sum(sent.values())} generated requests over {len(sent)} operations")
    assert len(sent) >= 6
    assert not failures, "\n\n".join(failures)


def fuzz_every_operation(
    live_server: Any, make_user: Any, mode: GenerationMode, examples: int
) -> tuple[dict[str, int], list[str]]:
    """Every operation of the live schema fuzzed in `mode` (NEGATIVE: those that read a body): requests
    sent per operation, and failures."""
    negative = mode is GenerationMode.NEGATIVE
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
        # Negative runs break the body only: the headers are fixed as sent (a broken token or key is
        # refused before the body is read, and would hide what the body does), and so is the query.
        fixed = {"headers": {**headers, "Idempotency-Key": "fixed"}, "query": {}} if negative else {}

        @given(case=operation.as_strategy(generation_mode=mode, **fixed))
        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        )
        def run(case: schemathesis.Case) -> None:
            sent[label] += 1
            case.call_and_validate(
                base_url=live_server.url,
                # A fresh key per request: a reused one answers 422 and would hide what the body does.
                headers={**headers, "Idempotency-Key": str(uuid.uuid4())} if negative else headers,
                excluded_checks=NOT_SCHEMA_RULES,
                additional_checks=[problem_details_speak_api],
            )

        try:
            run()
        except BaseException as exc:  # collect every operation's failure, then fail once
            if isinstance(exc, KeyboardInterrupt):
                raise
            failures.append(f"{label}: {exc}")

    for result in schema.get_all_operations():
        operation = result.ok()
        if not negative or operation.body:
            fuzz(operation)
    return sent, failures
