"""Helpers for declaring a route's JSON body (``Blueprint(body=...)``): small inline JSON Schemas
(draft 2020-12) and the unknown-field shape (``engine.model.fields``) a closed one implies.

A schema written with ``obj`` is closed (``additionalProperties: false``), so the one
declaration types the body in the OpenAPI document and refuses a misspelt field at any depth it
names, with its path (422 ``UNKNOWN_FIELD``).
"""

from __future__ import annotations

from typing import Any

from ..engine.model.fields import ANY

STRING = {"type": "string"}
NOTE = {"type": "string", "maxLength": 500, "description": "a note kept in the audit row"}
BOOLEAN = {"type": "boolean"}
ANY_OBJECT = {"type": "object", "description": "a JSON object"}


def ref(name: str, pointer: str = "") -> dict[str, Any]:
    """A shipped schema (``cortexdb/schemas/<name>.schema.json``), or a part of it."""
    return {"$ref": f"{name}.schema.json{'#' + pointer if pointer else ''}"}


def obj(properties: dict[str, Any], *, required: tuple[str, ...] = (), description: str | None = None,
        nullable: bool = False) -> dict[str, Any]:  # fmt: skip
    """A closed object schema: these properties and no other."""
    schema: dict[str, Any] = {"type": ["object", "null"] if nullable else "object", "properties": properties,
                              "additionalProperties": False}  # fmt: skip
    if required:
        schema["required"] = list(required)
    if description:
        schema["description"] = description
    return schema


def array(items: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "array", "items": items, **extra}


def shape_of(schema: Any) -> Any:
    """The unknown-field shape of a schema: a closed object names its fields (each with its own
    shape), an array of them is ``[shape]``; anything else (a scalar, an open object, a
    reference to a shipped schema) is ``ANY``, not looked into."""
    if not isinstance(schema, dict) or schema.get("x-cortex-checked-by") == "engine":
        return ANY
    if schema.get("additionalProperties") is False and "properties" in schema:
        return {name: shape_of(inner) for name, inner in schema["properties"].items()}
    if "items" in schema:
        inner = shape_of(schema["items"])
        return [inner] if inner is not ANY else ANY
    return ANY


def engine_checked(schema: dict[str, Any]) -> dict[str, Any]:
    """A body the engine's own validator checks field by field (its error codes are the
    contract's): the schema documents it, and the route adds no unknown-field check of its own."""
    return {**schema, "x-cortex-checked-by": "engine"}


def properties_of(name: str, *, without: tuple[str, ...] = ()) -> dict[str, Any]:
    """The properties of a shipped object schema, for a body that extends it; its local
    references (``#/$defs/...``) are qualified with the schema's file, so they still resolve."""
    from .. import schemas

    def qualify(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: (f"{name}.schema.json{v}" if k == "$ref" and isinstance(v, str) and v.startswith("#")
                        else qualify(v)) for k, v in node.items()}  # fmt: skip
        if isinstance(node, list):
            return [qualify(v) for v in node]
        return node

    return {k: qualify(v) for k, v in schemas.load(name)["properties"].items() if k not in without}
