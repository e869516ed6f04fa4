"""LevelDB's data block size is a setting (``EngineConfig.leveldb_block_size``, 4 KiB;
``CORTEX_LEVELDB_BLOCK_SIZE`` under a server): it reaches plyvel, so the tables written carry
blocks of that size and an index of one entry per block (decisions.md, "LevelDB blocks of 16 KiB")."""

from __future__ import annotations

import random

import pytest

from cortexdb import EngineConfig, open_engine
from cortexdb.backends import open_store
from cortexdb.backends.leveldb import LevelDBStore
from cortexdb.engine.spi.kv import Put
from cortexdb.server.serve import config_of
from cortexdb.server.settings import ServerSettings


def varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[position]
        value |= (byte & 0x7F) << shift
        position += 1
        if not byte & 0x80:
            return value, position
        shift += 7


def index_bytes(path) -> int:
    """The index blocks' bytes of every table under ``path``, read from each table's footer (its
    last 48 bytes: the meta-index handle, then the index handle, as varints; table_format.md)."""
    total = 0
    for table in path.glob("*.ldb"):
        footer = table.read_bytes()[-48:]
        assert footer[-8:] == bytes.fromhex("57fb808b247547db")  # LevelDB's table magic, little-endian
        _, position = varint(footer, 0)
        _, position = varint(footer, position)
        _, position = varint(footer, position)  # the index block's offset
        size, _ = varint(footer, position)
        total += size
    return total


async def written_index(path, **options) -> int:
    store = await LevelDBStore.open(str(path), **options)
    try:
        rng = random.Random(7)
        ops = [Put(f"key-{i:06d}".encode(), rng.randbytes(200)) for i in range(6000)]  # incompressible
        await store.write(ops)
        await store.compact(b"key-", b"key.")  # the keys now live in table files
        assert list(path.glob("*.ldb"))
        assert await store.get(b"key-001234") == ops[1234].value
    finally:
        await store.close()
    return index_bytes(path)


def test_the_default_and_its_bounds():
    assert EngineConfig().leveldb_block_size == 4096
    assert EngineConfig().leveldb_options() == {"block_size": 4096}
    assert EngineConfig(leveldb_block_size=16_384).leveldb_options() == {"block_size": 16_384}
    for wrong in (0, 1023, 4 * 1024 * 1024 + 1):
        with pytest.raises(ValueError, match="leveldb_block_size"):
            EngineConfig(leveldb_block_size=wrong)


def test_the_server_setting_reaches_the_engine_config():
    assert config_of(ServerSettings.from_env({})).leveldb_block_size == EngineConfig().leveldb_block_size
    assert config_of(ServerSettings.from_env({"CORTEX_LEVELDB_BLOCK_SIZE": "65536"})).leveldb_block_size == 65_536
    with pytest.raises(ValueError, match="CORTEX_LEVELDB_BLOCK_SIZE must be a number"):
        ServerSettings.from_env({"CORTEX_LEVELDB_BLOCK_SIZE": "big"})
    with pytest.raises(ValueError, match="leveldb_block_size"):
        ServerSettings.from_env({"CORTEX_LEVELDB_BLOCK_SIZE": "512"})


async def test_the_block_size_reaches_plyvel(tmp_path):
    """The same 1.2 MB written with 4 KiB and with 64 KiB blocks: the index of the second holds a
    sixteenth of the entries (a tenth, with slack for the last block and the keys' lengths)."""
    small = await written_index(tmp_path / "small", block_size=4096)
    large = await written_index(tmp_path / "large", block_size=65_536)
    assert small > 0 and large > 0
    assert large * 10 < small


async def test_open_store_and_open_engine_pass_the_configured_size(tmp_path):
    store = await open_store("leveldb", str(tmp_path / "store"), leveldb={"block_size": 4096})
    try:
        assert store._settings["block_size"] == 4096
    finally:
        await store.close()
    config = EngineConfig(leveldb_block_size=65_536)
    async with open_engine("leveldb", str(tmp_path / "engine"), config=config) as engine:
        assert engine.store._settings["block_size"] == 65_536
    async with open_engine("leveldb", str(tmp_path / "default")) as engine:
        assert engine.store._settings["block_size"] == 4096
