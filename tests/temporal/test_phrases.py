"""Natural and custom phrases (§12.2, §12.4): a phrase is reduced to a valid-time window, anchored
at the request's time (or ``reference_date``), and combines with ``as_of`` like any window."""

from __future__ import annotations

import pytest

import cortexdb

from .harness import SCOPE, value


async def jobs(world) -> None:
    """Alice worked at Acme from January, at Initech from April 20th (learnt on May 1st, 10th)."""
    world.at("2026-05-01")
    await world.say("I work at Acme.", "2026-01-05")
    world.at("2026-05-10")
    await world.say("I work at Initech.", "2026-04-20")


async def test_last_n_days(world):
    await jobs(world)
    world.at("2026-05-12")
    assert await world.values("works_at", natural="last 7 days") == ["Initech"]
    assert sorted(await world.values("works_at", natural="last 30 days")) == ["Acme", "Initech"]
    # anchored elsewhere: the 30 days before March 1st
    assert await world.values("works_at", natural="last 30 days", reference_date="2026-03-01") == ["Acme"]


async def test_yesterday_and_this_week(world):
    await jobs(world)
    world.at("2026-05-13T09:00")  # a Wednesday
    assert await world.values("works_at", natural="yesterday") == ["Initech"]
    assert await world.values("works_at", natural="this week") == ["Initech"]
    assert await world.values("works_at", natural="yesterday", reference_date="2026-02-11") == ["Acme"]


async def test_between_and_since(world):
    await jobs(world)
    assert await world.values("works_at", natural="between 2026-02-01 and 2026-03-01") == ["Acme"]
    assert sorted(await world.values("works_at", natural="between 2026-04-01 and 2026-04-30")) == ["Acme", "Initech"]
    assert await world.values("works_at", natural="since 2026-04-25") == ["Initech"]


async def test_a_phrase_as_of_a_past_instant(world):
    await jobs(world)
    # "since April 25th", as known on May 5th: Acme, no end known yet; as known now: Initech
    assert await world.spans("works_at", natural="since 2026-04-25", as_of="2026-05-05") == {
        ("Acme", "2026-01-05", None, False)}
    assert await world.spans("works_at", natural="since 2026-04-25") == {("Initech", "2026-04-20", None, True)}


async def test_a_month_phrase_on_beliefs_and_episodes(world):
    await jobs(world)
    assert set(await world.stances("works_at", natural="in February 2026")) == {"Acme"}
    world.at("2026-05-11")
    await world.say("The quarterly review went fine.", "2026-03-15T10:00")
    assert [e["started_at"][:10] for e in await world.episodes(natural="in March 2026")] == ["2026-03-15"]
    assert await world.episodes(natural="in March 2026", as_of="2026-05-10T12:00") == []


async def test_a_phrase_in_recall(world):
    await jobs(world)
    pack = await world.recall("where does alice work", ["facts"], natural="between 2026-02-01 and 2026-03-01")
    assert [value(f) for f in pack["facts"]] == ["Acme"]
    pack = await world.recall("where does alice work", ["facts"], natural="between 2026-02-01 and 2026-03-01",
                              as_of="2026-05-05")
    assert [(value(f), f["valid_to"]) for f in pack["facts"]] == [("Acme", None)]


async def test_a_custom_phrase_names_a_period(world):
    await jobs(world)
    await world.engine.register_temporal_phrase("fiscal_q1", "fiscal Q1",
                                                {"valid_during": ["2026-01-01", "2026-04-01"]})  # fmt: skip
    await world.engine.register_temporal_phrase("fiscal_q2", "fiscal Q2",
                                                {"valid_during": ["2026-04-01", "2026-07-01"]})  # fmt: skip
    assert await world.values("works_at", natural="fiscal Q1") == ["Acme"]
    assert sorted(await world.values("works_at", natural="fiscal q2")) == ["Acme", "Initech"]  # case-insensitive
    # Q2 as known on May 5th: only Acme (Initech was not known yet)
    assert await world.values("works_at", natural="fiscal Q2", as_of="2026-05-05") == ["Acme"]


async def test_a_custom_phrase_in_recall_and_on_beliefs(world):
    await jobs(world)
    await world.engine.register_temporal_phrase("onboarding", "onboarding period",
                                                {"valid_during": ["2026-01-01", "2026-02-01"]})  # fmt: skip
    pack = await world.recall("where does alice work", ["facts"], natural="onboarding period")
    assert [value(f) for f in pack["facts"]] == ["Acme"]
    assert set(await world.stances("works_at", natural="onboarding period")) == {"Acme"}


async def test_a_deleted_custom_phrase_no_longer_parses(world):
    await jobs(world)
    await world.engine.register_temporal_phrase("fiscal_q1", "fiscal Q1",
                                                {"valid_during": ["2026-01-01", "2026-04-01"]})  # fmt: skip
    assert await world.values("works_at", natural="fiscal Q1") == ["Acme"]
    await world.engine.delete_temporal_phrase("fiscal_q1")
    with pytest.raises(cortexdb.CortexError) as unparseable:
        await world.values("works_at", natural="fiscal Q1")
    assert (unparseable.value.http_status, unparseable.value.error_code) == (422, "UNPARSEABLE_TEMPORAL")
    assert (await world.engine.facts(SCOPE, natural="in 2026", subject="user:alice"))["items"]
