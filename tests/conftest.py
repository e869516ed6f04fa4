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


import cortexdb  # noqa: E402
from cortexdb import EngineConfig, ManualClock  # noqa: E402

START = "2026-05-13T15:42:09Z"


@pytest.fixture
def clock():
    return ManualClock(START)


@pytest.fixture
def engine_factory(backend, tmp_path, clock):
    """Open engines on the parametrised backend; the same data dir on every call (reopen)."""

    def factory(**kwargs):
        kwargs.setdefault("clock", clock)
        kwargs.setdefault("id_seed", 7)
        kwargs.setdefault(
            "config", EngineConfig(episode_idle_check=3600.0, default_caller="user:alice")
        )
        if backend == "memory":
            return cortexdb.open_engine("memory", **kwargs)
        return cortexdb.open_engine("leveldb", path=str(tmp_path / "data"), **kwargs)

    return factory


@pytest.fixture
async def engine(engine_factory):
    async with engine_factory() as opened:
        yield opened


def envelope(
    text="I live in Paris.",
    *,
    scope="org:acme/user:alice",
    observed_at="2026-05-13T15:42:00Z",
    key=None,
    role="user",
    **extra,
):
    body = {
        "scope": scope,
        "modality": "conversation",
        "content": {"kind": "message", "role": role, "text": text},
        "context": {"observed_at": observed_at},
    }
    if key is not None:
        body["idempotency_key"] = key
    body.update(extra)
    return body
