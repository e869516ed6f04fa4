"""Memory that stays flat under a long write load (issue 10, part 8; docs/decisions.md, "Soak
memory"): bounded caches of derived records, vector runs sealed out of the heap into files."""

import cortexdb
from cortexdb import EngineConfig

from .conftest import envelope

TEXTS = [
    "I live in Paris.", "My sister lives in Lisbon.", "I work at Acme.", "I live in Berlin.",
    "My favorite color is blue.", "My brother works at Globex.", "I live in Rome.",
    "My favorite color is green.", "My sister lives in Madrid.", "I work at Initech.",
    "My dog is called Rex.", "I live in Paris.", "My brother works at Acme.",
    "My favorite food is ramen.", "My dog is called Max.", "I work at Acme.",
]  # fmt: skip


def _open(backend, path, clock, **settings):
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", **settings)
    if backend == "memory":
        return cortexdb.open_engine("memory", clock=clock, id_seed=7, config=config)
    return cortexdb.open_engine("leveldb", path=str(path), clock=clock, id_seed=7, config=config)


async def _history(backend, path, clock, **settings):
    """Write TEXTS one by one, then read every fact and belief (superseded ones too)."""
    async with _open(backend, path, clock, **settings) as engine:
        for text in TEXTS:
            clock.advance(60)
            await engine.experience(envelope(text), wait="consolidated")
        scope = "org:acme/user:alice"
        facts = await engine.facts(scope, include_superseded=True, limit=1000)
        beliefs = await engine.beliefs(scope, limit=1000)
        pack = await engine.recall({"scope": scope, "query": "where does my sister live"})
        states = [lane.work.state for lane in _lanes(engine)]
        return facts, beliefs, pack, states


def _lanes(engine):
    handles = engine._ctx.supervisor._handles.values()
    return [handle.actor.lane for handle in handles if handle.actor is not None]


async def test_a_tiny_derived_cache_derives_the_same_records(backend, tmp_path, clock):
    base = await _history(backend, tmp_path / "a", clock.__class__("2026-05-13T15:42:09Z"))
    tiny = await _history(backend, tmp_path / "b", clock.__class__("2026-05-13T15:42:09Z"),
                          derived_cache_records=2)  # fmt: skip
    assert base[0] == tiny[0]  # facts, supersession included
    assert base[1] == tiny[1]  # beliefs
    assert len(base[0]["items"]) >= 8 and base[1]["items"]
    assert base[2]["context_block"] == tiny[2]["context_block"] and base[2]["layers"] == tiny[2]["layers"]
    for state in tiny[3]:  # the bound held at the end of every batch
        assert len(state.facts) <= 2 and len(state.beliefs) <= 2 and len(state.belief_by_id) <= 2
    assert any(len(state.facts) > 2 for state in base[3])  # the default keeps them all here
