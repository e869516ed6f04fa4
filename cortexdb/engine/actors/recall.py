"""The RecallCoordinator: one recall, from request to stratified pack (reference §8.3, §9, §10.1).

1. validate the request; classify the query (the plan is the first trail phase);
2. resolve the traversal with ``Engine.traverse`` (the one rule layer reads use too): scopes the
   caller may not read are skipped, named in the ``traverse`` trail phase and, in diagnostics,
   as denied placeholders;
3. ask every scope actor for candidates concurrently, each under a deadline: a slow or failing
   scope degrades the pack (``DERIVED_LAYER_UNAVAILABLE`` in diagnostics) instead of failing it;
4. score (signals × plan weights), MMR per layer, per-layer limits, the token knapsack;
5. render the view (raw / granular / holistic / structured), the context block with citations,
   the provenance trail and citation DAG, and diagnostics at the requested level.
Packs are cached for 60 s by ``pack_id``; an ``idempotency_key`` returns the same pack within 60 s.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import trio

from ...errors import CortexError, InvalidBody, InvalidRecall, NotFound
from ..model import Candidate
from ..policy.capabilities import SCOPE_READ_LOCAL, scope_read
from ..retrieve import filters as recall_filters
from ..retrieve import planner, render, scoring
from ..retrieve.temporal_filter import TemporalFilter
from ..scopes import canonical_scope
from .messages import ReadLayer

LAYERS = ("events", "episodes", "facts", "beliefs", "understanding")
SHAPES = ("raw", "granular", "holistic", "structured")
TRAVERSALS = ("local", "holistic", "descend")
DIAGNOSTICS = ("none", "summary", "full")
DEFAULT_LIMITS = {"events": 10, "episodes": 5, "facts": 20, "beliefs": 10, "understanding": 3}
RAW_EVENTS_LIMIT = 50
REQUEST_FIELDS = {
    "scope", "view", "traversal", "query", "include", "exclude_content", "temporal", "filters", "budgets",
    "citation_mode", "diagnostics", "stream", "idempotency_key",
}  # fmt: skip
MMR_LAMBDA = 0.7



def _validate(request: Any) -> dict[str, Any]:
    if not isinstance(request, dict):
        raise InvalidBody("the recall request must be a JSON object", details={"field": "$"})
    unknown = sorted(request.keys() - REQUEST_FIELDS)
    if unknown:
        raise InvalidRecall(unknown[0], "is not a field of the recall request")
    if "scope" not in request:
        raise InvalidRecall("scope", "is required")
    scope = canonical_scope(request["scope"])
    view = request.get("view") or "holistic"
    traversal = request.get("traversal")
    if view in ("local", "descend"):  # `view` may name the traversal (§3.4.2) ...
        traversal, shape = traversal or view, "holistic"
    elif view in SHAPES:  # ... or the pack's shape (§9.1)
        shape = view
    elif view == "narrative":
        raise InvalidRecall(
            "view", "narrative needs an LLM and arrives with /v1/answer; use holistic"
        )
    else:
        raise InvalidRecall("view", f"must be one of {list(SHAPES) + ['local', 'descend']}")
    traversal = traversal or "holistic"
    if traversal not in TRAVERSALS:
        raise InvalidRecall("traversal", f"must be one of {list(TRAVERSALS)}")
    query = request.get("query") or ""
    if not isinstance(query, str) or len(query) > 8192:
        raise InvalidRecall("query", "must be a string of at most 8192 characters")
    include = request.get("include")
    if include is not None:
        if not isinstance(include, list) or any(layer not in LAYERS for layer in include):
            raise InvalidRecall("include", f"must be an array drawn from {list(LAYERS)}")
    layers = set(include or LAYERS)
    if shape == "raw":
        layers = {"events"}
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
        if layer not in LAYERS:
            raise InvalidRecall(
                f"budgets.per_layer_limits.{layer}", f"is not a layer; use {list(LAYERS)}"
            )
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1000:
            raise InvalidRecall(
                f"budgets.per_layer_limits.{layer}", "must be an integer from 0 to 1000"
            )
        limits[layer] = value
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
    return {
        "scope": scope, "shape": shape, "traversal": traversal, "query": query, "layers": layers,
        "limits": limits, "max_tokens": max_tokens, "citation_mode": citation_mode, "diagnostics": diagnostics,
        "exclude_content": exclude_content, "temporal": request.get("temporal"),
        "filters": request.get("filters"), "idempotency_key": key,
    }  # fmt: skip


class RecallCoordinator:
    def __init__(self, engine, ctx) -> None:
        self.engine = engine  # for the traversal and the temporal phrases
        self.ctx = ctx  # the engine's NodeContext
        self._packs: dict[str, tuple[dt.datetime, dict[str, Any]]] = {}
        self._keys: dict[tuple[str, str], str] = {}

    # -- public --------------------------------------------------------------------------------
    async def recall(
        self, request: dict[str, Any], *, caller: str, tenant_id: str
    ) -> dict[str, Any]:
        pack = None
        async for name, data in self.stream(request, caller=caller, tenant_id=tenant_id):
            if name == "pack":
                pack = data
        return pack

    async def stream(
        self, request: dict[str, Any], *, caller: str, tenant_id: str
    ) -> AsyncIterator[tuple[str, Any]]:
        """The §10.1 events in order — plan, one layer per layer, context_block, provenance,
        diagnostics, done — and finally ("pack", the whole pack) for callers that want it."""
        started = trio.current_time()
        spec = _validate(request)
        now = self.ctx.clock.now()
        self._expire(now)
        if spec["idempotency_key"]:
            cached = self._keys.get((caller, spec["idempotency_key"]))
            if cached in self._packs:
                async for item in self._replay(self._packs[cached][1]):
                    yield item
                return
        timings: dict[str, float] = {}
        trail: list[dict[str, Any]] = []

        def lap(name: str, since: float) -> float:
            elapsed = round((trio.current_time() - since) * 1000, 3)
            timings[name] = elapsed
            return elapsed

        t = trio.current_time()
        filters_applied = recall_filters.validate(spec["filters"])
        custom = await self.engine.temporal_phrase_map(tenant_id)
        temporal = TemporalFilter.from_query(spec["temporal"], now, custom)
        filters_applied += temporal.describe()
        warnings = []
        if spec["shape"] == "raw" and temporal.valid_during is not None:
            warnings.append("valid_during_ignored_for_view_raw")  # §18.2 item 17
        plan = planner.classify(spec["query"], temporal.active)
        mode = self.ctx.config.recall_mode
        weights = planner.weights_for(plan) if mode == "hybrid" else planner.single_signal(mode)
        trail.append({"phase": "classify", "plan": plan, "elapsed_ms": lap("classify", t)})
        yield "plan", {"plan": plan, "filters_applied": filters_applied}

        t = trio.current_time()
        policy_capability = scope_read(spec["traversal"])
        self.ctx.policy.check(caller, SCOPE_READ_LOCAL, spec["scope"])
        if spec["traversal"] != "local":
            self.ctx.policy.check(caller, policy_capability, spec["scope"])
        traversal = await self.engine.traverse(spec["scope"], spec["traversal"], caller=caller)
        scopes, denied = list(traversal.scopes), list(traversal.denied)
        lap("policy_check", t)
        trail.append({"phase": "traverse", "view": spec["traversal"], "scopes": scopes,
                      "skipped": [{"scope": d["scope"], "denied_reason": d["denied_reason"]} for d in denied],
                      "elapsed_ms": timings["policy_check"]})  # fmt: skip

        t = trio.current_time()
        vector = None
        if spec["query"]:
            embedder = self.ctx.embedder
            if getattr(embedder, "inline", False):
                vector = embedder.embed([spec["query"]])[0]
            else:
                vector = (await trio.to_thread.run_sync(embedder.embed, [spec["query"]]))[0]
        reference = temporal.as_of or temporal.reference or now
        query = {
            "text": spec["query"], "vector": vector, "layers": spec["layers"] - {"understanding"},
            "k": self.ctx.config.recall_candidates, "temporal": temporal, "filters": spec["filters"],
            "reference": reference, "mode": mode, "limits": spec["limits"],
        }  # fmt: skip
        candidates, traversed, degraded = await self._fan_out(scopes, query)
        for placeholder in denied:
            traversed.append(placeholder)
        trail.append({"phase": "hybrid_retrieve", "scopes": len(scopes),
                      "bm25_hits": sum(1 for c in candidates if c.bm25 > 0),
                      "vector_hits": sum(1 for c in candidates if c.semantic > 0),
                      "candidates": len(candidates), "elapsed_ms": lap("recall", t)})  # fmt: skip
        trail.append({"phase": "rerank", "model": None, "elapsed_ms": 0.0})

        t = trio.current_time()
        scoring.score_candidates(candidates, weights)
        linked = sum(1 for c in candidates if c.signals["graph"] > 0)
        trail.append(
            {
                "phase": "graph_expand",
                "linked_candidates": linked,
                "added_nodes": 0,
                "elapsed_ms": 0.0,
            }
        )
        trail.append({"phase": "score", "weights": weights, "elapsed_ms": lap("rank", t)})

        t = trio.current_time()
        by_layer: dict[str, list[Candidate]] = {layer: [] for layer in LAYERS}
        best: dict[tuple[str, str], Candidate] = {}  # one item per record: a long event's
        for candidate in candidates:  # best passage (its item says which of how many it is)
            key = (candidate.scope, candidate.record["id"])
            if key not in best or candidate.score > best[key].score:
                best[key] = candidate
        for candidate in best.values():
            by_layer[candidate.layer].append(candidate)
        chosen: dict[str, list[Candidate]] = {}
        layer_ms: dict[str, float] = {}
        for layer in LAYERS:
            layer_started = trio.current_time()
            limit = spec["limits"][layer] if layer in spec["layers"] else 0
            chosen[layer] = scoring.mmr(by_layer[layer], limit, MMR_LAMBDA) if limit else []
            layer_ms[layer] = round((trio.current_time() - layer_started) * 1000, 3)
        trail.append({"phase": "mmr", "lambda": MMR_LAMBDA, "elapsed_ms": lap("mmr", t)})
        t = trio.current_time()
        flat = [c for layer in LAYERS for c in chosen[layer]]
        kept, evictions = scoring.knapsack(flat, spec["max_tokens"])
        kept_ids = {c.id for c in kept}
        trail.append({"phase": "knapsack", "budget_tokens": spec["max_tokens"],
                      "tokens_used": sum(c.tokens_estimate for c in kept),
                      "knapsack_evictions": evictions, "elapsed_ms": lap("knapsack", t)})  # fmt: skip

        layers_out: dict[str, list[dict[str, Any]]] = {}
        records: dict[str, list[dict[str, Any]]] = {}
        for layer in LAYERS:
            items = [c for c in chosen[layer] if c.id in kept_ids]
            items.sort(key=lambda c: (-c.score, c.id))
            records[layer] = [c.record for c in items]
            layers_out[layer] = [
                self._item(c, position, spec["exclude_content"])
                for position, c in enumerate(items, 1)
            ]

        t = trio.current_time()
        context_text, markers = ("", [])
        if spec["shape"] == "holistic":
            context_text, markers = render.context_block(records, spec["citation_mode"])
        lap("render_context_block", t)
        citations: dict[str, list[str]] = {}
        for layer in LAYERS:
            for c in chosen[layer]:
                if c.id in kept_ids:
                    for source, targets in c.chain.items():
                        citations.setdefault(source, list(targets))
        provenance = {"trail": trail, "citations": citations}
        if spec["citation_mode"] != "none":
            provenance["markers"] = markers

        pack_id = self.ctx.ids.new("pack")
        timings["total"] = round((trio.current_time() - started) * 1000, 3)
        pack: dict[str, Any] = {
            "pack_id": pack_id,
            "request_id": request.get("request_id") or self.ctx.ids.new("req"),
            "scope": spec["scope"],
            "view": spec["shape"],
            "traversal": spec["traversal"],
            "context_block": context_text,
            "layers": layers_out
            if spec["shape"] != "structured"
            else {layer: [] for layer in LAYERS},
            "provenance": provenance,
        }
        if spec["shape"] == "structured":
            pack["knowledge_subgraph"] = render.knowledge_subgraph(records)
        if warnings:
            pack["warnings"] = warnings
        diagnostics = self._diagnostics(spec, plan, weights, filters_applied, traversed, degraded, timings,
                                        evictions, kept, policy_capability)  # fmt: skip
        if diagnostics is not None:
            pack["diagnostics"] = diagnostics
        self._packs[pack_id] = (now + dt.timedelta(seconds=self.ctx.config.pack_ttl_seconds), pack)
        while len(self._packs) > self.ctx.config.pack_cache_max:  # a recall burst: oldest out
            del self._packs[next(iter(self._packs))]
        if spec["idempotency_key"]:
            self._keys[(caller, spec["idempotency_key"])] = pack_id

        for layer in LAYERS:
            if layer in spec["layers"] and spec["shape"] != "structured":
                yield (
                    "layer",
                    {"layer": layer, "items": layers_out[layer], "elapsed_ms": layer_ms[layer]},
                )
        yield "context_block", {"text": context_text}
        yield "provenance", provenance
        if diagnostics is not None:
            yield "diagnostics", diagnostics
        yield "done", {"total_ms": timings["total"], "pack_id": pack_id}
        yield "pack", pack

    def get_pack(self, pack_id: str) -> dict[str, Any]:
        self._expire(self.ctx.clock.now())
        entry = self._packs.get(pack_id)
        if entry is None:
            raise NotFound("no such pack (packs live 60 seconds)", details={"pack_id": pack_id})
        return entry[1]

    # -- helpers -------------------------------------------------------------------------------
    async def _replay(self, pack: dict[str, Any]) -> AsyncIterator[tuple[str, Any]]:
        yield "plan", {"plan": pack["provenance"]["trail"][0]["plan"], "replay": True}
        for layer, items in pack["layers"].items():
            yield "layer", {"layer": layer, "items": items, "elapsed_ms": 0.0}
        yield "context_block", {"text": pack["context_block"]}
        yield "provenance", pack["provenance"]
        if "diagnostics" in pack:
            yield "diagnostics", pack["diagnostics"]
        yield "done", {"total_ms": 0.0, "pack_id": pack["pack_id"], "replay": True}
        yield "pack", pack

    def _expire(self, now: dt.datetime) -> None:
        for pack_id in [p for p, (expires, _) in self._packs.items() if expires <= now]:
            del self._packs[pack_id]
        for key in [k for k, p in self._keys.items() if p not in self._packs]:
            del self._keys[key]

    @staticmethod
    def _item(candidate: Candidate, position: int, exclude_content: bool) -> dict[str, Any]:
        record = dict(candidate.record)
        if exclude_content:
            for field in ("content", "summary", "opening", "closing"):
                record.pop(field, None)
        record["ranked_position"] = position
        record["score"] = round(candidate.score, 4)
        record["scope"] = candidate.scope
        return record

    async def _fan_out(self, scopes: list[str], query: dict[str, Any]):
        results: dict[str, list[Candidate]] = {}
        degraded: list[dict[str, Any]] = []
        deadline = self.ctx.config.recall_deadline

        async def ask(path: str) -> None:
            with trio.move_on_after(deadline) as timer:
                try:
                    results[path] = await self.ctx.supervisor.request(
                        path, lambda reply: ReadLayer("candidates", query, reply)
                    )
                except CortexError as exc:
                    degraded.append({"scope": path, "error_code": "DERIVED_LAYER_UNAVAILABLE",
                                     "cause": exc.error_code, "message": exc.message})  # fmt: skip
            if timer.cancelled_caught:
                degraded.append({"scope": path, "error_code": "DERIVED_LAYER_UNAVAILABLE",
                                 "cause": "DEADLINE_EXCEEDED", "message": f"no answer within {deadline}s"})  # fmt: skip

        async with trio.open_nursery() as nursery:
            for path in scopes:
                nursery.start_soon(ask, path)
        candidates = [c for path in scopes for c in results.get(path, [])]
        traversed = [{"scope": path, "items": len(results.get(path, []))} for path in scopes]
        return candidates, traversed, degraded

    @staticmethod
    def _diagnostics(spec, plan, weights, filters_applied, traversed, degraded, timings, evictions, kept,
                     capability) -> dict[str, Any] | None:  # fmt: skip
        level = spec["diagnostics"]
        if level == "none":
            return None
        diagnostics: dict[str, Any] = {
            "plan": plan,
            "filters_applied": filters_applied,
            "scopes_traversed": traversed,
            "time_ms": timings,
            "knapsack_evictions": evictions,
            "_partial": bool(degraded),
        }
        if degraded:
            diagnostics["degraded"] = degraded
        if level == "full":
            diagnostics["policy"] = {"tier_attribution": "scope", "capability": capability}
            diagnostics["weights"] = weights
            diagnostics["items"] = {
                c.id: {
                    "layer": c.layer,
                    "score": round(c.score, 4),
                    "signals": c.signals,
                }
                for c in kept
            }
        return diagnostics
