"""A recall's pack (reference §9) and its streamed events (§10.1): the chosen candidates as
items per layer, the context block with citations, the provenance trail and citation DAG, and
diagnostics at the requested level."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs
import trio

from ..model import Candidate
from ..retrieve import render
from .partial import mark_partial
from .request import LAYERS, RecallSpec

STRIPPED = ("content", "summary", "opening", "closing")  # what ``exclude_content`` leaves out
# what a pack's episode item leaves out: its events' ids a second time and their causal roles
# (up to ``episode_max_events`` of each); the item keeps ``events``, the citations list them
# too, and ``GET /v1/episodes/{id}`` gives the episode whole (docs/decisions.md, "A pack's
# episode items")
EPISODE_LEFT_OUT = ("supports", "causal_chain")


@attrs.define
class Trail:
    """The provenance trail's phases and the recall's timings (``time_ms``)."""

    phases: list[dict[str, Any]] = attrs.field(factory=list)
    timings: dict[str, float] = attrs.field(factory=dict)
    started: float = attrs.field(factory=trio.current_time)  # when the recall began (trio time)

    def lap(self, name: str, since: float) -> float:
        elapsed = round((trio.current_time() - since) * 1000, 3)
        self.timings[name] = elapsed
        return elapsed


@attrs.define
class Ranked:
    """What ranking chose: per layer (after MMR), what the token knapsack kept, and the signals
    ``full`` diagnostics explain."""

    chosen: dict[str, list[Candidate]]
    kept: list[Candidate]
    evictions: int
    layer_ms: dict[str, float]  # per layer: ms since the recall began when its items were final
    weights: dict[str, float]
    capped: dict[str, int] = attrs.field(factory=dict)  # per requested layer: left out by its limit
    deduplicated: int = 0  # candidates dropped as another passage of a record already chosen
    budget: int | None = None  # what the knapsack spent on items (format xml: less the skeleton)


@attrs.define
class Context:
    """What the pack reports about how it was made."""

    plan: dict[str, Any]
    filters_applied: list[Any]
    warnings: list[str]
    traversed: list[dict[str, Any]]
    degraded: list[dict[str, Any]]
    capability: str


def item(candidate: Candidate, position: int, exclude_content: bool, layer: str = "") -> dict[str, Any]:
    record = dict(candidate.record)
    if exclude_content:
        for field in STRIPPED:
            record.pop(field, None)
    if layer == "episodes":
        for field in EPISODE_LEFT_OUT:
            record.pop(field, None)
    record["ranked_position"] = position
    record["score"] = round(candidate.score, 4)
    record["scope"] = candidate.scope
    return record


def assemble(spec: RecallSpec, request: dict[str, Any], ranked: Ranked, context: Context, trail: Trail,
             ids: Any, started: float) -> tuple[dict[str, Any], dict[str, list]]:  # fmt: skip
    """The pack, and its items by layer (a structured pack lists none: its subgraph says it all);
    ``trail`` gets its last timings (``render_context_block``, ``total``)."""
    kept_ids = {c.id for c in ranked.kept}
    layers_out: dict[str, list[dict[str, Any]]] = {}
    by_layer = kept(ranked)
    for layer, items in by_layer.items():
        layers_out[layer] = [item(c, position, spec.exclude_content, layer) for position, c in enumerate(items, 1)]
    records = {layer: [c.record for c in items] for layer, items in by_layer.items()}  # kept_records
    t = trio.current_time()
    context_text, markers = ("", [])
    if spec.shape == "holistic" and spec.format == "text":  # xml: contextdoc, once the pack is whole
        context_text, markers = render.context_block(records, spec.citation_mode)
    trail.lap("render_context_block", t)
    provenance: dict[str, Any] = {"trail": trail.phases, "citations": citations(ranked.chosen, kept_ids)}
    if spec.citation_mode != "none":
        provenance["markers"] = markers
    pack_id = ids.new("pack")
    trail.timings["total"] = round((trio.current_time() - started) * 1000, 3)
    structured = spec.shape == "structured"
    pack: dict[str, Any] = {
        "pack_id": pack_id, "request_id": request.get("request_id") or ids.new("req"),
        "scope": spec.scope, "view": spec.shape, "traversal": spec.traversal,
        "context_block": context_text,
        "layers": {layer: [] for layer in LAYERS} if structured else layers_out,
        "provenance": provenance,
    }  # fmt: skip
    if structured:
        pack["knowledge_subgraph"] = render.knowledge_subgraph(records)
    if context.warnings:
        pack["warnings"] = context.warnings
    report = diagnostics(spec, ranked, context, trail)
    if report is not None:
        pack["diagnostics"] = report
    if context.degraded or ranked.evictions:  # said at every diagnostics level, "none" too
        mark_partial(pack, "derived_layer_unavailable" if context.degraded else "token_budget_exhausted")
    return pack, layers_out



def kept(ranked: Ranked) -> dict[str, list[Candidate]]:
    """Per layer, the candidates the knapsack kept, best first."""
    kept_ids = {c.id for c in ranked.kept}
    out = {}
    for layer in LAYERS:
        out[layer] = sorted((c for c in ranked.chosen[layer] if c.id in kept_ids), key=lambda c: (-c.score, c.id))
    return out


def kept_records(ranked: Ranked) -> dict[str, list[dict[str, Any]]]:
    return {layer: [c.record for c in items] for layer, items in kept(ranked).items()}


def events(spec: RecallSpec, pack: dict[str, Any], layers_out: dict[str, list], ranked: Ranked,
           trail: Trail) -> Iterator[tuple[str, Any]]:  # fmt: skip
    """The streamed events after ``plan``, in the §10.1 order (the pack's other parts after its
    layers: ``parts``), then ("pack", the whole pack)."""
    for layer in LAYERS:
        if layer in spec.layers and spec.shape != "structured":
            yield "layer", {"layer": layer, "items": layers_out[layer], "elapsed_ms": ranked.layer_ms[layer]}
    yield from parts(pack)
    yield "context_block", {"text": pack["context_block"]}
    yield "provenance", pack["provenance"]
    if "diagnostics" in pack:
        yield "diagnostics", pack["diagnostics"]
    yield "done", {"total_ms": trail.timings["total"], "pack_id": pack["pack_id"]}
    yield "pack", pack


def parts(pack: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """The pack's parts beside its layers, each its own event after the layers: ``relationships``
    and ``signals`` (``{"items": [...]}``, as in the pack), ``facets`` (a temporal_facets recall's)."""
    for name in ("relationships", "signals"):
        if name in pack:
            yield name, {"items": pack[name]}
    if "facets" in pack:
        yield "facets", pack["facets"]


def replay(pack: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """The events of a cached pack (a recall repeated with its ``idempotency_key``)."""
    yield "plan", {"plan": pack["provenance"]["trail"][0]["plan"], "replay": True,
                   **({"warnings": pack["warnings"]} if pack.get("warnings") else {})}  # fmt: skip
    for layer, items in pack["layers"].items():
        yield "layer", {"layer": layer, "items": items, "elapsed_ms": 0.0}
    yield from parts(pack)
    yield "context_block", {"text": pack["context_block"]}
    yield "provenance", pack["provenance"]
    if "diagnostics" in pack:
        yield "diagnostics", pack["diagnostics"]
    yield "done", {"total_ms": 0.0, "pack_id": pack["pack_id"], "replay": True}
    yield "pack", pack


def citations(chosen: dict[str, list[Candidate]], kept_ids: set[str]) -> dict[str, list[str]]:
    """The citation DAG: each kept record's sources, down to events."""
    out: dict[str, list[str]] = {}
    for layer in LAYERS:
        for candidate in chosen[layer]:
            if candidate.id in kept_ids:
                for source, targets in candidate.chain.items():
                    out.setdefault(source, list(targets))
    return out


def diagnostics(spec: RecallSpec, ranked: Ranked, context: Context,
                trail: Trail) -> dict[str, Any] | None:  # fmt: skip
    level = spec.diagnostics
    if level == "none":
        return None
    report: dict[str, Any] = {
        "plan": context.plan,
        "filters_applied": context.filters_applied,
        "scopes_traversed": context.traversed,
        "time_ms": trail.timings,
        "knapsack_evictions": ranked.evictions,
        "per_layer_evictions": ranked.capped,
        "dedupe_evictions": ranked.deduplicated,
        # partial: a scope did not answer, or the token budget dropped items the ranking chose
        "_partial": bool(context.degraded) or ranked.evictions > 0,
    }
    fresh = [c.signals.get("freshness", 0.0) for c in ranked.kept]
    report["freshness"] = {  # how recently memory learned what the pack holds (1: just now)
        "weight": ranked.weights.get("freshness", 0.0),
        "mean": round(sum(fresh) / len(fresh), 4) if fresh else None,
        "min": min(fresh) if fresh else None,
    }
    if report["_partial"]:
        report["_partial_reason"] = "derived_layer_unavailable" if context.degraded else "token_budget_exhausted"
    if context.degraded:
        report["degraded"] = context.degraded
    if level == "full":
        report["policy"] = {"tier_attribution": "scope", "capability": context.capability}
        report["weights"] = ranked.weights
        report["items"] = {
            c.id: {"layer": c.layer, "score": round(c.score, 4), "signals": c.signals}
            for c in ranked.kept
        }
    return report
