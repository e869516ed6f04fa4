"""The KVStore conformance suite (DESIGN §4), written as pytest-trio tests over a fixture.

Import every name from this module into a test module and provide a ``kv_factory`` fixture: an
object with ``async open() -> KVStore`` (the same underlying data on every call, once the
previous handle is closed) and a ``persistent`` flag (reopen keeps the data).
"""

from __future__ import annotations

import pytest
import trio

from ..engine.spi.kv import Delete, Put
from ..errors import StoreClosed

__all__ = [name for name in dir() if name.startswith("test_")]  # filled at the bottom


@pytest.fixture
async def store(kv_factory):
    handle = await kv_factory.open()
    try:
        yield handle
    finally:
        await handle.close()


async def collect(iterator):
    return [pair async for pair in iterator]


async def keys_of(iterator):
    return [key for key, _ in await collect(iterator)]


async def fill(store, keys):
    await store.write([Put(k, b"v:" + k) for k in keys])


async def test_get_missing_returns_none(store):
    assert await store.get(b"nope") is None


async def test_put_get_roundtrip_binary(store):
    key, value = bytes(range(256)), b"\x00\xff" * 100
    await store.write([Put(key, value)])
    assert await store.get(key) == value


async def test_empty_value_is_distinct_from_missing(store):
    await store.write([Put(b"k", b"")])
    assert await store.get(b"k") == b""


async def test_keys_are_ordered_as_unsigned_bytes(store):
    keys = [b"\xff", b"a", b"", b"\x00", b"a\x00", b"ab", b"b", b"\x7f", b"\x80", b"A"]
    keys = [k for k in keys if k]  # the empty key is not portable across backends
    await fill(store, keys)
    assert await keys_of(store.scan()) == sorted(keys)


async def test_prefix_scan(store):
    await fill(store, [b"a", b"ab", b"abc", b"abd", b"ac", b"b", b"ab\xff", b"ab\xff\xff"])
    assert await keys_of(store.scan(prefix=b"ab")) == [
        b"ab",
        b"abc",
        b"abd",
        b"ab\xff",
        b"ab\xff\xff",
    ]
    assert await keys_of(store.scan(prefix=b"ab\xff")) == [b"ab\xff", b"ab\xff\xff"]
    assert await keys_of(store.scan(prefix=b"zz")) == []


async def test_prefix_of_all_ff_bytes(store):
    await fill(store, [b"\xff", b"\xff\xff", b"\xfe"])
    assert await keys_of(store.scan(prefix=b"\xff")) == [b"\xff", b"\xff\xff"]


async def test_start_stop_are_inclusive_exclusive(store):
    await fill(store, [b"a", b"b", b"c", b"d"])
    assert await keys_of(store.scan(start=b"b", stop=b"d")) == [b"b", b"c"]
    assert await keys_of(store.scan(start=b"bb")) == [b"c", b"d"]
    assert await keys_of(store.scan(stop=b"a")) == []
    assert await keys_of(store.scan(start=b"c", stop=b"b")) == []
    assert await keys_of(store.scan(start=b"c", stop=b"c")) == []


async def test_prefix_combined_with_range(store):
    await fill(store, [b"p1", b"p2", b"p3", b"q1"])
    assert await keys_of(store.scan(prefix=b"p", start=b"p2")) == [b"p2", b"p3"]
    assert await keys_of(store.scan(prefix=b"p", stop=b"p3")) == [b"p1", b"p2"]
    assert await keys_of(store.scan(prefix=b"p", start=b"a", stop=b"z")) == [b"p1", b"p2", b"p3"]
    assert await keys_of(store.scan(prefix=b"p", start=b"q")) == []


async def test_reverse_and_limit(store):
    await fill(store, [b"a", b"b", b"c", b"d", b"e"])
    assert await keys_of(store.scan(reverse=True)) == [b"e", b"d", b"c", b"b", b"a"]
    assert await keys_of(store.scan(limit=2)) == [b"a", b"b"]
    assert await keys_of(store.scan(reverse=True, limit=2)) == [b"e", b"d"]
    assert await keys_of(store.scan(start=b"b", stop=b"e", reverse=True, limit=2)) == [b"d", b"c"]
    assert await keys_of(store.scan(limit=0)) == []
    assert await keys_of(store.scan(limit=100)) == [b"a", b"b", b"c", b"d", b"e"]


async def test_scan_values(store):
    await fill(store, [b"x", b"y"])
    assert await collect(store.scan()) == [(b"x", b"v:x"), (b"y", b"v:y")]


async def test_large_scan_crosses_chunk_boundaries(store):
    keys = [f"k{i:06d}".encode() for i in range(10_000)]
    await store.write([Put(k, k) for k in keys])
    assert await keys_of(store.scan(prefix=b"k")) == keys
    assert await keys_of(store.scan(prefix=b"k", reverse=True)) == keys[::-1]
    assert await keys_of(store.scan(prefix=b"k", limit=5000)) == keys[:5000]
    assert len(await keys_of(store.scan(prefix=b"k", start=b"k005000"))) == 5000


async def test_batch_applies_puts_and_deletes_in_order(store):
    await fill(store, [b"a", b"b"])
    await store.write(
        [
            Delete(b"a"),
            Put(b"c", b"1"),
            Put(b"c", b"2"),
            Delete(b"missing"),
            Put(b"b", b"x"),
            Delete(b"b"),
        ]
    )
    assert await collect(store.scan()) == [(b"c", b"2")]


async def test_batch_with_a_bad_op_changes_nothing(store):
    await fill(store, [b"a"])
    with pytest.raises(TypeError):
        await store.write([Put(b"z", b"1"), Put("not-bytes", b"2")])  # type: ignore[arg-type]
    assert await keys_of(store.scan()) == [b"a"]


async def test_synced_write_is_visible(store):
    await store.write([Put(b"s", b"1")], sync=True)
    assert await store.get(b"s") == b"1"


async def test_empty_batch_is_a_noop(store):
    await store.write([])
    assert await keys_of(store.scan()) == []


async def test_snapshot_is_isolated_from_later_writes_and_deletes(store):
    await fill(store, [b"a", b"b", b"c"])
    snap = await store.snapshot()
    try:
        await store.write([Delete(b"a"), Put(b"b", b"new"), Put(b"d", b"4")])
        assert await snap.get(b"a") == b"v:a"
        assert await snap.get(b"b") == b"v:b"
        assert await snap.get(b"d") is None
        assert await collect(snap.scan()) == [(b"a", b"v:a"), (b"b", b"v:b"), (b"c", b"v:c")]
        assert await keys_of(snap.scan(reverse=True, limit=1)) == [b"c"]
        assert await collect(store.scan()) == [(b"b", b"new"), (b"c", b"v:c"), (b"d", b"4")]
    finally:
        await snap.close()


async def test_scan_started_before_a_write_is_consistent(store):
    await fill(store, [b"a", b"b", b"c"])
    iterator = store.scan()
    first = await iterator.__anext__()
    await store.write([Delete(b"c"), Put(b"bb", b"x")])
    rest = [pair async for pair in iterator]
    assert [first[0]] + [k for k, _ in rest] == [b"a", b"b", b"c"]


async def test_closed_snapshot_refuses(store):
    snap = await store.snapshot()
    await snap.close()
    with pytest.raises(StoreClosed):
        await snap.get(b"a")


async def test_operations_after_close_raise_store_closed(kv_factory):
    handle = await kv_factory.open()
    await handle.close()
    with pytest.raises(StoreClosed):
        await handle.get(b"a")
    with pytest.raises(StoreClosed):
        await handle.write([Put(b"a", b"b")])
    with pytest.raises(StoreClosed):
        await collect(handle.scan())
    with pytest.raises(StoreClosed):
        await handle.snapshot()
    await handle.close()  # closing twice is harmless


async def test_reopen_keeps_data_when_persistent(kv_factory):
    """Persistent backends keep synced and unsynced writes; volatile ones start empty."""
    handle = await kv_factory.open()
    await handle.write([Put(b"durable", b"yes"), Put(b"gone", b"1")], sync=True)
    await handle.write([Delete(b"gone")])
    await handle.close()
    handle = await kv_factory.open()
    try:
        expected = b"yes" if kv_factory.persistent else None
        assert await handle.get(b"durable") == expected
        assert await handle.get(b"gone") is None
    finally:
        await handle.close()


async def test_compact_keeps_live_data_and_drops_deleted(store):
    """``compact`` (whole store or a range) never changes what reads see."""
    await fill(store, [b"c:1", b"c:2", b"c:3", b"d:1"])
    await store.write([Delete(b"c:2"), Put(b"c:3", b"new")])
    assert await store.compact(b"c:", b"c;") in (True, False)
    assert await store.compact() in (True, False)
    assert await keys_of(store.scan()) == [b"c:1", b"c:3", b"d:1"]
    assert await store.get(b"c:2") is None
    assert await store.get(b"c:3") == b"new"
    assert await store.compact(b"c:1", b"c:3") in (True, False)  # bounds that are live keys
    assert await store.compact(b"c:3", b"c:3\x00") in (True, False)  # one key
    assert await keys_of(store.scan()) == [b"c:1", b"c:3", b"d:1"]
    assert await store.get(b"c:1") == b"v:c:1"


async def test_compact_after_close_raises_store_closed(kv_factory):
    handle = await kv_factory.open()
    await handle.close()
    with pytest.raises(StoreClosed):
        await handle.compact()


async def test_concurrent_writers_all_land(store):
    async def writer(n):
        for i in range(50):
            await store.write([Put(f"w{n}:{i:03d}".encode(), b"x")])

    async with trio.open_nursery() as nursery:
        for n in range(4):
            nursery.start_soon(writer, n)
    assert len(await keys_of(store.scan(prefix=b"w"))) == 200


__all__ = ["store"] + [name for name in dir() if name.startswith("test_")]
