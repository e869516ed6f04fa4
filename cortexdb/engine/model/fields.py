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
    order.  Cheap on the capture path: a body that is right is only walked (``_known``); the
    path is worked out only when something is wrong."""
    if _known(value, shape):
        return None
    return _unknown(value, shape, path)


def _known(value: Any, shape: Any) -> bool:
    """Whether ``value`` carries only fields its ``shape`` names (a walk of its keys: no sets)."""
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            return True  # its validator's business
        for name, item in value.items():
            if name not in shape:
                return False
            inner = shape[name]
            if inner is not None and not _known(item, inner):
                return False
    elif isinstance(shape, list) and isinstance(value, list):
        inner = shape[0]
        for item in value:
            if not _known(item, inner):
                return False
    return True


def _unknown(value: Any, shape: Any, path: str) -> str | None:
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            return None
        extra = value.keys() - shape.keys()
        if extra:
            name = min(extra, key=str)
            return f"{path}.{name}" if path else str(name)
        for name, inner in shape.items():
            if inner is not None and name in value:
                found = _unknown(value[name], inner, f"{path}.{name}" if path else name)
                if found is not None:
                    return found
    elif isinstance(shape, list) and isinstance(value, list):
        for index, item in enumerate(value):
            found = _unknown(item, shape[0], f"{path}[{index}]")
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
