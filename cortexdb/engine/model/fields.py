"""The fields a request body may carry, at every depth (issue 15): a misspelt field is refused
with its path (``budgets.max_tokns``), never silently ignored.

A *shape* is a dict naming an object's fields, each with the shape of its value: another dict
(an object whose fields are checked in turn), a one-item list ``[shape]`` (an array whose items
have that shape), or ``ANY`` (a value this check does not look into: a scalar, a map whose keys
are the caller's — ``labels``, ``data`` — or a tree its own validator checks, like recall
``filters``).  Types are the validators' business: a value that is not the object or array its
shape describes is left to them.
"""

from __future__ import annotations

from typing import Any

ANY = None


def unknown_field(value: Any, shape: Any, path: str = "") -> str | None:
    """The path of a field ``value`` carries that its ``shape`` does not name, or None: an
    object's own unknown fields first (the least in sort order), then its values' in its shape's
    order.  Cheap on the capture path: one set difference per object, no sorting unless wrong."""
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            return None
        extra = value.keys() - shape.keys()
        if extra:
            name = min(extra, key=str)
            return f"{path}.{name}" if path else str(name)
        for name, inner in shape.items():
            if inner is not None and name in value:
                found = unknown_field(value[name], inner, f"{path}.{name}" if path else name)
                if found is not None:
                    return found
    elif isinstance(shape, list) and isinstance(value, list):
        for index, item in enumerate(value):
            found = unknown_field(item, shape[0], f"{path}[{index}]")
            if found is not None:
                return found
    return None


def shape_at(shape: Any, path: str) -> Any:
    """The shape of the object holding the field at ``path`` (``budgets.max_tokns`` -> the
    ``budgets`` shape), for naming what is allowed there."""
    parts = path.replace("[", ".[").split(".")[:-1]
    for part in parts:
        if part.startswith("["):
            shape = shape[0] if isinstance(shape, list) else None
        elif isinstance(shape, dict):
            shape = shape.get(part)
    return shape
