"""LevelDB KVStore via plyvel: the default for ``cortexdb serve``."""

from .store import LevelDBStore

__all__ = ["LevelDBStore"]
