"""Factories that open the built-in backends for the conformance and engine suites."""

from __future__ import annotations

import attrs

from ..backends.leveldb import LevelDBStore
from ..backends.memory import MemoryStore


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
