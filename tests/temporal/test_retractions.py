"""Retractions: a later statement withdraws an earlier one (a negation), or a write is cancelled.

A negation is knowledge like any other: it supersedes the claim, which stays readable as it was
held.  A cancel (§8.9.5) is not: the cancelled write is taken out of every layer and of every
earlier version — as of any instant, nothing derived shows it (docs/time.md)."""

from __future__ import annotations

import pytest

import cortexdb

from .harness import SCOPE, value


def polarity_view(facts: list[dict]) -> set[tuple]:
    return {(value(f), f["polarity"]) for f in facts}


async def test_a_negation_withdraws_a_preference(world):
    world.at("2026-05-01")
    await world.say("I love hiking.", "2026-04-01")
    world.at("2026-05-03")
    await world.say("I don't like hiking anymore.", "2026-05-02")
    assert polarity_view(await world.facts("likes", as_of="2026-05-02")) == {("hiking", 1)}
    assert polarity_view(await world.facts("likes", as_of="2026-05-04")) == {("hiking", -1)}
    # known now: they liked hiking from April 1st until May 2nd
    assert await world.spans("likes", valid_during="2026-04-10..2026-04-11") == {
        ("hiking", "2026-04-01", "2026-05-02", True)}


async def test_a_negated_triple_retracts_a_claim(world):
    world.at("2026-05-01")
    await world.triple("Acme", "uses", "Postgres", "2026-04-01")
    world.at("2026-05-04")
    await world.triple("Acme", "uses", "Postgres", "2026-05-03", negated=True)
    before = await world.facts("uses", subject="Acme", as_of="2026-05-02")
    after = await world.facts("uses", subject="Acme", as_of="2026-05-05")
    assert polarity_view(before) == {("Postgres", 1)} and polarity_view(after) == {("Postgres", -1)}
    assert after[0]["supersedes"] == before[0]["id"]


async def test_the_belief_of_a_retracted_claim_is_overturned_but_its_past_stays(world):
    world.at("2026-05-01")
    await world.triple("Acme", "uses", "Postgres", "2026-04-01")
    world.at("2026-05-04")
    await world.triple("Acme", "uses", "Postgres", "2026-05-03", negated=True)
    before = await world.beliefs(as_of="2026-05-02")
    assert [(value(b), b["stance"]) for b in before] == [("Postgres", "supported")]
    now = await world.beliefs(valid_during="..")
    assert [(value(b), b["stance"], b["valid_to"]) for b in now] == [("Postgres", "contradicted", "2026-05-03T00:00:00Z")]
    assert await world.beliefs() == []  # the claim no longer holds


async def test_a_retraction_then_a_reaffirmation(world):
    world.at("2026-05-01")
    await world.say("I love hiking.", "2026-04-01")
    world.at("2026-05-03")
    await world.say("I don't like hiking anymore.", "2026-05-02")
    world.at("2026-05-06")
    await world.say("I love hiking.", "2026-05-05")
    timeline = {"2026-05-02": 1, "2026-05-04": -1, "2026-05-07": 1}
    for as_of, polarity in timeline.items():
        assert polarity_view(await world.facts("likes", as_of=as_of)) == {("hiking", polarity)}, as_of
    # as of May 4th the claim had ended (overturned, closed on May 2nd): only a window shows it
    assert await world.stances("likes", as_of="2026-05-04") == {}
    assert (await world.stances("likes", as_of="2026-05-04", valid_during=".."))["hiking"][0] == "contradicted"
    assert (await world.stances("likes"))["hiking"][0] == "supported"  # reopened by new evidence


async def test_a_cancelled_write_is_gone_from_every_instant(world):
    world.at("2026-05-01")
    await world.say("I live in Paris.", "2026-01-10")
    world.at("2026-05-02")
    moved = await world.say("I moved to Zanzibar.", "2026-03-01")
    world.at("2026-05-03")
    await world.engine.cancel(moved, caller="user:alice")
    # as of the day the move was recorded, it no longer shows: a cancel withdraws it for good
    for as_of in ("2026-05-02T12:00", "2026-05-04"):
        facts = await world.facts("lives_in", as_of=as_of, include_superseded=True)
        assert "Zanzibar" not in {value(f) for f in facts}, as_of
    everything = await world.facts("lives_in", include_superseded=True, valid_during="..", recorded_during="..")
    assert "Zanzibar" not in {value(f) for f in everything}


async def test_a_belief_deleted_by_a_cancel_answers_410_at_every_instant(world):
    world.at("2026-05-01")
    done = await world.say("My favorite color is blue.", "2026-04-01")
    belief_id = await world.belief_id("blue", "favorite_color")
    world.at("2026-05-02")
    await world.engine.cancel(done, caller="user:alice")
    for as_of in (None, "2026-05-01T12:00"):
        with pytest.raises(cortexdb.ResourceDeleted):
            await world.belief(belief_id, as_of=as_of)
    assert await world.beliefs(as_of="2026-05-01T12:00") == []


async def test_a_belief_deleted_below_the_floor_stays_readable_as_of_before(world_factory):
    # a tenant floor of 0.6: one corroborated claim, then one source against it (not enough to
    # call it contradicted) takes it below the floor and deletes it
    async with world_factory(confidence_floor=0.6) as world:
        world.at("2026-05-01")
        await world.triple("Acme", "plan", "enterprise", "2026-04-01", single_valued=False, confidence=0.9)
        belief_id = await world.belief_id("enterprise", "plan")
        world.at("2026-05-02")
        await world.triple("Acme", "plan", "enterprise", "2026-04-01", single_valued=False, negated=True,
                           confidence=0.9)
        with pytest.raises(cortexdb.ResourceDeleted):
            await world.belief(belief_id)
        then = await world.belief(belief_id, as_of="2026-05-01T12:00")
        assert then["stance"] == "supported" and then["recorded_to"] == "2026-05-02T00:00:00Z"
        assert [b["id"] for b in await world.beliefs(as_of="2026-05-01T12:00")] == [belief_id]
        assert await world.beliefs(as_of="2026-05-03") == []
        assert (await world.engine.beliefs_why(SCOPE, belief_id, as_of="2026-05-01T12:00:00Z"))["belief"]["id"] == belief_id
