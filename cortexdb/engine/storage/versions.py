"""``Versions[T]``: the closed versions of one layer's records (tables ``FV``, ``BV``, ``EV``).

A record's current version is its row in the layer's own table (``F``, ``B``, ``EP``); every
version it had before is a row here, named ``(record id, version_stamp(recorded_to))`` — the
moment it was closed — so a record's versions read in time order and the one held at a moment
``T`` is the first whose stamp is past ``T`` (docs/time.md).

| method                    | does                                                          |
|---------------------------|---------------------------------------------------------------|
| ``put_op(id, closed, v)`` | the row of a version closed at ``closed``                     |
| ``rows(id, after=T)``     | its closed versions in time order (closed after ``T`` only)   |
| ``record_ids(after)``     | the ids that have closed versions, each once, in id order     |
| ``delete_ops(id)``        | deletions of every closed version of ``id``                   |
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from typing import Any, Generic, TypeVar

from ..spi.kv import Delete, KVStore, Op
from . import keys
from .table import Codec, Table

T = TypeVar("T")


class Versions(Generic[T]):
    def __init__(self, store: KVStore, prefix: bytes, codec: Codec[T]) -> None:
        self.table: Table[T] = Table(store, prefix, codec)

    def put_op(self, record_id: str, closed: dt.datetime, value: T) -> Op:
        return self.table.put_op((record_id, keys.version_stamp(closed)), value)

    async def rows(self, record_id: str, *, after: dt.datetime | None = None,
                   limit: int | None = None) -> AsyncIterator[T]:  # fmt: skip
        """The closed versions of ``record_id`` in time order; with ``after``, only those closed
        after it (the first of them is the version held at ``after``, if any was)."""
        bound = keys.version_stamp(after) if after is not None else None  # rows past the stamp
        async for _, value in self.table.scan(record_id, after=bound, limit=limit):
            yield value

    async def raw_rows(self, record_id: str, *, after: dt.datetime | None = None) -> AsyncIterator[bytes]:
        bound = keys.version_stamp(after) if after is not None else None
        async for _, value in self.table.raw.scan(record_id, after=bound):
            yield value

    async def has(self, record_id: str) -> bool:
        async for _ in self.table.ids(record_id, limit=1):
            return True
        return False

    async def record_ids(self, after: str | None = None) -> AsyncIterator[str]:
        """The ids with closed versions, each once, in id order (past ``after``)."""
        last = after
        async for parts, _ in self.table.raw.items(after=after):
            if parts[0] != last:
                last = parts[0]
                yield last

    async def delete_ops(self, record_id: str) -> list[Op]:
        under = self.table.key(record_id) + keys.SEP
        return [Delete(under + stamp.encode()) async for stamp in self.table.ids(record_id)]

    async def first_recorded(self, record_id: str) -> dict[str, Any] | None:
        """The oldest closed version of ``record_id`` as JSON (None when it has none)."""
        async for _, value in self.table.json.scan(record_id, limit=1):
            return value
        return None
