"""The RecallCoordinator: one recall, from request to stratified pack (reference §8.3, §9, §10.1).

1. validate the request (``request``); classify the query (the plan is the first trail phase);
   route it (``routing``: one of six query types, each with its handler; the ``route`` phase);
2. resolve the traversal (``traversal``, the one rule layer reads use too): scopes the caller
   may not read are skipped, named in the ``traverse`` trail phase and, in diagnostics, as denied
   placeholders;
3. ask every scope actor for candidates concurrently, each under a deadline: a slow or failing
   scope degrades the pack (``DERIVED_LAYER_UNAVAILABLE`` in diagnostics) instead of failing it;
4. walk the relationships of the entities a relationship or entity-lookup question names
   (``graph_expand``, ``graph``); score (signals × plan weights, then the route's handler), MMR per
   layer, per-layer limits, the token knapsack;
5. assemble the pack (``pack``): the view, the context block with citations, the provenance
   trail and citation DAG, diagnostics at the requested level.
Packs are cached for 60 s by ``pack_id`` (``cache``); an ``idempotency_key`` returns the same pack
within 60 s.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import AsyncIterator
from typing import Any

import attrs
import trio

from ...errors import CortexError
from .. import jsoncodec
from ..actors.messages import Candidates
from ..model import Candidate
from ..phrases import TemporalPhrases
from ..policy.capabilities import SCOPE_READ_LOCAL, SIGNAL_READ, scope_read
from ..retrieve import document, planner, scoring
from ..retrieve import filters as recall_filters
from ..retrieve.temporal_filter import TemporalFilter
from ..temporal import format_ts
from . import contextdoc, graph, quality, routing, speakers
from . import pack as packs
from .cache import PackCache
from .request import LAYERS, RecallSpec, validate
from .traversal import traverse, verdict

MMR_LAMBDA = 0.7


def request_digest(request: dict[str, Any]) -> str:
    """What an idempotency key is bound to: the request, whichever way it is delivered (stream)."""
    return hashlib.sha256(jsoncodec.encode_canonical({k: v for k, v in request.items() if k != "stream"})).hexdigest()


@attrs.define
class Plan:
    """The classify phase's outcome: the query plan, its signal weights, the temporal filter."""

    plan: dict[str, Any]
    weights: dict[str, float]
    temporal: TemporalFilter
    filters_applied: list[Any]
    warnings: list[str]
    route: dict[str, Any] | None = None  # the router's output (None: recall_router off)
    starts: list[dict[str, Any]] = attrs.field(factory=list)  # the entities the question names
    window: Any = None  # a temporal question's resolved window: its records ranked first (window.py)


class RecallCoordinator:
    def __init__(self, ctx: Any, phrases: TemporalPhrases) -> None:
        self.ctx = ctx  # the engine's NodeContext
        self.phrases = phrases
        self.cache = ctx.packs = PackCache(ctx.config.pack_ttl_seconds, ctx.config.pack_cache_max,
                                                 ctx.config.pack_cache_bytes)  # fmt: skip
        self.narrator: Any = None  # view=narrative: answer.AnswerService.narrative (set by the engine)
        self.graph = graph.RelationshipService(ctx)  # relationships: engine.relationships

    async def recall(self, request: dict[str, Any], *, caller: str, tenant_id: str) -> dict[str, Any]:
        """The pack; a replay (its ``idempotency_key`` seen within 60 s) says so: ``replayed``."""
        pack, replayed = None, False
        async for name, data in self.stream(request, caller=caller, tenant_id=tenant_id):
            if name == "pack":
                pack = data
            elif name == "done":
                replayed = bool(data.get("replay"))
        return {**pack, "replayed": True} if replayed else pack

    def get_pack(self, pack_id: str, caller: str | None = None) -> dict[str, Any]:
        return self.cache.get(pack_id, self.ctx.clock.now(), caller)

    async def stream(self, request: dict[str, Any], *, caller: str,
                     tenant_id: str) -> AsyncIterator[tuple[str, Any]]:  # fmt: skip
        """The §10.1 events in order — plan, one layer per layer, context_block, provenance,
        diagnostics, done — and finally ("pack", the whole pack) for callers that want it."""
        started = trio.current_time()
        spec = validate(request)
        if spec.shape == "narrative":  # a story told from a holistic pack (answer.py)
            async for event in self.narrator(request, spec, caller=caller, tenant_id=tenant_id):
                yield event
            return
        now = self.ctx.clock.now()
        epoch = self.cache.epoch  # a forget meanwhile: the pack is not kept
        self.cache.expire(now)
        digest = request_digest(request) if spec.idempotency_key else ""
        if spec.idempotency_key:
            cached = self.cache.by_key((caller, spec.idempotency_key), digest)
            if cached is not None:
                for event in packs.replay(cached):
                    yield event
                return
        trail = packs.Trail(started=started)
        plan = await self._classify(spec, tenant_id, now, trail)
        yield "plan", {"plan": plan.plan, "filters_applied": plan.filters_applied,
                       **({"warnings": plan.warnings} if plan.warnings else {})}  # fmt: skip
        capability = scope_read(spec.traversal)
        scopes, denied = await self._traverse(spec, caller, capability, trail)
        candidates, traversed, degraded = await self._retrieve(spec, plan, scopes, now, trail)
        traversed += denied
        expansion = await routing.expand(self, spec, plan, scopes, trail)
        as_of = format_ts(plan.temporal.as_of or plan.temporal.reference or now)  # the anchor used
        head = contextdoc.header(spec.scope, as_of)
        ranked = self._rank(spec, plan, candidates, trail, expansion, head)
        context = packs.Context(plan=plan.plan, filters_applied=plan.filters_applied,
                                warnings=plan.warnings, traversed=traversed, degraded=degraded,
                                capability=capability)  # fmt: skip
        pack, layers_out = packs.assemble(spec, request, ranked, context, trail, self.ctx.ids, started)
        pack["as_of"] = as_of
        routing.into_pack(self.ctx.config, plan, expansion, pack, candidates)
        await self._signals(pack, scopes, plan, now, caller, tenant_id)
        if spec.format == "xml":  # last, over the whole pack (its signals and relationships parts too)
            contextdoc.attach(pack, packs.kept_records(ranked), head, spec.max_tokens, spec.citation_mode)
        key = (caller, spec.idempotency_key) if spec.idempotency_key else None
        self.cache.put(pack, now, key, epoch, caller, digest)
        for event in packs.events(spec, pack, layers_out, ranked, trail):
            yield event

    async def _signals(self, pack: dict[str, Any], scopes: list[str], plan: Plan, now: dt.datetime,
                       caller: str, tenant: str) -> None:  # fmt: skip
        """The ``signals`` pack part (engine/signals.py: decayed to the pack's anchor, of the
        traversed scopes whose ``signal.read`` the caller holds); a cut is counted in diagnostics."""
        moment = plan.temporal.as_of or plan.temporal.reference or now
        policy = self.ctx.policy
        pack["signals"], evicted, unread = await self.ctx.signals.for_recall(
            scopes, moment, tenant, plan.temporal.as_of, lambda scope: verdict(policy, caller, SIGNAL_READ, scope).allowed)
        report = pack.get("diagnostics")
        if report is not None:
            report["signals_evicted"] = evicted
            if unread:  # more signals than signal_snapshot_max: not read, said so
                report["signals_unread_scopes"] = unread
            if (evicted or unread) and not report["_partial"]:
                report["_partial"], report["_partial_reason"] = True, "signals_capped"

    async def _classify(self, spec: RecallSpec, tenant_id: str, now: dt.datetime,
                        trail: packs.Trail) -> Plan:  # fmt: skip
        t = trio.current_time()
        filters_applied = recall_filters.validate(spec.filters)
        custom = await self.phrases.map(tenant_id)
        temporal = TemporalFilter.from_query(spec.temporal, now, custom)
        filters_applied += temporal.describe()
        warnings = []
        if spec.shape == "raw" and temporal.valid_during is not None:
            warnings.append("valid_during_ignored_for_view_raw")  # §18.2 item 17
        plan = planner.classify(spec.query, temporal.active)
        mode = self.ctx.config.recall_mode
        freshness = self.ctx.config.freshness_weight
        weights = planner.weights_for(plan, freshness) if mode == "hybrid" else planner.single_signal(mode)
        trail.phases.append({"phase": "classify", "plan": plan, "elapsed_ms": trail.lap("classify", t)})
        chosen = Plan(plan, weights, temporal, filters_applied, warnings)
        if self.ctx.config.recall_router:
            await routing.route(self, spec, chosen, tenant_id, now, custom, trail)
        return chosen

    async def _traverse(self, spec: RecallSpec, caller: str, capability: str,
                        trail: packs.Trail) -> tuple[list[str], list[dict[str, Any]]]:  # fmt: skip
        """The start scope is checked (a refusal fails the recall); the traversal skips the
        scopes beyond it the caller may not read."""
        t = trio.current_time()
        self.ctx.policy.check(caller, SCOPE_READ_LOCAL, spec.scope)
        if spec.traversal != "local":
            self.ctx.policy.check(caller, capability, spec.scope)
        walk = await traverse(self.ctx, spec.scope, spec.traversal, caller)
        scopes, denied = list(walk.scopes), list(walk.denied)
        trail.lap("policy_check", t)
        trail.phases.append({"phase": "traverse", "view": spec.traversal, "scopes": scopes,
                             "skipped": [{"scope": d["scope"], "denied_reason": d["denied_reason"]} for d in denied],
                             "elapsed_ms": trail.timings["policy_check"]})  # fmt: skip
        return scopes, denied

    async def _embed(self, text: str) -> Any:
        if not text:
            return None
        embedder = self.ctx.embedder
        if getattr(embedder, "inline", False):
            return embedder.embed([text])[0]
        return (await trio.to_thread.run_sync(embedder.embed, [text]))[0]

    async def _retrieve(self, spec: RecallSpec, plan: Plan, scopes: list[str], now: dt.datetime,
                        trail: packs.Trail):  # fmt: skip
        t = trio.current_time()
        temporal = plan.temporal
        config = self.ctx.config
        content = None  # the content query (speakers.ContentQuery): each scope strips its voices
        if spec.query and config.recall_content_query and config.recall_mode == "hybrid":
            content = speakers.ContentQuery(spec.query, self._embed)
        fields = {
            "text": spec.query, "vector": None if content else await self._embed(spec.query), "content": content,
            "layers": spec.layers, "k": self.ctx.config.recall_candidates,
            "temporal": temporal, "filters": spec.filters,
            "reference": temporal.as_of or temporal.reference or now,
            "mode": self.ctx.config.recall_mode, "limits": spec.limits, "window": plan.window,
        }  # fmt: skip
        candidates, traversed, degraded = await self._fan_out(scopes, fields)
        trail.phases.append({"phase": "hybrid_retrieve", "scopes": len(scopes),
                             "bm25_hits": sum(1 for c in candidates if c.bm25 > 0),
                             "vector_hits": sum(1 for c in candidates if c.semantic > 0),
                             "candidates": len(candidates), "elapsed_ms": trail.lap("recall", t),
                             **({"content_query": searched} if content and (searched := content.searched()) else {})})  # fmt: skip
        trail.phases.append({"phase": "rerank", "model": None, "elapsed_ms": 0.0})
        return candidates, traversed, degraded

    async def _fan_out(self, scopes: list[str], fields: dict[str, Any]):
        """Ask every scope for candidates at once, each under ``recall_deadline``."""
        results: dict[str, list[Candidate]] = {}
        degraded: list[dict[str, Any]] = []
        deadline = self.ctx.config.recall_deadline

        async def ask(path: str) -> None:
            with trio.move_on_after(deadline) as timer:
                try:
                    results[path] = await self.ctx.supervisor.request(
                        path, lambda reply: Candidates(reply=reply, **fields)
                    )
                except CortexError as exc:
                    degraded.append({"scope": path, "error_code": "DERIVED_LAYER_UNAVAILABLE",
                                     "cause": exc.error_code, "message": exc.message})  # fmt: skip
            if timer.cancelled_caught:
                degraded.append(self._late(path, deadline))

        async with trio.open_nursery() as nursery:
            for path in scopes:
                nursery.start_soon(ask, path)
        candidates = [c for path in scopes for c in results.get(path, [])]
        traversed = [{"scope": path, "items": len(results.get(path, []))} for path in scopes]
        return candidates, traversed, degraded

    def _late(self, path: str, deadline: float) -> dict[str, Any]:
        """The ``degraded`` entry of a scope that did not answer within the deadline: a scope whose
        actor is still restoring its indexes (just opened, or reopened after a release or a crash)
        says so, since retrying shortly will find it ready."""
        actor = self.ctx.supervisor.actor(path)
        if actor is not None and actor.restoring:
            return {"scope": path, "error_code": "DERIVED_LAYER_UNAVAILABLE", "cause": "SCOPE_RESTORING",
                    "message": f"the scope was restoring its indexes and did not answer within {deadline}s"}  # fmt: skip
        return {"scope": path, "error_code": "DERIVED_LAYER_UNAVAILABLE", "cause": "DEADLINE_EXCEEDED",
                "message": f"no answer within {deadline}s"}  # fmt: skip

    def _rank(self, spec: RecallSpec, plan: Plan, candidates: list[Candidate], trail: packs.Trail,
              expansion: dict[str, Any], head: dict[str, Any]) -> packs.Ranked:  # fmt: skip
        """Score, keep each record's best candidate, MMR per layer, then the token knapsack."""
        t = trio.current_time()
        scoring.score_candidates(candidates, plan.weights)
        routing.adjust(plan, candidates, expansion, trail)
        quality.adjust(self.ctx.config, spec.query, candidates)
        trail.phases.append({"phase": "score", "weights": plan.weights, "elapsed_ms": trail.lap("rank", t)})
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
        capped: dict[str, int] = {}  # per layer: the candidates its limit left out
        for layer in LAYERS:
            limit = spec.limits[layer] if layer in spec.layers else 0
            chosen[layer] = scoring.mmr(by_layer[layer], limit, MMR_LAMBDA) if limit else []
            if layer in spec.layers:
                capped[layer] = len(by_layer[layer]) - len(chosen[layer])
            layer_ms[layer] = round((trio.current_time() - trail.started) * 1000, 3)  # §10.1: since the start
        trail.phases.append({"phase": "mmr", "lambda": MMR_LAMBDA, "per_layer_evictions": capped,
                             "elapsed_ms": trail.lap("mmr", t)})  # fmt: skip
        t = trio.current_time()
        pool, budget = [c for layer in LAYERS for c in chosen[layer]], spec.max_tokens
        if spec.format == "xml":  # the budget bounds the document: items cost their elements
            budget = contextdoc.item_budget(spec.max_tokens, head)
            for candidate in pool:
                candidate.tokens_estimate = document.item_cost(candidate.layer, candidate.record)
        kept, evictions = scoring.knapsack(pool, budget)
        trail.phases.append({"phase": "knapsack", "budget_tokens": budget,
                             "tokens_used": sum(c.tokens_estimate for c in kept),
                             "knapsack_evictions": evictions, "elapsed_ms": trail.lap("knapsack", t)})  # fmt: skip
        return packs.Ranked(chosen, kept, evictions, layer_ms, plan.weights, capped,
                            deduplicated=len(candidates) - len(best), budget=budget)  # fmt: skip
