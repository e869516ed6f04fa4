"""The recall request (reference §8.3): its body checked once into a ``RecallSpec``."""

from __future__ import annotations

from typing import Any

import attrs

from ...errors import InvalidBody, InvalidRecall
from ..model.fields import ANY, unknown_field
from ..retrieve import document, render
from ..scopes import canonical_scope
from .contextdoc import minimum_tokens

LAYERS = ("events", "episodes", "facts", "beliefs", "understanding")
SHAPES = ("raw", "granular", "holistic", "structured", "narrative")
TRAVERSALS = ("local", "holistic", "descend")
DIAGNOSTICS = ("none", "summary", "full")
DEFAULT_LIMITS = {"events": 10, "episodes": 5, "facts": 20, "beliefs": 10, "understanding": 3}
RAW_EVENTS_LIMIT = 50
MAX_QUERY_CHARS = 8192
MAX_LAYER_LIMIT = 1000
TEMPORAL_SHAPE = {"as_of": ANY, "valid_during": ANY, "recorded_during": ANY, "natural": ANY, "reference_date": ANY}
# every field of a recall request, at every depth (``filters`` is checked by retrieve.filters)
REQUEST_SHAPE = {
    "scope": ANY, "view": ANY, "traversal": ANY, "query": ANY, "include": ANY, "exclude_content": ANY,
    "temporal": TEMPORAL_SHAPE, "filters": ANY, "budgets": {"max_tokens": ANY, "per_layer_limits": ANY},
    "citation_mode": ANY, "diagnostics": ANY, "stream": ANY, "idempotency_key": ANY, "format": ANY,
}  # fmt: skip
REQUEST_FIELDS = set(REQUEST_SHAPE)


@attrs.frozen
class RecallSpec:
    scope: str
    shape: str  # raw | granular | holistic | structured | narrative (the pack's view)
    traversal: str  # local | holistic | descend
    query: str
    layers: set[str]
    limits: dict[str, int]
    max_tokens: int | None
    citation_mode: str
    diagnostics: str  # none | summary | full
    exclude_content: bool
    temporal: Any  # the request's temporal block, checked by TemporalFilter.from_query
    filters: Any  # the filter tree, checked by retrieve.filters.validate
    idempotency_key: str | None
    format: str = "text"  # text | xml (the context block as a <cortex-context> document)


def validate(request: Any) -> RecallSpec:
    if not isinstance(request, dict):
        raise InvalidBody("the recall request must be a JSON object", details={"field": "$"})
    unknown = unknown_field(request, REQUEST_SHAPE)
    if unknown is not None:
        raise InvalidRecall(unknown, "is not a field of the recall request")
    if "scope" not in request:
        raise InvalidRecall("scope", "is required")
    scope = canonical_scope(request["scope"])
    shape, traversal = _view(request)
    query = request.get("query") or ""
    if not isinstance(query, str) or len(query) > MAX_QUERY_CHARS:
        raise InvalidRecall("query", f"must be a string of at most {MAX_QUERY_CHARS} characters")
    layers = _layers(request, shape)
    max_tokens, limits = _budgets(request, shape)
    citation_mode = request.get("citation_mode") or "inline_with_markers"
    if citation_mode not in render.CITATION_MODES:
        raise InvalidRecall("citation_mode", f"must be one of {list(render.CITATION_MODES)}")
    diagnostics = request.get("diagnostics") or "summary"
    if diagnostics not in DIAGNOSTICS:
        raise InvalidRecall("diagnostics", f"must be one of {list(DIAGNOSTICS)}")
    exclude_content = request.get("exclude_content", False)
    if not isinstance(exclude_content, bool):
        raise InvalidRecall("exclude_content", "must be true or false")
    key = request.get("idempotency_key")
    if key is not None and (not isinstance(key, str) or not 0 < len(key) <= 64):
        raise InvalidRecall("idempotency_key", "must be a string of 1 to 64 characters")
    format_ = _format(request, shape, scope, max_tokens)
    return RecallSpec(
        scope=scope, shape=shape, traversal=traversal, query=query, layers=layers, limits=limits,
        max_tokens=max_tokens, citation_mode=citation_mode, diagnostics=diagnostics,
        exclude_content=exclude_content, temporal=request.get("temporal"),
        filters=request.get("filters"), idempotency_key=key, format=format_,
    )  # fmt: skip


def _view(request: dict[str, Any]) -> tuple[str, str]:
    """(shape, traversal): ``view`` names the traversal (§3.4.2) or the pack's shape (§9.1)."""
    view = request.get("view") or "holistic"
    traversal = request.get("traversal")
    if view in ("local", "descend"):
        traversal, shape = traversal or view, "holistic"
    elif view in SHAPES:
        shape = view
    else:
        raise InvalidRecall("view", f"must be one of {list(SHAPES) + ['local', 'descend']}")
    traversal = traversal or "holistic"
    if traversal not in TRAVERSALS:
        raise InvalidRecall("traversal", f"must be one of {list(TRAVERSALS)}")
    return shape, traversal


def _layers(request: dict[str, Any], shape: str) -> set[str]:
    include = request.get("include")
    if include is not None:
        if not isinstance(include, list) or any(layer not in LAYERS for layer in include):
            raise InvalidRecall("include", f"must be an array drawn from {list(LAYERS)}")
    return {"events"} if shape == "raw" else set(include or LAYERS)


def _budgets(request: dict[str, Any], shape: str) -> tuple[int | None, dict[str, int]]:
    """(max_tokens, per-layer limits) from ``budgets``."""
    budgets = request.get("budgets") or {}
    if not isinstance(budgets, dict):
        raise InvalidRecall("budgets", "must be an object")
    max_tokens = budgets.get("max_tokens")
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        raise InvalidRecall("budgets.max_tokens", "must be a positive integer")
    limits = dict(DEFAULT_LIMITS)
    if shape == "raw":
        limits["events"] = RAW_EVENTS_LIMIT
    per_layer_limits = budgets.get("per_layer_limits") or {}
    if not isinstance(per_layer_limits, dict):
        raise InvalidRecall("budgets.per_layer_limits", "must be an object of layer: integer")
    for layer, value in per_layer_limits.items():
        field = f"budgets.per_layer_limits.{layer}"
        if layer not in LAYERS:
            raise InvalidRecall(field, f"is not a layer; use {list(LAYERS)}")
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LAYER_LIMIT:
            raise InvalidRecall(field, f"must be an integer from 0 to {MAX_LAYER_LIMIT}")
        limits[layer] = value
    return max_tokens, limits


def _format(request: dict[str, Any], shape: str, scope: str, max_tokens: int | None) -> str:
    """``format``: ``text`` (default) or ``xml``, which a structured or narrative view cannot
    take, and whose budget must at least fit the document's empty skeleton."""
    format_ = request.get("format") or "text"
    if format_ not in document.FORMATS:
        raise InvalidRecall("format", f"must be one of {list(document.FORMATS)}")
    if format_ == "xml":
        if shape in ("structured", "narrative"):
            raise InvalidRecall("format", f"xml renders a context block, which view {shape} has none of")
        least = minimum_tokens(scope)
        if max_tokens is not None and max_tokens < least:
            raise InvalidRecall("budgets.max_tokens", f"must be at least {least} with format xml (the empty document)")
    return format_
