"""LevelDB through plyvel.

Point operations are called directly on the event loop (≈1–2 µs; a thread hop costs ≈140 µs).
Synced batches and the tail of large scans run in a worker thread: a scan serves its first
``INLINE_ITEMS`` pairs inline (most scans are small) and fetches the rest in chunks off-loop.
Only one ``plyvel.DB`` may be open per directory; a second open fails fast with
``DATA_DIR_LOCKED`` instead of hanging.

After a forget, ``compact`` rewrites the key ranges it changed and ``rotate`` closes and reopens
the DB, the only way LevelDB writes a fresh MANIFEST and write-ahead log; the info logs (``LOG``,
``LOG.old``), which quote keys, are deleted meanwhile (docs/decisions.md, "LevelDB residue").
During a reopen every operation waits for it (a few milliseconds); a scan in progress goes on
from its last key in the reopened DB.  The sentinel keys a compaction writes are never read.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import AsyncIterator, Sequence

import plyvel
import trio

from ...engine.spi.kv import Delete, Op, Put, scan_bounds
from ...errors import StoreClosed, WalUnavailable
from .files import DEFAULT_OPTIONS, FLUSH_KEY, INFO_LOGS, SENTINELS, below, open_db, pack, unpack

INLINE_ITEMS = 256
CHUNK_ITEMS = 4096



def _iterator_args(prefix, start, stop, reverse):
    lower, upper = scan_bounds(prefix, start, stop)
    kwargs = {"reverse": reverse, "fill_cache": True}
    if lower:
        kwargs["start"] = lower
    if upper is not None:
        kwargs["stop"] = upper
    return kwargs


async def _scan(owner, prefix, start, stop, reverse, limit) -> AsyncIterator[tuple[bytes, bytes]]:
    """The pairs of a scan; ``owner`` is the store or a snapshot.  A scan whose store reopened
    (``rotate``) since its last chunk goes on past the last key it read, in the reopened DB.
    The sentinels of a compaction in progress (``_hidden``) are skipped."""
    if limit is not None and limit <= 0:
        return
    lower, upper = scan_bounds(prefix, start, stop)
    if upper is not None and upper <= lower:
        return
    await owner._ready()
    hidden = owner._hidden
    generation = owner._generation
    iterator = owner._iterator(**_iterator_args(prefix, start, stop, reverse))
    remaining = limit
    try:
        want = INLINE_ITEMS if remaining is None else min(INLINE_ITEMS, remaining)
        batch = []
        for pair in iterator:
            batch.append(pair)
            if len(batch) >= want:
                break
        while True:
            for pair in batch:
                if hidden and pair[0] in hidden:
                    continue
                yield pair
                if remaining is not None:
                    remaining -= 1
                    if remaining <= 0:
                        return
            if len(batch) < want:  # exhausted
                return
            await owner._ready()
            if owner._generation != generation:  # reopened: the old iterator was closed with its DB
                last = batch[-1][0]
                lower_now, upper_now = (start, last) if reverse else (last + b"\x00", stop)
                iterator.close()
                iterator = owner._iterator(**_iterator_args(prefix, lower_now, upper_now, reverse))
                generation = owner._generation
            want = CHUNK_ITEMS if remaining is None else min(CHUNK_ITEMS, remaining)

            def fetch(count=want, iterator=iterator):
                out = []
                for item in iterator:
                    out.append(item)
                    if len(out) >= count:
                        break
                return out

            batch = await owner._in_thread(fetch)
    finally:
        iterator.close()


class LevelDBSnapshot:
    _generation = 0  # a snapshot never outlives a reopen: ``rotate`` waits for it to close

    def __init__(self, snapshot, store: LevelDBStore) -> None:
        self._snapshot = snapshot
        self._store = store
        self._closed = False

    def _check(self) -> None:
        if self._closed:
            raise StoreClosed("snapshot is closed")
        self._store._check()

    async def _ready(self) -> None:
        self._check()

    def _iterator(self, **kwargs):
        return self._snapshot.iterator(**kwargs)

    @property
    def _hidden(self) -> set[bytes]:
        return self._store._hidden

    async def _in_thread(self, call):
        self._check()
        return await self._store._in_thread(call)

    async def get(self, key: bytes) -> bytes | None:
        self._check()
        if self._store._hidden and key in self._store._hidden:
            return None
        return self._snapshot.get(key)

    def scan(self, *, prefix=b"", start=None, stop=None, reverse=False, limit=None):
        self._check()
        return _scan(self, prefix, start, stop, reverse, limit)

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._snapshot.close()
            self._store._snapshot_closed()


class LevelDBStore:
    def __init__(self, db: plyvel.DB, path: str, settings: dict | None = None) -> None:
        self._db = db
        self.path = path
        self._settings = settings if settings is not None else dict(DEFAULT_OPTIONS)
        self.closed = False
        self._compacting = trio.Lock()  # close waits for a compaction running in a thread
        self._generation = 0  # how many times the DB was reopened (``rotate``)
        self._reopening: trio.Event | None = None  # set while the DB reopens: operations wait
        self._threads = 0  # worker-thread calls on the DB in flight (synced writes, scan chunks)
        self._threads_idle: trio.Event | None = None
        self._snapshots = 0  # open snapshots: a compaction waits for them (they pin old values)
        self._snapshots_closed: trio.Event | None = None
        self._no_snapshots = False  # while compacting, a new snapshot waits
        self._hidden: set[bytes] = set()  # a compaction's sentinel keys: never read (``compact``)

    @classmethod
    async def open(cls, path: str, **options) -> LevelDBStore:
        os.makedirs(path, exist_ok=True)
        settings = {**DEFAULT_OPTIONS, **options}
        db = open_db(path, settings)
        left = db.get(SENTINELS)
        if left is not None:  # a compaction was interrupted: its sentinels go before anyone reads
            batch = db.write_batch(sync=True)
            for key in [SENTINELS, *unpack(left)]:
                batch.delete(key)
            batch.write()
        return cls(db, path, settings)

    def _check(self) -> None:
        if self.closed:
            raise StoreClosed("the LevelDB store is closed")

    async def _ready(self) -> None:
        """Wait through a reopen (``rotate``); then the store must be open."""
        while self._reopening is not None:
            await self._reopening.wait()
        self._check()

    def _iterator(self, **kwargs):
        return self._db.iterator(**kwargs)

    async def _in_thread(self, call, **kwargs):
        """Run ``call`` on the DB in a worker thread; a reopen waits for it to return."""
        self._threads += 1
        try:
            return await trio.to_thread.run_sync(call, **kwargs)
        finally:
            self._threads -= 1
            if not self._threads and self._threads_idle is not None:
                self._threads_idle.set()

    async def get(self, key: bytes) -> bytes | None:
        if self._reopening is not None:
            await self._ready()
        self._check()
        if self._hidden and key in self._hidden:
            return None
        return self._db.get(key)

    async def write(self, ops: Sequence[Op], *, sync: bool = False) -> None:
        if self._reopening is not None:
            await self._ready()
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
                await self._in_thread(batch.write, abandon_on_cancel=False)
            else:
                await trio.lowlevel.checkpoint_if_cancelled()
                batch.write()
                await trio.lowlevel.cancel_shielded_checkpoint()
        except plyvel.Error as exc:
            raise WalUnavailable(f"LevelDB write failed: {exc}") from exc

    def scan(self, *, prefix=b"", start=None, stop=None, reverse=False, limit=None):
        self._check()
        return _scan(self, prefix, start, stop, reverse, limit)

    async def snapshot(self) -> LevelDBSnapshot:
        while self._no_snapshots or self._reopening is not None:  # a compaction is on: after it
            await self._ready()
            if self._no_snapshots:
                async with self._compacting:
                    pass
        self._check()
        self._snapshots += 1
        return LevelDBSnapshot(self._db.snapshot(), self)

    def _snapshot_closed(self) -> None:
        self._snapshots -= 1
        if not self._snapshots and self._snapshots_closed is not None:
            self._snapshots_closed.set()

    async def _no_open_snapshots(self) -> None:
        """Wait until every snapshot is closed (new ones wait meanwhile: ``_no_snapshots``)."""
        while self._snapshots:
            self._snapshots_closed = trio.Event()
            await self._snapshots_closed.wait()
        self._snapshots_closed = None

    async def compact(self, start: bytes | None = None, stop: bytes | None = None) -> bool:
        """Drop deleted and overwritten values in ``[start, stop)`` from the files on disk.

        LevelDB's ``CompactRange`` flushes the memtable (a new log file starts; the old one, which
        holds every recent write, is deleted) and then compacts each level *above* the deepest
        one holding the range into the next.  Two things escape it: a file at that deepest level
        holding a value and its deletion side by side (a flushed memtable can land there) is
        never rewritten, and each level's *compaction pointer* — the largest key of its last
        compaction's input, which the MANIFEST keeps — can be a deleted key of the range.  So
        the compaction first writes two *sentinels*, absent keys just below each end of the
        range (never read: ``_hidden``), flushed three times so that their last file lands at
        level 0 above the second, which lands above the first: their data then spans the range
        at every level from 0 down, is merged into each level's compaction (so its pointer is a
        sentinel's or a key past the range) and, at the level above the deepest, into every
        file holding the range, dropping what each shadowed.  Then the sentinels are deleted and
        the range compacted again (their values at the deepest level keep the deletions alive
        down to it).  ``SENTINELS`` lists them until then: a crash leaves them to the next open
        (docs/decisions.md, "LevelDB residue").  An open snapshot would keep the old values:
        the compaction waits for the snapshots to close (new ones wait for it).  Files an open
        iterator pins stay until it is closed, or until ``rotate``.  Runs in a worker thread."""
        return await self.compact_ranges([(start, stop)])

    async def compact_ranges(self, ranges: Sequence[tuple[bytes | None, bytes | None]]) -> bool:
        """``compact`` of several ranges at once (a forget's): one set of sentinels for all of
        them, flushed three times, then each range compacted (carrying its sentinels down), the
        sentinels deleted and each range compacted again — the memtable flushes are shared."""
        self._check()
        ranges = list(dict.fromkeys(ranges)) or [(None, None)]
        async with self._compacting:
            self._check()
            self._no_snapshots = True
            try:
                await self._no_open_snapshots()
                await self._ready()
                db = self._db
                compacts = [functools.partial(db.compact_range, start=a, stop=b) for a, b in ranges]
                flush = functools.partial(db.compact_range, start=FLUSH_KEY, stop=FLUSH_KEY)
                ends = [key for a, b in ranges for key in (below(a or b"\x01"), below(b) if b else b"\xff" * 16)]
                sentinels = [key for key in dict.fromkeys(ends) if key and db.get(key) is None]
                self._hidden.update([*sentinels, SENTINELS])  # no checkpoint since the look-up
                try:
                    for step in (flush, flush, compacts[0]):
                        batch = db.write_batch()
                        batch.put(SENTINELS, pack(sentinels))
                        for key in sentinels:
                            batch.put(key, b"")
                        batch.write()
                        await self._in_thread(step)
                    for step in compacts[1:]:
                        await self._in_thread(step)
                finally:  # however it ended (a cancel too): the sentinels go before they show
                    batch = db.write_batch()
                    for key in [*sentinels, SENTINELS]:
                        batch.delete(key)
                    batch.write()
                    self._hidden.difference_update([*sentinels, SENTINELS])
                for step in compacts:
                    await self._in_thread(step)
            except plyvel.Error as exc:
                raise WalUnavailable(f"LevelDB compaction failed: {exc}") from exc
            finally:
                self._no_snapshots = False
        return True

    async def rotate(self) -> bool:
        """Close and reopen the DB, so that LevelDB starts a new MANIFEST (the old one lists the
        smallest and largest key of every file it ever had) and a new write-ahead log, and
        deletes the old ones; the info logs, which quote the keys manual compactions stopped
        at, are deleted while the DB is closed.  Every operation waits for the reopen; the
        worker-thread calls in flight (synced writes, scan chunks) and open snapshots are
        waited for first.  A scan in progress goes on from its last key in the reopened DB."""
        self._check()
        async with self._compacting:
            self._check()
            self._no_snapshots = True
            try:
                await self._no_open_snapshots()
                await self._ready()
                self._reopening = trio.Event()
                while self._threads:
                    self._threads_idle = trio.Event()
                    await self._threads_idle.wait()
                self._threads_idle = None
                old, self._db = self._db, None

                def reopen():
                    old.close()
                    for name in INFO_LOGS:
                        with contextlib.suppress(FileNotFoundError):
                            os.remove(os.path.join(self.path, name))
                    return open_db(self.path, self._settings)

                try:
                    self._db = await trio.to_thread.run_sync(reopen, abandon_on_cancel=False)
                except BaseException:
                    self.closed = True  # the DB could not be reopened: the store is unusable
                    raise
                self._generation += 1
            finally:
                self._no_snapshots = False
                if self._reopening is not None:
                    self._reopening.set()
                    self._reopening = None
        return True

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            async with self._compacting:
                if self._db is not None:
                    await trio.to_thread.run_sync(self._db.close)
