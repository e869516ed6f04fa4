"""LevelDB reads its tables with ``pread``, not memory maps (decisions.md, "LevelDB tables read
with pread"): a store's reads leave no ``.ldb`` file mapped in the process, so what they touched
is not in its resident set; and the symbol look-up behind it changes nothing it cannot verify."""

from __future__ import annotations

import sys

import pytest

from cortexdb.backends.leveldb import LevelDBStore, mmap_reads
from cortexdb.engine.spi.kv import Put

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/maps is Linux's")


def mapped_tables(path) -> list[str]:
    with open("/proc/self/maps") as maps:
        return [line.split()[-1] for line in maps if str(path) in line and ".ldb" in line]


async def test_table_reads_leave_no_table_mapped(tmp_path):
    path = tmp_path / "db"
    store = await LevelDBStore.open(str(path))
    try:
        assert mmap_reads.disable_mmap_reads() == "pread"  # the bundled library's limit was found and set
        values = {f"k{i:05d}".encode(): bytes([i % 251]) * 300 for i in range(3000)}
        await store.write([Put(k, v) for k, v in values.items()])
        await store.compact(b"k", b"l")  # the keys now live in table files
        assert list(path.glob("*.ldb"))
        assert await store.get(b"k01234") == values[b"k01234"]
        assert [k async for k, _ in store.scan(prefix=b"k")] == sorted(values)
        assert mapped_tables(path) == []
    finally:
        await store.close()


def test_the_symbol_reader_finds_the_limit_and_refuses_what_is_not_elf(tmp_path):
    library = mmap_reads._library_path()
    assert library is not None and "libleveldb" in library
    found = mmap_reads._symbols(library, (mmap_reads.LIMIT_SYMBOL, mmap_reads.ANCHOR_SYMBOL))
    assert set(found) == {mmap_reads.LIMIT_SYMBOL, mmap_reads.ANCHOR_SYMBOL}
    assert found[mmap_reads.LIMIT_SYMBOL] != found[mmap_reads.ANCHOR_SYMBOL]
    other = tmp_path / "not-elf.so"
    other.write_bytes(b"#!/bin/sh\n" * 10)
    assert mmap_reads._symbols(str(other), (mmap_reads.LIMIT_SYMBOL,)) == {}
