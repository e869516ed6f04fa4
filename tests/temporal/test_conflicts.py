"""Conflicting sources: two values of a single-valued predicate claimed for the same moment are
both kept, in conflict, each listing the other — from the moment the second is learnt."""

from __future__ import annotations

from .harness import SCOPE, value


def conflicts(facts: list[dict]) -> dict:
    names = {f["id"]: value(f) for f in facts}
    return {value(f): (f["status"], sorted(names.get(c, c) for c in f["conflicts_with"])) for f in facts}


async def test_a_second_source_puts_the_first_in_conflict_from_then_on(world):
    world.at("2026-05-01")
    await world.triple("Acme", "headquarters", "ent:Lisbon", "2026-04-01", confidence=0.8)
    world.at("2026-05-02")
    await world.triple("Acme", "headquarters", "ent:Porto", "2026-04-01", confidence=0.7)
    assert conflicts(await world.facts("headquarters", subject="Acme", as_of="2026-05-01T12:00")) == {
        "Lisbon": ("accepted", [])}
    assert conflicts(await world.facts("headquarters", subject="Acme")) == {
        "Lisbon": ("accepted", ["Porto"]), "Porto": ("conflict_detected", ["Lisbon"])}


async def test_the_beliefs_of_rival_claims_are_in_tension(world):
    world.at("2026-05-01")
    await world.triple("Acme", "headquarters", "ent:Lisbon", "2026-04-01", confidence=0.8)
    world.at("2026-05-02")
    await world.triple("Acme", "headquarters", "ent:Porto", "2026-04-01", confidence=0.8)
    then = await world.stances(as_of="2026-05-01T12:00")
    assert then == {"Lisbon": ("supported", 0.6429)}
    now = await world.beliefs()
    assert {value(b): b["stance"] for b in now} == {"Lisbon": "uncertain", "Porto": "uncertain"}
    assert {b["contradicts"][0]["resolution"] for b in now} == {"unresolved"}


async def test_corroboration_settles_a_conflict_and_the_past_keeps_its_doubt(world):
    world.at("2026-05-01")
    await world.triple("Acme", "headquarters", "ent:Lisbon", "2026-04-01", confidence=0.8)
    world.at("2026-05-02")
    await world.triple("Acme", "headquarters", "ent:Porto", "2026-04-01", confidence=0.8)
    world.at("2026-05-03")
    await world.triple("Acme", "headquarters", "ent:Lisbon", "2026-04-01", confidence=0.9)
    on = {"2026-05-01T12:00": "supported", "2026-05-02T12:00": "uncertain"}
    for as_of, stance in on.items():
        assert (await world.stances(as_of=as_of))["Lisbon"][0] == stance, as_of
    now = await world.stances()
    assert now["Lisbon"][1] > now["Porto"][1] and now["Porto"][0] == "contradicted"


async def test_a_later_observation_resolves_a_conflict(world):
    world.at("2026-05-01")
    await world.triple("Acme", "headquarters", "ent:Lisbon", "2026-04-01")
    world.at("2026-05-02")
    await world.triple("Acme", "headquarters", "ent:Porto", "2026-04-01")
    world.at("2026-05-03")
    await world.triple("Acme", "headquarters", "ent:Madrid", "2026-05-01")
    assert sorted(await world.values("headquarters", subject="Acme", as_of="2026-05-02T12:00")) == ["Lisbon", "Porto"]
    assert await world.values("headquarters", subject="Acme") == ["Madrid"]
    april = await world.spans("headquarters", subject="Acme", valid_during="2026-04-10..2026-04-11")
    assert april == {("Lisbon", "2026-04-01", "2026-05-01", True), ("Porto", "2026-04-01", "2026-05-01", True)}


async def test_values_of_a_multi_valued_predicate_do_not_conflict(world):
    world.at("2026-05-01")
    await world.say("I like tea.", "2026-04-01")
    world.at("2026-05-02")
    await world.say("I like coffee.", "2026-04-01")
    assert await world.values("likes", as_of="2026-05-01T12:00") == ["tea"]
    assert sorted(await world.values("likes")) == ["coffee", "tea"]
    assert {f["status"] for f in await world.facts("likes")} == {"accepted"}


async def test_two_scopes_disagree_and_each_keeps_its_own_time(world):
    team = "org:acme/team:sales"
    world.at("2026-05-01")
    await world.triple("Acme", "stage", "poc", "2026-04-01")
    world.at("2026-05-02")
    await world.triple("Acme", "stage", "signed", "2026-04-20", scope=team)
    world.at("2026-05-03")
    await world.triple("Acme", "stage", "negotiation", "2026-04-15")
    mine = await world.engine.facts(SCOPE, subject="Acme", predicate="stage", as_of="2026-05-02T12:00:00Z")
    theirs = await world.engine.facts(team, subject="Acme", predicate="stage", as_of="2026-05-02T12:00:00Z")
    assert [value(f) for f in mine["items"]] == ["poc"] and [value(f) for f in theirs["items"]] == ["signed"]
    assert await world.values("stage", subject="Acme") == ["negotiation"]
