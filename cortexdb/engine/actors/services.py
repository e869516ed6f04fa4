"""Node services, each the single owner of its state: WAL sequencer, idempotency table, entities.

They run on the engine's Trio thread and make their decisions without an ``await`` between
check and update, so no two actors can race on the same key.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import attrs
import trio

from ...errors import IdempotencyConflict
from .. import jsoncodec
from ..derive.entities import actor_alias, normalise_alias
from ..model import Entity
from ..spi.extractor import TermRef
from ..storage import CHUNK_OPS, NodeTables, Op, Table
from ..temporal import format_ts, parse_rfc3339


def body_hash(body: Any) -> str:
    """sha256 of the canonical JSON (sorted keys) of a request body."""
    return jsoncodec.canonical_digest(body)


class Reservation:
    """An idempotency key claimed by a capture in flight.  A concurrent duplicate waits on
    ``done``, which is only created when someone actually waits (rare)."""

    __slots__ = ("_done", "body_hash", "durable", "finished", "key", "record")

    def __init__(self, key: tuple[str, ...], body_hash: str) -> None:
        self.key = key
        self.body_hash = body_hash
        self.record: dict[str, Any] | None = None
        self.finished = False
        self.durable = False  # its record never expires (an import's source key: engine/transfer)
        self._done: trio.Event | None = None

    async def wait(self) -> None:
        if self.finished:
            await trio.lowlevel.checkpoint()
            return
        if self._done is None:
            self._done = trio.Event()
        await self._done.wait()

    def finish(self) -> None:
        self.finished = True
        if self._done is not None:
            self._done.set()


@attrs.frozen
class Replay:
    record: dict[str, Any]


class IdempotencyTable:
    """Keys scoped to (tenant, caller, endpoint family, key) with a 24 h expiry (§6.3, §18.2 item 9)."""

    def __init__(self, table: Table[Any], clock, ttl_seconds: float) -> None:
        self._table = table  # NodeTables.idempotency: (tenant, caller, family, key) -> record
        self._clock = clock
        self._ttl = dt.timedelta(seconds=ttl_seconds)
        self._inflight: dict[tuple[str, ...], Reservation] = {}

    def _live(self, record: dict[str, Any]) -> bool:
        if record.get("durable"):
            return True  # deleted with its event (forget/erasure), never by age
        return parse_rfc3339(record["created_at"]) + self._ttl > self._clock.now()

    async def begin(
        self, tenant: str, caller: str, family: str, key: str, digest: str
    ) -> Reservation | Replay:
        storage_key = (tenant, caller, family, key)
        while True:
            pending = self._inflight.get(storage_key)
            if pending is not None:
                if pending.body_hash != digest:
                    raise self._conflict(key, family)
                await pending.wait()
                if pending.record is not None:
                    return Replay(pending.record)
                continue  # the first attempt failed; try to claim the key ourselves
            record = await self._table.get(storage_key)
            if storage_key in self._inflight:
                continue  # claimed while we read
            if record is not None:
                if self._live(record):
                    if record["body_hash"] != digest:
                        raise self._conflict(key, family)
                    return Replay(record)
            reservation = Reservation(storage_key, digest)
            self._inflight[storage_key] = reservation
            return reservation

    @staticmethod
    def _conflict(key: str, family: str) -> IdempotencyConflict:
        return IdempotencyConflict(
            "this idempotency key was already used with a different body",
            details={"idempotency_key": key, "endpoint_family": family},
        )

    def record_op(self, reservation: Reservation, record: dict[str, Any], now=None) -> Op:
        created = format_ts(now or self._clock.now())
        record = {**record, "body_hash": reservation.body_hash, "created_at": created}
        if reservation.durable:
            record["durable"] = True
        reservation.record = record
        return self._table.put_op(reservation.key, record)

    def complete(self, reservation: Reservation) -> None:
        self._inflight.pop(reservation.key, None)
        reservation.finish()

    def abort(self, reservation: Reservation) -> None:
        reservation.record = None
        self.complete(reservation)

    async def lookup(
        self, tenant: str, caller: str, family: str, key: str
    ) -> dict[str, Any] | None:
        record = await self._table.get((tenant, caller, family, key))
        if record is None:
            return None
        return record if self._live(record) else None

    async def prune(self) -> int:
        doomed = []
        async for key, record in self._table.items():
            if not self._live(record):
                doomed.append(self._table.delete_op(key))
        if doomed:
            await self._table.write(doomed)
        return len(doomed)


LEGACY_MENTION = "legacy"  # the mention row of an entity stored before mentions were tracked
MENTIONS_META = "entity_mentions"  # meta row: this data dir tracks which events mention entities


class EntityResolver:
    """Tenant-scoped entities: a surface name or actor id resolves to one stable ``ent_`` id.

    A new entity is persisted by the first derivation batch that references it (``pending_ops``)
    so a fact is never stored pointing at an entity that is not.  Each event's extraction also
    writes which entities it mentions (``NodeTables.mention_ops``: ``NM`` and ``NE``), so that
    ``release`` can delete an entity once every event mentioning it was erased or redacted.

    A derivation batch *holds* the entities it resolved (``resolve(..., held=)``) until the lane
    lets it go (``let_go``), after its commit: a release never deletes an entity a batch is about
    to write a mention of, and while an entity's deletion is being written nobody resolves it.
    """

    def __init__(self, tables: NodeTables, ids, clock, most: int = 16_384) -> None:
        self.most = most  # entities decoded, and as many aliases (``entity_cache_max``; ``_trim``)
        self._tables = tables
        self._entities_table = tables.entities  # (tenant, ent_id) -> Entity
        self._aliases = tables.entity_aliases  # (tenant, normalised alias) -> ent_id
        self._mentions = tables.entity_mentions  # (tenant, ent_id, evt_id) -> scope
        self._event_entities = tables.event_entities  # (evt_id, ent_id) -> tenant
        self._ids = ids
        self._clock = clock
        self._by_alias: dict[tuple[str, str], str] = {}
        self._entities: dict[str, Entity] = {}
        self._unpersisted: set[str] = set()
        self._holds: dict[str, int] = {}  # entity id -> derivation batches holding it
        self._watched: set[str] = set()  # entities a release is deciding on
        self._touched: set[str] = set()  # ... of which a batch let go meanwhile (so: keep them)
        self._deleting: dict[str, trio.Event] = {}  # entity id or tenant/alias -> its deletion landed
        self._releasing = trio.Lock()

    @staticmethod
    def alias_of(term: TermRef) -> str:
        return actor_alias(term.actor_id) if term.actor_id else normalise_alias(term.name)

    async def start(self) -> None:
        """Once per data dir: the entities stored before mentions were tracked get a mention row
        of no event (``LEGACY_MENTION``), so that no release ever deletes them — who mentions
        them is unknown."""
        meta = self._tables.meta
        if await meta.get(MENTIONS_META) is not None:
            return
        ops: list[Op] = []
        legacy = 0
        async for (tenant, entity_id), _ in self._entities_table.raw.items():
            ops.append(self._mentions.put_op((tenant, entity_id, LEGACY_MENTION), ""))
            legacy += 1
            if len(ops) >= CHUNK_OPS:
                await self._tables.write(ops)
                ops = []
        ops.append(meta.put_op(MENTIONS_META, {"version": 1, "legacy_entities": legacy}))
        await self._tables.write(ops, sync=True)

    async def _deleted(self, *keys: str) -> bool:
        """Wait for the deletion of any of ``keys`` being written; True when one was."""
        for key in keys:
            landed = self._deleting.get(key)
            if landed is not None:
                await landed.wait()
                return True
        return False

    async def resolve(self, tenant: str, term: TermRef, held: set[str] | None = None) -> Entity:
        """The entity of ``term``, created (unpersisted) when new; ``held``: the batch's set of
        held entity ids, which this one joins (``let_go`` releases them)."""
        alias = self.alias_of(term)
        cache_key = (tenant, alias)
        alias_key = f"{tenant}\x00{alias}"
        while True:
            if await self._deleted(alias_key):
                continue
            entity_id = self._by_alias.get(cache_key)
            if entity_id is None:
                stored_id = await self._aliases.get((tenant, alias))
                if await self._deleted(alias_key, stored_id or ""):
                    continue  # read while its deletion was being written: read again
                entity_id = self._by_alias.get(cache_key)  # another task may have resolved it meanwhile
                if entity_id is None and stored_id is not None:
                    entity_id = stored_id
                    self._by_alias[cache_key] = entity_id
            if entity_id is not None:
                entity = self._entities.get(entity_id)
                if entity is None:
                    stored = await self._entities_table.get((tenant, entity_id))
                    if await self._deleted(alias_key, entity_id):
                        continue
                    entity = self._entities.get(entity_id) or stored
                    if entity is None:  # alias without record: heal by recreating the record
                        entity = self._new(tenant, term, alias, entity_id)
                    self._entities[entity_id] = entity
                    self._by_alias.setdefault(cache_key, entity_id)
                break
            entity = self._new(tenant, term, alias)
            self._by_alias[cache_key] = entity.id
            self._entities[entity.id] = entity
            break
        if held is not None and entity.id not in held:
            held.add(entity.id)
            self._holds[entity.id] = self._holds.get(entity.id, 0) + 1
        return entity

    def let_go(self, held: set[str]) -> None:
        """A derivation batch is done with the entities it held (committed or failed)."""
        for entity_id in held:
            count = self._holds.get(entity_id, 0) - 1
            if count > 0:
                self._holds[entity_id] = count
            else:
                self._holds.pop(entity_id, None)
            if entity_id in self._watched:
                self._touched.add(entity_id)
        held.clear()
        if len(self._entities) > self.most or len(self._by_alias) > self.most:
            self._trim()

    def _trim(self) -> None:
        """Bound the decoded entities and the alias map to ``most`` entries each (``EngineConfig.
        entity_cache_max``), the oldest first, down to three quarters: what is dropped is read
        again from its table when next resolved.  Kept whatever the count: entities not stored
        yet (the batch that persists one writes it from here: ``pending_ops``) and their aliases
        (a resolve must find them, not create a second entity), those a batch holds and those a
        release is deciding on."""
        keep = self._unpersisted | self._holds.keys() | self._watched
        floor = self.most * 3 // 4
        for entity_id in [e for e in self._entities if e not in keep][: len(self._entities) - floor]:
            del self._entities[entity_id]
        for key in [k for k, e in self._by_alias.items() if e not in keep][: len(self._by_alias) - floor]:
            del self._by_alias[key]

    def _new(self, tenant: str, term: TermRef, alias: str, entity_id: str | None = None) -> Entity:
        entity = Entity(
            id=entity_id or self._ids.new("ent"),
            tenant_id=tenant,
            name=term.actor_id or term.name,
            aliases=[alias],
            kind="actor" if term.actor_id else "entity",
            actor_id=term.actor_id,
            created_at=self._clock.now(),
        )
        self._unpersisted.add(entity.id)
        return entity

    async def find(self, tenant: str, name: str) -> Entity | None:
        """Look an entity up by id, actor id or name without creating one."""
        if name.startswith("ent_"):
            while True:
                if name in self._entities:
                    return self._entities[name]
                stored = await self._entities_table.get((tenant, name))
                if not await self._deleted(name):
                    return stored
        is_actor = ":" in name and name.split(":", 1)[0].isidentifier()
        term = TermRef(name, actor_id=name if is_actor else None)
        alias = self.alias_of(term)
        while True:
            entity_id = self._by_alias.get((tenant, alias))
            if entity_id is None:
                entity_id = await self._aliases.get((tenant, alias))
                if await self._deleted(f"{tenant}\x00{alias}", entity_id or ""):
                    continue
                if entity_id is None:
                    return None
            return await self.find(tenant, entity_id)

    def pending_ops(self, entity_ids) -> list[Op]:
        ops = []
        for entity_id in entity_ids:
            if entity_id in self._unpersisted:
                entity = self._entities[entity_id]
                ops.append(self._entities_table.put_op((entity.tenant_id, entity.id), entity))
                for alias in entity.aliases:
                    ops.append(self._aliases.put_op((entity.tenant_id, alias), entity.id))
        return ops

    def mark_persisted(self, entity_ids) -> None:
        self._unpersisted.difference_update(entity_ids)

    # -- release: the forget and erasure cascade ---------------------------------------------
    async def release(self, event_ids) -> int:
        """Drop the mentions of ``event_ids`` (events erased, or redacted by a forget) and delete
        every entity no other event mentions any more — its record, its alias rows and this
        resolver's caches; how many entities were deleted.  An entity some other event of the
        tenant mentions (any scope), a derivation batch holds, or that was stored before
        mentions were tracked is kept.  Idempotent: an entity's mention rows (``NE``) go in the
        write that deletes it, or after, so a rerun after a crash finds what it left."""
        doomed = set(event_ids)
        async with self._releasing:
            by_entity: dict[tuple[str, str], list[str]] = {}
            for event_id in sorted(doomed):
                async for entity_id, tenant in self._event_entities.scan(event_id):
                    by_entity.setdefault((tenant, entity_id), []).append(event_id)
            deleted = 0
            for (tenant, entity_id), events in sorted(by_entity.items()):
                deleted += await self._release_one(tenant, entity_id, events)
            return deleted

    async def _release_one(self, tenant: str, entity_id: str, events: list[str]) -> int:
        mentions = [self._mentions.delete_op((tenant, entity_id, e)) for e in events]
        for start in range(0, len(mentions), CHUNK_OPS):
            await self._tables.write(mentions[start : start + CHUNK_OPS])
        self._watched.add(entity_id)
        self._touched.discard(entity_id)
        try:
            ops = [self._event_entities.delete_op((e, entity_id)) for e in events]
            gone = 0
            if not [e async for e in self._mentions.ids((tenant, entity_id), limit=1)]:
                entity = self._entities.get(entity_id) or await self._entities_table.get((tenant, entity_id))
                # no await from here to the write: the decision sees every hold and let-go
                if entity is not None and not self._holds.get(entity_id) and entity_id not in self._touched:
                    ops[:0] = self._forget(entity)
                    gone = 1
            keys = [entity_id, *(f"{tenant}\x00{alias}" for alias in entity.aliases)] if gone else []
            for key in keys:
                self._deleting[key] = trio.Event()
            try:
                for start in range(0, len(ops), CHUNK_OPS):
                    await self._tables.write(ops[start : start + CHUNK_OPS])
                    for key in keys:  # the first chunk deleted the entity: resolve may read again
                        self._deleting.pop(key).set()
                    keys = []
            finally:
                for key in keys:
                    self._deleting.pop(key).set()
            return gone
        finally:
            self._watched.discard(entity_id)
            self._touched.discard(entity_id)

    def _forget(self, entity: Entity) -> list[Op]:
        """Drop an entity from the caches; the operations deleting its rows."""
        tenant = entity.tenant_id
        self._entities.pop(entity.id, None)
        self._unpersisted.discard(entity.id)
        for alias in entity.aliases:
            if self._by_alias.get((tenant, alias)) == entity.id:
                del self._by_alias[(tenant, alias)]
        ops = [self._entities_table.delete_op((tenant, entity.id))]
        return ops + [self._aliases.delete_op((tenant, alias)) for alias in entity.aliases]
