"""The Engine facade: the one door every operation enters through (DESIGN §2).

Each public operation is one short method that fills in the caller and tenant defaults and
delegates: writes, reads, recall, phrases, the lifecycle bus, forget, erasures, blobs.  The engine
owns the root nursery: the supervisor, maintenance, the job runner and every actor end with it.
"""

from __future__ import annotations  # noqa: I001 (one line for .context keeps the module within its ratchet)

import logging
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import attrs
import trio

from ..backends import open_store
from ..errors import InvalidQuery, NotFound
from . import lifecycle, transfer
from .actors import messages
from .actors.bus import Subscription
from .actors.supervisor import ScopeSupervisor, SupervisorStatistics
from .clock import Clock, SystemClock
from .config import EngineConfig
from .context import NodeContext, check_embedder, close_context, derivation_processes, maintenance, node_context
from .forget import ForgetService, erasure
from .lifecycle import lifecycle_wire as lifecycle_wire  # the server's lifecycle streams use it
from .model import to_wire
from .phrases import TemporalPhrases
from .policy.capabilities import POLICY_ADMINISTER_SCOPE, SCOPE_WRITE
from .policy.hook import PolicyHook
from .reads import Reads
from .recall.answer import AnswerService
from .recall.coordinator import RecallCoordinator
from .recall.traversal import traverse
from .results import BulkResult, ExperienceResult, Traversal
from .scopes import canonical_scope
from .segmentation import SegmentationService
from .signals import agent_services
from .storage import NodeTables
from .storage.placement import ping_pending, release_placement, start_placement
from .understanding import Understanding
from .writes import Writes

log = logging.getLogger("cortexdb.engine")
RECALL_MODES = ("hybrid", "bm25", "vector")


class Engine:
    """An open CortexDB engine.  Create it with ``open_engine``."""

    def __init__(self, ctx: NodeContext) -> None:
        self._ctx = ctx
        self.config = ctx.config
        self.clock = ctx.clock
        self._supervisor = ScopeSupervisor(ctx)
        ctx.supervisor = self._supervisor
        self._phrases = TemporalPhrases(ctx.tables)
        self._reads = Reads(ctx, self._phrases)
        self._writes = Writes(ctx)
        self._recall = RecallCoordinator(ctx, self._phrases)
        self._answers = AnswerService(ctx, self._recall, ctx.llms)
        self.relationships = self._recall.graph  # relationships: traverse, envelope (docs/relationships.md)
        self.forget = ForgetService(ctx)  # forget (§8.5): await engine.forget(request, caller=...)
        self.erasures = erasure.ErasureService(self, ctx)  # GDPR erasure (§8.6): preview, execute, status...
        self.imports = transfer.ImportService(self, ctx, self.erasures.jobs, self._writes)  # imports (§8.11): start, status...
        self.exports = transfer.ExportService(self, ctx, self.erasures.jobs)  # exports (§8.12): start, status...
        self.concepts = Understanding(self, ctx, self._reads, self.erasures.jobs)  # list, get, related, synthesize...
        self.vocabularies = ctx.vocabularies  # vocabularies (§8.14): create, replace, get
        self.segmentation = SegmentationService(self, ctx, self.erasures.jobs)  # segment strategies: get, set, wait
        self.signals, self.proposals, self.intake = agent_services(self, ctx)  # docs/signals.md, proposals.md, intake.md
        self.blobs = ctx.blobs  # blobs (§8.13): engine/blobs.py's BlobService: put, stat, open, read, release
        self.embedder = ctx.embedder  # its name and dimension are recorded per data dir (M embedder)

    @property
    def store(self):
        """The engine's ``KVStore`` (what ``open_engine`` opened or was given)."""
        return self._ctx.store

    @property
    def tables(self) -> NodeTables:
        """The node's and tenants' tables (``storage.NodeTables``): how the server's stores read and
        write policy, tokens, audit rows and scope records without building a key (docs/decisions.md)."""
        return self._ctx.tables

    def _caller(self, caller: str | None) -> str:
        return caller or self.config.default_caller

    def _tenant(self, tenant_id: str | None) -> str:
        return tenant_id or self.config.tenant_id

    # -- lifetime ------------------------------------------------------------------------------
    async def _start(self, nursery: trio.Nursery) -> None:
        ctx = self._ctx
        reembed = await check_embedder(ctx)
        await ctx.entities.start()  # an old data dir: its entities are kept (legacy mentions)
        await ctx.wal.restore(ctx.tables.wal)
        await ctx.bus.restore()
        await start_placement(ctx, nursery, messages.Ping)  # several nodes share the store (engine/placement.py)
        await nursery.start(self._supervisor.run)
        nursery.start_soon(maintenance, ctx)
        scopes = await ctx.tables.scopes_with_pending_work()
        if reembed:  # re-embedding: every scope's actor does it on start
            scopes += [s for s in await self.scope_paths() if s not in scopes]
        for number, scope in enumerate(scopes, 1):
            if not await ping_pending(self._supervisor, scope, messages.Ping):  # spawning it resumes its pipeline
                continue  # another node holds its partition
            if reembed:  # the actor has re-embedded the scope (Lane.run restores before started)
                log.info("re-embedded scope %d/%d: %s", number, len(scopes), scope)
        await nursery.start(self.erasures.run)  # the job runner: resumes interrupted erasures

    async def _stop(self) -> None:
        await self._supervisor.stop()
        await release_placement(self._ctx)
        await close_context(self._ctx)  # LLM clients; a memory engine's transfer dir

    # -- writing -------------------------------------------------------------------------------
    async def experience(self, envelope: dict[str, Any], *, caller: str | None = None,
                         tenant_id: str | None = None, wait: str | None = None) -> ExperienceResult:  # fmt: skip
        """Capture one experience (§8.1); ``wait`` is None | captured | indexed | consolidated."""
        return await self._writes.experience(envelope, caller=self._caller(caller),
                                             tenant=self._tenant(tenant_id), wait=wait)  # fmt: skip

    async def experience_bulk(self, request: dict[str, Any], *, caller: str | None = None,
                              tenant_id: str | None = None, durable_keys: bool = False) -> BulkResult:  # fmt: skip
        """Up to ``bulk_max_items`` experiences, one scope, one atomic write (§8.2); ``durable_keys``: keys that never expire."""
        return await self._writes.bulk(request, caller=self._caller(caller), tenant=self._tenant(tenant_id), durable=durable_keys)  # fmt: skip

    async def experience_by_idempotency_key(self, key: str, *, caller: str | None = None,
                                            tenant_id: str | None = None) -> dict[str, Any]:  # fmt: skip
        """The event a (live) idempotency key produced, from a single or a bulk write."""
        record = await self._writes.by_idempotency_key(key, caller=self._caller(caller),
                                                       tenant=self._tenant(tenant_id))  # fmt: skip
        event = await self.get_event(record["scope"], record["event_id"])
        return {"event_id": record["event_id"], "wal_offset": record["wal_offset"], "scope": record["scope"], "batch_id": record.get("batch_id"), "event": event}  # fmt: skip

    # -- reading -------------------------------------------------------------------------------
    async def get_event(self, scope: str, event_id: str) -> dict[str, Any]:
        return await self._reads.ask(scope, messages.ReadEvent, event_id=event_id)

    async def events(self, scope: str, **filters: Any) -> dict[str, Any]:
        """A page of events: ``since``/``until`` (observed), ``recorded_since``/``recorded_until``,
        ``observed_actor``, ``modality``, ``include_excluded``, ``limit``, ``cursor``."""
        return await self._reads.ask(scope, messages.ReadEvents, **filters)

    async def episodes(self, scope: str, **filters: Any) -> dict[str, Any]:
        return await self._reads.ask(scope, messages.ReadEpisodes, **filters)

    async def get_episode(self, scope: str, episode_id: str, *, as_of: Any = None) -> dict[str, Any]:
        return await self._reads.ask(scope, messages.ReadEpisode, episode_id=episode_id, as_of=as_of)

    async def facts(self, scope: str, *, subject: str | None = None, tenant_id: str | None = None,
                    **filters: Any) -> dict[str, Any]:  # fmt: skip
        """A page of facts; ``subject`` is an ``ent_`` id, an actor id or a name.  ``as_of`` and
        ``include_superseded`` follow §12.3 / §18.2 item 1."""
        subject_id = await self._reads.subject_id(subject, tenant_id)
        return await self._reads.ask(scope, messages.ReadFacts, subject_id=subject_id, **filters)

    async def get_fact(self, scope: str, fact_id: str, *, as_of: Any = None) -> dict[str, Any]:
        return await self._reads.ask(scope, messages.ReadFact, fact_id=fact_id, as_of=as_of)

    async def fact_supports(self, scope: str, fact_id: str, *, limit: int | None = None,
                            cursor: str | None = None) -> dict[str, Any]:  # fmt: skip
        """Every event supporting a fact, in event order (the record keeps the first and latest)."""
        return await self._reads.ask(scope, messages.ReadFactSupports, fact_id=fact_id, limit=limit, cursor=cursor)

    async def facts_timeline(self, scope: str, *, subject: str, predicate: str,
                             tenant_id: str | None = None) -> dict[str, Any]:  # fmt: skip
        """The supersession chain of (subject, predicate), ordered by valid time (§8.7.4)."""
        subject_id = await self._reads.subject_id(subject, tenant_id)
        return await self._reads.ask(scope, messages.ReadTimeline, subject_id=subject_id, predicate=predicate)

    async def beliefs(self, scope: str, *, about: str | None = None, tenant_id: str | None = None,
                      **filters: Any) -> dict[str, Any]:  # fmt: skip
        about_id = await self._reads.subject_id(about, tenant_id)
        return await self._reads.ask(scope, messages.ReadBeliefs, about=about_id, **filters)

    async def get_belief(self, scope: str, belief_id: str, *, as_of: Any = None) -> dict[str, Any]:
        return await self._reads.ask(scope, messages.ReadBelief, belief_id=belief_id, as_of=as_of)

    async def beliefs_why(self, scope: str | None, belief_id: str, *, as_of: Any = None) -> dict[str, Any]:
        """Why we believe it (§8.7.6), as of a moment when asked; ``scope`` None: its own."""
        scope = scope or await self.home_scope(belief_id)
        return await self._reads.ask(scope, messages.ReadWhy, belief_id=belief_id, as_of=as_of)

    async def layer_counts(self, scope: str) -> dict[str, int]:
        """How many records each layer of a scope holds (operators' inventory, prune)."""
        return await self._reads.ask(scope, messages.LayerCounts)

    # -- understanding (§8.7.7-§8.7.11): engine/understanding.py; vocabularies (§8.14) -----------
    async def understanding(self, scope: str, **filters: Any) -> dict[str, Any]:
        return await self.concepts.list(scope, **filters)

    async def get_concept(self, scope: str, concept_id: str, *, as_of: Any = None) -> dict[str, Any]:
        return await self.concepts.get(scope, concept_id, as_of=as_of)

    async def related_concepts(self, scope: str, concept_id: str, **filters: Any) -> dict[str, Any]:
        return await self.concepts.related(scope, concept_id, **filters)

    async def understanding_coverage(self, scope: str) -> dict[str, Any]:
        return await self.concepts.coverage(scope)

    # -- scopes --------------------------------------------------------------------------------
    async def scope_paths(self, prefix: str = "") -> list[str]:
        """Every scope that has been written to (auto-provisioned or registered)."""
        return [path async for path in self._ctx.tables.scopes.ids(starting_with=prefix)]

    async def scope(self, path: str) -> dict[str, Any]:
        record = await self._ctx.tables.scopes.get(canonical_scope(path))
        if record is None:
            raise NotFound(f"scope {path} has never been written to", details={"path": path})
        return to_wire(record)

    async def edit_scope(self, path: str, edit: Any) -> Any:
        """Read-modify-write a scope's registration inside its actor: ``edit(Scope | None)``
        returns the new ``Scope`` or None to delete the registration (records stay)."""
        return await self._supervisor.request(canonical_scope(path), lambda reply: messages.EditScope(edit, reply))

    async def traverse(self, scope: str, view: str = "local", *, caller: str | None = None) -> Traversal:
        """The scopes a ``view`` of ``scope`` covers for ``caller`` (``recall.traversal``: the one
        rule recall and every layer read follow)."""
        return await traverse(self._ctx, scope, view, self._caller(caller))

    # -- recall --------------------------------------------------------------------------------
    async def recall(self, request: dict[str, Any], *, caller: str | None = None,
                     tenant_id: str | None = None) -> dict[str, Any]:  # fmt: skip
        """The stratified pack (reference §8.3, §9)."""
        return await self._recall.recall(request, caller=self._caller(caller), tenant_id=self._tenant(tenant_id))

    async def recall_stream(self, request: dict[str, Any], *, caller: str | None = None,
                            tenant_id: str | None = None) -> AsyncIterator[tuple[str, Any]]:  # fmt: skip
        """Streaming recall: ``(event, data)`` pairs in the §10.1 order (plan, layer…, done)."""
        async for name, data in self._recall.stream(request, caller=self._caller(caller),
                                                    tenant_id=self._tenant(tenant_id)):  # fmt: skip
            if name != "pack":
                yield name, data

    def get_pack(self, pack_id: str) -> dict[str, Any]:
        """A pack produced in the last 60 seconds (reference §18.2 items 20, 21)."""
        return self._recall.get_pack(pack_id)

    # -- answers (§8.4, §10.2; recall/answer.py, docs/answer.md) -------------------------------
    async def answer(self, request: dict[str, Any], *, caller: str | None = None,
                     tenant_id: str | None = None) -> dict[str, Any]:  # fmt: skip
        """Recall + LLM: the answer, its citations, the pack's provenance, diagnostics, as_of."""
        return await self._answers.answer(request, caller=self._caller(caller), tenant_id=self._tenant(tenant_id))

    def answer_stream(self, request: dict[str, Any], *, caller: str | None = None,
                      tenant_id: str | None = None) -> AsyncIterator[tuple[str, Any]]:  # fmt: skip
        """The answer as ``(event, data)`` pairs in the §10.2 order (token…, citations, done)."""
        return self._answers.stream(request, caller=self._caller(caller), tenant_id=self._tenant(tenant_id))

    # -- temporal phrases (§8.17) --------------------------------------------------------------
    async def register_temporal_phrase(self, name: str, pattern: str, resolves_to: dict[str, Any], *,
                                       tenant_id: str | None = None) -> dict[str, Any]:  # fmt: skip
        return await self._phrases.register(self._tenant(tenant_id), name, pattern, resolves_to)

    async def temporal_phrases(self, *, tenant_id: str | None = None) -> list[dict[str, Any]]:
        return await self._phrases.list(self._tenant(tenant_id))

    async def delete_temporal_phrase(self, name: str, *, tenant_id: str | None = None) -> None:
        await self._phrases.delete(self._tenant(tenant_id), name)

    async def temporal_phrase_map(self, tenant: str) -> dict[str, tuple]:
        return await self._phrases.map(tenant)

    @property
    def policy(self) -> PolicyHook:
        """The policy hook every capability decision goes through (``open_engine(policy=...)``)."""
        return self._ctx.policy

    def new_id(self, prefix: str) -> str:
        """A fresh time-ordered id of the given namespace (``req``, ``audit``, ...; §3.6)."""
        return self._ctx.ids.new(prefix)

    # -- lifecycle -----------------------------------------------------------------------------
    async def home_scope(self, record_id: str) -> str:
        """The scope an event was captured in, or a belief created in (NOT_FOUND: no such one)."""
        return await self._reads.home_scope(record_id)

    async def memory_event(self, event_id: str, *, scope: str | None = None) -> dict[str, Any]:
        """The aggregate state of one memory event (§8.9.3)."""
        scope = scope or await self.home_scope(event_id)
        return await self._reads.ask(scope, messages.ReadEventState, event_id=event_id)

    async def lifecycle_event(self, lifecycle_id: str) -> dict[str, Any]:
        return await lifecycle.record(self._ctx.bus, lifecycle_id)

    async def lifecycle(self, *, since_lifecycle_id: str | None = None, limit: int = 100,
                        **filters: Any) -> list[dict[str, Any]]:  # fmt: skip
        """Catch-up: published lifecycle rows after ``since_lifecycle_id``, in lce order (§8.9.4)."""
        return await lifecycle.history(self._ctx.bus, since_lifecycle_id=since_lifecycle_id, limit=limit,
                                       **filters)  # fmt: skip

    def subscribe(self, *, since_lifecycle_id: str | None = None, capacity: int | None = None,
                  **filters: Any) -> AbstractAsyncContextManager[Subscription]:  # fmt: skip
        """Live lifecycle records matching the filters, resuming after ``since_lifecycle_id``; one
        ``capacity`` records behind receives a ``lagging`` record and its iteration ends."""
        return lifecycle.subscription(self._ctx.bus, since_lifecycle_id=since_lifecycle_id,
                                      capacity=capacity or self.config.subscriber_buffer, **filters)  # fmt: skip

    async def cancel(self, event_id: str, *, caller: str | None = None) -> dict[str, Any]:
        """Cancel the queued stages of a captured event; it is excluded from recall (§8.9.5)."""
        caller = self._caller(caller)
        scope = await self.home_scope(event_id)
        self._ctx.policy.check(caller, SCOPE_WRITE, scope)
        event = await self.get_event(scope, event_id)
        if event["caller"] != caller:  # someone else's write: only an administrator of the scope
            self._ctx.policy.check(caller, POLICY_ADMINISTER_SCOPE, scope)
        return await self._supervisor.request(scope, lambda reply: messages.CancelEvent(event_id, caller, reply))

    # -- operations ----------------------------------------------------------------------------
    async def flush(self, scope: str | None = None, *, seal: bool = False) -> None:
        """Wait until queued derivations are done (in a scope, or every live actor); ``seal``: seal episodes."""
        scopes = [canonical_scope(scope)] if scope else self._supervisor.scopes()
        for name in scopes:
            await self._supervisor.request(name, lambda reply: messages.Flush(seal, reply))

    async def rebuild(self, scope: str) -> None:
        """Replay a scope's WAL into fresh derived layers (§2.1: every derived layer is reproducible)."""
        await self._supervisor.request(canonical_scope(scope), messages.Rebuild)

    async def ping(self, scope: str) -> dict[str, Any]:
        return await self._supervisor.request(canonical_scope(scope), messages.Ping)

    async def release(self, scope: str | None = None, *, drain: bool = False) -> bool | int:
        """Release one idle scope now (True: not open; ``drain``: once its work is done), or sweep (docs/architecture.md)."""
        return await self._supervisor.release(canonical_scope(scope), drain=drain) if scope else await self._supervisor.sweep()

    def observe_stages(self, observer: Any) -> None:
        """Call ``observer(STAGE_TIMING name, seconds)`` per event as each lane step ends (no I/O)."""
        self._ctx.stage_observer = observer

    def statistics(self) -> SupervisorStatistics:
        return self._supervisor.statistics()

    async def compact(self) -> bool:
        """Compact the store when its backend can; False when there is nothing to do."""
        return await self._ctx.tables.compact()

    def set_recall_mode(self, mode: str) -> None:
        """Switch ``EngineConfig.recall_mode`` (hybrid, bm25, vector) on an open engine, to
        compare them over the same data (bench/locomo.py's arms); every other setting stays."""
        if mode not in RECALL_MODES:
            raise InvalidQuery(f"recall_mode must be one of {list(RECALL_MODES)}",
                               details={"field": "recall_mode"})  # fmt: skip
        self.config = self._ctx.config = attrs.evolve(self._ctx.config, recall_mode=mode)

    async def pause_derivation(self, scope: str) -> None:
        """Park a scope's derivation lane (bench/capture.py times the drain of the backlog):
        captures stay pending (``P`` markers) until the engine reopens; a ``flush`` waits."""
        scope = canonical_scope(scope)
        await self.ping(scope)  # the actor is running
        actor = self._supervisor.actor(scope)
        if actor is not None:
            actor.lane.stop()

    @property
    def wal_offset(self) -> int:
        return self._ctx.wal.last
    placement = property(lambda self: self._ctx.placement)  # the partitions held (placement.py); None: one node


@asynccontextmanager
async def open_engine(backend: str = "memory", path: str | None = None, *, config: EngineConfig | None = None,
                      clock: Clock | None = None, id_seed: int | None = None, extractor: Any = None,
                      policy: PolicyHook | None = None, store: Any = None, embedder: Any = None,
                      llm: Any = None) -> AsyncIterator[Engine]:  # fmt: skip
    """Open an engine on ``memory`` or ``leveldb`` (at ``path``) for the duration of the block.

    ``clock`` and ``id_seed`` make recorded times and ids deterministic for tests; ``store``
    plugs in any ``KVStore`` (a third-party backend) instead of ``backend``/``path``; ``llm`` any
    ``spi.llm.LLM`` as the default answer model instead of the configured one.
    """
    config = config or EngineConfig()
    owned = store is None
    store = store if store is not None else await open_store(backend, path, leveldb=config.leveldb_options())
    ctx = node_context(store, config=config, clock=clock or SystemClock(), id_seed=id_seed,
                       extractor=extractor, policy=policy, embedder=embedder, llm=llm)  # fmt: skip
    try:
        async with derivation_processes(config) as processes, trio.open_nursery() as nursery:
            ctx.cpu_processes = processes
            engine = Engine(ctx)
            await engine._start(nursery)
            try:
                yield engine
            finally:
                with trio.CancelScope(shield=True):
                    await engine._stop()
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # the nursery is ours, not the caller's: one error from the block comes out as itself
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
    finally:
        if owned:
            with trio.CancelScope(shield=True):
                await store.close()
