"""Storage backends implementing ``cortexdb.engine.spi.KVStore``."""

from __future__ import annotations

from ..engine.spi.kv import KVStore


async def open_store(backend: str, path: str | None = None) -> KVStore:
    """Open a backend by name: ``memory`` or ``leveldb`` (which needs ``path``)."""
    if backend == "memory":
        from .memory import MemoryStore

        return MemoryStore()
    if backend == "leveldb":
        if not path:
            raise ValueError("the leveldb backend needs a data directory path")
        from .leveldb import LevelDBStore

        return await LevelDBStore.open(path)
    raise ValueError(f"unknown backend {backend!r}; expected 'memory' or 'leveldb'")
