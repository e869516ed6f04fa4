"""LevelDB through plyvel.

Point operations are called directly on the event loop (≈1–2 µs; a thread hop costs ≈140 µs).
Synced batches and the tail of large scans run in a worker thread: a scan serves its first
``INLINE_ITEMS`` pairs inline (most scans are small) and fetches the rest in chunks off-loop.
Only one ``plyvel.DB`` may be open per directory; a second open fails fast with
``DATA_DIR_LOCKED`` instead of hanging.
"""

from __future__ import annotations

import functools
import os
from collections.abc import AsyncIterator, Sequence

import plyvel
import trio

from ...engine.spi.kv import Delete, Op, Put, scan_bounds
from ...errors import DataDirLocked, StoreClosed, WalUnavailable

INLINE_ITEMS = 256
# A 4 MB memtable (LevelDB's default) fills in under a second at capture rates, and level-0
# files then pile up faster than compaction drains them, which makes LevelDB throttle writers.
# Measured in bench/capture.py (docs/decisions.md): larger buffers and a Bloom filter for the
# point look-ups on absent keys (idempotency keys, entity aliases).  16 MB + 8 MB captured as
# fast as 64 MB + 64 MB, which took minutes to fill and kept RSS growing that long (decisions.md,
# "Index memory"); LevelDB holds up to two memtables (one being flushed) plus the cache.
DEFAULT_OPTIONS = {
    "write_buffer_size": 16 << 20,
    "lru_cache_size": 8 << 20,
    "bloom_filter_bits": 10,
    "max_file_size": 16 << 20,
}
CHUNK_ITEMS = 4096


def _iterator_args(prefix, start, stop, reverse):
    lower, upper = scan_bounds(prefix, start, stop)
    kwargs = {"reverse": reverse, "fill_cache": True}
    if lower:
        kwargs["start"] = lower
    if upper is not None:
        kwargs["stop"] = upper
    return kwargs


async def _scan(
    source, prefix, start, stop, reverse, limit, owner
) -> AsyncIterator[tuple[bytes, bytes]]:
    if limit is not None and limit <= 0:
        return
    lower, upper = scan_bounds(prefix, start, stop)
    if upper is not None and upper <= lower:
        return
    owner._check()
    iterator = source.iterator(**_iterator_args(prefix, start, stop, reverse))
    remaining = limit
    try:
        inline = INLINE_ITEMS if remaining is None else min(INLINE_ITEMS, remaining)
        batch = []
        for pair in iterator:
            batch.append(pair)
            if len(batch) >= inline:
                break
        exhausted = len(batch) < inline
        while True:
            for pair in batch:
                yield pair
            if remaining is not None:
                remaining -= len(batch)
                if remaining <= 0:
                    return
            if exhausted:
                return
            owner._check()
            want = CHUNK_ITEMS if remaining is None else min(CHUNK_ITEMS, remaining)

            def fetch(count=want):
                out = []
                for item in iterator:
                    out.append(item)
                    if len(out) >= count:
                        break
                return out

            batch = await trio.to_thread.run_sync(fetch)
            exhausted = len(batch) < want
    finally:
        iterator.close()


class LevelDBSnapshot:
    def __init__(self, snapshot, store: LevelDBStore) -> None:
        self._snapshot = snapshot
        self._store = store
        self._closed = False

    def _check(self) -> None:
        if self._closed:
            raise StoreClosed("snapshot is closed")
        self._store._check()

    async def get(self, key: bytes) -> bytes | None:
        self._check()
        return self._snapshot.get(key)

    def scan(self, *, prefix=b"", start=None, stop=None, reverse=False, limit=None):
        self._check()
        return _scan(self._snapshot, prefix, start, stop, reverse, limit, self)

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._snapshot.close()


def _below(key: bytes) -> bytes:
    """A key just below ``key`` that no record uses (UTF-8 text never holds the byte 0xff)."""
    if key[-1]:
        return key[:-1] + bytes([key[-1] - 1]) + b"\xff" * 16
    return key[:-1]


class LevelDBStore:
    def __init__(self, db: plyvel.DB, path: str) -> None:
        self._db = db
        self.path = path
        self.closed = False
        self._compacting = trio.Lock()  # close waits for a compaction running in a thread

    @classmethod
    async def open(cls, path: str, **options) -> LevelDBStore:
        os.makedirs(path, exist_ok=True)
        settings = {**DEFAULT_OPTIONS, **options}
        try:
            db = plyvel.DB(path, create_if_missing=True, **settings)
        except plyvel.IOError as exc:
            if "lock" in str(exc).lower():
                raise DataDirLocked(
                    f"data directory {path} is already open in another process or engine",
                    details={"path": path},
                ) from None
            raise WalUnavailable(
                f"cannot open LevelDB at {path}: {exc}", details={"path": path}
            ) from exc
        except plyvel.Error as exc:
            raise WalUnavailable(
                f"cannot open LevelDB at {path}: {exc}", details={"path": path}
            ) from exc
        return cls(db, path)

    def _check(self) -> None:
        if self.closed:
            raise StoreClosed("the LevelDB store is closed")

    async def get(self, key: bytes) -> bytes | None:
        self._check()
        return self._db.get(key)

    async def write(self, ops: Sequence[Op], *, sync: bool = False) -> None:
        self._check()
        batch = self._db.write_batch(sync=sync)
        for op in ops:
            if isinstance(op, Put):
                batch.put(op.key, op.value)
            elif isinstance(op, Delete):
                batch.delete(op.key)
            else:
                batch.clear()
                raise TypeError(f"not a Put/Delete: {op!r}")
        try:
            if sync:
                await trio.to_thread.run_sync(batch.write, abandon_on_cancel=False)
            else:
                await trio.lowlevel.checkpoint_if_cancelled()
                batch.write()
                await trio.lowlevel.cancel_shielded_checkpoint()
        except plyvel.Error as exc:
            raise WalUnavailable(f"LevelDB write failed: {exc}") from exc

    def scan(self, *, prefix=b"", start=None, stop=None, reverse=False, limit=None):
        self._check()
        return _scan(self._db, prefix, start, stop, reverse, limit, self)

    async def snapshot(self) -> LevelDBSnapshot:
        self._check()
        return LevelDBSnapshot(self._db.snapshot(), self)

    async def compact(self, start: bytes | None = None, stop: bytes | None = None) -> bool:
        """Drop deleted and overwritten values in ``[start, stop)`` from the files on disk.

        LevelDB's ``CompactRange`` flushes the memtable (a new log file starts; the old one, which
        holds every recent write, is deleted) and then compacts each level *above* the deepest
        one holding the range into the next.  A flushed memtable may itself land at that deepest
        level holding a value and its deletion side by side, and no range compaction would ever
        rewrite it.  So a second pass first writes deletions of two absent keys just below each
        end of the range (checked absent; readers never see a deletion) and compacts again:
        their small file spans the range and lands above every file holding it, which the
        compaction then merges down through, dropping every shadowed value (docs/decisions.md,
        "Forget").  Files pinned by an open iterator
        or snapshot stay until it is closed.  Runs in a worker thread."""
        self._check()
        compact = functools.partial(self._db.compact_range, start=start, stop=stop)
        async with self._compacting:
            self._check()
            try:
                await trio.to_thread.run_sync(compact)
                ends = [Delete(key) for key in (_below(start or b"\x01"), _below(stop) if stop else b"\xff" * 16)
                        if key and self._db.get(key) is None]  # fmt: skip
                batch = self._db.write_batch()  # no checkpoint since the look-up: still absent
                for end in ends:
                    batch.delete(end.key)
                batch.write()
                await trio.to_thread.run_sync(compact)
            except plyvel.Error as exc:
                raise WalUnavailable(f"LevelDB compaction failed: {exc}") from exc
        return True

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            async with self._compacting:
                await trio.to_thread.run_sync(self._db.close)
