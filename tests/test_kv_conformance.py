"""Both built-in backends against the shipped conformance suite."""

import pytest

from cortexdb.backends.leveldb import LevelDBStore
from cortexdb.errors import DataDirLocked
from cortexdb.testing.kv_conformance import *  # noqa: F401,F403


async def test_leveldb_second_open_of_same_dir_fails_fast(tmp_path):
    first = await LevelDBStore.open(str(tmp_path / "db"))
    try:
        with pytest.raises(DataDirLocked) as info:
            await LevelDBStore.open(str(tmp_path / "db"))
        assert info.value.error_code == "DATA_DIR_LOCKED"
        assert info.value.details["path"].endswith("db")
    finally:
        await first.close()
    reopened = await LevelDBStore.open(str(tmp_path / "db"))
    await reopened.close()
