"""Out-of-order arrivals: an observation of an earlier time is recorded after a later one.

It is filed as history (its end is the later value's start) or moves a fact's start earlier —
each a new version, so what was known before it arrived is unchanged."""

from __future__ import annotations

from .harness import value


async def test_an_earlier_home_arrives_after_the_current_one(world):
    world.at("2026-05-01")
    await world.say("I live in Paris.", "2026-03-01")
    world.at("2026-05-02")
    await world.say("I live in Lyon.", "2026-01-01")  # observed before Paris, learnt after
    # now: Paris is current; Lyon is history, ended when Paris began
    assert await world.values("lives_in") == ["Paris"]
    assert await world.spans("lives_in", valid_during="..") == {
        ("Paris", "2026-03-01", None, True), ("Lyon", "2026-01-01", "2026-03-01", True)}
    # January, as known now: Lyon; as known on May 1st: nothing was known of January
    assert await world.values("lives_in", valid_during="2026-01-10..2026-01-11") == ["Lyon"]
    assert await world.values("lives_in", valid_during="2026-01-10..2026-01-11", as_of="2026-05-01T12:00") == []


async def test_nothing_is_closed_by_late_history(world):
    world.at("2026-05-01")
    await world.say("I live in Paris.", "2026-03-01")
    world.at("2026-05-02")
    await world.say("I live in Lyon.", "2026-01-01")
    paris = (await world.facts("lives_in"))[0]
    assert (paris.get("version", 1), paris["superseded_by"]) == (1, None)
    assert await world.spans("lives_in", include_superseded=True) == {("Paris", "2026-03-01", None, True)}


async def test_a_repeat_observed_earlier_moves_the_start_back(world):
    world.at("2026-05-01")
    await world.say("I work at Acme.", "2026-04-01")
    world.at("2026-05-02")
    await world.say("I work at Acme.", "2026-02-01")  # the same, observed two months earlier
    assert await world.spans("works_at", as_of="2026-05-01T12:00") == {("Acme", "2026-04-01", None, False)}
    assert await world.spans("works_at") == {("Acme", "2026-02-01", None, True)}
    # March, as known on May 1st: no job known; as known now: Acme
    assert await world.values("works_at", valid_during="2026-03-01..2026-03-02", as_of="2026-05-01T12:00") == []
    assert await world.values("works_at", valid_during="2026-03-01..2026-03-02") == ["Acme"]


async def test_a_late_earlier_value_does_not_supersede_the_later_one(world):
    world.at("2026-05-01")
    await world.say("I moved to Berlin.", "2026-04-01")
    world.at("2026-05-02")
    await world.say("I live in Paris.", "2026-01-01")
    facts = {value(f): f for f in await world.facts("lives_in", valid_during="..")}
    assert facts["Berlin"]["superseded_by"] is None and facts["Paris"]["valid_to"] == "2026-04-01T00:00:00Z"
    assert await world.values("lives_in", as_of="2026-05-03") == ["Berlin"]


async def test_a_belief_starts_when_its_earliest_evidence_does(world):
    world.at("2026-05-01")
    await world.say("I work at Acme.", "2026-04-01")
    world.at("2026-05-02")
    await world.say("I work at Acme.", "2026-02-01")
    then = await world.beliefs(as_of="2026-05-01T12:00")
    now = await world.beliefs()
    assert [b["valid_from"] for b in then] == ["2026-04-01T00:00:00Z"]
    assert [b["valid_from"] for b in now] == ["2026-02-01T00:00:00Z"]
    assert then[0]["confidence"] < now[0]["confidence"]  # two observations weigh more than one


async def test_an_episode_grows_backwards_when_an_earlier_turn_arrives(world):
    world.at("2026-05-01T10:00")
    await world.say("We started the review.", "2026-05-01T09:50")
    world.at("2026-05-01T10:05")
    await world.say("Someone joined before the start.", "2026-05-01T09:40")
    then = await world.episodes(as_of="2026-05-01T10:01")
    now = await world.episodes()
    assert [(e["started_at"], len(e["events"])) for e in then] == [("2026-05-01T09:50:00Z", 1)]
    assert [(e["started_at"], len(e["events"])) for e in now] == [("2026-05-01T09:40:00Z", 2)]


async def test_an_observation_of_the_future_is_not_valid_yet(world):
    world.at("2026-05-01")
    await world.triple("Acme", "plan", "enterprise", "2026-06-01")  # a contract starting in June
    assert await world.values("plan", subject="Acme") == []  # not valid now
    assert await world.values("plan", subject="Acme", as_of="2026-06-02") == ["enterprise"]
    assert await world.values("plan", subject="Acme", valid_during="2026-06-01..") == ["enterprise"]
