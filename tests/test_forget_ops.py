"""The deletion operations erasure reuses (``cortexdb.engine.forget.ops``), on both backends:
each does what it says, leaves no dangling pointer, and is idempotent (a rerun counts 0)."""

from __future__ import annotations

import pytest

from cortexdb import EngineConfig
from cortexdb.engine.forget import ops
from cortexdb.errors import NotFound, ResourceDeleted

from .conftest import envelope

SCOPE = "org:acme/user:alice"
TEAM = "org:acme"


@pytest.fixture
async def engine(engine_factory):
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", vector_segment_size=4)
    async with engine_factory(config=config) as opened:
        yield opened


async def write(engine, texts, scope=SCOPE, **extra) -> list[str]:
    ids = []
    for i, text in enumerate(texts):
        done = await engine.experience(envelope(text, scope=scope, observed_at=f"2026-05-13T15:{i:02d}:00Z", **extra),
                                       wait="consolidated")  # fmt: skip
        ids.append(done.event_id)
    await engine.flush(scope, seal=True)
    return ids


def lane(engine, scope=SCOPE):
    return engine._supervisor.actor(scope).lane.state


def held_vectors(engine, scope=SCOPE) -> set[str]:
    """Every id a vector is held for: in sealed segments (dead or alive) and the delta."""
    held = set()
    for index in lane(engine, scope).vector_index._indexes.values():
        held.update(d for segment in index._segments for d in segment.ids)
        held.update(index._delta_ids)
    return held


async def test_delete_records_rebuilds_sealed_vector_segments_without_them(engine):
    await write(engine, [f"I like sport number {i}." for i in range(10)])
    doomed = [f["id"] for f in (await engine.facts(SCOPE))["items"]][:3]
    assert lane(engine).vector_index._indexes["fact_"].segment_sizes  # sealed segments exist
    assert set(doomed) <= held_vectors(engine)
    counts = await ops.delete_records(engine, SCOPE, doomed)
    assert counts == {"facts": 3, "beliefs": 3, "episodes": 0, "understanding": 0}
    assert not set(doomed) & held_vectors(engine)  # rewritten, not filtered at query time
    assert await ops.delete_records(engine, SCOPE, doomed) == dict.fromkeys(counts, 0)  # idempotent


async def test_redact_events_replaces_the_actor_when_asked(engine):
    ids = await write(engine, ["I like tea.", "I like coffee."])
    assert await ops.redact_events(engine, SCOPE, ids[:1], actor="redacted:gdpr_x") == 1
    event = await engine.get_event(SCOPE, ids[0])
    assert event["actor"] == "redacted:gdpr_x" and event["observed_actor"] == {"id": "redacted:gdpr_x"}
    assert event["content"] == {"kind": "redacted", "original_kind": "message"}
    assert ids[0] not in lane(engine).text_index and ids[0] not in lane(engine).vector_index
    assert await ops.redact_events(engine, SCOPE, ids[:1], actor="redacted:gdpr_x") == 0
    facts = (await engine.facts(SCOPE))["items"]  # what it derived is the caller's to decide
    assert {f["object"]["value"] for f in facts} == {"tea", "coffee"}


async def test_delete_events_leaves_nothing_pointing_at_them(engine):
    ids = await write(engine, ["I like tea.", "I like tea.", "I like coffee."])
    await engine.experience({**envelope("I like cake.", observed_at="2026-05-13T15:09:00Z"), "idempotency_key": "k1"},
                            wait="consolidated")  # fmt: skip
    cake = (await engine.experience_by_idempotency_key("k1"))["event_id"]
    tea = next(f for f in (await engine.facts(SCOPE))["items"] if f["object"]["value"] == "tea")
    assert tea["supports_total"] == 2
    lifecycle = [r["lifecycle_id"] for r in await engine.lifecycle(event_id=ids[0])]
    assert await ops.delete_events(engine, SCOPE, [ids[0], cake]) == 2
    with pytest.raises(NotFound):
        await engine.get_event(SCOPE, ids[0])
    with pytest.raises(NotFound):
        await engine.home_scope(ids[0])  # its state
    with pytest.raises(NotFound):
        await engine.experience_by_idempotency_key("k1")
    assert await engine.lifecycle(event_id=ids[0]) == []
    with pytest.raises(NotFound):
        await engine.lifecycle_event(lifecycle[0])
    tea = await engine.get_fact(SCOPE, tea["id"])
    assert tea["supports"] == [ids[1]] and tea["supports_total"] == 1
    assert (await engine.fact_supports(SCOPE, tea["id"]))["items"] == [ids[1]]
    episode = (await engine.episodes(SCOPE))["items"][0]
    assert ids[0] not in episode["events"] and cake not in episode["events"]
    assert [e["id"] for e in (await engine.events(SCOPE))["items"]] == ids[1:]
    assert await ops.delete_events(engine, SCOPE, [ids[0]]) == 0


async def test_delete_events_reaches_the_scopes_they_were_consolidated_into(engine):
    ids = await write(engine, ["I like tea."], directives={"consolidate_into": TEAM})
    await engine.flush(TEAM)
    team_fact = (await engine.facts(TEAM))["items"][0]
    assert team_fact["supports"] == ids
    await ops.delete_events(engine, SCOPE, ids)
    assert (await engine.get_fact(TEAM, team_fact["id"]))["supports"] == []


async def test_mark_evidence_and_demote(engine):
    ids = await write(engine, ["I like tea.", "I like coffee.", "I like coffee."])
    await ops.redact_events(engine, SCOPE, ids[:2])
    assert await ops.mark_evidence_redacted(engine, SCOPE, ids[:2]) == 5  # 2 facts, 2 beliefs, the episode
    beliefs = {b["claim"]["object"]["value"]: b for b in (await engine.beliefs(SCOPE))["items"]}
    assert beliefs["tea"]["supporting_evidence_redacted_fraction"] == 1.0
    assert beliefs["coffee"]["supporting_evidence_redacted_fraction"] == 0.5  # one of its two events
    tea_before = beliefs["tea"]["confidence"]
    assert await ops.demote_beliefs(engine, SCOPE, factor=0.5, floor=0.3) == {"demoted": 1, "deleted": 0}
    tea = await engine.get_belief(SCOPE, beliefs["tea"]["id"])
    assert tea["confidence"] == round(tea_before * 0.5, 4) and tea["_partial_reason"] == "supporting_evidence_redacted"
    assert await ops.demote_beliefs(engine, SCOPE) == {"demoted": 0, "deleted": 0}  # once
    await ops.redact_events(engine, SCOPE, ids[2:])
    await ops.mark_evidence_redacted(engine, SCOPE, ids[2:])
    assert await ops.demote_beliefs(engine, SCOPE, factor=0.1, floor=0.3) == {"demoted": 0, "deleted": 1}
    with pytest.raises(ResourceDeleted):
        await engine.get_belief(SCOPE, beliefs["coffee"]["id"])


async def test_scrub_empties_the_pack_cache(engine):
    await write(engine, ["I like tea."])
    pack = await engine.recall({"scope": SCOPE, "query": "tea", "idempotency_key": "r1"})
    assert engine.get_pack(pack["pack_id"])["pack_id"] == pack["pack_id"]
    await ops.scrub(engine, scopes=[SCOPE], event_ids=[], record_ids=[])
    with pytest.raises(NotFound):
        engine.get_pack(pack["pack_id"])
    again = await engine.recall({"scope": SCOPE, "query": "tea", "idempotency_key": "r1"})
    assert again["pack_id"] != pack["pack_id"]  # recalled afresh, not replayed from the cache
