"""The engine's public accessors that benchmarks and the server use instead of its privates."""

import pytest

import cortexdb
from cortexdb import EngineConfig
from cortexdb.backends.memory import MemoryStore
from cortexdb.errors import InvalidQuery

from .conftest import envelope

SCOPE = "org:acme/user:alice"


async def test_set_recall_mode_switches_the_signals_and_nothing_else(engine):
    await engine.experience(envelope("I live in Paris."), wait="consolidated")
    request = {"scope": SCOPE, "query": "Paris", "diagnostics": "full"}
    hybrid = (await engine.recall(request))["diagnostics"]["weights"]
    engine.set_recall_mode("bm25")
    assert engine.config.recall_mode == "bm25"
    assert engine.config.default_caller == "user:alice"  # the rest of the configuration stays
    weights = (await engine.recall(request))["diagnostics"]["weights"]
    assert weights["bm25"] == 1.0 and sum(weights.values()) == 1.0
    engine.set_recall_mode("hybrid")
    assert (await engine.recall(request))["diagnostics"]["weights"] == hybrid
    with pytest.raises(InvalidQuery) as info:
        engine.set_recall_mode("psychic")
    assert info.value.details == {"field": "recall_mode"}


async def test_pause_derivation_parks_a_backlog_until_reopen(backend, tmp_path, clock, pg_dsn):
    kwargs = {"store": MemoryStore()} if backend == "memory" else {"path": pg_dsn or str(tmp_path / "d")}
    config = EngineConfig(default_caller="user:alice", episode_idle_check=3600.0)

    def opened():
        return cortexdb.open_engine(backend, clock=clock, id_seed=7, config=config, **kwargs)

    async with opened() as engine:
        await engine.pause_derivation(SCOPE)
        bulk = await engine.experience_bulk({"scope": SCOPE, "items": [
            {k: v for k, v in envelope(f"I live in city {i}.").items() if k != "scope"} for i in range(3)
        ]})  # fmt: skip
        assert bulk.accepted == 3
        stats = engine.statistics().scopes[SCOPE]
        assert (stats.pipeline_queue, stats.processed) == (3, 0)
        events = (await engine.events(SCOPE))["items"]
        assert [(await engine.memory_event(e["id"]))["stages_completed"] for e in events] == [["captured"]] * 3
    async with opened() as engine:
        await engine.flush(SCOPE)
        for event in (await engine.events(SCOPE))["items"]:
            assert "consolidated" in (await engine.memory_event(event["id"]))["stages_completed"]


async def test_compact_runs_the_backends_compaction_when_it_has_one(clock):
    class Compacting(MemoryStore):
        compactions = 0

        async def compact(self):
            self.compactions += 1

    for store, expected in ((MemoryStore(), False), (Compacting(), True)):
        async with cortexdb.open_engine(store=store, clock=clock) as engine:
            assert await engine.compact() is expected
    assert store.compactions == 1
