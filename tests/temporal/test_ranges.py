"""Valid-time ranges and the recorded axis: ``valid_during`` asks about a period (the window
replaces the point on the valid axis), ``recorded_during`` about what was held during a period
of recording, and episodes are versioned as they grow and are sealed."""

from __future__ import annotations

import pytest

import cortexdb

from .harness import SCOPE, value


async def moves(world) -> None:
    for recorded, text, observed in (("2026-05-01", "I live in Paris.", "2026-01-01"),
                                     ("2026-05-02", "I moved to Berlin.", "2026-02-01"),
                                     ("2026-05-03", "I moved to Rome.", "2026-03-01")):  # fmt: skip
        world.at(recorded)
        await world.say(text, observed)


async def test_a_window_returns_what_held_in_it_as_known_now(world):
    await moves(world)
    windows = {"2026-01-10..2026-01-20": ["Paris"], "2026-02-10..2026-02-20": ["Berlin"],
               "2026-01-25..2026-02-05": ["Paris", "Berlin"], "2026-03-05..": ["Rome"], "..": ["Paris", "Berlin", "Rome"]}  # fmt: skip
    for window, values in windows.items():
        assert sorted(await world.values("lives_in", valid_during=window)) == sorted(values), window


async def test_a_window_excludes_superseded_versions_unless_asked(world):
    await moves(world)
    january = "2026-01-10..2026-01-20"
    assert await world.spans("lives_in", valid_during=january) == {("Paris", "2026-01-01", "2026-02-01", True)}
    # with include_superseded: also the versions of Paris held before (open-ended, then closed)
    assert await world.spans("lives_in", valid_during=january, include_superseded=True) == {
        ("Paris", "2026-01-01", "2026-02-01", True), ("Paris", "2026-01-01", None, False)}


async def test_a_window_as_of_a_past_instant(world):
    await moves(world)
    # "what did we believe on May 2nd about January?": Paris, ended on February 1st
    assert await world.spans("lives_in", valid_during="2026-01-10..2026-01-20", as_of="2026-05-02T12:00") == {
        ("Paris", "2026-01-01", "2026-02-01", True)}
    # "... about March?": Berlin, with no end known then
    assert await world.spans("lives_in", valid_during="2026-03-10..2026-03-20", as_of="2026-05-02T12:00") == {
        ("Berlin", "2026-02-01", None, False)}


async def test_recorded_during_returns_the_versions_held_then(world):
    await moves(world)
    held = await world.spans("lives_in", recorded_during="2026-05-01T06:00:00Z..2026-05-01T07:00:00Z",
                             valid_during="..")  # fmt: skip
    assert held == {("Paris", "2026-01-01", None, False)}
    held = await world.spans("lives_in", recorded_during="2026-05-02T06:00:00Z..2026-05-02T07:00:00Z",
                             valid_during="..")  # fmt: skip
    # Paris's second version (its end learnt) is still the current one; Berlin's first was closed
    assert held == {("Paris", "2026-01-01", "2026-02-01", True), ("Berlin", "2026-02-01", None, False)}


async def test_every_version_of_every_fact(world):
    await moves(world)
    every = await world.facts("lives_in", include_superseded=True, valid_during="..", recorded_during="..")
    assert sorted((value(f), f.get("version", 1), f["recorded_from"][:10], (f["recorded_to"] or "")[:10]) for f in every) == [
        ("Berlin", 1, "2026-05-02", "2026-05-03"), ("Berlin", 2, "2026-05-03", ""),
        ("Paris", 1, "2026-05-01", "2026-05-02"), ("Paris", 2, "2026-05-02", ""), ("Rome", 1, "2026-05-03", "")]


async def test_a_closed_belief_shows_in_its_window(world):
    await moves(world)
    assert set(await world.stances("lives_in")) == {"Rome"}
    february = await world.stances("lives_in", valid_during="2026-02-10..2026-02-11")
    assert set(february) == {"Berlin"} and february["Berlin"][0] == "contradicted"


async def test_an_episode_is_seen_as_it_had_grown(world):
    for minute, text in ((0, "We opened the incident."), (5, "We rolled back."), (10, "We closed it.")):
        world.at(f"2026-05-01T10:{minute:02d}")
        await world.say(text, f"2026-05-01T09:{minute:02d}")
    world.at("2026-05-01T11:00")
    await world.seal()
    grown = {"2026-05-01T10:01": (1, "open"), "2026-05-01T10:06": (2, "open"), "2026-05-01T10:30": (3, "open"),
             "2026-05-01T11:30": (3, "compressed")}  # fmt: skip
    for as_of, (count, status) in grown.items():
        [episode] = await world.episodes(as_of=as_of)
        assert (len(episode["events"]), episode["status"]) == (count, status), as_of
        assert len(episode["causal_chain"]) == count and episode["summary"].startswith(f"{count} event")
    assert await world.episodes(as_of="2026-05-01T09:59") == []


async def test_an_episode_read_by_id_as_of(world):
    world.at("2026-05-01T10:00")
    await world.say("We opened the incident.", "2026-05-01T09:00")
    [episode] = await world.episodes()
    world.at("2026-05-01T10:05")
    await world.say("We closed it.", "2026-05-01T09:05")
    then = await world.engine.get_episode(SCOPE, episode["id"], as_of="2026-05-01T10:01:00Z")
    now = await world.engine.get_episode(SCOPE, episode["id"])
    assert (len(then["events"]), then["recorded_to"], now.get("version")) == (1, "2026-05-01T10:05:00Z", 2)
    with pytest.raises(cortexdb.NotFound):
        await world.engine.get_episode(SCOPE, episode["id"], as_of="2026-05-01T09:30:00Z")


async def test_episodes_overlapping_bare_dates(world):
    world.at("2026-05-03")
    await world.say("Kick-off meeting.", "2026-04-02T10:00")
    await world.say("Follow-up meeting.", "2026-04-20T10:00")
    # the engine takes overlapping_from/_to (the server splits ?overlapping=FROM..TO into them)
    april = await world.engine.episodes(SCOPE, overlapping_from="2026-04-01", overlapping_to="2026-04-10")
    assert [e["started_at"][:10] for e in april["items"]] == ["2026-04-02"]
    later = await world.engine.episodes(SCOPE, overlapping_from="2026-04-15", overlapping_to="2026-05-01")
    assert [e["started_at"][:10] for e in later["items"]] == ["2026-04-20"]
    with pytest.raises(cortexdb.CortexError) as bad:
        await world.engine.episodes(SCOPE, overlapping_from="2026-13-01")
    assert bad.value.http_status == 422


async def test_recall_with_a_window_returns_the_value_then(world):
    await moves(world)
    february = await world.recall("where did alice live", ["facts"], valid_during=["2026-02-10", "2026-02-20"])
    assert [value(f) for f in february["facts"]] == ["Berlin"]
    as_of = await world.recall("where did alice live", ["facts"], as_of="2026-05-02T12:00")
    assert [(value(f), f["valid_to"]) for f in as_of["facts"]] == [("Berlin", None)]
    # a window in recall lists current versions only (the closed ones of Paris are not found)
    january = await world.recall("where did alice live", ["facts"], valid_during=["2026-01-10", "2026-01-20"])
    assert [(value(f), f["valid_to"]) for f in january["facts"]] == [("Paris", "2026-02-01T00:00:00Z")]
