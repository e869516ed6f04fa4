"""An ordered in-memory KVStore: a dict for values plus a sorted key list (bisect).

Snapshots are copy-on-write: a snapshot shares the current maps until the next write, which
then copies them, so taking a snapshot is O(1) and only the first write after it pays O(n).
"""

from __future__ import annotations

import bisect
from collections.abc import AsyncIterator, Sequence

import trio

from ...engine.spi.kv import Delete, Op, Put, scan_bounds
from ...errors import StoreClosed


class _View:
    """A frozen (values, sorted keys) pair that scans and gets read from."""

    __slots__ = ("keys", "values")

    def __init__(self, values: dict[bytes, bytes], keys: list[bytes]) -> None:
        self.values = values
        self.keys = keys

    def range(self, prefix, start, stop, reverse, limit) -> list[tuple[bytes, bytes]]:
        lower, upper = scan_bounds(prefix, start, stop)
        lo = bisect.bisect_left(self.keys, lower)
        hi = len(self.keys) if upper is None else bisect.bisect_left(self.keys, upper)
        if hi <= lo or (limit is not None and limit <= 0):
            return []
        if reverse:
            begin = lo if limit is None else max(lo, hi - limit)
            selected = self.keys[begin:hi][::-1]
        else:
            end = hi if limit is None else min(hi, lo + limit)
            selected = self.keys[lo:end]
        values = self.values
        return [(key, values[key]) for key in selected]


async def _iterate(pairs: list[tuple[bytes, bytes]]) -> AsyncIterator[tuple[bytes, bytes]]:
    for index, pair in enumerate(pairs):
        if index and index % 1024 == 0:
            await trio.lowlevel.checkpoint()
        yield pair


class MemorySnapshot:
    def __init__(self, view: _View, store: MemoryStore) -> None:
        self._view = view
        self._store = store
        self._closed = False

    def _check(self) -> None:
        if self._closed or self._store.closed:
            raise StoreClosed("snapshot is closed")

    async def get(self, key: bytes) -> bytes | None:
        self._check()
        return self._view.values.get(key)

    def scan(self, *, prefix=b"", start=None, stop=None, reverse=False, limit=None):
        self._check()
        return _iterate(self._view.range(prefix, start, stop, reverse, limit))

    async def close(self) -> None:
        self._closed = True


class MemoryStore:
    def __init__(self) -> None:
        self._view = _View({}, [])
        self._shared = False  # a snapshot holds the current view; copy before mutating
        self.closed = False

    def _check(self) -> None:
        if self.closed:
            raise StoreClosed("the memory store is closed")

    async def get(self, key: bytes) -> bytes | None:
        self._check()
        return self._view.values.get(key)

    async def write(self, ops: Sequence[Op], *, sync: bool = False) -> None:
        self._check()
        for op in ops:  # validate first so that a bad batch changes nothing
            if not isinstance(op, Put | Delete) or not isinstance(op.key, bytes):
                raise TypeError(f"not a Put/Delete with bytes key: {op!r}")
            if isinstance(op, Put) and not isinstance(op.value, bytes):
                raise TypeError(f"value must be bytes: {op!r}")
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._shared:
            self._view = _View(dict(self._view.values), list(self._view.keys))
            self._shared = False
        values, keys = self._view.values, self._view.keys
        for op in ops:
            if isinstance(op, Put):
                if op.key not in values:
                    bisect.insort(keys, op.key)
                values[op.key] = op.value
            elif op.key in values:
                del values[op.key]
                del keys[bisect.bisect_left(keys, op.key)]
        await trio.lowlevel.cancel_shielded_checkpoint()

    def scan(self, *, prefix=b"", start=None, stop=None, reverse=False, limit=None):
        self._check()
        return _iterate(self._view.range(prefix, start, stop, reverse, limit))

    async def snapshot(self) -> MemorySnapshot:
        self._check()
        self._shared = True
        return MemorySnapshot(self._view, self)

    async def compact(self, start: bytes | None = None, stop: bytes | None = None) -> bool:
        """Nothing to reclaim: a delete drops the value itself (a snapshot taken before keeps
        its own view until closed)."""
        self._check()
        await trio.lowlevel.checkpoint()
        return False

    async def close(self) -> None:
        self.closed = True

    def approximate_size(self) -> int:
        return len(self._view.keys)
