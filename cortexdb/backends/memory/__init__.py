"""In-memory KVStore: ordered and deterministic; the default for tests and embedding."""

from .store import MemoryStore

__all__ = ["MemoryStore"]
