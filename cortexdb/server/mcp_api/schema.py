"""Tool schemas derived from the wire contract (``cortexdb/schemas``), never written twice.

An MCP host validates a tool's arguments and result against plain JSON Schemas and cannot
resolve our ``$ref`` URLs, so every reference is inlined.  A tool's input is the properties it
picks from a request schema (``derive``), and pieces of other schemas (``part``).
"""

from __future__ import annotations

from typing import Any

from ... import schemas

SUFFIX = ".schema.json"


def part(name: str, pointer: str = "") -> dict[str, Any]:
    """The node at JSON pointer ``pointer`` of schema ``name``, its references inlined."""
    node: Any = schemas.load(name)
    for token in filter(None, pointer.split("/")):
        node = node[token.replace("~1", "/").replace("~0", "~")]
    return inline(node, name)


def inline(node: Any, base: str) -> Any:
    """``node`` with every ``$ref`` (``other.schema.json#/ptr`` or ``#/ptr``, relative to the
    schema ``base``) replaced by what it names; a reference's sibling keywords are kept."""
    if isinstance(node, list):
        return [inline(item, base) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: inline(value, base) for key, value in node.items() if key not in ("$ref", "$defs")}
    ref = node.get("$ref")
    if isinstance(ref, str):
        target, _, pointer = ref.partition("#")
        name = target[: -len(SUFFIX)] if target.endswith(SUFFIX) else base
        resolved = part(name, pointer)
        out = {**resolved, **out}
    return out


def derive(name: str, *, pick: tuple[str, ...] | None = None, required: tuple[str, ...] | None = None,
           extra: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """An object schema of the properties ``pick`` (default all) of schema ``name``, with
    ``extra`` properties after them; ``required`` defaults to the source's, among those kept."""
    source = schemas.load(name)
    properties = source["properties"]
    chosen = {key: properties[key] for key in (pick or tuple(properties))}
    kept = tuple(key for key in source.get("required", ()) if key in chosen)
    return {
        "type": "object",
        "properties": {**inline(chosen, name), **(extra or {})},
        "required": list(kept if required is None else required),
        "additionalProperties": False,
    }
