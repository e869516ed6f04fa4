"""The router's part of a recall (docs/router.md): route the question (the ``route`` trail phase),
run its type's handler, and put what the handlers found into the pack.

| type | handler |
|---|---|
| ``relationship`` | walk 2 hops from the named entities (``graph_expand``); the facts that are edges of the walk get the full graph signal; the edges go into the pack's ``relationships`` |
| ``entity_lookup`` | walk 1 hop from the named entity; records about it (a fact's or belief's subject or object, an event's subject) get the full graph signal |
| ``temporal`` | the window the question names is resolved; each scope also retrieves the records that happened inside it beyond the plain candidate cut (``actors.candidates``), and every in-window record is ranked first (``window.prefer``), the others kept after them as the fallback; recency already weighs more (the plan) |
| ``temporal_facets`` | the window the question names becomes the recall's valid-time window (unless the request gave one), and the pack gets ``facets`` aggregated over the window's candidates |
| ``aspect_query`` | candidates of the asked aspects are ranked first (their score gets ``ASPECT_BONUS``) |
| ``exploratory`` | nothing beyond the hybrid blend |
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import trio

from ...errors import CortexError
from ..model import aspects
from ..retrieve.temporal_filter import TemporalFilter
from ..temporal import format_ts
from . import graph
from . import window as windows

ASPECT_BONUS = 0.25  # added to the score of a candidate of an asked aspect: above any unasked one's blend
NO_EXPANSION: dict[str, Any] = {"edges": [], "nodes": 0, "examined": 0, "truncated": False, "known": []}


async def route(coordinator: Any, spec: Any, plan: Any, tenant: str, now: dt.datetime, custom: Any,
                trail: Any) -> None:  # fmt: skip
    """Classify the question; resolve its entity hints and its window; set ``plan.route``."""
    t = trio.current_time()
    found = graph.route_of(spec.query, plan.temporal.active)
    hints = await coordinator.graph.resolve(found.entity_hints, tenant)
    temporal: dict[str, Any] = {"window": found.window, "valid_during": None, "applied": False}
    if plan.temporal.active:
        temporal["request"] = plan.temporal.describe()
    if found.window:
        try:
            window = TemporalFilter.from_query({"natural": found.window}, now, custom)
        except CortexError:
            window = None  # a phrase the resolver does not know: reported, not applied
        if window is not None and window.valid_during is not None:
            start, end = window.valid_during
            temporal["valid_during"] = [format_ts(start) if start else None, format_ts(end) if end else None]
            if found.type == "temporal_facets" and not plan.temporal.active:
                plan.temporal = window  # this type's handler: the window the question names
                plan.filters_applied += window.describe()
                temporal["applied"] = True
            elif found.type == "temporal":
                plan.window = window.valid_during  # this type's handler: retrieved (_retrieve), first (adjust)
    if found.type == "temporal":
        temporal["preferred"] = plan.window is not None  # no resolvable window: recency only
    plan.starts = hints
    plan.route = {"type": found.type, "entity_hints": [], "names_found": len(found.entity_hints),
                  "temporal": temporal, "aspects": list(found.aspects), "cues": list(found.cues)}  # fmt: skip
    trail.phases.append({"phase": "route", **plan.route, "elapsed_ms": trail.lap("route", t)})


async def expand(coordinator: Any, spec: Any, plan: Any, scopes: list[str], trail: Any) -> dict[str, Any]:
    """``graph_expand``: the relationship walk of a relationship or entity-lookup question, with
    the recall's as_of and its confidence floor (a ``confidence.gte`` filter) applied while walking."""
    t = trio.current_time()
    route = plan.route
    if route is None or route["type"] not in graph.RECALL_DEPTH:
        return NO_EXPANSION
    as_of = plan.temporal.as_of
    expansion = await coordinator.graph.expand(route["type"], plan.starts, scopes, as_of,
                                               _floor(spec.filters))  # fmt: skip
    expansion["elapsed_ms"] = trail.lap("graph_expand", t)
    # the entity hints the trail names: those with relationships in a scope this recall reads
    # (an entity known only elsewhere in the tenant is not disclosed, nor the question's words)
    route["entity_hints"] = expansion["known"]
    for phase in trail.phases:
        if phase["phase"] == "route":
            phase["entity_hints"] = expansion["known"]
    return expansion


def _floor(filters: Any) -> float | None:
    """The recall's ``confidence`` floor, from a top-level ``confidence: {gte: x}`` filter."""
    if isinstance(filters, dict) and isinstance(filters.get("confidence"), dict):
        value = filters["confidence"].get("gte")
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
    return None


def adjust(plan: Any, candidates: list[Any], expansion: dict[str, Any], trail: Any) -> None:
    """After scoring: the handlers' effect on the scores, and the ``graph_expand`` trail phase."""
    route = plan.route
    weight = plan.weights.get("graph", 0.0)
    edge_ids = {e["id"] for e in expansion["edges"]}
    about = {h["id"] for h in (route or {}).get("entity_hints", [])}
    boosted = 0
    lookup = route is not None and route["type"] == "entity_lookup"
    asked = route["aspects"] if route is not None and route["type"] == "aspect_query" else None
    for candidate in candidates:
        linked = bool(edge_ids) and candidate.record.get("id") in edge_ids
        if lookup and not linked:
            linked = bool(about & _entities(candidate))
        if linked and candidate.signals.get("graph", 0.0) < 1.0:
            candidate.score += weight * (1.0 - candidate.signals.get("graph", 0.0))
            candidate.signals["graph"] = 1.0
            boosted += 1
        if asked and aspects.of_record_in(candidate.layer, candidate.record, asked):
            candidate.score += ASPECT_BONUS
    if plan.window is not None and route is not None:  # the temporal handler
        route["temporal"].update(windows.prefer(plan.window, candidates))
    linked_count = sum(1 for c in candidates if c.signals.get("graph", 0.0) > 0)
    trail.phases.append({"phase": "graph_expand", "linked_candidates": linked_count,
                         "added_nodes": expansion["nodes"], "edges": len(expansion["edges"]),
                         "edges_examined": expansion["examined"], "boosted_candidates": boosted,
                         "truncated": expansion["truncated"],
                         "elapsed_ms": expansion.get("elapsed_ms", 0.0)})  # fmt: skip


def _entities(candidate: Any) -> set[str]:
    record = candidate.record
    if candidate.layer == "facts":
        return {record["subject"].get("id"), (record.get("object") or {}).get("id")} - {None}
    if candidate.layer == "beliefs":
        claim = record.get("claim") or {}
        return {(claim.get("subject") or {}).get("id"), (claim.get("object") or {}).get("id")} - {None}
    if candidate.layer == "events":
        return {(record.get("subject") or {}).get("id")} - {None}
    return set()


def into_pack(config: Any, plan: Any, expansion: dict[str, Any], pack: dict[str, Any],
              candidates: list[Any] | None = None) -> None:  # fmt: skip
    """The pack's ``relationships`` part (and ``facets`` for temporal_facets).  The walk stops at
    ``recall_relationships_limit`` edges or ``recall_relationships_examined`` facts a scope; when
    it stopped with more to look at, ``diagnostics.relationships_truncated`` says so (and the
    ``graph_expand`` phase), never silently."""
    if plan.route is None:
        return
    limit = config.recall_relationships_limit
    edges = expansion["edges"]
    pack["relationships"] = edges[:limit]
    if "diagnostics" in pack:
        pack["diagnostics"]["relationships_truncated"] = expansion["truncated"] or len(edges) > limit
        pack["diagnostics"]["route"] = plan.route["type"]
    if plan.route["type"] == "temporal_facets" and candidates is not None:
        pack["facets"] = {"window": plan.route["temporal"], **graph.facets(candidates, config.facets_limit)}
