"""``GET /v1/openapi.json``: an OpenAPI 3.1 document built from the route declarations.

Bodies and responses reference the shipped JSON Schemas (draft 2020-12, which OpenAPI 3.1
uses natively) by their ``$id``; the schemas themselves are included under
``components.schemas`` so the document is self-contained.
"""

from __future__ import annotations

import re
from typing import Any

from .. import __version__, schemas

_PARAM = re.compile(r"\{([a-z_]+)(?::path)?\}")
BYTES = {"type": "string", "contentMediaType": "application/octet-stream"}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": schemas.load(name)["$id"]}


def _response_schema(name: str | None) -> dict[str, Any] | None:
    if name is None:
        return None
    if name.startswith("page:"):
        return {"allOf": [_ref("page"), {"properties": {"items": {"items": _ref(name[5:])}}}]}
    return _ref(name)


def document(routes: list[Any]) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    error = {"description": "Error envelope (§6.6)",
             "content": {"application/json": {"schema": _ref("error_envelope")}}}  # fmt: skip
    for route in routes:
        path = _PARAM.sub(r"{\1}", route.path)
        operation: dict[str, Any] = {
            "operationId": f"{route.method.lower()}_{path.strip('/').replace('/', '_').replace('{', '').replace('}', '').replace('-', '_').replace('.', '_')}",
            "summary": route.summary,
            "x-cortex-stability": route.tier,
            "parameters": [{"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                           for name in _PARAM.findall(route.path)],
            "responses": {"default": error},
        }  # fmt: skip
        if route.open:
            operation["security"] = []
        if route.upload:  # docs/blobs.md: a file in the field `file`, or raw bytes
            operation["requestBody"] = {"required": True, "content": {
                "multipart/form-data": {"schema": {"type": "object", "required": ["file"],
                                                   "properties": {"file": BYTES}}}, "*/*": {"schema": BYTES}}}  # fmt: skip
        elif route.request_schema:
            operation["requestBody"] = {"required": True, "content": {
                "application/json": {"schema": _ref(route.request_schema)}}}  # fmt: skip
        elif route.method in ("POST", "PUT"):
            operation["requestBody"] = {"required": False, "content": {
                "application/json": {"schema": {"type": "object"}}}}  # fmt: skip
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
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                           "description": "PASETO v4.public or JWT (RS256/ES256)"}},  # fmt: skip
            "schemas": {name: schemas.load(name) for name in schemas.NAMES},
        },
    }
