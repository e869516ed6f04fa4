import pytest

from cortexdb.testing.factories import LevelDBFactory, MemoryFactory, PostgresFactory

from .pg_support import UNAVAILABLE, fresh_dsn, start_server

BACKENDS = ["memory", "leveldb", "postgres"]


@pytest.fixture(scope="session")
def pg_server():
    """One PostgreSQL server for the session, started on first use (tests/pg_support.py)."""
    server = start_server()
    yield server
    if server is not None:
        server.stop()


@pytest.fixture
def live_pg_server(pg_server):
    """The session's server for tests that only make sense on PostgreSQL; without one (only
    when ``CORTEX_REQUIRE_POSTGRES`` is unset) they are skipped, and the run's summary says why."""
    if pg_server is None:
        pytest.skip("NO POSTGRESQL SERVER (see the summary at the end of the run)")
    return pg_server


@pytest.fixture(params=BACKENDS)
def backend(request):
    if request.param == "postgres" and request.getfixturevalue("pg_server") is None:
        pytest.skip(f"NO POSTGRESQL SERVER: {UNAVAILABLE[0]}")
    return request.param


@pytest.fixture
def pg_dsn(backend, request):
    """A DSN on a fresh schema when the backend is ``postgres`` (else None)."""
    return fresh_dsn(request.getfixturevalue("pg_server")) if backend == "postgres" else None


@pytest.fixture
def kv_factory(backend, tmp_path, pg_dsn):
    if backend == "memory":
        return MemoryFactory()
    if backend == "postgres":
        return PostgresFactory(pg_dsn, "kv")
    return LevelDBFactory(str(tmp_path / "kv"))


def pytest_collection_modifyitems(config, items):
    """A test marked ``inline_storage`` counts on virtual time standing still, or on
    ``wait_all_tasks_blocked`` meaning "idle", while the store works: true of memory and
    LevelDB (calls on the event loop), not of postgres (calls in worker threads, during which
    an autojump clock jumps).  Its postgres case is deselected, not skipped."""
    keep, drop = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        on_postgres = callspec is not None and callspec.params.get("backend") == "postgres"
        (drop if on_postgres and item.get_closest_marker("inline_storage") else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_terminal_summary(terminalreporter):
    if UNAVAILABLE:
        terminalreporter.section("PostgreSQL backend NOT TESTED", sep="!", red=True, bold=True)
        terminalreporter.line(UNAVAILABLE[0], red=True)


import cortexdb  # noqa: E402
from cortexdb import EngineConfig, ManualClock  # noqa: E402

START = "2026-05-13T15:42:09Z"


@pytest.fixture
def clock():
    return ManualClock(START)


@pytest.fixture
def engine_factory(backend, tmp_path, clock, pg_dsn):
    """Open engines on the parametrised backend; the same data dir on every call (reopen)."""

    def factory(**kwargs):
        kwargs.setdefault("clock", clock)
        kwargs.setdefault("id_seed", 7)
        kwargs.setdefault(
            "config", EngineConfig(episode_idle_check=3600.0, default_caller="user:alice")
        )
        if backend == "memory":
            return cortexdb.open_engine("memory", **kwargs)
        if backend == "postgres":
            return cortexdb.open_engine("postgres", path=pg_dsn, **kwargs)
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
