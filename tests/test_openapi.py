"""The OpenAPI document is generated from the route table (issue 15, item 18): every body and
every query parameter a route takes is declared on the route, the document types them, and its
references resolve inside it."""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator

from cortexdb.server.openapi import document
from cortexdb.server.params import QUERY
from cortexdb.server.routes import BLUEPRINTS, declared
from tests.server_support import server

ROUTES = declared()
DOC = document(ROUTES)
OPERATIONS = [(path, method, op) for path, ops in DOC["paths"].items() for method, op in ops.items()]


def resolve(pointer: str):
    assert pointer.startswith("#/"), pointer
    node = DOC
    for part in pointer[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def refs(node):
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for value in node.values():
            yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r.method} {r.path}")
def test_every_route_declares_what_it_takes(route):
    if route.method in ("POST", "PUT", "PATCH"):
        assert route.upload or route.request_schema is not None, \
            f"{route.method} {route.path}: declare its body (Blueprint(body=...))"  # fmt: skip
    else:
        assert route.request_schema is None and not route.upload
    assert set(route.query) <= set(QUERY), f"{route.method} {route.path}: describe {set(route.query) - set(QUERY)} in params.QUERY"
    assert set(route.required_query) <= set(route.query)


def test_every_reference_resolves_inside_the_document():
    found = list(refs(DOC))
    assert found
    for ref in found:
        assert ref.startswith("#/components/schemas/"), ref
        resolve(ref)  # raises KeyError when it does not
    assert not any("$id" in schema for schema in DOC["components"]["schemas"].values())


def test_every_body_and_parameter_is_typed():
    for path, method, op in OPERATIONS:
        for parameter in op["parameters"]:
            schema = parameter["schema"]
            assert "type" in schema or "enum" in schema, (method, path, parameter)
            Draft202012Validator.check_schema(schema)
        body = op.get("requestBody")
        if method in ("post", "put"):
            assert body, (method, path)
            for content in body["content"].values():
                schema = content["schema"]
                Draft202012Validator.check_schema(schema)
                target = resolve(schema["$ref"]) if "$ref" in schema else schema
                assert target.get("type") in ("object", "string"), (method, path)
    recall = DOC["paths"]["/v1/recall"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert resolve(recall["$ref"])["properties"]["scope"] == {"$ref": "#/components/schemas/common/$defs/scope_path"}


def test_authentication_is_declared():
    schemes = DOC["components"]["securitySchemes"]
    assert schemes["bearer"] == {**schemes["bearer"], "type": "http", "scheme": "bearer"}
    assert schemes["actor"] == {**schemes["actor"], "type": "apiKey", "in": "header", "name": "X-Cortex-Actor"}
    assert DOC["security"] == [{"bearer": []}, {"actor": []}]
    assert DOC["paths"]["/v1/admin/version"]["get"]["security"] == []


def test_a_closed_inline_body_refuses_unknown_fields_at_every_depth():
    route = next(r for r in ROUTES if (r.method, r.path) == ("POST", "/v1/temporal/phrases"))
    assert route.fields == {"name": None, "pattern": None, "resolves_to": {"valid_during": None}}
    route = next(r for r in ROUTES if (r.method, r.path) == ("PUT", "/v1/scopes/members"))
    assert route.fields == {"members": [{"actor": None, "role": None}]}


def test_a_new_family_is_picked_up_from_the_blueprints():
    installed = [route for blueprint in BLUEPRINTS for route, _ in blueprint.routes]
    assert {(r.method, r.path) for r in installed} == {(r.method, r.path) for r in ROUTES if r.path != "/v1/lifecycle/ws"}


async def test_the_served_document_is_the_generated_one_and_undeclared_parameters_are_refused(tmp_path):
    async with server(tmp_path) as h:
        response = await h.client.get("/v1/openapi.json")
        assert json.loads(await response.get_data()) == json.loads(json.dumps(DOC))
        for path in ("/v1/events/evt_1?scope=org:acme", "/v1/admin/health?verbose=1",
                     "/v1/facts?scope=org:acme/user:alice&subjet=x"):  # fmt: skip
            response, error = await h.call("GET", path)
            assert response.status_code == 400 and error["error_code"] == "INVALID_QUERY", (path, error)
            assert error["details"]["field"] in ("scope", "verbose", "subjet")


def test_docs_api_md_is_the_generated_reference():
    """Regenerate with ``python -m cortexdb.server.apidoc > docs/api.md`` after changing a route."""
    from pathlib import Path

    from cortexdb.server.apidoc import generate

    committed = (Path(__file__).parent.parent / "docs" / "api.md").read_text()
    assert committed == generate(), "docs/api.md is stale: run python -m cortexdb.server.apidoc > docs/api.md"


def test_a_handler_still_naming_its_parameters_is_told_to_declare_them():
    from types import SimpleNamespace

    from werkzeug.datastructures import MultiDict

    from cortexdb.server.call import current, handling
    from cortexdb.server.params import query_args

    route = next(r for r in ROUTES if (r.method, r.path) == ("GET", "/v1/facts/timeline"))
    with current(SimpleNamespace(route=route)), handling(SimpleNamespace(args=MultiDict([("subject", "x")]))):
        assert query_args() == {"subject": "x"}
        with pytest.raises(TypeError, match=r"declare its query parameters on the route"):
            query_args(("scope", "subject"))
