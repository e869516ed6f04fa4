"""The node's and tenants' tables, and the server's stores (``keys`` documents each table).

``NodeTables`` is what the engine opens on a store; ``Engine.tables`` hands it to the server,
whose stores (policy documents, revoked tokens, audit rows and peppers, scope records) are its
tables — the server never builds a key.  A scope actor's tables come from ``partition(scope)``.

| attribute          | table | row key                              | value            |
|--------------------|-------|--------------------------------------|------------------|
| ``wal``            | W     | wal offset (see ``WalTable``)        | scope, event id  |
| ``event_states``   | X     | evt_id                               | ``EventState``   |
| ``lifecycle``      | L     | lce_id                               | ``LifecycleEvent`` |
| ``scopes``         | S     | scope path                           | ``Scope``        |
| ``batches``        | BT    | batch_id                             | JSON             |
| ``meta``           | M     | name                                 | JSON             |
| ``idempotency``    | I     | (tenant, caller, family, key)        | JSON             |
| ``entities``       | N     | (tenant, ent_id)                     | ``Entity``       |
| ``entity_aliases`` | NA    | (tenant, alias)                      | ent_id           |
| ``entity_mentions``| NM    | (tenant, ent_id, evt_id)             | scope            |
| ``event_entities`` | NE    | (evt_id, ent_id)                     | tenant           |
| ``temporal_phrases`` | TP  | (tenant, name)                       | JSON             |
| ``policy_docs``    | PO    | (tier, target)                       | JSON             |
| ``revoked``        | RV    | jti                                  | JSON             |
| ``audit_rows``     | AU    | audit_id                             | JSON             |
| ``peppers``        | PP    | (tenant, version) (``PepperTable``)  | JSON             |
| ``all_vectors``    | V     | (scope, record id): every scope's    | float32          |
| ``jobs``           | J     | job_id                               | JSON job record  |
| ``erasure_manifests`` | EM | ("h", id) / ("c", id, section, part) | JSON             |
| ``blobs``          | BL    | blob_id                              | JSON             |
| ``blob_references``| BR    | (blob_id, evt_id)                    | scope            |
| ``event_blobs``    | BE    | (evt_id, blob_id)                    | mark             |
| ``blob_contents``  | BH    | (sha256, blob_id)                    | mark             |
| ``belief_homes``   | BS    | belief_id                            | scope            |
| ``vocabularies``   | VO    | (tenant, name)                       | JSON             |
| ``signal_types``   | SGT   | (tenant, signal type)                | JSON             |
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Sequence
from typing import Any

from ..model import Entity, EventState, LifecycleEvent, Scope
from ..spi.kv import Delete, KVStore, Op, Put
from . import keys
from .lifecycle_rows import LifecycleRows
from .partition import Partition
from .table import CHUNK_OPS, JSON, MARK, TEXT, VECTOR, Records, Table

#: ``NodeTables.compact`` merges two ranges separated by fewer bytes of live rows than this
#: (a quarter of a LevelDB table file here: compacting either range rewrites such files whole)
COALESCE_GAP_BYTES = 4 << 20
BELIEF_HOMES_META = "belief_homes"  # meta row: this data dir notes where each belief lives


class WalTable:
    """The node WAL order (``W``): offset -> (scope, event id).  Its keys are 8-byte offsets."""

    def __init__(self, store: KVStore) -> None:
        self.store = store

    def put_op(self, offset: int, scope: str, event_id: str) -> Op:
        return Put(keys.wal(offset), keys.wal_value(scope, event_id))

    def delete_op(self, offset: int) -> Op:
        return Delete(keys.wal(offset))

    async def last_offset(self) -> int | None:
        async for key, _ in self.store.scan(prefix=keys.WAL_PREFIX, reverse=True, limit=1):
            return keys.wal_offset_of(key)
        return None

    async def scan(self, after: int | None = None) -> AsyncIterator[tuple[int, str, str]]:
        """``(offset, scope, event id)`` in WAL order (past offset ``after`` when given)."""
        start = keys.wal(after + 1) if after is not None else None
        async for key, value in self.store.scan(prefix=keys.WAL_PREFIX, start=start):
            yield (keys.wal_offset_of(key), *keys.parse_wal_value(value))


class PepperTable:
    """Audit peppers (``PP``): (tenant, version) -> record; versions are integers, stored as 8
    digits so that they sort numerically."""

    def __init__(self, store: KVStore) -> None:
        self.rows: Table[Any] = Table(store, keys.prefix(keys.PEPPERS), JSON)

    async def scan(self, tenant: str) -> AsyncIterator[tuple[int, Any]]:
        async for version, record in self.rows.scan(tenant):
            yield int(version), record

    def put_op(self, tenant: str, version: int, record: Any) -> Op:
        return self.rows.put_op((tenant, keys.pepper_version(version)), record)

    def delete_op(self, tenant: str, version: int) -> Op:
        return self.rows.delete_op((tenant, keys.pepper_version(version)))


class NodeTables:
    def __init__(self, store: KVStore) -> None:
        self.store = store
        self.wal = WalTable(store)

        def table(name: bytes, codec: Any) -> Table[Any]:
            return Table(store, keys.prefix(name), codec)

        self.event_states: Table[EventState] = table(keys.EVENT_STATES, Records(EventState))
        self.lifecycle: Table[LifecycleEvent] = table(keys.LIFECYCLE, LifecycleRows())
        self.scopes: Table[Scope] = table(keys.SCOPES, Records(Scope))
        self.batches = table(keys.BATCHES, JSON)
        self.meta = table(keys.META, JSON)
        self.idempotency = table(keys.IDEMPOTENCY, JSON)
        self.entities: Table[Entity] = table(keys.ENTITIES, Records(Entity))
        self.entity_aliases: Table[str] = table(keys.ENTITY_ALIASES, TEXT)
        self.entity_mentions: Table[str] = table(keys.ENTITY_MENTIONS, TEXT)  # who mentions an entity
        self.event_entities: Table[str] = table(keys.EVENT_ENTITIES, TEXT)  # whom an event mentions
        self.temporal_phrases = table(keys.TEMPORAL_PHRASES, JSON)
        self.policy_docs = table(keys.POLICY_DOCS, JSON)
        self.revoked = table(keys.REVOKED, JSON)
        self.audit_rows = table(keys.AUDIT_ROWS, JSON)
        self.peppers = PepperTable(store)
        self.all_vectors = table(keys.VECTORS, VECTOR)
        self.jobs = table(keys.JOBS, JSON)
        self.erasure_manifests = table(keys.ERASURE_MANIFESTS, JSON)
        self.blobs = table(keys.BLOBS, JSON)  # blobs (engine/blobs.py): metadata, references
        self.blob_references: Table[str] = table(keys.BLOB_REFERENCES, TEXT)
        self.event_blobs = table(keys.EVENT_BLOBS, MARK)
        self.blob_contents = table(keys.BLOB_CONTENTS, MARK)
        self.belief_homes: Table[str] = table(keys.BELIEF_HOMES, TEXT)  # belief id -> its scope
        self.vocabularies = table(keys.VOCABULARIES, JSON)  # (tenant, name) -> vocabulary (§8.14)
        self.signal_types = table(keys.SIGNAL_TYPES, JSON)  # a tenant's signal type overrides
        self._pending = table(keys.PENDING, MARK)
        self._all_beliefs = table(keys.BELIEFS, MARK)  # (scope, belief_id): every scope's
        self._foreign_work = table(keys.FOREIGN_WORK, JSON)

    def blob_reference_ops(self, event_id: str, scope: str, blob_ids: Sequence[str]) -> list[Op]:
        """The rows saying that an event refers to blobs (BR and BE), for its capture write."""
        ops: list[Op] = []
        for blob_id in dict.fromkeys(blob_ids):
            ops += [self.blob_references.put_op((blob_id, event_id), scope), self.event_blobs.put_op((event_id, blob_id), True)]
        return ops

    def mention_ops(self, event_id: str, tenant: str, scope: str, entity_ids: Sequence[str]) -> list[Op]:
        """The rows saying that an event mentions entities (NM and NE), for its extraction's write."""
        ops: list[Op] = []
        for entity_id in entity_ids:
            ops += [self.entity_mentions.put_op((tenant, entity_id, event_id), scope),
                    self.event_entities.put_op((event_id, entity_id), tenant)]  # fmt: skip
        return ops

    async def note_belief_homes(self) -> int:
        """Once per data dir: the beliefs stored before their homes were noted (``BS``) get
        theirs, so ``beliefs/why`` finds any belief by id.  Returns how many were noted."""
        if await self.meta.get(BELIEF_HOMES_META) is not None:
            return 0
        ops: list[Op] = []
        noted = 0
        async for (scope, belief_id), _ in self._all_beliefs.items():
            ops.append(self.belief_homes.put_op(belief_id, scope))
            noted += 1
            if len(ops) >= CHUNK_OPS:
                await self.write(ops)
                ops = []
        ops.append(self.meta.put_op(BELIEF_HOMES_META, {"version": 1, "noted": noted}))
        await self.write(ops, sync=True)
        return noted

    def partition(self, scope: str) -> Partition:
        """The tables of one scope (its actor's)."""
        return Partition(self.store, scope, self.event_states)

    async def write(self, ops: Sequence[Op], *, sync: bool = False) -> None:
        """Apply operations of any tables of this store in one atomic write."""
        await self.store.write(ops, sync=sync)

    async def scopes_with_pending_work(self) -> list[str]:
        """The scopes with an unfinished pipeline (``P``) or foreign work (``FW``), each once."""
        scopes: list[str] = []
        for table in (self._pending, self._foreign_work):
            start = table.prefix
            while True:
                found = None
                async for key, _ in self.store.scan(prefix=table.prefix, start=start, limit=1):
                    found = key
                if found is None:
                    break
                scope = keys.first_part(found)
                if scope not in scopes:
                    scopes.append(scope)
                start = keys.prefix(table.prefix[:-1], scope)[:-1] + b"\x01"  # past this scope
        return scopes

    async def compact(self, *ranges: tuple[bytes | None, bytes | None]) -> bool:
        """Compact the store (or the key ``ranges`` given, each ``(start, stop)``) when the
        backend can, then let it rotate its logs (``rotate``: LevelDB reopens, so that no
        manifest or log keeps a key the compaction dropped); False when it has nothing to
        compact."""
        compact_range = getattr(self.store, "compact", None)
        if compact_range is None:
            return False
        spans = await self._coalesce(ranges) if ranges else []
        compact_ranges = getattr(self.store, "compact_ranges", None)  # LevelDB: shares the flushes
        if compact_ranges is not None:
            done = [await compact_ranges(spans or [(None, None)])]
        else:
            done = [await compact_range(start, stop) for start, stop in spans] if spans else [await compact_range()]
        compacted = any(result is not False for result in done)  # None: a store from before compact's bool
        rotate = getattr(self.store, "rotate", None)
        if compacted and rotate is not None:
            await rotate()
        return compacted

    async def _coalesce(self, ranges: Sequence[tuple[bytes | None, bytes | None]]) -> list[tuple[bytes | None, bytes | None]]:
        """The ranges in key order, overlapping ones merged, and neighbours merged when less than
        ``COALESCE_GAP_BYTES`` of live rows lie between them.  A range compaction costs about
        the same however little its range holds (it rewrites the files overlapping it, whole,
        and syncs the store's manifest), so a scope's tables, often close to each other, are
        compacted in a few passes instead of one each; the rows in between are rewritten
        unchanged."""
        spans: list[tuple[bytes | None, bytes | None]] = []
        for start, stop in sorted(ranges, key=lambda r: r[0] or b""):
            if spans:
                last_start, last_stop = spans[-1]
                if last_stop is None or (start is not None and start <= last_stop) or await self._small_gap(last_stop, start):
                    merged = None if last_stop is None or stop is None else max(last_stop, stop)
                    spans[-1] = (last_start, merged)
                    continue
            spans.append((start, stop))
        return spans

    async def _small_gap(self, start: bytes, stop: bytes | None) -> bool:
        """Whether the live rows in [start, stop) hold less than ``COALESCE_GAP_BYTES``."""
        size = 0
        async for key, value in self.store.scan(start=start, stop=stop):
            size += len(key) + len(value)
            if size >= COALESCE_GAP_BYTES:
                return False
        return True

    def forget_ranges(self, scope: str, event_ids: Collection[str] = ()) -> list[tuple[bytes, bytes]]:
        """The key ranges a forget in ``scope`` rewrote, for ``compact``: the scope's derived
        tables (with its suppressions, notes and pending work) and, when events were redacted or
        deleted, the span of their rows in the scope's events and the node's event states, and
        the lifecycle rows (the replay window), and the entity tables (an entity goes with its last
        mention: ``EntityResolver.release``).  The WAL order and idempotency records hold ids
        and hashes only."""
        ranges = [_whole(keys.prefix(name, scope)) for name in keys.FORGET_SCOPED]
        if event_ids:
            first, last = min(event_ids), max(event_ids)
            for table in (keys.prefix(keys.EVENTS, scope), keys.prefix(keys.EVENT_STATES)):
                ranges.append((keys.within(table, first), keys.within(table, last) + b"\x01"))
            ranges.append(_whole(keys.prefix(keys.LIFECYCLE)))
            first, *_, last = sorted(keys.FORGET_ENTITY_TABLES)  # N, NA, NE, NM: adjacent, no other table between
            ranges.append((keys.prefix(first), _whole(keys.prefix(last))[1]))
        return ranges


def _whole(prefix: bytes) -> tuple[bytes, bytes]:
    """Every key starting with ``prefix`` (which ends with the separator) as [start, stop)."""
    return prefix, prefix[:-1] + b"\x01"
