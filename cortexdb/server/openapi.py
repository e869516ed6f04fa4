"""``GET /v1/openapi.json``: an OpenAPI 3.1 document generated from the route declarations
(``call.Blueprint``), so it cannot drift from what the server takes.

Each operation carries its path and query parameters (``Route.query``, typed by
``params.QUERY``), its JSON body's schema (``Route.request_schema``: a shipped schema by name, or
an inline one) and its answer's.  The shipped JSON Schemas (draft 2020-12, OpenAPI 3.1's own
dialect) are included under ``components.schemas`` without their ``$id``, and every reference
points inside the document (``#/components/schemas/<name>...``), so standard tools resolve it
offline.  Authentication: a bearer token, or — where the preset allows unsigned callers
(dev_local) — the ``X-Cortex-Actor`` header alone; with a token, ``X-Cortex-Actor`` may name the
token's subject (it must match).
"""

from __future__ import annotations

import re
from typing import Any

from .. import __version__, schemas
from .params import QUERY

_PARAM = re.compile(r"\{([a-z_]+)(?::path)?\}")
_FILE_REF = re.compile(r"^([a-z_]+)\.schema\.json(?:#(.*))?$")
_ID_REF = re.compile(r"^https://schemas\.cortexdb\.ai/v1/([a-z_]+)\.schema\.json(?:#(.*))?$")
BYTES = {"type": "string", "contentMediaType": "application/octet-stream"}
SECURITY = [{"bearer": []}, {"actor": []}]
SECURITY_SCHEMES = {
    "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "PASETO v4.public or JWT (RS256/ES256)",
               "description": "A signed token; its `sub` is the caller."},
    "actor": {"type": "apiKey", "in": "header", "name": "X-Cortex-Actor",
              "description": "The caller as `type:id` (e.g. `user:alice`). Alone, it authenticates only "
                             "where the deployment preset accepts unsigned callers (dev_local); beside a "
                             "token it must name the token's subject."},
}  # fmt: skip


def component(name: str, pointer: str | None = None) -> dict[str, Any]:
    """A reference to a shipped schema (or a part of it) inside the document."""
    return {"$ref": f"#/components/schemas/{name}{pointer or ''}"}


def localize(node: Any, home: str | None = None) -> Any:
    """``node`` with every ``$ref`` pointing inside the document: ``common.schema.json#/$defs/x``,
    a schema's ``$id`` URL, or — within the schema ``home`` — ``#/$defs/x``."""
    if isinstance(node, list):
        return [localize(value, home) for value in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str):
            match = _FILE_REF.match(value) or _ID_REF.match(value)
            if match:
                value = component(match.group(1), match.group(2))["$ref"]
            elif value.startswith("#/") and not value.startswith("#/components/") and home:
                value = component(home, value[1:])["$ref"]
            out[key] = value
        elif key in ("$id", "$schema") and home is not None and isinstance(value, str):
            continue  # an embedded schema's base is the document
        else:
            out[key] = localize(value, home)
    return out


def _schema(spec: str | dict[str, Any]) -> dict[str, Any]:
    return component(spec) if isinstance(spec, str) else localize(spec)


def _response_schema(name: str | None) -> dict[str, Any] | None:
    if name is None:
        return None
    if name.startswith("page:"):
        return {"allOf": [component("page"), {"properties": {"items": {"items": component(name[5:])}}}]}
    return component(name)


def operation_id(method: str, path: str) -> str:
    name = path.strip("/").replace("/", "_").replace("{", "").replace("}", "").replace("-", "_").replace(".", "_")
    return f"{method.lower()}_{name}"


def parameters(route: Any) -> list[dict[str, Any]]:
    out = [{"name": name, "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}
           for name in _PARAM.findall(route.path)]  # fmt: skip
    for name in route.query:
        if name not in QUERY:
            raise KeyError(f"{route.method} {route.path} declares the query parameter {name!r}, "
                           "which params.QUERY does not describe")  # fmt: skip
        schema = dict(QUERY[name])
        description = schema.pop("description", None)
        parameter = {"name": name, "in": "query", "required": name in route.required_query, "schema": schema}
        if description:
            parameter["description"] = description
        out.append(parameter)
    return out


def request_body(route: Any) -> dict[str, Any] | None:
    if route.upload:  # docs/blobs.md, docs/import-export.md: a file in the field `file`, or raw bytes
        content = {"multipart/form-data": {"schema": {"type": "object", "required": ["file"],
                                                      "properties": {"file": BYTES}}}}  # fmt: skip
        if route.request_schema is not None:  # an import's JSON request, the file inside it
            content["application/json"] = {"schema": _schema(route.request_schema)}
        content["*/*"] = {"schema": BYTES}
        return {"required": True, "content": content}
    if route.request_schema is None:
        return None
    return {"required": route.body_required,
            "content": {"application/json": {"schema": _schema(route.request_schema)}}}  # fmt: skip


def document(routes: list[Any]) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    error = {"description": "Error envelope (§6.6)",
             "content": {"application/json": {"schema": component("error_envelope")}}}  # fmt: skip
    for route in routes:
        path = _PARAM.sub(r"{\1}", route.path)
        operation: dict[str, Any] = {
            "operationId": operation_id(route.method, path),
            "summary": route.summary,
            "x-cortex-stability": route.tier,
            "parameters": parameters(route),
            "responses": {"default": error},
        }
        if route.open:
            operation["security"] = []
        body = request_body(route)
        if body is not None:
            operation["requestBody"] = body
        ok: dict[str, Any] = {"description": "Success"}
        if route.stream:
            ok["content"] = {"text/event-stream": {"schema": {"type": "string"}}}
        elif route.response_schema == "bytes":  # the raw bytes of a blob, with their own type
            ok["content"] = {"*/*": {"schema": BYTES}}
        elif route.status != 204:
            schema = _response_schema(route.response_schema) or {"type": "object"}
            ok["content"] = {"application/json": {"schema": schema}}
        operation["responses"][str(route.status)] = ok
        paths.setdefault(path, {})[route.method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "info": {"title": "CortexDB API", "version": __version__,
                 "description": "A memory database for AI agents (reference API v1)."},  # fmt: skip
        "servers": [{"url": "/"}],
        "security": SECURITY,
        "paths": paths,
        "components": {
            "securitySchemes": SECURITY_SCHEMES,
            "schemas": {name: localize(schemas.load(name), name) for name in schemas.NAMES},
        },
    }
