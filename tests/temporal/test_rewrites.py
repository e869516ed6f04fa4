"""What rewrites history instead of versioning it (docs/time.md): a forget, an erasure, a cancel.
No instant shows what they removed, and the versions tables keep nothing of it."""

from __future__ import annotations

import pytest

import cortexdb

from ..test_erasure import finished
from .harness import SCOPE, value


async def versions_of(world, table: str, record_id: str) -> int:
    versions = getattr(world.engine.tables.partition(SCOPE), table)
    return len([row async for row in versions.rows(record_id)])


async def test_a_forgotten_successor_leaves_its_predecessor_as_if_never_superseded(world):
    world.at("2026-05-01")
    await world.say("I live in Paris.", "2026-01-10")
    world.at("2026-05-02")
    await world.say("I moved to Berlin.", "2026-03-01")
    facts = {value(f): f for f in await world.facts("lives_in", valid_during="..")}
    assert await versions_of(world, "fact_versions", facts["Paris"]["id"]) == 1
    world.at("2026-05-03")
    await world.engine.forget({"scope": SCOPE, "layers": ["facts"], "selector": {"memory_ids": [facts["Berlin"]["id"]]}})
    [paris] = await world.facts("lives_in")
    assert (paris["valid_to"], paris["superseded_by"], paris.get("version", 1)) == (None, None, 1)
    assert paris["recorded_from"] == "2026-05-01T00:00:00Z"  # recorded from when its first version was
    assert await versions_of(world, "fact_versions", paris["id"]) == 0
    every = await world.facts("lives_in", include_superseded=True, valid_during="..", recorded_during="..")
    assert [value(f) for f in every] == ["Paris"]
    assert await world.values("lives_in", as_of="2026-05-02T12:00") == ["Paris"]


async def test_a_forgotten_belief_takes_its_kept_versions_along(world_factory):
    async with world_factory(confidence_floor=0.6) as world:
        world.at("2026-05-01")
        await world.triple("Acme", "plan", "enterprise", "2026-04-01", single_valued=False, confidence=0.9)
        belief_id = await world.belief_id("enterprise", "plan")
        world.at("2026-05-02")
        await world.triple("Acme", "plan", "enterprise", "2026-04-01", single_valued=False, negated=True, confidence=0.9)
        assert await versions_of(world, "belief_versions", belief_id) == 1  # deleted by revision: kept
        world.at("2026-05-03")
        await world.engine.forget({"scope": SCOPE, "layers": ["facts"], "selector": {"predicate": "plan"}})
        assert await versions_of(world, "belief_versions", belief_id) == 0
        with pytest.raises(cortexdb.CortexError):
            await world.belief(belief_id, as_of="2026-05-01T12:00")


async def test_an_erased_scope_keeps_no_version(world):
    world.at("2026-05-01")
    await world.say("I live in Paris.", "2026-01-10")
    world.at("2026-05-02")
    await world.say("I moved to Berlin.", "2026-03-01")
    partition = world.engine.tables.partition(SCOPE)
    assert await partition.fact_versions.table.count() and await partition.episode_versions.table.count()
    erasure = await world.engine.erasures.execute({"scope": SCOPE})
    status = await finished(world.engine, erasure["erasure_id"])
    assert status["status"] == "completed", status
    for table in (partition.fact_versions, partition.belief_versions, partition.episode_versions):
        assert await table.table.count() == 0


async def test_a_cancel_rewrites_the_history_of_what_it_touches(world):
    world.at("2026-05-01")
    await world.say("I live in Paris.", "2026-04-30T09:00")
    [episode] = await world.episodes()
    world.at("2026-05-02")
    moved = await world.say("I moved to Zanzibar.", "2026-04-30T09:10")  # the same episode
    await world.engine.flush(SCOPE)
    assert await versions_of(world, "episode_versions", episode["id"]) == 1
    world.at("2026-05-03")
    await world.engine.cancel(moved, caller="user:alice")
    assert await versions_of(world, "episode_versions", episode["id"]) == 0
    [now] = await world.episodes(as_of="2026-05-02T12:00")
    assert len(now["events"]) == 1 and "Zanzibar" not in now["summary"]
