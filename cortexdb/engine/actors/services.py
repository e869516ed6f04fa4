"""Node services, each the single owner of its state: WAL sequencer, idempotency table, entities.

They run on the engine's Trio thread and make their decisions without an ``await`` between
check and update, so no two actors can race on the same key.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Any

import attrs
import trio

from ...errors import IdempotencyConflict
from .. import jsoncodec, keys
from ..derive.entities import actor_alias, normalise_alias
from ..model import Entity, dumps, encode_json, loads
from ..spi.extractor import TermRef
from ..spi.kv import Delete, Put
from ..temporal import format_ts, parse_rfc3339


class WalSequencer:
    """Node-monotonic ``wal_offset``: restored from the highest WAL key, so it survives restarts."""

    def __init__(self) -> None:
        self.last = 0

    async def restore(self, store) -> None:
        async for key, _ in store.scan(prefix=keys.WAL_PREFIX, reverse=True, limit=1):
            self.last = keys.wal_offset_of(key)

    def next(self) -> int:
        self.last += 1
        return self.last


def body_hash(body: Any) -> str:
    """sha256 of the canonical JSON (sorted keys) of a request body."""
    return hashlib.sha256(jsoncodec.encode_canonical(body)).hexdigest()


class Reservation:
    """An idempotency key claimed by a capture in flight.  A concurrent duplicate waits on
    ``done``, which is only created when someone actually waits (rare)."""

    __slots__ = ("_done", "body_hash", "finished", "key", "record")

    def __init__(self, key: bytes, body_hash: str) -> None:
        self.key = key
        self.body_hash = body_hash
        self.record: dict[str, Any] | None = None
        self.finished = False
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

    def __init__(self, store, clock, ttl_seconds: float) -> None:
        self._store = store
        self._clock = clock
        self._ttl = dt.timedelta(seconds=ttl_seconds)
        self._inflight: dict[bytes, Reservation] = {}

    def _live(self, record: dict[str, Any]) -> bool:
        return parse_rfc3339(record["created_at"]) + self._ttl > self._clock.now()

    async def begin(
        self, tenant: str, caller: str, family: str, key: str, digest: str
    ) -> Reservation | Replay:
        storage_key = keys.idempotency(tenant, caller, family, key)
        while True:
            pending = self._inflight.get(storage_key)
            if pending is not None:
                if pending.body_hash != digest:
                    raise self._conflict(key, family)
                await pending.wait()
                if pending.record is not None:
                    return Replay(pending.record)
                continue  # the first attempt failed; try to claim the key ourselves
            raw = await self._store.get(storage_key)
            if storage_key in self._inflight:
                continue  # claimed while we read
            if raw is not None:
                record = jsoncodec.decode(raw)
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

    def record_op(self, reservation: Reservation, record: dict[str, Any], now=None) -> Put:
        created = format_ts(now or self._clock.now())
        record = {**record, "body_hash": reservation.body_hash, "created_at": created}
        reservation.record = record
        return Put(reservation.key, encode_json(record))

    def complete(self, reservation: Reservation) -> None:
        self._inflight.pop(reservation.key, None)
        reservation.finish()

    def abort(self, reservation: Reservation) -> None:
        reservation.record = None
        self.complete(reservation)

    async def lookup(
        self, tenant: str, caller: str, family: str, key: str
    ) -> dict[str, Any] | None:
        raw = await self._store.get(keys.idempotency(tenant, caller, family, key))
        if raw is None:
            return None
        record = jsoncodec.decode(raw)
        return record if self._live(record) else None

    async def prune(self) -> int:
        doomed = []
        async for key, raw in self._store.scan(prefix=keys.IDEMPOTENCY_PREFIX):
            if not self._live(jsoncodec.decode(raw)):
                doomed.append(Delete(key))
        if doomed:
            await self._store.write(doomed)
        return len(doomed)


class EntityResolver:
    """Tenant-scoped entities: a surface name or actor id resolves to one stable ``ent_`` id.

    A new entity is persisted by the first derivation batch that references it (``pending_ops``)
    so a fact is never stored pointing at an entity that is not.
    """

    def __init__(self, store, ids, clock) -> None:
        self._store = store
        self._ids = ids
        self._clock = clock
        self._by_alias: dict[tuple[str, str], str] = {}
        self._entities: dict[str, Entity] = {}
        self._unpersisted: set[str] = set()

    @staticmethod
    def alias_of(term: TermRef) -> str:
        return actor_alias(term.actor_id) if term.actor_id else normalise_alias(term.name)

    async def resolve(self, tenant: str, term: TermRef) -> Entity:
        alias = self.alias_of(term)
        cache_key = (tenant, alias)
        entity_id = self._by_alias.get(cache_key)
        if entity_id is None:
            raw = await self._store.get(keys.entity_alias(tenant, alias))
            entity_id = self._by_alias.get(cache_key)  # another task may have resolved it meanwhile
            if entity_id is None and raw is not None:
                entity_id = raw.decode()
                self._by_alias[cache_key] = entity_id
        if entity_id is not None:
            entity = self._entities.get(entity_id)
            if entity is None:
                raw = await self._store.get(keys.entity(tenant, entity_id))
                entity = self._entities.get(entity_id) or (loads(raw, Entity) if raw else None)
                if entity is None:  # alias without record: heal by recreating the record
                    entity = self._new(tenant, term, alias, entity_id)
                self._entities[entity_id] = entity
            return entity
        entity = self._new(tenant, term, alias)
        self._by_alias[cache_key] = entity.id
        self._entities[entity.id] = entity
        return entity

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
            if name in self._entities:
                return self._entities[name]
            raw = await self._store.get(keys.entity(tenant, name))
            return loads(raw, Entity) if raw else None
        is_actor = ":" in name and name.split(":", 1)[0].isidentifier()
        term = TermRef(name, actor_id=name if is_actor else None)
        alias = self.alias_of(term)
        entity_id = self._by_alias.get((tenant, alias))
        if entity_id is None:
            raw = await self._store.get(keys.entity_alias(tenant, alias))
            if raw is None:
                return None
            entity_id = raw.decode()
        return await self.find(tenant, entity_id)

    def pending_ops(self, entity_ids) -> list[Put]:
        ops = []
        for entity_id in entity_ids:
            if entity_id in self._unpersisted:
                entity = self._entities[entity_id]
                ops.append(Put(keys.entity(entity.tenant_id, entity.id), dumps(entity)))
                for alias in entity.aliases:
                    ops.append(Put(keys.entity_alias(entity.tenant_id, alias), entity.id.encode()))
        return ops

    def mark_persisted(self, entity_ids) -> None:
        self._unpersisted.difference_update(entity_ids)
