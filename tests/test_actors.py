"""The actor runtime: crash isolation, restart, backpressure, idle eviction, clean shutdown."""

import pytest
import trio
import trio.testing

import cortexdb
from cortexdb import EngineConfig, Internal
from cortexdb.engine.actors.scope_actor import ScopeActor

from .conftest import envelope

ALICE = "org:acme/user:alice"
BOB = "org:acme/user:bob"


@pytest.fixture
def crash_on_ping(monkeypatch):
    """Make one scope's actor crash while handling a Ping (a handler bug)."""
    original = ScopeActor._ping
    crashes = []

    async def ping(self, message):
        if self.scope == BOB and not crashes:
            crashes.append(self.scope)
            raise RuntimeError("handler bug")
        await original(self, message)

    monkeypatch.setattr(ScopeActor, "_ping", ping)
    return crashes


async def test_a_crashing_actor_does_not_take_down_other_scopes(engine, crash_on_ping):
    await engine.experience(envelope("I live in Paris.", scope=ALICE), wait="consolidated")
    await engine.experience(envelope("I live in Rome.", scope=BOB), wait="consolidated")
    with pytest.raises(Internal) as info:
        await engine.ping(BOB)
    assert info.value.retriable and info.value.error_code == "INTERNAL"
    assert crash_on_ping == [BOB]
    # Alice's actor never noticed
    assert (await engine.ping(ALICE))["scope"] == ALICE
    assert engine.statistics().scopes[ALICE].restarts == 0
    # Bob's actor was restarted and serves the same data from storage
    facts = (await engine.facts(BOB))["items"]
    assert [f["object"]["name"] for f in facts] == ["Rome"]
    assert engine.statistics().restarts == 1
    assert engine.statistics().scopes[BOB].restarts == 1
    again = await engine.experience(envelope("I live in Oslo.", scope=BOB, observed_at="2026-05-13T15:42:05Z"),
                                    wait="consolidated")  # fmt: skip
    assert any(d.startswith("fact_") for d in again.derives)


async def test_requests_queued_behind_a_crash_fail_retriably(engine_factory, monkeypatch):
    gate, release = trio.Event(), trio.Event()
    original = ScopeActor._ping

    async def slow_crash(self, message):
        if self.scope == BOB and not gate.is_set():
            gate.set()
            await release.wait()  # crash only once the second request is queued behind us
            raise RuntimeError("boom")
        await original(self, message)

    monkeypatch.setattr(ScopeActor, "_ping", slow_crash)
    outcomes = []
    async with engine_factory() as engine:
        await engine.ping(ALICE)

        async def call(name):
            try:
                await engine.ping(BOB)
                outcomes.append((name, "ok"))
            except Internal as exc:
                outcomes.append((name, exc.retriable))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, "first")
            await gate.wait()
            nursery.start_soon(call, "queued")
            await trio.testing.wait_all_tasks_blocked()
            assert engine.statistics().scopes[BOB].mailbox_used == 1
            release.set()
    assert sorted(outcomes) == [("first", True), ("queued", True)]


@pytest.mark.inline_storage
async def test_mailbox_backpressure_is_observable(engine_factory, monkeypatch):
    """A stalled actor with a full mailbox makes senders wait; statistics() shows it."""
    stall = trio.Event()
    original = ScopeActor._ping

    async def stalled(self, message):
        await stall.wait()
        await original(self, message)

    monkeypatch.setattr(ScopeActor, "_ping", stalled)
    config = EngineConfig(mailbox_size=2, default_caller="user:alice", episode_idle_check=3600.0)
    async with engine_factory(config=config) as engine:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(engine.ping, ALICE)
            await trio.testing.wait_all_tasks_blocked()  # the actor is stuck handling it
            for _ in range(4):
                nursery.start_soon(engine.ping, ALICE)
            await trio.testing.wait_all_tasks_blocked()
            stats = engine.statistics().scopes[ALICE]
            assert stats.mailbox_capacity == 2
            assert stats.mailbox_used == 2  # two queued behind the stuck one ...
            assert stats.senders_waiting == 2  # ... and two senders held back
            stall.set()
        assert engine.statistics().scopes[ALICE].senders_waiting == 0


@pytest.mark.inline_storage
async def test_idle_actors_are_evicted_and_reload_from_storage(engine_factory, autojump_clock):
    config = EngineConfig(idle_timeout=30.0, default_caller="user:alice", episode_idle_check=3600.0)
    async with engine_factory(config=config) as engine:
        await engine.experience(envelope("I live in Paris.", scope=ALICE), wait="consolidated")
        assert engine.statistics().actors == 1
        await trio.sleep(31)  # virtual time (autojump_clock): lets the 30 s idle timer fire
        assert engine.statistics().actors == 0 and engine.statistics().releases == 1
        facts = (await engine.facts(ALICE))["items"]
        assert [f["object"]["name"] for f in facts] == ["Paris"]
        assert engine.statistics().actors == 1 and engine.statistics().reopens == 1


async def test_shutdown_leaves_no_task_running(backend, tmp_path, clock, pg_dsn):
    kwargs = {"path": pg_dsn or str(tmp_path / "d")} if backend != "memory" else {}
    before = _task_count()
    async with cortexdb.open_engine(backend, clock=clock, id_seed=1, **kwargs) as engine:
        for i in range(20):
            await engine.experience(
                envelope(f"I live in city {i}.", scope=f"org:acme/user:u{i % 4}")
            )
        assert _task_count() > before
    assert _task_count() == before


def _task_count() -> int:
    def walk(task):
        return 1 + sum(
            walk(child) for nursery in task.child_nurseries for child in nursery.child_tasks
        )

    return walk(trio.lowlevel.current_root_task())


async def test_shutdown_drains_the_mailbox_and_pending_work_resumes(tmp_path, clock):
    path = str(tmp_path / "drain")
    async with cortexdb.open_engine("leveldb", path=path, clock=clock, id_seed=1) as engine:
        results = [await engine.experience(envelope(f"I have {i + 1} cats.")) for i in range(50)]
    async with cortexdb.open_engine("leveldb", path=path, clock=clock, id_seed=2) as engine:
        await engine.flush(ALICE)
        for result in results:
            view = await engine.memory_event(result.event_id)
            assert view["stages_completed"][:4] == [
                "captured",
                "extracted",
                "indexed",
                "consolidated",
            ]
        facts = (await engine.facts(ALICE, limit=1000, include_superseded=True))["items"]
        assert len(facts) == 50 and {f["predicate"] for f in facts} == {"cat_count"}


async def test_messages_after_shutdown_fail_cleanly(engine_factory):
    async with engine_factory() as engine:
        await engine.experience(envelope("x"))
    with pytest.raises(cortexdb.CortexError):
        await engine.experience(envelope("y"))


async def test_an_error_in_the_block_leaves_open_engine_as_itself(engine_factory):
    with pytest.raises(cortexdb.NotFound):
        async with engine_factory() as engine:
            await engine.get_event(ALICE, "evt_00000000-0000-7000-8000-000000000000")
