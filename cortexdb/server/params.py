"""Query parameters and cursors (reference §6.4): each is read, checked and refused here with a
400 ``INVALID_QUERY`` (or ``MISSING_REQUIRED_FIELD``) naming the parameter."""

from __future__ import annotations

from typing import Any

from ..engine import cursor as cursors
from ..engine.scopes import canonical_scope
from ..engine.stages import WAIT_MODES
from ..errors import InvalidBody, InvalidQuery, MissingRequiredField
from .call import current_call, current_request

TEMPORAL_PARAMS = ("as_of", "valid_during", "recorded_during", "natural", "reference_date")
COMMON_PARAMS = ("scope", "view", "limit", "cursor")
LAYER_PARAMS: dict[str, tuple[str, ...]] = {
    "events": ("since", "until", "recorded_since", "recorded_until", "observed_actor", "modality", "aspect",
               "include_excluded", *TEMPORAL_PARAMS),
    "episodes": ("actor", "overlapping", "with_causal_chain", "include_superseded", *TEMPORAL_PARAMS),
    "facts": ("subject", "predicate", "aspect", "min_confidence", "include_superseded", *TEMPORAL_PARAMS),
    "beliefs": ("about", "aspect", "min_confidence", "include_deprecated", "include_superseded", *TEMPORAL_PARAMS),
}  # fmt: skip
BOOL_PARAMS = ("include_excluded", "include_superseded", "include_deprecated", "with_causal_chain")
VIEWS = ("local", "holistic", "descend")


STRING = {"type": "string"}
INSTANT = {"type": "string", "description": "RFC 3339 or YYYY-MM-DD"}
BOOLEAN = {"type": "boolean"}
INTERVAL = {"type": "string", "description": "FROM..TO (RFC 3339 or YYYY-MM-DD; either end may be empty)"}

# Every query parameter a route may declare (``Blueprint(query=...)``), by name, with its schema in
# the OpenAPI document: a name means the same thing wherever it is taken.  A route declaring a
# name missing here fails ``tests/test_openapi.py``.
QUERY: dict[str, dict[str, Any]] = {
    "scope": {"type": "string", "description": "a scope path, e.g. org:acme/user:alice"},
    "view": {"enum": list(VIEWS), "description": "local (this scope), holistic (and its ancestors), descend (and its descendants)"},
    "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "items per page"},
    "cursor": {"type": "string", "description": "the next_cursor of the previous page"},
    "as_of": {**INSTANT, "description": "what was known at that instant (RFC 3339 or YYYY-MM-DD)"},
    "valid_during": {**INTERVAL, "description": "records valid during FROM..TO"},
    "recorded_during": {**INTERVAL, "description": "records recorded during FROM..TO"},
    "natural": {"type": "string", "description": "a time phrase such as \"last 30 days\""},
    "reference_date": {**INSTANT, "description": "the anchor of natural (default now)"},
    "since": {**INSTANT, "description": "observed (events) or written (audit) at or after"},
    "until": {**INSTANT, "description": "observed before"},
    "recorded_since": {**INSTANT, "description": "recorded at or after"},
    "recorded_until": {**INSTANT, "description": "recorded before"},
    "observed_actor": {"type": "string", "description": "the actor who was observed (type:id)"},
    "modality": {"type": "string", "description": "conversation, observation, action, ..."},
    "include_excluded": {**BOOLEAN, "description": "include events cancelled from recall"},
    "actor": {"type": "string", "description": "an actor (type:id)"},
    "overlapping": {**INTERVAL, "description": "episodes overlapping FROM..TO"},
    "with_causal_chain": {**BOOLEAN, "description": "include each episode's causal chain"},
    "include_superseded": {**BOOLEAN, "description": "include superseded versions"},
    "include_deprecated": {**BOOLEAN, "description": "include closed and contradicted beliefs"},
    "subject": {"type": "string", "description": "a fact's subject (an entity id or name)"},
    "predicate": {"type": "string", "description": "a fact's predicate"},
    "aspect": {"type": "string", "description": "identity, knowledge, belief, preference, habit, goal, task, "
               "directive, decision, event, problem or relationship"},
    "min_confidence": {"type": "number", "minimum": 0, "maximum": 1},
    "about": {"type": "string", "description": "the subject a belief is about"},
    "belief_id": {"type": "string"},
    "path": {"type": "string", "description": "a scope path"},
    "prefix": {"type": "string", "description": "scope paths starting with it"},
    "auto_provisioned": {**BOOLEAN, "description": "only scopes created by a first write (or only registered ones)"},
    "records": {"enum": ["keep"], "description": "what becomes of the scope's records: kept"},
    "since_lifecycle_id": {"type": "string", "description": "lifecycle records after this id"},
    "event_id": {"type": "string"},
    "batch_id": {"type": "string"},
    "job_id": {"type": "string"},
    "import_id": {"type": "string"},
    "export_id": {"type": "string"},
    "erasure_id": {"type": "string"},
    "events": {"type": "string", "description": "comma-separated stage names"},
    "capability": {"type": "string", "description": "a capability name, e.g. scope.read.local"},
    "decision": {"enum": ["allow", "deny"]},
    "topic": {"type": "string"},
    "depth": {"type": "integer", "minimum": 0},
    "relation": {"type": "string", "description": "a vocabulary relation label"},
    "window": {"type": "string", "description": "an ISO 8601 duration (e.g. P7D): the trajectory's window"},
    "status": {"type": "string", "description": "only items in this status"},
    "from": {"type": "string", "description": "the entity a walk starts from (an id or a name)"},
    "type": {"type": "string", "description": "a relationship type (a fact predicate)"},
    "direction": {"enum": ["out", "in", "both"], "description": "which edges a walk follows"},
    "wait": {"enum": [str(mode) for mode in WAIT_MODES if mode is not None],
             "description": "answer once the write reached this stage (default: captured, 202)"},
    "filename": {"type": "string", "description": "the blob's file name (raw uploads)"},
    "scope_template": {"type": "string", "description": "the scopes to write, e.g. org:acme/user:{user_id}"},
    "format": {"type": "string", "description": "the source's format (detected when absent)"},
    "ordering": {"enum": ["strict_temporal", "batch_throughput"]},
    "on_error": {"enum": ["skip", "abort"]},
    "observed_at": {**INSTANT, "description": "observed_at of records that carry none"},
    "user_id": {"type": "string"},
    "branches": {"type": "string"},
    "include_hidden": BOOLEAN,
    "agent_name": {"type": "string"},
    "agent_id": {"type": "string"},
    "group_id": {"type": "string"},
    "graph_id": {"type": "string"},
    "thread_id": {"type": "string"},
    "extract_facts": BOOLEAN,
}  # fmt: skip


def declared(names: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A route's ``query=`` declaration (``"scope!"``: required) as (names, required names)."""
    return tuple(n.rstrip("!") for n in names), tuple(n[:-1] for n in names if n.endswith("!"))


def check_query(allowed: tuple[str, ...], args: Any) -> dict[str, str]:
    """The query parameters of a request, each one its route declares, given once."""
    out = {}
    for name in args:
        if name not in allowed:
            raise InvalidQuery(f"unknown query parameter {name!r}",
                               details={"field": name, "allowed": sorted(allowed)})  # fmt: skip
        values = args.getlist(name)
        if len(values) > 1:
            raise InvalidQuery(f"query parameter {name!r} given more than once", details={"field": name})
        out[name] = values[0]
    return out


def query_args(*undeclared: Any) -> dict[str, str]:
    """The current request's query parameters: only those its route declares (``query=``); the
    pipeline refused any other before the handler ran."""
    route = current_call().route
    if undeclared:  # the old ``query_args(("scope", ...))``: the names belong on the route now
        raise TypeError(f"{route.method} {route.path}: declare its query parameters on the route "
                        f"(Blueprint(query={tuple(undeclared[0])!r})) and call query_args() without them")  # fmt: skip
    return check_query(route.query, current_request().args)


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

