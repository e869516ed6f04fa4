"""LevelDB leaves no deleted key behind (issue 12, "rotate the log so the bytes are gone").

A forget compacts the key ranges it changed (``LevelDBStore.compact``), and then ``rotate``
closes and reopens the DB: the old MANIFEST (which lists the smallest and largest key of every
table file it ever had, and each level's compaction pointer), the old write-ahead log and the info
logs (which quote the keys manual compactions stop at) are gone.  These tests plant a deleted key
in those files, check it is there before ``rotate`` and nowhere after, and check that the store
stays usable — for a scan running across the reopen too.
"""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest
import trio
import trio.testing

from cortexdb.backends.leveldb import LevelDBStore
from cortexdb.backends.leveldb import files as leveldb_files
from cortexdb.backends.leveldb import store as leveldb_store
from cortexdb.engine.spi.kv import Delete, Put

MARK = b"qzvmarkerx"


def holding(path: Path, needle: bytes = MARK) -> list[str]:
    """The files of a data dir holding ``needle`` (MANIFEST-*, *.log, LOG*, CURRENT, tables)."""
    return sorted(p.name for p in path.iterdir() if p.is_file() and needle in p.read_bytes())


def keys(table: bytes, count: int) -> list[bytes]:
    return [table + b"\x00t\x00" + f"{i:06d}".encode() for i in range(count)]


async def test_rotate_drops_a_deleted_key_from_manifest_and_logs(tmp_path):
    path = tmp_path / "db"
    store = await LevelDBStore.open(str(path))
    try:
        marked = b"NA\x00t\x00" + MARK  # an alias key: the largest key the first table holds
        await store.write([Put(k, b"v") for k in [*keys(b"A", 50), *keys(b"NA", 50), marked]])
        await store.compact(b"NA\x00t\x00" + MARK, b"NA\x00t\x01")  # the info log quotes its start
        assert {"LOG"} <= set(holding(path)) and any(n.startswith("MANIFEST-") for n in holding(path))
        await store.write([Put(k, b"w") for k in keys(b"Z", 50)] + [Delete(marked)])
        await store.compact(b"NA\x00", b"NA\x01")  # the forget's compaction: the tables are clean ...
        assert not [n for n in holding(path) if n.endswith(".ldb")]
        assert holding(path)  # ... but the MANIFEST's history and the info log still quote the key

        assert await store.rotate() is True
        assert holding(path) == []
        assert {"CURRENT", "LOG"} <= {p.name for p in path.iterdir()}
        assert await store.get(marked) is None  # and the store goes on
        assert await store.get(keys(b"NA", 50)[7]) == b"v"
        await store.write([Put(b"after", b"x")], sync=True)
        assert [k async for k, _ in store.scan(prefix=b"Z\x00")] == keys(b"Z", 50)
    finally:
        await store.close()
    reopened = await LevelDBStore.open(str(path))  # what it left opens as before
    try:
        assert await reopened.get(b"after") == b"x" and await reopened.get(marked) is None
    finally:
        await reopened.close()


async def test_a_value_and_its_deletion_flushed_to_one_file_are_both_dropped(tmp_path):
    """A memtable holding a value and its deletion is flushed as one file straight to level 2,
    which no compaction of the range rewrites on its own: the sentinels' file merges into it."""
    path = tmp_path / "db"
    store = await LevelDBStore.open(str(path))
    try:
        await store.write([Put(b"k", MARK)])
        await store.write([Delete(b"k")])
        await store.compact(b"k", b"l")
        assert [n for n in holding(path) if n.endswith(".ldb")] == []
        await store.rotate()
        assert holding(path) == [] and await store.get(b"k") is None
        assert [k async for k, _ in store.scan()] == []  # no sentinel is left, none was seen
    finally:
        await store.close()


async def test_sentinels_a_crash_left_are_deleted_on_open(tmp_path):
    store = await LevelDBStore.open(str(tmp_path / "db"))
    sentinel = b"A\x00t" + b"\xff" * 16
    await store.write([Put(b"A\x00t\x00a", b"v"), Put(sentinel, b""),
                       Put(leveldb_files.SENTINELS, leveldb_files.pack([sentinel]))], sync=True)  # fmt: skip
    await store.close()
    store = await LevelDBStore.open(str(tmp_path / "db"))
    try:
        assert [k async for k, _ in store.scan()] == [b"A\x00t\x00a"]
    finally:
        await store.close()


@pytest.mark.parametrize("reverse", [False, True])
async def test_a_scan_across_a_rotate_reads_every_key_once(tmp_path, reverse):
    store = await LevelDBStore.open(str(tmp_path / "db"))
    try:
        every = keys(b"A", 3 * leveldb_store.CHUNK_ITEMS)
        for start in range(0, len(every), 2000):
            await store.write([Put(k, k[-6:]) for k in every[start : start + 2000]])
        seen = []
        async for key, value in store.scan(prefix=b"A\x00", reverse=reverse):
            seen.append(key)
            assert value == key[-6:]
            if len(seen) in (10, leveldb_store.INLINE_ITEMS + 5, 2 * leveldb_store.CHUNK_ITEMS):
                await store.rotate()  # inline part, first chunk, a later chunk: its DB was closed
        assert seen == (every[::-1] if reverse else every)
        limited = [k async for k, _ in _rotating(store, store.scan(prefix=b"A\x00", limit=5000))]
        assert limited == every[:5000]
    finally:
        await store.close()


async def _rotating(store, scan):
    async for pair in scan:
        yield pair
        if pair[0].endswith(b"000300"):
            await store.rotate()


async def test_a_rotate_waits_for_a_scan_chunk_being_read_and_operations_wait_for_it(tmp_path, monkeypatch):
    store = await LevelDBStore.open(str(tmp_path / "db"))
    every = keys(b"A", 2 * leveldb_store.CHUNK_ITEMS)
    await store.write([Put(k, b"v") for k in every])
    fetching, release = trio.Event(), threading.Event()
    run_sync = trio.to_thread.run_sync

    async def held_fetch(call, **kwargs):  # the scan's next chunk is read until the test says so
        if call.__name__ == "fetch" and not release.is_set():
            fetching.set()
            return await run_sync(lambda: (release.wait(), call())[1], **kwargs)
        return await run_sync(call, **kwargs)

    monkeypatch.setattr(leveldb_store.trio.to_thread, "run_sync", held_fetch)
    seen, got, rotated = [], [], []
    try:
        async with trio.open_nursery() as nursery:
            async def scan():
                seen.extend([k async for k, _ in store.scan(prefix=b"A\x00")])

            async def rotate():
                await fetching.wait()
                rotated.append(await store.rotate())

            async def get():
                await fetching.wait()
                await trio.testing.wait_all_tasks_blocked()
                got.append(await store.get(every[1]))

            nursery.start_soon(scan)
            nursery.start_soon(rotate)
            await fetching.wait()
            await trio.testing.wait_all_tasks_blocked()
            assert store._reopening is not None and not rotated  # the reopen waits for the chunk
            nursery.start_soon(get)
            await trio.testing.wait_all_tasks_blocked()
            assert got == []  # and a point read waits for the reopen
            release.set()
        assert seen == every and rotated == [True] and got == [b"v"]
    finally:
        release.set()
        await store.close()


async def test_a_compaction_waits_for_open_snapshots(tmp_path):
    store = await LevelDBStore.open(str(tmp_path / "db"))
    try:
        await store.write([Put(b"k", MARK)])
        snapshot = await store.snapshot()
        await store.write([Delete(b"k")])
        done = []
        async with trio.open_nursery() as nursery:
            async def compact():
                done.append(await store.compact(b"k", b"l"))
                done.append(await store.rotate())

            nursery.start_soon(compact)
            await trio.testing.wait_all_tasks_blocked()
            assert done == [] and await snapshot.get(b"k") == MARK  # the snapshot still reads it
            await snapshot.close()
        assert done == [True, True] and holding(tmp_path / "db") == []
    finally:
        await store.close()


async def test_random_layouts_leave_no_deleted_key_anywhere(tmp_path):
    """Small memtables and files, so that the data spreads over several levels and a deleted key
    can end a table file or a level's compaction: every round, after compacting the ranges of
    the deleted keys and rotating, no file holds one."""
    for seed in range(4):
        rng = random.Random(seed)
        path = tmp_path / f"db{seed}"
        store = await LevelDBStore.open(str(path), write_buffer_size=64 << 10, max_file_size=1 << 20)
        try:
            for _ in range(3):
                doomed = []
                for _ in range(rng.randint(5, 25)):
                    ops = []
                    for _ in range(300):
                        table = rng.choice([b"A", b"FI", b"NA", b"X"])
                        key = table + b"\x00t\x00" + rng.randbytes(6).hex().encode()
                        if table in (b"FI", b"NA") and rng.random() < 0.1:
                            key = key[:-6] + MARK + rng.randbytes(2).hex().encode()
                            doomed.append(key)
                        ops.append(Put(key, rng.randbytes(rng.randint(10, 200))))
                    await store.write(ops)
                await store.write([Delete(k) for k in doomed])
                tables = rng.sample([b"FI", b"NA"], 2)
                if rng.random() < 0.5:  # as a forget does: its ranges together
                    await store.compact_ranges([(table + b"\x00", table + b"\x01") for table in tables])
                else:
                    for table in tables:
                        await store.compact(table + b"\x00", table + b"\x01")
                await store.rotate()
                assert holding(path) == [], seed
        finally:
            await store.close()


async def test_readers_never_see_a_compaction_s_sentinels(tmp_path, monkeypatch):
    store = await LevelDBStore.open(str(tmp_path / "db"))
    table = keys(b"NA", 20)
    await store.write([Put(k, b"v") for k in table])
    compacting, release = trio.Event(), threading.Event()
    run_sync = trio.to_thread.run_sync

    async def held_compaction(call, **kwargs):  # the first step waits until the test has read
        if getattr(getattr(call, "func", None), "__name__", "") == "compact_range" and not release.is_set():
            compacting.set()
            return await run_sync(lambda: (release.wait(), call())[1], **kwargs)
        return await run_sync(call, **kwargs)

    monkeypatch.setattr(leveldb_store.trio.to_thread, "run_sync", held_compaction)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.compact, b"NA\x00t\x00", b"NA\x00t\x01")
            await compacting.wait()
            sentinels = sorted(store._hidden)
            assert len(sentinels) == 3  # both ends and their list
            assert [k async for k, _ in store.scan()] == table  # written, and not seen
            assert [k async for k, _ in store.scan(prefix=b"NA\x00t\x00", reverse=True, limit=1)] == table[-1:]
            assert [await store.get(k) for k in sentinels] == [None, None, None]
            assert all(store._db.get(k) is not None for k in sentinels)  # they are in the DB
            release.set()
        assert store._hidden == set() and [k async for k, _ in store.scan()] == table
        assert all(store._db.get(k) is None for k in sentinels)
    finally:
        release.set()
        await store.close()
