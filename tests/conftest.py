import pytest

from cortexdb.testing.factories import LevelDBFactory, MemoryFactory

BACKENDS = ["memory", "leveldb"]


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


@pytest.fixture
def kv_factory(backend, tmp_path):
    if backend == "memory":
        return MemoryFactory()
    return LevelDBFactory(str(tmp_path / "kv"))
