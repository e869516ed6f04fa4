"""The Engine facade: the one door every operation enters through (DESIGN §2).

A request is validated, its identities resolved, its capabilities checked once (policy hook),
and it is handed to the actor that owns its scope.  The engine owns the root nursery: the
supervisor, the maintenance task and every actor live inside it, so nothing outlives
``open_engine``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from ..backends import open_store
from ..errors import (
    CortexError,
    IdempotencyConflict,
    InvalidEnvelope,
    NotFound,
    PayloadTooLarge,
    PolicyDenied,
)
from . import jsoncodec, keys
from .actors.bus import LifecycleBus, LifecycleFilter, Subscription
from .actors.messages import CancelEvent, Capture, CaptureItem, Flush, Ping, ReadLayer, Rebuild
from .actors.services import EntityResolver, IdempotencyTable, Replay, WalSequencer, body_hash
from .actors.supervisor import ScopeSupervisor, SupervisorStatistics
from .clock import Clock, SystemClock
from .config import EngineConfig
from .derive.rules import RuleExtractor
from .envelope import resolve_identities, validate_envelope
from .ids import IdGenerator
from .limits import check_event_size
from .memtrim import release_free_memory_soon
from .model import LifecycleEvent, to_wire
from .policy.hook import AllowAll, PolicyHook, Verdict
from .retrieve.embedders import by_name
from .scopes import ancestors, canonical_scope, is_within
from .temporal import parse_rfc3339

log = logging.getLogger("cortexdb.engine")

WAIT_MODES = (None, "captured", "indexed", "consolidated")
STAGE_ORDER = ("captured", "extracted", "indexed", "consolidated")
STAGE_TIMING = {"extracted": "extract", "indexed": "index", "consolidated": "consolidate"}
ORDERINGS = ("strict_temporal", "batch_throughput")
FAMILY_EXPERIENCE = "/v1/experience"
FAMILY_BULK = "/v1/experience/bulk"


@attrs.frozen
class ExperienceResult:
    """The answer to one write (reference §8.1)."""

    event_id: str
    status: str  # captured | indexed | consolidated | cancelled
    wal_offset: int
    scope: str
    replay: bool = False
    stages_completed: tuple[str, ...] | None = None
    derives: tuple[str, ...] | None = None
    elapsed_ms: dict[str, float] | None = None

    @property
    def lifecycle_stream(self) -> str:
        return f"/v1/lifecycle/stream?event_id={self.event_id}"

    def to_wire(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "event_id": self.event_id,
            "status": self.status,
            "wal_offset": self.wal_offset,
            "lifecycle_stream": self.lifecycle_stream,
        }
        if self.stages_completed is not None:
            body["stages_completed"] = list(self.stages_completed)
            body["derives"] = list(self.derives or ())
            body["elapsed_ms"] = dict(self.elapsed_ms or {})
        return body


@attrs.frozen
class BulkResult:
    """The answer to a bulk write (reference §8.2): always asynchronous."""

    batch_id: str
    accepted: int
    replayed: int
    scope: str
    ordering: str

    @property
    def lifecycle_stream(self) -> str:
        return f"/v1/lifecycle/stream?batch_id={self.batch_id}"

    def to_wire(self) -> dict[str, Any]:
        return {
            "batch_id": self.batch_id,
            "accepted": self.accepted,
            "replayed": self.replayed,
            "ordering": self.ordering,
            "lifecycle_stream": self.lifecycle_stream,
        }


@attrs.frozen
class Traversal:
    """The scopes one read covers: the one traversal rule of recall and every layer read
    (docs/decisions.md, "One traversal").  ``scopes`` are readable, the start scope first;
    ``denied`` are the scopes the view reaches but the caller may not read, as §18.2 item 4
    placeholders (``{scope, denied, item_count, denied_reason}``: existence, never content)."""

    view: str
    scopes: tuple[str, ...]
    denied: tuple[dict[str, Any], ...] = ()


VIEWS = ("local", "holistic", "descend")


@attrs.define
class NodeContext:
    """What every actor shares: node services and configuration (no mutable shared state)."""

    store: Any
    clock: Clock
    ids: IdGenerator
    config: EngineConfig
    bus: LifecycleBus
    wal: WalSequencer
    idempotency: IdempotencyTable
    entities: EntityResolver
    extractor: Any
    policy: PolicyHook
    embedder: Any = None
    supervisor: ScopeSupervisor | None = None
    # derivation's CPU work on long texts: at most config.derivation_worker_limit workers at once;
    # "process" (config.derivation_workers) until a process fails, then "thread"; the engine's
    # trio-parallel worker context when processes are on
    cpu_limiter: trio.CapacityLimiter | None = None
    cpu_workers: str = "thread"
    cpu_processes: Any = None


class Engine:
    """An open CortexDB engine.  Create it with ``open_engine``."""

    def __init__(self, ctx: NodeContext) -> None:
        self._ctx = ctx
        self.config = ctx.config
        self.clock = ctx.clock
        self._supervisor = ScopeSupervisor(ctx)
        ctx.supervisor = self._supervisor
        from .actors.recall import RecallCoordinator

        self._recall = RecallCoordinator(self)
        self._phrases: dict[str, dict[str, tuple]] = {}

    @property
    def store(self):
        return self._ctx.store

    # -- lifetime ------------------------------------------------------------------------------
    async def _start(self, nursery: trio.Nursery) -> None:
        ctx = self._ctx
        await self._check_embedder()
        await ctx.wal.restore(ctx.store)
        await ctx.bus.restore()
        await nursery.start(self._supervisor.run)
        nursery.start_soon(self._maintenance)
        scopes = await self._scopes_with_pending_work()
        if getattr(
            self, "_rescan_all", False
        ):  # re-embedding: every scope's actor does it on start
            scopes += [s for s in await self.scope_paths() if s not in scopes]
        for scope in scopes:
            await self._supervisor.request(scope, Ping)  # spawning the actor resumes its pipeline

    async def _check_embedder(self) -> None:
        """A data dir records its embedder: vectors of two embedders are never mixed."""
        from .retrieve.embedders import EmbedderMismatch
        from .spi.kv import Delete, Put

        embedder = self._ctx.embedder
        current = {"name": embedder.name, "dimension": embedder.dimension}
        raw = await self.store.get(keys.meta("embedder"))
        recorded = jsoncodec.decode(raw) if raw else None
        if recorded == current:
            return
        if recorded is not None and not self.config.reembed:
            raise EmbedderMismatch(
                f"this data dir was embedded with {recorded['name']} ({recorded['dimension']} dimensions), "
                f"not {embedder.name}; open it with that embedder, or with reembed=True to re-embed",
                details={"recorded": recorded, "requested": current},
            )
        if recorded is not None:  # re-embed: drop every stored vector; actors re-embed on start
            doomed = [
                Delete(key) async for key, _ in self.store.scan(prefix=keys.VECTOR_TABLE_PREFIX)
            ]
            for start in range(0, len(doomed), 10_000):
                await self.store.write(doomed[start : start + 10_000])
            self._rescan_all = True
        await self.store.write([Put(keys.meta("embedder"), jsoncodec.encode(current))], sync=True)

    async def _scopes_with_pending_work(self) -> list[str]:
        scopes: list[str] = []
        for table in (b"P", b"FW"):
            start = table + keys.SEP
            while True:
                found = None
                async for key, _ in self.store.scan(prefix=table + keys.SEP, start=start, limit=1):
                    found = key
                if found is None:
                    break
                scope = found[len(table) + 1 :].split(keys.SEP, 1)[0].decode()
                if scope not in scopes:
                    scopes.append(scope)
                start = table + keys.SEP + scope.encode() + b"\x01"
        return scopes

    async def _maintenance(self) -> None:
        while True:  # a periodic timer (prune expired lifecycle rows and idempotency keys)
            await trio.sleep(self.config.maintenance_interval)
            try:
                await self._ctx.bus.prune()
                await self._ctx.idempotency.prune()
                await release_free_memory_soon()  # free heap pages back to the OS (memtrim.py)
            except CortexError as exc:  # the store is closing; the next round will tell
                log.warning("maintenance skipped: %s", exc)

    async def _stop(self) -> None:
        await self._supervisor.stop()

    # -- writing -------------------------------------------------------------------------------
    def _check(self, caller: str, capability: str, scope: str) -> None:
        self._ctx.policy.check(caller, capability, scope)

    def _authorise_write(self, caller: str, envelope, identities) -> None:
        self._check(caller, "scope.write", envelope.scope)
        if identities.observed_actor["id"] != caller:
            self._check(caller, "scope.write.on_behalf_of", envelope.scope)
        if identities.subject["id"] != identities.observed_actor["id"]:
            self._check(caller, "scope.write.about_other", envelope.scope)
        target = envelope.directives.get("consolidate_into")
        if target:
            try:
                self._check(caller, "scope.write", target)
            except PolicyDenied as exc:
                raise InvalidEnvelope(
                    "directives.consolidate_into",
                    "the caller lacks scope.write on the consolidation target",
                    capability="scope.write",
                    denied_by_tier=exc.details.get("denied_by_tier"),
                ) from None

    async def experience(
        self,
        envelope: dict[str, Any],
        *,
        caller: str | None = None,
        tenant_id: str | None = None,
        wait: str | None = None,
    ) -> ExperienceResult:
        """Capture one experience (§8.1); ``wait`` is None | captured | indexed | consolidated."""
        if wait not in WAIT_MODES:
            raise InvalidEnvelope(
                "wait", f"must be one of {[w for w in WAIT_MODES if w]} or omitted"
            )
        started = trio.current_time()
        caller = caller or self.config.default_caller
        tenant = tenant_id or self.config.tenant_id
        check_event_size(envelope, self.config.max_event_text_bytes)
        valid = validate_envelope(envelope)
        identities = resolve_identities(caller, valid)
        self._authorise_write(caller, valid, identities)
        reservation = None
        if valid.idempotency_key is not None:
            claim = await self._ctx.idempotency.begin(tenant, caller, FAMILY_EXPERIENCE, valid.idempotency_key,
                                                      body_hash(envelope))  # fmt: skip
            if isinstance(claim, Replay):
                return await self._replayed(claim.record, wait)
            reservation = claim
        wait_for = self._wait_stages(wait, valid.directives, valid.scope)
        item = CaptureItem(valid, identities, tenant, reservation, None, wait_for)
        try:
            captured = await self._supervisor.request(
                valid.scope, lambda reply: Capture((item,), wait is not None, reply)
            )
        except BaseException:
            if reservation is not None:
                self._ctx.idempotency.abort(reservation)
            raise
        result = captured[0]
        capture_ms = round((trio.current_time() - started) * 1000, 3)
        if wait in (None, "captured"):
            return ExperienceResult(event_id=result.event.id, status="captured", wal_offset=result.event.wal_offset,
                                    scope=valid.scope)  # fmt: skip
        for waiter in result.waiters.values():
            await waiter.wait()
        return await self._settled(
            valid.scope, result.event.id, result.event.wal_offset, wait, capture_ms
        )

    @staticmethod
    def _wait_stages(wait: str | None, directives: dict, scope: str) -> tuple[str, ...]:
        if wait == "indexed":
            return ("indexed",)
        if wait == "consolidated":
            target = directives.get("consolidate_into")
            if target and target != scope:
                return ("consolidated", f"consolidated@{target}")
            return ("consolidated",)
        return ()

    async def _settled(self, scope: str, event_id: str, offset: int, wait: str, capture_ms: float | None,
                       replay: bool = False) -> ExperienceResult:  # fmt: skip
        """The result of a ``wait=indexed|consolidated`` write: the stages up to the one waited
        for, what they derived, and how long each took (later stages may already be running)."""
        view = await self.memory_event(event_id, scope=scope)
        upto = STAGE_ORDER.index(wait)
        done = [
            s for s in view["stages_completed"] if s in STAGE_ORDER and STAGE_ORDER.index(s) <= upto
        ]
        reached = wait in done
        status = wait if reached else ("cancelled" if view["excluded_from_recall"] else done[-1])
        by_stage = view.get("derives_by_stage", {})
        derives: list[str] = []
        for stage in done + (["foreign"] if wait == "consolidated" else []):
            derives.extend(d for d in by_stage.get(stage, ()) if d not in derives)
        timings = view.get("elapsed_ms", {})
        elapsed = {"capture": capture_ms} if capture_ms is not None else {}
        for stage in done[1:]:
            name = STAGE_TIMING[stage]
            if name in timings:
                elapsed[name] = timings[name]
        return ExperienceResult(
            event_id=event_id, status=status, wal_offset=offset, scope=scope, replay=replay,
            stages_completed=tuple(done), derives=tuple(derives), elapsed_ms=elapsed,
        )  # fmt: skip

    async def _replayed(self, record: dict[str, Any], wait: str | None) -> ExperienceResult:
        scope, event_id, offset = record["scope"], record["event_id"], record["wal_offset"]
        if wait in (None, "captured"):
            return ExperienceResult(
                event_id=event_id, status="captured", wal_offset=offset, scope=scope, replay=True
            )
        stage = "indexed" if wait == "indexed" else "consolidated"
        waiter = self._ctx.bus.stage_waiter(event_id, stage)
        view = await self.memory_event(event_id, scope=scope)
        if stage not in view["stages_completed"] and not view["excluded_from_recall"]:
            await waiter.wait()
        else:
            self._ctx.bus.forget_waiter(event_id, stage)  # it happened already: it never fires
        return await self._settled(scope, event_id, offset, wait, None, replay=True)

    async def experience_bulk(
        self,
        request: dict[str, Any],
        *,
        caller: str | None = None,
        tenant_id: str | None = None,
    ) -> BulkResult:
        """Capture up to ``bulk_max_items`` experiences into one scope in one atomic write (§8.2)."""
        caller = caller or self.config.default_caller
        tenant = tenant_id or self.config.tenant_id
        if not isinstance(request, dict):
            raise InvalidEnvelope("$", "the bulk request must be a JSON object")
        unknown = request.keys() - {
            "scope",
            "actor",
            "observed_actor",
            "subject",
            "items",
            "directives",
            "ordering",
        }
        if unknown:
            raise InvalidEnvelope(sorted(unknown)[0], "is not a field of the bulk request")
        items = request.get("items")
        limit = self.config.bulk_max_items
        if not isinstance(items, list) or not items:
            raise InvalidEnvelope("items", "must be a non-empty array")
        if len(items) > limit:
            raise InvalidEnvelope("items", f"has {len(items)} items; at most {limit} are allowed per call",
                                  max_items=limit)  # fmt: skip
        ordering = request.get("ordering") or "strict_temporal"
        if ordering not in ORDERINGS:
            raise InvalidEnvelope("ordering", f"must be one of {list(ORDERINGS)}")
        shared_directives = request.get("directives") or {}
        if not isinstance(shared_directives, dict):
            raise InvalidEnvelope("directives", "must be an object")
        envelopes = []
        for index, raw in enumerate(items):
            if not isinstance(raw, dict):
                raise InvalidEnvelope(f"items[{index}]", "must be an object")
            envelope = {k: v for k, v in raw.items()}
            envelope["scope"] = request.get("scope")
            actor = (
                raw.get("observed_actor") or request.get("observed_actor") or request.get("actor")
            )
            if actor is not None:
                envelope["observed_actor"] = actor
            subject = raw.get("subject") or request.get("subject")
            if subject is not None:
                envelope["subject"] = subject
            if shared_directives or raw.get("directives"):
                if not isinstance(raw.get("directives") or {}, dict):
                    raise InvalidEnvelope(f"items[{index}].directives", "must be an object", item=index)
                envelope["directives"] = {**shared_directives, **(raw.get("directives") or {})}
            try:
                check_event_size(envelope, self.config.max_event_text_bytes, f"items[{index}].")
            except PayloadTooLarge as exc:
                exc.details["item"] = index
                raise
            try:
                valid = validate_envelope(envelope)
            except InvalidEnvelope as exc:
                raise InvalidEnvelope(
                    _bulk_field(exc.details["field"], raw, index), exc.details["reason"], item=index
                ) from None
            identities = resolve_identities(caller, valid)
            self._authorise_write(caller, valid, identities)
            envelopes.append((envelope, valid, identities))
        if ordering == "strict_temporal":
            envelopes.sort(key=lambda entry: parse_rfc3339(entry[1].context["observed_at"]))
        scope = envelopes[0][1].scope
        batch_id = self._ctx.ids.new("batch")
        capture_items: list[CaptureItem] = []
        reservations = []
        seen: dict[str, str] = {}
        replayed = 0
        try:
            for envelope, valid, identities in envelopes:
                reservation = None
                key = valid.idempotency_key
                if key is not None:
                    digest = body_hash(envelope)
                    if key in seen:
                        if seen[key] != digest:
                            raise IdempotencyConflict("an idempotency key appears twice in this batch with different bodies",
                                                      details={"idempotency_key": key})  # fmt: skip
                        replayed += 1
                        continue
                    seen[key] = digest
                    claim = await self._ctx.idempotency.begin(
                        tenant, caller, FAMILY_BULK, key, digest
                    )
                    if isinstance(claim, Replay):
                        replayed += 1
                        continue
                    reservation = claim
                    reservations.append(claim)
                capture_items.append(CaptureItem(valid, identities, tenant, reservation, batch_id))
            if capture_items:
                await self._supervisor.request(
                    scope, lambda reply: Capture(tuple(capture_items), False, reply)
                )
        except BaseException:
            for reservation in reservations:
                if not reservation.finished:
                    self._ctx.idempotency.abort(reservation)
            raise
        return BulkResult(batch_id=batch_id, accepted=len(capture_items), replayed=replayed, scope=scope,
                          ordering=ordering)  # fmt: skip

    async def experience_by_idempotency_key(self, key: str, *, caller: str | None = None,
                                            tenant_id: str | None = None) -> dict[str, Any]:  # fmt: skip
        """The event a (live) idempotency key produced, from a single or a bulk write."""
        caller = caller or self.config.default_caller
        tenant = tenant_id or self.config.tenant_id
        for family in (FAMILY_EXPERIENCE, FAMILY_BULK):
            record = await self._ctx.idempotency.lookup(tenant, caller, family, key)
            if record is not None:
                event = await self.get_event(record["scope"], record["event_id"])
                return {"event_id": record["event_id"], "wal_offset": record["wal_offset"],
                        "scope": record["scope"], "batch_id": record.get("batch_id"), "event": event}  # fmt: skip
        raise NotFound("no live write used this idempotency key", details={"idempotency_key": key})

    # -- reading -------------------------------------------------------------------------------
    async def _read(self, scope: str, layer: str, **query: Any) -> Any:
        scope = canonical_scope(scope)
        limit = query.get("limit")
        if limit is not None:
            if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
                raise InvalidQuery("limit must be a positive integer", details={"field": "limit"})
            if limit > self.config.read_max_limit:
                raise InvalidQuery(f"limit may be at most {self.config.read_max_limit}",
                                   details={"field": "limit", "max": self.config.read_max_limit})  # fmt: skip
        min_confidence = query.get("min_confidence")
        if min_confidence is not None and (
            isinstance(min_confidence, bool)
            or not isinstance(min_confidence, int | float)
            or not 0 <= min_confidence <= 1
        ):
            raise InvalidQuery(
                "min_confidence must be a number between 0 and 1",
                details={"field": "min_confidence"},
            )
        for flag in (
            "include_superseded",
            "include_excluded",
            "include_deprecated",
            "with_causal_chain",
        ):
            if flag in query and not isinstance(query[flag], bool):
                raise InvalidQuery(f"{flag} must be true or false", details={"field": flag})
        cursor = query.get("cursor")
        if cursor is not None and not isinstance(cursor, str):
            raise InvalidQuery("cursor must be a string", details={"field": "cursor"})
        temporal_keys = ("valid_during", "recorded_during", "natural", "reference_date")
        block = {name: query.pop(name) for name in temporal_keys if query.get(name) is not None}
        for name in temporal_keys:
            query.pop(name, None)
        if block:
            from .retrieve.temporal_filter import TemporalFilter

            phrases = await self.temporal_phrase_map(
                query.pop("tenant", None) or self.config.tenant_id
            )
            query["temporal"] = TemporalFilter.from_query(block, self.clock.now(), phrases)
        for name in (
            "as_of",
            "since",
            "until",
            "recorded_since",
            "recorded_until",
            "overlapping_from",
            "overlapping_to",
        ):
            value = query.get(name)
            if isinstance(value, str):
                query[name] = parse_rfc3339(value, field=name)
        return await self._supervisor.request(scope, lambda reply: ReadLayer(layer, query, reply))

    async def get_event(self, scope: str, event_id: str) -> dict[str, Any]:
        return await self._read(scope, "event", event_id=event_id)

    async def events(self, scope: str, **filters: Any) -> dict[str, Any]:
        """A page of events: ``since``/``until`` (observed), ``recorded_since``/``recorded_until``,
        ``observed_actor``, ``modality``, ``include_excluded``, ``limit``, ``cursor``."""
        return await self._read(scope, "events", **filters)

    async def episodes(self, scope: str, **filters: Any) -> dict[str, Any]:
        return await self._read(scope, "episodes", **filters)

    async def get_episode(self, scope: str, episode_id: str) -> dict[str, Any]:
        return await self._read(scope, "episode", episode_id=episode_id)

    async def _subject_id(self, subject: str | None, tenant: str | None) -> str | None:
        if subject is None:
            return None
        entity = await self._ctx.entities.find(tenant or self.config.tenant_id, subject)
        return entity.id if entity else f"unknown:{subject}"

    async def facts(self, scope: str, *, subject: str | None = None, tenant_id: str | None = None,
                    **filters: Any) -> dict[str, Any]:  # fmt: skip
        """A page of facts; ``subject`` is an ``ent_`` id, an actor id or a name.  ``as_of`` and
        ``include_superseded`` follow §12.3 / §18.2 item 1."""
        return await self._read(
            scope, "facts", subject_id=await self._subject_id(subject, tenant_id), **filters
        )

    async def get_fact(self, scope: str, fact_id: str) -> dict[str, Any]:
        return await self._read(scope, "fact", fact_id=fact_id)

    async def fact_supports(self, scope: str, fact_id: str, *, limit: int | None = None,
                            cursor: str | None = None) -> dict[str, Any]:  # fmt: skip
        """Every event supporting a fact, in event order (the record keeps the first and latest)."""
        return await self._read(scope, "fact_supports", fact_id=fact_id, limit=limit, cursor=cursor)

    async def facts_timeline(self, scope: str, *, subject: str, predicate: str,
                             tenant_id: str | None = None) -> dict[str, Any]:  # fmt: skip
        """The supersession chain of (subject, predicate), ordered by valid time (§8.7.4)."""
        subject_id = await self._subject_id(subject, tenant_id)
        return await self._read(scope, "timeline", subject_id=subject_id, predicate=predicate)

    async def beliefs(self, scope: str, *, about: str | None = None, tenant_id: str | None = None,
                      **filters: Any) -> dict[str, Any]:  # fmt: skip
        return await self._read(
            scope, "beliefs", about=await self._subject_id(about, tenant_id), **filters
        )

    async def get_belief(self, scope: str, belief_id: str) -> dict[str, Any]:
        return await self._read(scope, "belief", belief_id=belief_id)

    async def beliefs_why(self, scope: str, belief_id: str) -> dict[str, Any]:
        """Why we believe it: the support graph down to events and a narrative citing ids (§8.7.6)."""
        return await self._read(scope, "belief_why", belief_id=belief_id)

    # -- understanding (§8.7.7-§8.7.10) ---------------------------------------------------------
    # Concept synthesis is not implemented yet (reference §19, phase 11).  These reads say so:
    # no concept exists, and list and coverage answers carry _partial with the reason.
    async def understanding(self, scope: str, **filters: Any) -> dict[str, Any]:
        canonical_scope(scope)
        return {
            "items": [],
            "next_cursor": None,
            "has_more": False,
            "_partial": True,
            "_partial_reason": "no_implementation_yet",
        }

    async def get_concept(self, scope: str, concept_id: str) -> dict[str, Any]:
        canonical_scope(scope)
        raise NotFound(
            f"no concept {concept_id}: concept synthesis is not implemented yet",
            details={"concept_id": concept_id, "reason": "no_implementation_yet"},
        )

    async def related_concepts(self, scope: str, concept_id: str, **filters: Any) -> dict[str, Any]:
        return await self.get_concept(scope, concept_id)

    async def understanding_coverage(self, scope: str) -> dict[str, Any]:
        return {
            "scope": canonical_scope(scope),
            "concept_count": 0,
            "by_topic": [],
            "synthesis_lag": None,
            "_partial": True,
            "_partial_reason": "no_implementation_yet",
        }

    async def scope_paths(self, prefix: str = "") -> list[str]:
        """Every scope that has been written to (auto-provisioned or registered)."""
        paths = []
        async for key, _ in self.store.scan(prefix=keys.SCOPE_PREFIX + prefix.encode()):
            paths.append(key[len(keys.SCOPE_PREFIX) :].decode())
        return paths

    async def scope(self, path: str) -> dict[str, Any]:
        from .model import Scope, loads

        raw = await self.store.get(keys.scope_record(canonical_scope(path)))
        if raw is None:
            raise NotFound(f"scope {path} has never been written to", details={"path": path})
        return to_wire(loads(raw, Scope))

    async def edit_scope(self, path: str, edit: Any) -> Any:
        """Read-modify-write a scope's registration inside its actor: ``edit(Scope | None)``
        returns the new ``Scope`` or None to delete the registration (records stay)."""
        from .actors.messages import EditScope

        return await self._supervisor.request(
            canonical_scope(path), lambda reply: EditScope(edit, reply)
        )

    # -- recall --------------------------------------------------------------------------------
    async def recall(self, request: dict[str, Any], *, caller: str | None = None,
                     tenant_id: str | None = None) -> dict[str, Any]:  # fmt: skip
        """The stratified pack (reference §8.3, §9)."""
        return await self._recall.recall(request, caller=caller or self.config.default_caller,
                                         tenant_id=tenant_id or self.config.tenant_id)  # fmt: skip

    async def recall_stream(self, request: dict[str, Any], *, caller: str | None = None,
                            tenant_id: str | None = None) -> AsyncIterator[tuple[str, Any]]:  # fmt: skip
        """Streaming recall: ``(event, data)`` pairs in the §10.1 order (plan, layer…, context_block,
        provenance, diagnostics, done)."""
        async for name, data in self._recall.stream(request, caller=caller or self.config.default_caller,
                                                    tenant_id=tenant_id or self.config.tenant_id):  # fmt: skip
            if name != "pack":
                yield name, data

    def get_pack(self, pack_id: str) -> dict[str, Any]:
        """A pack produced in the last 60 seconds (reference §18.2 items 20, 21)."""
        return self._recall.get_pack(pack_id)

    # -- temporal phrases (§8.17) --------------------------------------------------------------
    async def register_temporal_phrase(self, name: str, pattern: str, resolves_to: dict[str, Any], *,
                                       tenant_id: str | None = None) -> dict[str, Any]:  # fmt: skip
        from .retrieve.temporal_filter import parse_interval
        from .spi.kv import Put

        tenant = tenant_id or self.config.tenant_id
        for field, value in (("name", name), ("pattern", pattern)):
            if not isinstance(value, str) or not value.strip() or len(value) > 200:
                raise InvalidQuery(f"{field} must be a non-empty string of at most 200 characters",
                                   details={"field": field})  # fmt: skip
        if not isinstance(resolves_to, dict) or "valid_during" not in resolves_to:
            raise InvalidQuery(
                "resolves_to must be {valid_during: [from, to]}", details={"field": "resolves_to"}
            )
        interval = parse_interval(resolves_to["valid_during"], "resolves_to.valid_during")
        record = {
            "name": name,
            "pattern": pattern,
            "resolves_to": {"valid_during": list(resolves_to["valid_during"])},
        }
        await self.store.write(
            [Put(keys.temporal_phrase(tenant, name), jsoncodec.encode(record))], sync=True
        )
        self._phrases.pop(tenant, None)
        del interval
        return record

    async def temporal_phrases(self, *, tenant_id: str | None = None) -> list[dict[str, Any]]:
        tenant = tenant_id or self.config.tenant_id
        return [
            jsoncodec.decode(raw)
            async for _, raw in self.store.scan(prefix=keys.temporal_phrases_prefix(tenant))
        ]

    async def delete_temporal_phrase(self, name: str, *, tenant_id: str | None = None) -> None:
        from .spi.kv import Delete

        tenant = tenant_id or self.config.tenant_id
        if await self.store.get(keys.temporal_phrase(tenant, name)) is None:
            raise NotFound(f"no temporal phrase {name!r}", details={"name": name})
        await self.store.write([Delete(keys.temporal_phrase(tenant, name))], sync=True)
        self._phrases.pop(tenant, None)

    async def temporal_phrase_map(self, tenant: str) -> dict[str, tuple]:
        from .retrieve.temporal_filter import parse_interval

        if tenant not in self._phrases:
            self._phrases[tenant] = {
                p["pattern"]: parse_interval(p["resolves_to"]["valid_during"], "valid_during")
                for p in await self.temporal_phrases(tenant_id=tenant)
            }
        return self._phrases[tenant]

    # -- traversal -----------------------------------------------------------------------------
    async def traverse(self, scope: str, view: str = "local", *, caller: str | None = None) -> Traversal:
        """The scopes a ``view`` of ``scope`` covers for ``caller``.

        ``local``: the scope.  ``holistic``: the scope, then its ancestors that hold records,
        nearest first — only up to the roots named by the scope's ``inherit_from`` when it
        registered some.  ``descend``: the scope, then every scope below it that holds records.
        Scopes beyond the start that the caller may not read are skipped and reported as
        placeholders; the start scope itself is the caller's to check (it fails the request)."""
        scope = canonical_scope(scope)
        caller = caller or self.config.default_caller
        if view not in VIEWS:
            raise InvalidQuery(f"view must be one of {list(VIEWS)}", details={"field": "view"})
        if view == "local":
            return Traversal(view, (scope,))
        if view == "holistic":
            reach = ancestors(scope)
            record = await self._scope_record(scope)
            inherit = (record.policies.get("inherit_from") if record else None) or None
            if inherit:
                reach = [a for a in reach if any(is_within(a, root) for root in inherit)]
            reach = [a for a in reach if await self._scope_record(a) is not None]
        else:
            reach = await self.scope_paths(scope + "/")
        scopes, denied = [scope], []
        for path in reach:
            verdict = self._verdict(caller, "scope.read.local", path)
            if verdict.allowed:
                scopes.append(path)
                continue
            count = await self._supervisor.request(path, lambda reply: ReadLayer("count", {}, reply))
            denied.append({"scope": path, "denied": True, "item_count": count,
                           "denied_reason": verdict.tier or "policy"})  # fmt: skip
        return Traversal(view, tuple(scopes), tuple(denied))

    def _verdict(self, caller: str, capability: str, scope: str) -> Verdict:
        """The hook's non-raising answer; a hook that only implements ``check`` still works."""
        hook = self._ctx.policy
        if hasattr(hook, "verdict"):
            return hook.verdict(caller, capability, scope)
        try:
            hook.check(caller, capability, scope)
        except PolicyDenied as exc:
            return Verdict(False, exc.details.get("denied_by_tier"), exc.message)
        return Verdict(True)

    async def _scope_record(self, path: str):
        from .model import Scope, loads

        raw = await self.store.get(keys.scope_record(path))
        return loads(raw, Scope) if raw else None

    async def layer_counts(self, scope: str) -> dict[str, int]:
        """How many records each layer of a scope holds (operators' inventory, prune)."""
        return await self._read(scope, "layer_counts")

    def use_policy(self, hook: PolicyHook) -> None:
        """Route every capability decision through ``hook`` (the server's gate)."""
        self._ctx.policy = hook

    def new_id(self, prefix: str) -> str:
        """A fresh time-ordered id of the given namespace (``req``, ``audit``, ...; §3.6)."""
        return self._ctx.ids.new(prefix)

    # -- lifecycle -----------------------------------------------------------------------------
    async def home_scope(self, event_id: str) -> str:
        """The scope an event was captured in (NOT_FOUND when no such event exists)."""
        raw = await self.store.get(keys.event_state(event_id))
        if raw is None:
            raise NotFound(f"no memory event {event_id}", details={"event_id": event_id})
        return jsoncodec.decode(raw)["scope"]

    async def memory_event(self, event_id: str, *, scope: str | None = None) -> dict[str, Any]:
        """The aggregate state of one memory event (§8.9.3)."""
        scope = scope or await self.home_scope(event_id)
        return await self._read(scope, "event_state", event_id=event_id)

    async def lifecycle_event(self, lifecycle_id: str) -> dict[str, Any]:
        record = await self._ctx.bus.get(lifecycle_id)
        if record is None:
            raise NotFound(
                f"no lifecycle event {lifecycle_id} in the replay window",
                details={"lifecycle_id": lifecycle_id},
            )
        return lifecycle_wire(record)

    async def lifecycle(self, *, since_lifecycle_id: str | None = None, limit: int = 100,
                        **filters: Any) -> list[dict[str, Any]]:  # fmt: skip
        """Catch-up: published lifecycle rows after ``since_lifecycle_id``, in lce order (§8.9.4)."""
        records = await self._ctx.bus.history(
            make_filter(**filters), after=since_lifecycle_id, limit=limit
        )
        return [lifecycle_wire(r) for r in records]

    @asynccontextmanager
    async def subscribe(self, *, since_lifecycle_id: str | None = None, capacity: int | None = None,
                        **filters: Any) -> AsyncIterator[Subscription]:  # fmt: skip
        """Live lifecycle records (``LifecycleEvent``) matching the filters, resuming after
        ``since_lifecycle_id``.  A subscriber that falls ``capacity`` records behind receives a
        ``lagging`` record and its iteration ends."""
        subscription = await self._ctx.bus.subscribe(
            make_filter(**filters), since_lifecycle_id=since_lifecycle_id,
            capacity=capacity or self.config.subscriber_buffer,
        )  # fmt: skip
        try:
            yield subscription
        finally:
            subscription.close()

    async def cancel(self, event_id: str, *, caller: str | None = None) -> dict[str, Any]:
        """Cancel the queued stages of a captured event; it is excluded from recall (§8.9.5)."""
        caller = caller or self.config.default_caller
        scope = await self.home_scope(event_id)
        self._check(caller, "scope.write", scope)
        event = await self.get_event(scope, event_id)
        if event["caller"] != caller:  # someone else's write: only an administrator of the scope
            self._check(caller, "policy.administer.scope", scope)
        return await self._supervisor.request(
            scope, lambda reply: CancelEvent(event_id, caller, reply)
        )

    # -- operations ----------------------------------------------------------------------------
    async def flush(self, scope: str | None = None, *, seal: bool = False) -> None:
        """Wait until queued derivations are done (in one scope, or in every live actor);
        ``seal`` also seals the open episode(s)."""
        scopes = [canonical_scope(scope)] if scope else list(self._supervisor._handles)
        for name in scopes:
            await self._supervisor.request(name, lambda reply: Flush(seal, reply))

    async def rebuild(self, scope: str) -> None:
        """Replay a scope's WAL into fresh derived layers (§2.1: every derived layer is reproducible)."""
        await self._supervisor.request(canonical_scope(scope), Rebuild)

    async def ping(self, scope: str) -> dict[str, Any]:
        return await self._supervisor.request(canonical_scope(scope), Ping)

    def statistics(self) -> SupervisorStatistics:
        return self._supervisor.statistics()

    @property
    def wal_offset(self) -> int:
        return self._ctx.wal.last


def _bulk_field(field: str, item: dict, index: int) -> str:
    """Name a bulk validation error where the caller wrote the offending value: on the request
    (``scope``, the shared ``actor``/``subject``/``directives``) or on ``items[index]``."""
    top = field.split(".", 1)[0].split("[", 1)[0]
    if top == "scope" or (top in ("observed_actor", "subject", "directives") and top not in item):
        return field
    return f"items[{index}].{field}"


class InvalidQuery(CortexError):
    error_code = "INVALID_QUERY"
    http_status = 400


def make_filter(*, scope: str | None = None, event_id: str | None = None, batch_id: str | None = None,
                job_id: str | None = None, events: Any = None) -> LifecycleFilter:  # fmt: skip
    kinds = frozenset(events.split(",") if isinstance(events, str) else events) if events else None
    return LifecycleFilter(scope=canonical_scope(scope) if scope else None, event_id=event_id,
                           batch_id=batch_id, job_id=job_id, events=kinds)  # fmt: skip


def lifecycle_wire(record: LifecycleEvent) -> dict[str, Any]:
    wire = to_wire(record)
    return {k: v for k, v in wire.items() if v is not None}


@asynccontextmanager
async def derivation_processes(config: EngineConfig) -> AsyncIterator[Any]:
    """The engine's own worker processes for derivation's CPU work (``derivation_workers =
    "process"``): started on first use at a lower CPU priority, shut down with the engine."""
    if config.derivation_workers != "process":
        yield None
        return
    import trio_parallel

    from .actors.pipeline import lower_priority

    try:
        context = trio_parallel.open_worker_context(init=lower_priority, grace_period=5.0)
        async with context as processes:
            yield processes
    except trio_parallel.BrokenWorkerError as exc:  # a worker that would not stop was killed
        log.warning("a derivation worker process did not shut down cleanly: %r", exc)


@asynccontextmanager
async def open_engine(
    backend: str = "memory",
    path: str | None = None,
    *,
    config: EngineConfig | None = None,
    clock: Clock | None = None,
    id_seed: int | None = None,
    extractor: Any = None,
    policy: PolicyHook | None = None,
    store: Any = None,
    embedder: Any = None,
) -> AsyncIterator[Engine]:
    """Open an engine on ``memory`` or ``leveldb`` (at ``path``) for the duration of the block.

    ``clock`` and ``id_seed`` make recorded times and ids deterministic for tests; ``store``
    plugs in any ``KVStore`` (a third-party backend) instead of ``backend``/``path``.
    """
    config = config or EngineConfig()
    clock = clock or SystemClock()
    owned = store is None
    store = store if store is not None else await open_store(backend, path)
    ids = IdGenerator(clock, seed=id_seed)
    ctx = NodeContext(
        store=store, clock=clock, ids=ids, config=config,
        bus=LifecycleBus(store, ids, clock, window_seconds=config.lifecycle_window_seconds),
        wal=WalSequencer(),
        idempotency=IdempotencyTable(store, clock, config.idempotency_ttl_seconds),
        entities=EntityResolver(store, ids, clock),
        extractor=extractor or RuleExtractor(),
        policy=policy or AllowAll(),
        embedder=embedder or by_name(config.embedder),
        cpu_limiter=trio.CapacityLimiter(config.derivation_worker_limit),
        cpu_workers=config.derivation_workers,
    )  # fmt: skip
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
