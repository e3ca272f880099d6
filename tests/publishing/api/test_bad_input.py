"""Bad input to the JSON API (issue 18 item 6): every body is an object of the documented schema or
a 400 problem with nothing written; the OpenAPI schema states the constraints the server enforces;
problem details speak of the API, not of a web page."""

from __future__ import annotations

import json

import pytest

from publishing.models import Brief, Revision
from tests.publishing.api.support import WEB_PAGE_WORDS, ApiClient, problem, token_for
from tests.workers.test_admin import dead_letter, key_conflict
from workers.models import AuditEvent, Conflict, Operation

pytestmark = pytest.mark.django_db

NOT_OBJECTS = {
    "string": (b'"hello world source?"', "a string"),  # the report's: a brief titled "Hello World Source?"
    "array": (b'["Harbour strike"]', "an array"),
    "number": (b"42", "a number"),
    "null": (b"null", "null"),
    "boolean": (b"true", "a boolean"),
}


@pytest.fixture
def everyone(make_user):
    from publishing.roles import Role

    user = make_user("fuzz", Role.EDITOR, Role.APPROVER, Role.OPERATOR)
    return ApiClient(token_for(user))


def body_endpoints(api: ApiClient) -> dict[str, str]:
    """Every endpoint that reads a body, on things that exist, so that only the body can be wrong."""
    brief = json.loads(api.post("/briefs", {"title": "Harbour strike", "source_material": "Dockers."}).content)
    api.post(f"/briefs/{brief['id']}/revisions", {"base_revision": 0, "title": "Strike", "body": "Dockers."})
    operation = dead_letter("test:dead")
    conflict = key_conflict("test:conflicted")
    return {
        "create brief": "/briefs",
        "replace source": f"/briefs/{brief['id']}/source",
        "write revision": f"/briefs/{brief['id']}/revisions",
        "decide": f"/briefs/{brief['id']}/revisions/1/decisions",
        "cancel": f"/operations/{operation.id}/cancel",
        "resolve": f"/conflicts/{conflict.id}/resolve",
    }


def written() -> tuple[int, ...]:
    return (
        Brief.objects.count(),
        Revision.objects.count(),
        AuditEvent.objects.count(),
        Operation.objects.filter(status="cancelled").count(),
        Conflict.objects.filter(resolved_at__isnull=False).count(),
    )


@pytest.mark.parametrize("kind", NOT_OBJECTS)
def test_api_body__not_a_json_object__400_problem_and_nothing_written(kind, everyone):
    raw, named = NOT_OBJECTS[kind]
    endpoints = body_endpoints(everyone)
    before = written()

    for name, path in endpoints.items():
        response = everyone.post(path, raw=raw)
        assert response.status_code == 400, (name, response.content)
        body = problem(response)
        assert body["type"] == "urn:galley:problem:invalid-request"
        assert body["detail"] == f"body: The body must be a JSON object with the documented fields, not {named}."
    assert written() == before
    assert not Brief.objects.filter(title="Hello World Source?").exists()


def test_api_body__a_field_the_schema_does_not_name__400_naming_it(everyone):
    response = everyone.post("/briefs", {"title": "Harbour strike", "soruce_material": "Dockers walked out."})

    assert response.status_code == 400
    assert problem(response)["detail"] == "soruce_material: Extra inputs are not permitted"
    assert not Brief.objects.exists()


def test_api_decision__payload_hash_not_a_sha256__400_as_the_schema_says(everyone):
    endpoints = body_endpoints(everyone)
    for payload_hash in ("", "abc", "A" * 64, "0" * 63 + "g"):
        response = everyone.post(endpoints["decide"], {"decision": "approved", "payload_hash": payload_hash})
        assert response.status_code == 400, response.content
        assert problem(response)["detail"].startswith("payload_hash: String should match pattern")


def test_api_list__cursor_outside_the_schema__400_as_the_schema_says(everyone):
    for cursor in ("not a cursor!", "x" * 201):
        response = everyone.get("/briefs", cursor=cursor)
        assert response.status_code == 400
        assert problem(response)["detail"].startswith("cursor: String should")


def test_openapi_schema__states_the_constraints_the_server_enforces(client):
    schema = json.loads(client.get("/api/v1/openapi.json").content)
    components = schema["components"]["schemas"]

    for body in ("BriefIn", "SourceMaterialIn", "RevisionIn", "DecisionIn", "CancelIn", "ResolveIn"):
        assert components[body]["additionalProperties"] is False, body
    assert components["DecisionIn"]["properties"]["payload_hash"]["pattern"] == "^[0-9a-f]{64}$"
    assert components["CancelIn"]["properties"]["reason"]["maxLength"] == 1000
    cursor = next(p for p in schema["paths"]["/api/v1/briefs"]["get"]["parameters"] if p["name"] == "cursor")
    assert {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,200}$"} in cursor["schema"]["anyOf"]
    # Lists are pages alike: the conflicts and a brief's revisions like the operations.
    for path in ("/api/v1/operations", "/api/v1/conflicts", "/api/v1/briefs/{brief_id}/revisions"):
        listing = schema["paths"][path]["get"]
        assert {p["name"] for p in listing["parameters"]} >= {"before", "limit"}, path
        page = listing["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
        assert set(components[page]["properties"]) == {"items", "next_cursor"}, path
    # A database outage is a declared answer of every endpoint.
    for operations in schema["paths"].values():
        for operation in operations.values():
            assert "application/problem+json" in operation["responses"]["503"]["content"]


def test_api_problem_details__a_revision_conflict_speaks_api_not_web_page_words(everyone):
    endpoints = body_endpoints(everyone)
    path = endpoints["write revision"]
    everyone.post(path, {"base_revision": 1, "title": "Strike", "body": "The port is closed."})

    conflict = everyone.post(path, {"base_revision": 1, "title": "Strike", "body": "My edit."})

    assert conflict.status_code == 409
    detail = problem(conflict)["detail"]
    assert not [word for word in WEB_PAGE_WORDS if word in detail.lower()], detail
    assert "base_revision 2" in detail
