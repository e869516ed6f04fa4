"""Knowledge updates: a later statement supersedes an earlier one.  The old fact is not rewritten:
its version as held is closed when the update is learnt, and its next version carries the end."""

from __future__ import annotations

from .harness import SCOPE, value


async def test_a_move_is_seen_as_it_was_known_at_each_instant(world):
    world.at("2026-05-01")
    await world.say("I live in Paris.", "2026-01-10")
    world.at("2026-05-02")
    await world.say("I moved to Berlin.", "2026-03-01")
    # before the move was learnt: Paris, open-ended (the end was not known yet)
    assert await world.spans("lives_in", as_of="2026-05-01T12:00") == {("Paris", "2026-01-10", None, False)}
    # after: Berlin; Paris is no longer valid
    assert await world.spans("lives_in", as_of="2026-05-03") == {("Berlin", "2026-03-01", None, True)}
    assert await world.values("lives_in") == ["Berlin"]
    # before anything was learnt: nothing
    assert await world.facts("lives_in", as_of="2026-04-30") == []


async def test_include_superseded_adds_the_versions_closed_by_as_of(world):
    world.at("2026-05-01")
    await world.say("I live in Paris.", "2026-01-10")
    world.at("2026-05-02")
    await world.say("I moved to Berlin.", "2026-03-01")
    # §18.2 item 1: both axes clip; the closed version of Paris (open-ended as held) comes back
    assert await world.spans("lives_in", include_superseded=True) == {
        ("Paris", "2026-01-10", None, False), ("Berlin", "2026-03-01", None, True)}
    # as of before the move was learnt nothing had been closed yet
    assert await world.spans("lives_in", include_superseded=True, as_of="2026-05-01T12:00") == {
        ("Paris", "2026-01-10", None, False)}


async def test_what_is_known_now_of_the_past_carries_the_end_learnt(world):
    world.at("2026-05-01")
    await world.say("I live in Paris.", "2026-01-10")
    world.at("2026-05-02")
    await world.say("I moved to Berlin.", "2026-03-01")
    february = await world.facts("lives_in", valid_during="2026-02-01..2026-02-28")
    assert [(value(f), f["valid_to"], f["superseded_by"] is not None, f["version"]) for f in february] == [
        ("Paris", "2026-03-01T00:00:00Z", True, 2)]
    # as of before the move was learnt, February was Paris with no known end
    before = await world.facts("lives_in", valid_during="2026-02-01..2026-02-28", as_of="2026-05-01T12:00")
    assert [(value(f), f["valid_to"], f["superseded_by"]) for f in before] == [("Paris", None, None)]


async def test_three_successive_values(world):
    for recorded, (text, observed) in zip(("2026-05-01", "2026-05-02", "2026-05-03"), (
            ("I live in Paris.", "2026-01-01"), ("I moved to Berlin.", "2026-02-01"),
            ("I moved to Rome.", "2026-03-01")), strict=True):  # fmt: skip
        world.at(recorded)
        await world.say(text, observed)
    expected = {"2026-05-01T06:00": ["Paris"], "2026-05-02T06:00": ["Berlin"], "2026-05-03T06:00": ["Rome"]}
    for as_of, values in expected.items():
        assert await world.values("lives_in", as_of=as_of) == values, as_of
    assert await world.spans("lives_in", valid_during="..") == {
        ("Paris", "2026-01-01", "2026-02-01", True), ("Berlin", "2026-02-01", "2026-03-01", True),
        ("Rome", "2026-03-01", None, True)}


async def test_a_literal_attribute_changes(world):
    world.at("2026-05-01")
    await world.say("My favorite color is blue.", "2026-04-01")
    world.at("2026-05-05")
    await world.say("My favorite color is green.", "2026-05-04")
    assert await world.values("favorite_color", as_of="2026-05-04") == ["blue"]
    assert await world.values("favorite_color", as_of="2026-05-06") == ["green"]
    # the valid axis alone moves too: as of 2026-05-06, what held on 2026-04-15 is still blue
    assert await world.values("favorite_color", valid_during="2026-04-15..2026-04-16", as_of="2026-05-06") == ["blue"]


async def test_a_count_is_updated_by_triples(world):
    world.at("2026-05-01")
    await world.triple("Acme", "seat_count", 100, "2026-04-01")
    world.at("2026-05-10")
    await world.triple("Acme", "seat_count", 200, "2026-05-09")
    assert await world.values("seat_count", subject="Acme", as_of="2026-05-09") == [100]
    assert await world.values("seat_count", subject="Acme", as_of="2026-05-10") == [200]
    assert await world.values("seat_count", subject="Acme") == [200]


async def test_an_update_learnt_late_does_not_rewrite_what_was_known(world):
    # the move happened on March 1st but CortexDB hears of it only on May 20th
    world.at("2026-05-01")
    await world.say("I live in Paris.", "2026-01-10")
    world.at("2026-05-20")
    await world.say("I moved to Berlin.", "2026-03-01")
    # asked on May 10th about April, the answer then was Paris
    assert await world.values("lives_in", as_of="2026-05-10") == ["Paris"]
    # asked now about April, the answer is Berlin
    assert await world.values("lives_in", valid_during="2026-04-01..2026-04-02") == ["Berlin"]


async def test_belief_versions_follow_the_update(world):
    world.at("2026-05-01")
    await world.say("I live in Paris.", "2026-01-10")
    world.at("2026-05-02")
    await world.say("I moved to Berlin.", "2026-03-01")
    assert await world.stances("lives_in", as_of="2026-05-01T12:00") == {"Paris": ("supported", 0.6491)}
    now = await world.stances("lives_in")
    assert set(now) == {"Berlin"} and now["Berlin"][0] == "supported"
    # the overturned claim: closed, contradicted, as known now of the time it held
    january = await world.stances("lives_in", valid_during="2026-01-15..2026-01-16")
    assert january["Paris"][0] == "contradicted"


async def test_a_belief_read_by_id_as_of(world):
    world.at("2026-05-01")
    await world.say("I live in Paris.", "2026-01-10")
    paris = await world.belief_id("Paris", "lives_in")
    world.at("2026-05-02")
    await world.say("I moved to Berlin.", "2026-03-01")
    then = await world.belief(paris, as_of="2026-05-01T12:00")
    assert (then["stance"], then["valid_to"], then["recorded_to"]) == ("supported", None, "2026-05-02T00:00:00Z")
    current = await world.belief(paris)
    assert (current["stance"], current["valid_to"], current["version"]) == ("contradicted", "2026-03-01T00:00:00Z", 2)
    with __import__("pytest").raises(__import__("cortexdb").NotFound):
        await world.belief(paris, as_of="2026-04-30")  # not recorded yet


async def test_why_as_of_shows_the_evidence_held_then(world):
    world.at("2026-05-01")
    await world.say("I live in Paris.", "2026-01-10")
    paris = await world.belief_id("Paris", "lives_in")
    world.at("2026-05-02")
    await world.say("I moved to Berlin.", "2026-03-01")
    engine = world.engine
    then = await engine.beliefs_why(SCOPE, paris, as_of="2026-05-01T12:00:00Z")
    relations = {e["relation"] for e in then["support_graph"]["edges"] if e["from"] == paris}
    assert relations == {"supported_by"} and then["belief"]["stance"] == "supported"
    now = await engine.beliefs_why(None, paris)  # by id alone: its scope is found
    relations = {e["relation"] for e in now["support_graph"]["edges"] if e["from"] == paris}
    assert relations == {"contradicted_by"} and now["belief"]["stance"] == "contradicted"


async def test_the_timeline_is_the_chain_as_known_now(world):
    world.at("2026-05-01")
    await world.say("I live in Paris.", "2026-01-10")
    world.at("2026-05-02")
    await world.say("I moved to Berlin.", "2026-03-01")
    timeline = await world.engine.facts_timeline(SCOPE, subject="user:alice", predicate="lives_in")
    assert [(t["value"]["name"], t["valid_from"][:10], (t["valid_to"] or "")[:10]) for t in timeline["timeline"]] == [
        ("Paris", "2026-01-10", "2026-03-01"), ("Berlin", "2026-03-01", "")]


async def test_recall_as_of_returns_what_was_known(world):
    world.at("2026-05-01")
    await world.say("I live in Paris.", "2026-01-10")
    world.at("2026-05-02")
    await world.say("I moved to Berlin.", "2026-03-01")
    then = await world.recall("where does alice live", ["facts"], as_of="2026-05-01T12:00")
    assert [value(f) for f in then["facts"]] == ["Paris"] and then["facts"][0]["valid_to"] is None
    now = await world.recall("where does alice live", ["facts"])
    assert [value(f) for f in now["facts"]] == ["Berlin"]
