"""The postgres backend beyond the conformance suite: byte order at the extremes, long scans
(a server-side cursor) that stay consistent and never starve the pool, one transaction per
batch, VACUUM FULL leaving no deleted bytes, recovery from dropped connections, two stores
(nodes) on one table."""

from __future__ import annotations

import os
import random

import psycopg
import pytest
import trio

from cortexdb.backends.postgres import PostgresStore
from cortexdb.backends.postgres.store import CHUNK_ITEMS, INLINE_ITEMS
from cortexdb.engine.spi.kv import Delete, Put
from cortexdb.errors import WalUnavailable

from .pg_support import fresh_dsn


@pytest.fixture
def dsn(live_pg_server):
    return fresh_dsn(live_pg_server)


@pytest.fixture
async def store(dsn):
    opened = await PostgresStore.open(dsn, table="kv")
    try:
        yield opened
    finally:
        await opened.close()


async def pairs(iterator):
    return [pair async for pair in iterator]


def extreme_keys(count: int, seed: int = 3) -> list[bytes]:
    """Keys made mostly of 0x00 and 0xFF bytes (plus the shorter-is-smaller cases)."""
    rng = random.Random(seed)
    keys = {b"\x00", b"\xff", b"\x00\x00", b"\xff\xff", b"\x00\xff", b"\xff\x00", b"\x7f", b"\x80"}
    while len(keys) < count:
        keys.add(bytes(rng.choice((0, 0, 255, 255, 1, 128, 254)) for _ in range(rng.randint(1, 6))))
    return list(keys)


async def test_keys_of_zero_and_ff_bytes_scan_in_memcmp_order_on_both_scan_paths(store):
    keys = extreme_keys(INLINE_ITEMS * 3)  # more than one query returns: the cursor path too
    await store.write([Put(k, k[::-1]) for k in keys])
    ordered = sorted(keys)
    assert [k for k, _ in await pairs(store.scan())] == ordered
    assert [k for k, _ in await pairs(store.scan(reverse=True))] == ordered[::-1]
    for prefix in (b"\x00", b"\xff", b"\x00\xff", b"\xff\xff"):
        expected = [k for k in ordered if k.startswith(prefix)]
        assert [k for k, _ in await pairs(store.scan(prefix=prefix))] == expected
        assert [k for k, _ in await pairs(store.scan(prefix=prefix, reverse=True, limit=5))] == expected[::-1][:5]
    middle = ordered[len(ordered) // 3], ordered[2 * len(ordered) // 3]
    assert [k for k, _ in await pairs(store.scan(start=middle[0], stop=middle[1]))] == [
        k for k in ordered if middle[0] <= k < middle[1]]  # fmt: skip
    assert await pairs(store.scan(prefix=b"\x00\x00", limit=1)) == [(b"\x00\x00", b"\x00\x00")]


async def test_a_long_scan_keeps_its_snapshot_across_chunks(store):
    keys = [f"k{i:06d}".encode() for i in range(CHUNK_ITEMS * 2 + 10)]
    await store.write([Put(k, b"old") for k in keys])
    scan = store.scan(prefix=b"k")
    first = await scan.__anext__()
    # between chunks: a delete past the first chunk, an overwrite, a new key
    await store.write([Delete(keys[-1]), Put(keys[CHUNK_ITEMS + 5], b"new"), Put(b"k9", b"new")])
    rest = [pair async for pair in scan]
    seen = [first, *rest]
    assert [k for k, _ in seen] == keys
    assert {v for _, v in seen} == {b"old"}
    now = await pairs(store.scan(prefix=b"k"))
    assert len(now) == len(keys) and now[-1] == (b"k9", b"new")


async def test_reading_inside_a_long_scan_does_not_starve_a_pool_of_one(dsn):
    store = await PostgresStore.open(dsn, table="kv", pool_size=1, max_held=2)
    try:
        keys = [f"k{i:05d}".encode() for i in range(INLINE_ITEMS + 50)]
        await store.write([Put(k, k) for k in keys])
        seen = 0
        with trio.fail_after(60):  # a deadlock would hang here (a guard, not a measurement)
            async for key, _ in store.scan(prefix=b"k"):
                assert await store.get(key) == key
                if seen % 100 == 0:
                    await store.write([Put(b"side" + key, b"x")])
                seen += 1
        assert seen == len(keys)
    finally:
        await store.close()


async def test_snapshot_interleaves_two_long_scans(store):
    keys = [f"k{i:05d}".encode() for i in range(INLINE_ITEMS * 2)]
    await store.write([Put(k, b"1") for k in keys])
    snap = await store.snapshot()
    try:
        await store.write([Put(k, b"2") for k in keys] + [Put(b"k99999", b"2")])
        forward, backward = snap.scan(prefix=b"k"), snap.scan(prefix=b"k", reverse=True)
        got_f, got_b = [], []
        for _ in keys:
            got_f.append(await forward.__anext__())
            got_b.append(await backward.__anext__())
        assert [k for k, _ in got_f] == keys and [k for k, _ in got_b] == keys[::-1]
        assert {v for _, v in got_f + got_b} == {b"1"}
        assert await pairs(forward) == [] and await pairs(backward) == []
        assert await snap.get(b"k99999") is None
    finally:
        await snap.close()
    assert await store.get(b"k99999") == b"2"


async def test_a_batch_is_one_transaction(store, dsn):
    await store.write([Put(b"a", b"1"), Put(b"b", b"1")])
    with psycopg.connect(dsn, autocommit=True) as conn:  # the server refuses one row of the batch
        conn.execute("CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                     "IF NEW.k = '\\x626f6f6d'::bytea THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$")  # fmt: skip
        conn.execute("CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON kv FOR EACH ROW EXECUTE FUNCTION refuse()")
    for sync in (False, True):
        with pytest.raises(WalUnavailable) as info:
            await store.write([Delete(b"a"), Put(b"b", b"2"), Put(b"c", b"3"), Put(b"boom", b"!")], sync=sync)
        assert "refused" in str(info.value)
        assert await pairs(store.scan()) == [(b"a", b"1"), (b"b", b"1")]
    await store.write([Delete(b"a"), Put(b"c", b"3")])
    assert await pairs(store.scan()) == [(b"b", b"1"), (b"c", b"3")]


async def test_compact_leaves_no_deleted_bytes_in_the_table_files(store, dsn, pg_server):
    secret = b"SECRET-" + os.urandom(16).hex().encode()
    await store.write([Put(b"keep", b"kept"), Put(b"gone", secret), Put(b"over", secret + b"-v1")])
    await store.write([Delete(b"gone"), Put(b"over", b"v2")])

    def table_bytes() -> bytes:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CHECKPOINT")  # the dirty pages reach the files
            path = conn.execute("SELECT pg_relation_filepath('kv')").fetchone()[0]
        with open(os.path.join(pg_server.base, "data", path), "rb") as file:
            return file.read()

    assert secret in table_bytes()  # the dead rows are still there ...
    assert await store.compact(b"gone", b"gone\x00") is True
    assert secret not in table_bytes()  # ... and gone after VACUUM FULL
    assert await pairs(store.scan()) == [(b"keep", b"kept"), (b"over", b"v2")]


async def test_compact_waits_for_open_snapshots(store):
    await store.write([Put(b"a", b"1")])
    snap = await store.snapshot()
    done = trio.Event()

    async def compact():
        await store.compact()
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(compact)
        assert await snap.get(b"a") == b"1"  # the snapshot works while the compaction waits
        assert not done.is_set()
        await snap.close()
        await done.wait()
    assert await store.get(b"a") == b"1"


async def test_dropped_connections_are_replaced(store, dsn):
    await store.write([Put(b"a", b"1")])
    with psycopg.connect(dsn, autocommit=True) as conn:
        killed = conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                              "WHERE pid <> pg_backend_pid() AND datname = current_database()").fetchone()[0]  # fmt: skip
    assert killed >= 1
    failures = 0
    for _ in range(10):  # each broken pooled connection fails one call, then is replaced
        try:
            assert await store.get(b"a") == b"1"
        except WalUnavailable:
            failures += 1
    assert failures <= killed
    assert await store.get(b"a") == b"1"


async def test_two_stores_on_one_table_see_each_others_writes(dsn):
    first = await PostgresStore.open(dsn, table="shared")
    second = await PostgresStore.open(dsn, table="shared")
    try:
        await first.write([Put(b"x", b"from first")], sync=True)
        await second.write([Put(b"y", b"from second")])
        assert await second.get(b"x") == b"from first"
        assert await pairs(first.scan()) == [(b"x", b"from first"), (b"y", b"from second")]
    finally:
        await first.close()
        await second.close()


async def test_bad_settings_are_refused(dsn):
    with pytest.raises(ValueError):
        await PostgresStore.open(dsn, table="Robert'); DROP TABLE students;--")
    with pytest.raises(WalUnavailable):
        await PostgresStore.open("host=/nonexistent-socket-dir port=1 user=nobody connect_timeout=2")


class _BlobFactory:
    """Handles on one postgres store's blobs, each through a newly opened store (a restart)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.stores: list[PostgresStore] = []

    async def open(self):
        store = await PostgresStore.open(self.dsn, table="kv")
        self.stores.append(store)
        return store.blob_store


@pytest.fixture
async def blob_factory(dsn):
    factory = _BlobFactory(dsn)
    yield factory
    for store in factory.stores:
        await store.close()


from cortexdb.testing.blob_conformance import *  # noqa: E402,F401,F403


async def test_an_upload_left_by_a_crash_is_deleted_once_stale(dsn):
    store = await PostgresStore.open(dsn, table="kv")
    upload = await store.blob_store.begin()
    await upload.write(b"x" * (3 << 20))  # three chunks staged, never committed
    await store.close()

    def staged() -> int:
        with psycopg.connect(dsn, autocommit=True) as conn:
            return conn.execute("SELECT count(*) FROM kv_uploads").fetchone()[0]

    assert staged() == 3
    young = await PostgresStore.open(dsn, table="kv")  # another node's upload may be this young
    await young.close()
    assert staged() == 3
    stale = await PostgresStore.open(dsn, table="kv", stale_upload_seconds=0)
    try:
        assert staged() == 0
        assert [d async for d in stale.blob_store.digests()] == []
    finally:
        await stale.close()


async def test_a_scan_outliving_its_snapshot_stops_and_leaves_the_pool_alone(store):
    from cortexdb.errors import StoreClosed

    keys = [f"k{i:06d}".encode() for i in range(CHUNK_ITEMS + 100)]
    await store.write([Put(k, b"v") for k in keys])
    snap = await store.snapshot()
    scan = snap.scan(prefix=b"k")
    for _ in range(CHUNK_ITEMS):  # the whole first chunk of the cursor
        await scan.__anext__()
    await snap.close()  # its connection goes back to the pool
    with pytest.raises(StoreClosed):
        await scan.__anext__()
    await scan.aclose()
    assert len([pair async for pair in store.scan(prefix=b"k")]) == len(keys)
    await store.write([Put(b"after", b"1")], sync=True)
    assert await store.get(b"after") == b"1"
