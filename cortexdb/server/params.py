"""Query parameters and cursors (reference §6.4): each is read, checked and refused here with a
400 ``INVALID_QUERY`` (or ``MISSING_REQUIRED_FIELD``) naming the parameter."""

from __future__ import annotations

from typing import Any

from ..engine import cursor as cursors
from ..engine.scopes import canonical_scope
from ..errors import InvalidBody, InvalidQuery, MissingRequiredField
from .call import current_request

TEMPORAL_PARAMS = ("as_of", "valid_during", "recorded_during", "natural", "reference_date")
COMMON_PARAMS = ("scope", "view", "limit", "cursor")
LAYER_PARAMS: dict[str, tuple[str, ...]] = {
    "events": ("since", "until", "recorded_since", "recorded_until", "observed_actor", "modality", "aspect",
               "include_excluded", *TEMPORAL_PARAMS),
    "episodes": ("actor", "overlapping", "with_causal_chain", "include_superseded", *TEMPORAL_PARAMS),
    "facts": ("subject", "predicate", "aspect", "min_confidence", "include_superseded", *TEMPORAL_PARAMS),
    "beliefs": ("about", "min_confidence", "include_deprecated", "include_superseded", *TEMPORAL_PARAMS),
}  # fmt: skip
BOOL_PARAMS = ("include_excluded", "include_superseded", "include_deprecated", "with_causal_chain")
VIEWS = ("local", "holistic", "descend")


def query_args(allowed: tuple[str, ...]) -> dict[str, str]:
    args = {}
    request = current_request()
    for name in request.args:
        if name not in allowed:
            raise InvalidQuery(f"unknown query parameter {name!r}",
                                    details={"field": name, "allowed": sorted(allowed)})  # fmt: skip
        values = request.args.getlist(name)
        if len(values) > 1:
            raise InvalidQuery(f"query parameter {name!r} given more than once", details={"field": name})
        args[name] = values[0]
    return args


def required(args: dict[str, Any], name: str) -> str:
    value = args.get(name)
    if value in (None, ""):
        raise MissingRequiredField(f"{name} is required", details={"field": name})
    return value


def scope_param(value: Any, field: str = "scope") -> str:
    """A scope path given in a parameter or a body field, canonical."""
    if not isinstance(value, str) or not value:
        raise InvalidBody(f"{field} is required", details={"field": field})
    return canonical_scope(value)


def to_int(value: str | None, name: str, default: int | None = None) -> int | None:
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise InvalidQuery(f"{name} must be an integer", details={"field": name}) from None


def page_limit(value: str | None, default: int = 50) -> int:
    """A list endpoint's ``limit`` (§6.4): default 50 (100 for logs), at most 1000."""
    limit = to_int(value, "limit", default)
    if not 1 <= limit <= 1000:
        raise InvalidQuery("limit must be between 1 and 1000", details={"field": "limit"})
    return limit


def to_bool(value: str, name: str) -> bool:
    if value.lower() in ("true", "1"):
        return True
    if value.lower() in ("false", "0"):
        return False
    raise InvalidQuery(f"{name} must be true or false", details={"field": name})


def to_float(value: str, name: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise InvalidQuery(f"{name} must be a number", details={"field": name}) from None


def view_param(view: str) -> str:
    if view not in VIEWS:
        raise InvalidQuery("view must be local, holistic or descend", details={"field": "view"})
    return view


def layer_filters(args: dict[str, str]) -> dict[str, Any]:
    """A layer list's filters (what is left of ``LAYER_PARAMS`` once scope, view, limit and
    cursor are taken), typed: booleans, numbers, ``overlapping=FROM..TO``."""
    filters: dict[str, Any] = {}
    for name, value in args.items():
        if name in BOOL_PARAMS:
            filters[name] = to_bool(value, name)
        elif name == "min_confidence":
            filters[name] = to_float(value, name)
        elif name == "overlapping":
            start, sep, end = value.partition("..")
            if not sep:
                raise InvalidQuery("overlapping must be FROM..TO", details={"field": name})
            filters["overlapping_from"] = start or None
            filters["overlapping_to"] = end or None
        else:
            filters[name] = value
    return filters


encode_cursor = cursors.encode

CURSOR_FIELDS = {"i": lambda v: type(v) is int and v >= 0, "c": lambda v: v is None or isinstance(v, str),
                 "after": lambda v: isinstance(v, str)}  # fmt: skip


def decode_cursor(text: str) -> dict[str, Any]:
    """A cursor of a multi-scope view or of a server listing (``{"i", "c"}`` / ``{"after"}``)."""
    data = cursors.decode(text, max_depth=2)
    if not isinstance(data, dict) or not all(k in CURSOR_FIELDS and CURSOR_FIELDS[k](v) for k, v in data.items()):
        raise InvalidQuery("cursor is not one this server issued", details={"field": "cursor"})
    return data

