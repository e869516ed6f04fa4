"""Factories that open the built-in backends for the conformance and engine suites."""

from __future__ import annotations

import attrs

from ..backends.filesystem import FileBlobStore
from ..backends.leveldb import LevelDBStore
from ..backends.memory import MemoryStore
from ..backends.memory.blobs import MemoryBlobStore


@attrs.define
class MemoryFactory:
    persistent = False

    async def open(self):
        return MemoryStore()


@attrs.define
class LevelDBFactory:
    path: str
    persistent = True

    async def open(self):
        return await LevelDBStore.open(self.path)


@attrs.define
class MemoryBlobFactory:
    """The memory blob store: every handle is the same store (what a restart would see)."""

    store: MemoryBlobStore = attrs.field(factory=MemoryBlobStore)

    async def open(self):
        return self.store


@attrs.define
class FileBlobFactory:
    path: str

    async def open(self):
        return FileBlobStore(self.path)


@attrs.define
class PostgresFactory:
    """The PostgreSQL store on ``dsn``, in a table of its own (the same table on every open)."""

    dsn: str
    table: str
    persistent = True

    async def open(self):
        from ..backends.postgres import PostgresStore

        return await PostgresStore.open(self.dsn, table=self.table)
