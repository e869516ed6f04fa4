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
from .. import jsoncodec
from ..derive.entities import actor_alias, normalise_alias
from ..model import Entity
from ..spi.extractor import TermRef
from ..storage import NodeTables, Op, Table, WalTable
from ..temporal import format_ts, parse_rfc3339


class WalSequencer:
    """Node-monotonic ``wal_offset``: restored from the highest WAL key, so it survives restarts."""

    def __init__(self) -> None:
        self.last = 0

    async def restore(self, wal: WalTable) -> None:
        last = await wal.last_offset()
        if last is not None:
            self.last = last

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

    def __init__(self, key: tuple[str, ...], body_hash: str) -> None:
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

    def __init__(self, table: Table[Any], clock, ttl_seconds: float) -> None:
        self._table = table  # NodeTables.idempotency: (tenant, caller, family, key) -> record
        self._clock = clock
        self._ttl = dt.timedelta(seconds=ttl_seconds)
        self._inflight: dict[tuple[str, ...], Reservation] = {}

    def _live(self, record: dict[str, Any]) -> bool:
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


class EntityResolver:
    """Tenant-scoped entities: a surface name or actor id resolves to one stable ``ent_`` id.

    A new entity is persisted by the first derivation batch that references it (``pending_ops``)
    so a fact is never stored pointing at an entity that is not.
    """

    def __init__(self, tables: NodeTables, ids, clock) -> None:
        self._entities_table = tables.entities  # (tenant, ent_id) -> Entity
        self._aliases = tables.entity_aliases  # (tenant, normalised alias) -> ent_id
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
            stored_id = await self._aliases.get((tenant, alias))
            entity_id = self._by_alias.get(cache_key)  # another task may have resolved it meanwhile
            if entity_id is None and stored_id is not None:
                entity_id = stored_id
                self._by_alias[cache_key] = entity_id
        if entity_id is not None:
            entity = self._entities.get(entity_id)
            if entity is None:
                stored = await self._entities_table.get((tenant, entity_id))
                entity = self._entities.get(entity_id) or stored
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
            return await self._entities_table.get((tenant, name))
        is_actor = ":" in name and name.split(":", 1)[0].isidentifier()
        term = TermRef(name, actor_id=name if is_actor else None)
        alias = self.alias_of(term)
        entity_id = self._by_alias.get((tenant, alias))
        if entity_id is None:
            entity_id = await self._aliases.get((tenant, alias))
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
