"""The BlobStore conformance suite (``engine.spi.blobs``), written as pytest-trio tests over a
fixture.

Import every name from this module into a test module and provide a ``blob_factory`` fixture:
an object with ``async open() -> BlobStore`` giving a handle on the same underlying data on every
call (a new handle sees what an earlier one committed, as after a restart)::

    from cortexdb.testing.blob_conformance import *  # noqa: F401,F403

    @pytest.fixture
    def blob_factory(tmp_path):
        return MyBlobStoreFactory(tmp_path)
"""

from __future__ import annotations

import hashlib

import pytest
import trio

from ..errors import NotFound

__all__ = [name for name in dir() if name.startswith("test_")]  # filled at the bottom

MIB = 1 << 20


@pytest.fixture
async def blob_store(blob_factory):
    return await blob_factory.open()


async def put(store, data: bytes, *, pieces: int = 1) -> tuple[str, int]:
    upload = await store.begin()
    step = max(1, len(data) // pieces)
    for start in range(0, len(data), step):
        await upload.write(data[start : start + step])
    return await upload.commit()


async def content(store, digest: str, chunk_size: int = MIB) -> bytes:
    return b"".join([chunk async for chunk in store.read(digest, chunk_size=chunk_size)])


async def listed(store) -> list[str]:
    return [digest async for digest in store.digests()]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def test_commit_names_the_content_by_its_sha256(blob_store):
    data = b"a photo of the whiteboard"
    assert await put(blob_store, data, pieces=3) == (sha(data), len(data))
    assert await blob_store.has(sha(data))
    assert await blob_store.size(sha(data)) == len(data)
    assert await content(blob_store, sha(data)) == data
    assert await listed(blob_store) == [sha(data)]


async def test_binary_and_empty_contents_round_trip(blob_store):
    for data in (bytes(range(256)) * 3, b"", b"\x00" * 10):
        assert await put(blob_store, data) == (sha(data), len(data))
        assert await content(blob_store, sha(data)) == data


async def test_large_content_reads_in_bounded_chunks(blob_store):
    data = bytes(range(256)) * (3 * MIB // 256) + b"tail"
    digest, size = await put(blob_store, data, pieces=50)
    assert (digest, size) == (sha(data), len(data))
    chunks = [chunk async for chunk in blob_store.read(digest, chunk_size=MIB)]
    assert all(0 < len(chunk) <= MIB for chunk in chunks)
    assert b"".join(chunks) == data


async def test_the_same_bytes_are_stored_once(blob_store):
    data = b"the same bytes"
    first = await put(blob_store, data)
    second = await put(blob_store, data, pieces=4)
    assert first == second == (sha(data), len(data))
    assert await listed(blob_store) == [sha(data)]


async def test_nothing_is_visible_before_commit(blob_store):
    data = b"half written"
    upload = await blob_store.begin()
    await upload.write(data)
    assert not await blob_store.has(sha(data))
    assert await blob_store.size(sha(data)) is None
    assert await listed(blob_store) == []
    await upload.commit()
    assert await listed(blob_store) == [sha(data)]


async def test_abort_keeps_nothing(blob_store):
    upload = await blob_store.begin()
    await upload.write(b"never mind")
    await upload.abort()
    assert await listed(blob_store) == []
    assert not await blob_store.has(sha(b"never mind"))


async def test_a_finished_upload_takes_no_more_bytes(blob_store):
    upload = await blob_store.begin()
    await upload.write(b"done")
    await upload.commit()
    with pytest.raises(ValueError):
        await upload.write(b"more")


async def test_missing_content_is_not_found(blob_store):
    missing = sha(b"nobody uploaded this")
    assert not await blob_store.has(missing)
    assert await blob_store.size(missing) is None
    with pytest.raises(NotFound):
        await content(blob_store, missing)
    assert await blob_store.delete(missing) is False


async def test_delete_removes_one_content(blob_store):
    keep, drop = b"keep me", b"drop me"
    await put(blob_store, keep)
    await put(blob_store, drop)
    assert await blob_store.delete(sha(drop)) is True
    assert await listed(blob_store) == [sha(keep)]
    assert not await blob_store.has(sha(drop))
    assert await blob_store.delete(sha(drop)) is False
    assert await content(blob_store, sha(keep)) == keep


async def test_digests_that_are_not_sha256_hex_are_refused(blob_store):
    for bad in ("../../etc/passwd", "ABC", sha(b"x").upper(), sha(b"x")[:-1], sha(b"x") + "/"):
        with pytest.raises(ValueError):
            await blob_store.has(bad)
        with pytest.raises(ValueError):
            await blob_store.delete(bad)


async def test_concurrent_uploads_each_commit_whole(blob_store):
    datas = [bytes([i]) * (100_000 + i) for i in range(6)] + [b"same"] * 3
    results = {}

    async def one(index: int, data: bytes) -> None:
        results[index] = await put(blob_store, data, pieces=7)

    async with trio.open_nursery() as nursery:
        for index, data in enumerate(datas):
            nursery.start_soon(one, index, data)
    assert all(results[i] == (sha(d), len(d)) for i, d in enumerate(datas))
    assert sorted(await listed(blob_store)) == sorted({sha(d) for d in datas})
    for data in datas:
        assert await content(blob_store, sha(data)) == data


async def test_a_new_handle_sees_committed_contents_only(blob_factory):
    first = await blob_factory.open()
    await put(first, b"committed")
    pending = await first.begin()
    await pending.write(b"abandoned: the process died before commit")  # neither commit nor abort
    second = await blob_factory.open()
    assert await listed(second) == [sha(b"committed")]
    assert await content(second, sha(b"committed")) == b"committed"


__all__ = [name for name in dir() if name.startswith("test_")] + ["blob_store"]
