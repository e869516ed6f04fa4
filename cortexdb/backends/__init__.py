"""Storage backends implementing ``cortexdb.engine.spi.KVStore`` and ``BlobStore``."""

from __future__ import annotations

import os

from ..engine.spi.blobs import BlobStore
from ..engine.spi.kv import KVStore


async def open_store(backend: str, path: str | None = None, *, leveldb: dict | None = None) -> KVStore:
    """Open a backend by name: ``memory``, ``leveldb`` (``path``: its data directory; ``leveldb``:
    plyvel options over the store's defaults, e.g. ``EngineConfig.leveldb_options()``) or
    ``postgres`` (``path``: a libpq connection string or URI, docs/scale-out.md)."""
    if backend == "memory":
        from .memory import MemoryStore

        return MemoryStore()
    if backend == "leveldb":
        if not path:
            raise ValueError("the leveldb backend needs a data directory path")
        from .leveldb import LevelDBStore

        return await LevelDBStore.open(path, **(leveldb or {}))
    if backend == "postgres":
        if not path:
            raise ValueError("the postgres backend needs a DSN (a libpq connection string or URI)")
        from .postgres import PostgresStore

        return await PostgresStore.open(path)
    raise ValueError(f"unknown backend {backend!r}; expected 'memory', 'leveldb' or 'postgres'")


def open_blob_store(store: KVStore) -> BlobStore:
    """The blob store that goes with a KV store: its own (``store.blob_store``), else files in
    ``<data dir>/blobs/`` for a store with a data directory (``store.path``: LevelDB), else
    memory (engine/spi/blobs.py)."""
    own = getattr(store, "blob_store", None)
    if own is not None:
        return own
    path = getattr(store, "path", None)
    if path:
        from .filesystem import FileBlobStore

        return FileBlobStore(os.path.join(path, "blobs"))
    from .memory.blobs import MemoryBlobStore

    return MemoryBlobStore()
