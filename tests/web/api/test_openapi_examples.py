"""Every request body the OpenAPI schema offers (what Swagger UI's "Try it out" fills in) is a valid
request that succeeds as shown (issue 60 item 8: ``POST /api/seed``'s pre-filled body answered 422).

:func:`swagger_bodies` takes a route's bodies as Swagger UI 5 does: the media type's ``example`` or
``examples``, else the schema's ``example`` or ``examples``, else the body it generates from each
property's own example or default (and, failing those, from the type and bounds). Each is sent to its
route on the tiny model; a job must also end ``done``. tests/web/ui/test_browser_docs.py checks that
the body Swagger UI really fills in is the first of these."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from petri.web.app import create_app
from tests.web.api.test_job_api import poll_final


def resolve(schema: dict, spec: dict) -> dict:
    """``schema`` with its ``$ref`` (``#/components/schemas/...``) followed."""
    while "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def generated(schema: dict, spec: dict):
    """The value Swagger UI 5 generates for ``schema`` when no example is given: the schema's
    ``example``, first of ``examples``, ``default`` or ``const``; else the first ``anyOf``/``oneOf``
    branch; an object's every property; a one-item array; a number's ``minimum`` if truthy, else its
    ``maximum``, else 0 (Swagger UI's JavaScript test, so a minimum of 0 gives the maximum)."""
    schema = resolve(schema, spec)
    if "example" in schema:
        return schema["example"]
    if schema.get("examples"):
        return schema["examples"][0]
    for key in ("default", "const"):
        if key in schema:
            return schema[key]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return generated(schema[key][0], spec)
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        if "properties" in schema:
            return {name: generated(prop, spec) for name, prop in schema["properties"].items()}
        extra = schema.get("additionalProperties")
        value = generated(extra, spec) if isinstance(extra, dict) else {}
        return {f"additionalProp{i}": value for i in range(1, 4 if isinstance(extra, dict) else 2)}
    if kind == "array":
        return [generated(schema.get("items", {}), spec)]
    if kind in ("integer", "number"):  # JSON has one number type: 1000000.0 is written 1000000
        bound = schema.get("minimum") or schema.get("maximum") or 0
        return int(bound) if kind == "integer" or bound == int(bound) else bound
    return {"boolean": True, "null": None}.get(kind, "string")


def swagger_bodies(operation: dict, spec: dict) -> list:
    """The JSON bodies the schema offers for ``operation``, the one Swagger UI fills in first."""
    media = operation["requestBody"]["content"]["application/json"]
    if "example" in media:
        return [media["example"]]
    if media.get("examples"):
        return [example["value"] for example in media["examples"].values()]
    schema = resolve(media["schema"], spec)
    if "example" in schema:
        return [schema["example"]]
    if schema.get("examples"):
        return list(schema["examples"])
    return [generated(schema, spec)]


def test_the_walker_generates_what_swagger_ui_filled_in_before_the_fix():
    """A hand-written schema shaped like the old ``SeedRequest``: the walker gives the body the
    issue's Swagger UI filled in (both ``event`` and ``events``, ``positions: [1000000]``)."""
    spec = {"components": {"schemas": {"EventIn": {"type": "object", "properties": {
        "event": {"type": "string"}, "group": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}}}}
    schema = {"type": "object", "properties": {
        "concepts": {"type": "array", "items": {"type": "string"}, "examples": [["order", "person"]]},
        "event": {"anyOf": [{"type": "string"}, {"type": "null"}], "examples": ["An event."]},
        "events": {"anyOf": [{"type": "array", "items": {"$ref": "#/components/schemas/EventIn"}}, {"type": "null"}]},
        "positions": {"anyOf": [{"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 1000000}},
                                {"type": "null"}]},
        "samples": {"type": "integer", "minimum": 1, "maximum": 64, "default": 8},
        "steps": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 256}, {"type": "null"}]},
        "ask_if": {"type": "object", "additionalProperties": {"type": "string"}},
        "study": {"type": "object", "additionalProperties": True}}}
    operation = {"requestBody": {"content": {"application/json": {"schema": schema}}}}
    assert swagger_bodies(operation, spec) == [{
        "concepts": ["order", "person"], "event": "An event.", "events": [{"event": "string", "group": "string"}],
        "positions": [1000000], "samples": 8, "steps": 1,
        "ask_if": {"additionalProp1": "string", "additionalProp2": "string", "additionalProp3": "string"},
        "study": {"additionalProp1": {}}}]


@pytest.fixture(scope="module")
def client(served):
    with TestClient(create_app(served, ui=False)) as c:
        yield c


def request_bodies(spec: dict) -> list[tuple[str, str, object]]:
    """(method, path, body) of every body every route of ``spec`` offers."""
    return [(method, path, body) for path, operations in spec["paths"].items()
            for method, operation in operations.items() if "requestBody" in operation
            for body in swagger_bodies(operation, spec)]


def test_every_request_body_example_succeeds_as_shown(client):
    spec = client.get("/openapi.json").json()
    sent = request_bodies(spec)
    routes = {(method, path) for method, path, _ in sent}
    assert {("post", "/api/seed"), ("post", "/api/jobs/seed"), ("post", "/api/study"), ("post", "/api/jobs/study"),
            ("post", "/api/probe")} <= routes, routes
    for method, path, body in sent:
        answer = client.request(method, path, json=body)
        assert 200 <= answer.status_code < 300, f"{method.upper()} {path} {body}\n→ {answer.status_code} {answer.text}"
        if answer.status_code == 202:
            state = poll_final(client, answer.json()["job_id"])
            assert state["status"] == "done", f"{method.upper()} {path} {body}\n→ job {state}"
