"""Signals (docs/signals.md) on both backends: decay on read, trajectories over the window with
polarity, tenant type settings, bi-temporal reads (as_of), recall's ``signals`` part, forget,
erasure and rebuild; and the pure rules (derive/signals.py)."""

from __future__ import annotations

import datetime as dt

import pytest

from cortexdb import EngineConfig
from cortexdb.engine.derive import signals as rules
from cortexdb.errors import InvalidRequest, UnknownField
from cortexdb.schemas import validator

from .conftest import envelope

SCOPE = "org:acme/user:alice"
DAY = 86_400.0
T0 = dt.datetime(2026, 5, 13, 15, 42, 9, tzinfo=dt.UTC)


def signal(kind="frustration", intensity=0.8, subject="user:alice", **extra):
    return {"scope": SCOPE, "subject": subject, "type": kind, "intensity": intensity, **extra}


# -- the pure rules ---------------------------------------------------------------------------------
def test_effective_intensity_halves_every_half_life():
    assert rules.effective(0.8, T0, T0, DAY) == 0.8
    assert rules.effective(0.8, T0, T0 + dt.timedelta(days=1), DAY) == pytest.approx(0.4)
    assert rules.effective(0.8, T0, T0 + dt.timedelta(days=2), DAY) == pytest.approx(0.2)
    assert rules.effective(0.8, T0 + dt.timedelta(days=1), T0, DAY) == 0.0  # not yet observed


def test_trajectory_table():
    settings = rules.TrajectorySettings(window_seconds=7 * DAY, threshold=0.1, floor=0.05)
    now = T0 + dt.timedelta(days=10)
    ago = lambda days: now - dt.timedelta(days=days)  # noqa: E731
    half = 30 * DAY  # slow decay: the observations dominate
    assert rules.trajectory([], now, half, settings) == ("neutral", 0.0)
    assert rules.trajectory([(ago(9), 0.2), (ago(1), 0.7)], now, half, settings)[0] == "warming"
    assert rules.trajectory([(ago(9), 0.8), (ago(1), 0.3)], now, half, settings)[0] == "cooling"
    assert rules.trajectory([(ago(9), 0.5), (ago(1), 0.52)], now, half, settings)[0] == "stable"
    # one old reading decays: its level falls over the window
    assert rules.trajectory([(ago(9), 0.8)], now, 2 * DAY, settings)[0] == "cooling"
    # fully decayed at both ends: nothing to say
    assert rules.trajectory([(ago(300), 0.8)], now, DAY, settings) == ("neutral", 0.0)


def test_overall_trajectory_weighs_polarity():
    # frustration (negative) falling and satisfaction (positive) rising: the subject warms
    assert rules.overall([("cooling", -0.4, "negative"), ("warming", 0.3, "positive")], 0.1) == "warming"
    assert rules.overall([("warming", 0.5, "negative")], 0.1) == "cooling"
    assert rules.overall([("neutral", 0.0, "positive")], 0.1) == "neutral"


@pytest.mark.parametrize("body, field", [
    ({"half_life_seconds": 0}, "half_life_seconds"), ({"half_life_seconds": True}, "half_life_seconds"),
    ({"half_life_seconds": 10, "polarity": "up"}, "polarity"), ({"half_life_seconds": 10, "x": 1}, "x"),
])  # fmt: skip
def test_type_settings_are_checked(body, field):
    with pytest.raises(InvalidRequest) as caught:
        rules.check_type_settings("mood", body)
    assert caught.value.details["field"] == field


# -- the engine, on both backends -------------------------------------------------------------------
async def test_record_and_decay_on_read(engine, clock):
    stored = await engine.signals.record(signal(intensity=0.8))
    assert stored["id"].startswith("sig_") and stored["effective_intensity"] == 0.8
    assert stored["half_life_seconds"] == 3 * DAY and stored["polarity"] == "negative"
    validator("signal").validate(stored)
    clock.advance(3 * DAY)  # one half-life of frustration
    snap = await engine.signals.snapshot(SCOPE, subject="user:alice")
    validator("signal_snapshot").validate(snap)
    (item,) = snap["items"]
    assert item["intensity"] == 0.8 and item["effective_intensity"] == pytest.approx(0.4)
    (row,) = snap["subjects"][0]["types"]
    assert row["effective_intensity"] == pytest.approx(0.4) and row["observations"] == 1


async def test_trajectories_warming_and_cooling_with_overall(engine, clock):
    await engine.signals.record(signal("frustration", 0.9))
    await engine.signals.record(signal("satisfaction", 0.2))
    clock.advance(8 * DAY)  # past the 7-day window: the start levels are these readings, decayed
    await engine.signals.record(signal("frustration", 0.1))
    await engine.signals.record(signal("satisfaction", 0.7))
    clock.advance(DAY)
    snap = await engine.signals.snapshot(SCOPE)
    (alice,) = snap["subjects"]
    by_type = {row["type"]: row for row in alice["types"]}
    assert by_type["satisfaction"]["trajectory"] == "warming"
    assert by_type["frustration"]["trajectory"] == "cooling"  # ~0.57 at the window's start, ~0.08 now
    assert by_type["frustration"]["change"] == pytest.approx(0.1 * 0.5 ** (1 / 3) - 0.9 * 0.5 ** (2 / 3), abs=1e-6)
    assert alice["overall"] == "warming"  # frustration falling and satisfaction rising both warm
    assert {i["type"]: i["trajectory"] for i in snap["items"]} == {"satisfaction": "warming", "frustration": "cooling"}
    clock.advance(40 * DAY)  # everything has decayed under the floor by now
    later = (await engine.signals.snapshot(SCOPE))["subjects"][0]
    assert [row["trajectory"] for row in later["types"]] == ["neutral", "neutral"] and later["overall"] == "neutral"
    wide = (await engine.signals.snapshot(SCOPE, window_seconds=45 * DAY))["subjects"][0]
    # frustration faded more (-0.36) than satisfaction (-0.12): on balance the state warmed
    assert [row["trajectory"] for row in wide["types"]] == ["cooling", "cooling"] and wide["overall"] == "warming"


async def test_custom_types_and_tenant_settings(engine, clock):
    custom = await engine.signals.record(signal("curiosity", 0.6))
    assert custom["half_life_seconds"] == 3 * DAY  # the configured default of a custom type
    await engine.signals.set_type("default", "curiosity", {"half_life_seconds": DAY, "polarity": "positive"})
    await engine.signals.set_type("default", "frustration", {"half_life_seconds": 3600})
    clock.advance(DAY)
    items = {i["type"]: i for i in (await engine.signals.snapshot(SCOPE))["items"]}
    assert items["curiosity"]["effective_intensity"] == pytest.approx(0.3)
    assert items["curiosity"]["polarity"] == "positive"
    other = await engine.signals.types("other-tenant")  # another tenant keeps the built-ins
    assert other["frustration"].half_life_seconds == 3 * DAY and "curiosity" not in other
    assert await engine.signals.delete_type("default", "curiosity") is True
    assert (await engine.signals.types("default"))["frustration"].half_life_seconds == 3600


async def test_configured_types(engine_factory):
    config = EngineConfig(default_caller="user:alice", signal_types=(("frustration", 60.0, "negative"),))
    async with engine_factory(config=config) as engine:
        assert (await engine.signals.record(signal()))["half_life_seconds"] == 60.0


async def test_as_of_reads_what_was_recorded_then(engine, clock):
    first = await engine.signals.record(signal(intensity=0.8))
    clock.advance(DAY)
    await engine.signals.record(signal(intensity=0.2))
    then = await engine.signals.snapshot(SCOPE, as_of=first["recorded_at"])
    assert [i["id"] for i in then["items"]] == [first["id"]] and then["as_of"] == first["recorded_at"]
    assert then["items"][0]["effective_intensity"] == 0.8
    # a reading observed in the past, recorded now, counts from when it was observed
    back = await engine.signals.record(signal(intensity=0.5, observed_at="2026-05-10T15:42:09Z"))
    assert back["effective_intensity"] == pytest.approx(0.5 * 0.5 ** (4 / 3), abs=1e-6)


async def test_subjects_and_limits(engine):
    for i in range(5):
        await engine.signals.record(signal(intensity=0.1 * (i + 1)))
    await engine.signals.record(signal(subject="user:bob"))
    page = await engine.signals.snapshot(SCOPE, subject="user:alice", limit=2)
    assert page["total"] == 5 and page["has_more"] is True and len(page["items"]) == 2
    assert {s["subject"] for s in (await engine.signals.snapshot(SCOPE))["subjects"]} == {"user:alice", "user:bob"}


@pytest.mark.parametrize("body, field", [
    ({"intensity": 1.5}, "intensity"), ({"intensity": "high"}, "intensity"), ({"type": "Bad Type"}, "type"),
    ({"subject": ""}, "subject"), ({"confidence": -1}, "confidence"), ({"observed_at": "yesterday"}, "observed_at"),
    ({"note": 7}, "note"),
])  # fmt: skip
async def test_bad_signals_are_refused(engine, body, field):
    with pytest.raises(Exception) as caught:
        await engine.signals.record({**signal(), **body})
    assert caught.value.http_status == 422 and caught.value.details["field"] == field


async def test_unknown_fields_and_missing_ones(engine):
    with pytest.raises(UnknownField):
        await engine.signals.record({**signal(), "mood": "bad"})
    with pytest.raises(InvalidRequest) as caught:
        await engine.signals.record({"scope": SCOPE, "subject": "user:alice", "type": "frustration"})
    assert caught.value.details["field"] == "intensity"


async def test_signals_in_recall(engine, clock):
    await engine.experience(envelope("I like green tea."), wait="consolidated")
    await engine.signals.record(signal("frustration", 0.9))
    await engine.signals.record(signal("satisfaction", 0.4))
    await engine.signals.record(signal("confusion", 0.02))  # under the floor: noise
    pack = await engine.recall({"scope": SCOPE, "query": "tea", "diagnostics": "summary"})
    validator("stratified_pack").validate(pack)
    assert [(s["type"], s["effective_intensity"]) for s in pack["signals"]] == [("frustration", 0.9), ("satisfaction", 0.4)]
    assert {"id", "type", "subject", "intensity", "effective_intensity", "trajectory", "observed_at"} <= set(pack["signals"][0])
    assert pack["diagnostics"]["signals_evicted"] == 0


async def test_recall_caps_signals_and_says_so(engine_factory):
    config = EngineConfig(default_caller="user:alice", recall_signals_max=2)
    async with engine_factory(config=config) as engine:
        for i in range(4):
            await engine.signals.record(signal(f"kind_{i}", 0.5 + i / 10))
        pack = await engine.recall({"scope": SCOPE, "query": "anything", "diagnostics": "summary"})
        assert [s["type"] for s in pack["signals"]] == ["kind_3", "kind_2"]
        assert pack["diagnostics"]["signals_evicted"] == 2 and pack["diagnostics"]["_partial"] is True


async def test_recall_goes_on_past_a_scope_with_too_many_signals(engine_factory):
    config = EngineConfig(default_caller="user:alice", signal_snapshot_max=3)
    async with engine_factory(config=config) as engine:
        for i in range(4):
            await engine.signals.record(signal(subject=f"user:u{i}"))
        pack = await engine.recall({"scope": SCOPE, "query": "anything", "diagnostics": "summary"})
        assert pack["signals"] == [] and pack["diagnostics"]["signals_unread_scopes"] == [SCOPE]
        assert pack["diagnostics"]["_partial"] is True
        with pytest.raises(InvalidRequest) as caught:
            await engine.signals.snapshot(SCOPE)
        assert caught.value.details == {"field": "subject", "limit": 3}
        assert (await engine.signals.snapshot(SCOPE, subject="user:u1"))["total"] == 1


async def test_recall_as_of_sees_the_signals_recorded_then(engine, clock):
    first = await engine.signals.record(signal(intensity=0.8))
    clock.advance(DAY)
    await engine.signals.record(signal("satisfaction", 0.6))
    pack = await engine.recall({"scope": SCOPE, "query": "x", "temporal": {"as_of": first["recorded_at"]}})
    assert [s["id"] for s in pack["signals"]] == [first["id"]]


async def test_forget_signals_by_subject_ids_and_time(engine, clock):
    a = await engine.signals.record(signal(subject="user:alice"))
    b = await engine.signals.record(signal(subject="user:bob"))
    clock.advance(DAY)
    c = await engine.signals.record(signal(subject="user:bob", kind="trust"))
    forget = engine.forget
    # not named: a forget of the derived layers leaves signals alone
    answer = await forget({"scope": SCOPE, "selector": {"about_subject": "user:bob"}})
    assert "signals" not in answer["deleted"]
    answer = await forget({"scope": SCOPE, "layers": ["signals"], "selector": {"memory_ids": [a["id"]]}})
    assert answer["deleted"]["signals"] == 1
    answer = await forget({"scope": SCOPE, "layers": ["signals", "facts"],
                           "selector": {"about_subject": "user:bob", "recorded_during": [b["recorded_at"], c["recorded_at"]]}})  # fmt: skip
    assert answer["deleted"]["signals"] == 1
    assert [i["id"] for i in (await engine.signals.snapshot(SCOPE))["items"]] == [c["id"]]
    answer = await forget({"scope": SCOPE, "layers": ["signals"], "selector": {"predicate": "likes"}})
    assert answer["deleted"]["signals"] == 0  # signals have no predicate
    answer = await forget({"scope": SCOPE, "layers": ["signals"], "confirm_all": True})
    assert answer["deleted"]["signals"] == 1 and (await engine.signals.snapshot(SCOPE))["total"] == 0


async def test_forget_memory_ids_of_other_layers_leave_signals(engine):
    await engine.signals.record(signal())
    await engine.experience(envelope("I live in Paris."), wait="consolidated")
    facts = (await engine.facts(SCOPE))["items"]
    answer = await engine.forget({"scope": SCOPE, "layers": ["facts", "signals"],
                                  "selector": {"memory_ids": [facts[0]["id"]]}})  # fmt: skip
    assert answer["deleted"]["signals"] == 0 and (await engine.signals.snapshot(SCOPE))["total"] == 1


async def test_signals_survive_rebuild_and_reopen(engine_factory, backend):
    async with engine_factory() as engine:
        stored = await engine.signals.record(signal())
        await engine.rebuild(SCOPE)  # primary records: a rebuild keeps them
        assert [i["id"] for i in (await engine.signals.snapshot(SCOPE))["items"]] == [stored["id"]]
    if backend == "leveldb":
        async with engine_factory() as engine:
            assert [i["id"] for i in (await engine.signals.snapshot(SCOPE))["items"]] == [stored["id"]]


async def test_erasure_removes_signals(engine):
    await engine.experience(envelope("I live in Paris."), wait="consolidated")
    await engine.signals.record(signal())
    elsewhere = {**signal(subject="user:alice"), "scope": "org:acme/ws:team"}
    await engine.signals.record(elsewhere)
    await engine.experience(envelope("Alice joined the team.", scope="org:acme/ws:team"), wait="consolidated")
    await engine.signals.record({**signal(subject="user:carol"), "scope": "org:acme/ws:team"})
    accepted = await engine.erasures.execute({"scope": SCOPE})
    async with engine.subscribe(job_id=accepted["erasure_id"], events="erasure_complete", since_lifecycle_id="") as ended:
        await ended.__anext__()
    job = await engine.erasures.status(accepted["erasure_id"])
    assert job["status"] == "completed" and job["progress"]["erased_signals"] == 2
    assert (await engine.signals.snapshot(SCOPE))["total"] == 0
    left = (await engine.signals.snapshot("org:acme/ws:team"))["items"]
    assert [i["subject"] for i in left] == ["user:carol"]


async def test_readings_order_by_time_not_by_text_and_future_ones_wait(engine, clock):
    # "…09.5Z" sorts before "…09Z" as text; the level must be the later reading's
    await engine.signals.record(signal(intensity=0.9, observed_at="2026-05-13T15:42:08.5Z"))
    await engine.signals.record(signal(intensity=0.2, observed_at="2026-05-13T15:42:09Z"))
    later = await engine.signals.record(signal(kind="trust", intensity=0.7, observed_at="2026-05-14T15:42:09Z"))
    snap = await engine.signals.snapshot(SCOPE)
    rows = {row["type"]: row for row in snap["subjects"][0]["types"]}
    assert rows["frustration"]["effective_intensity"] == pytest.approx(0.2) and rows["frustration"]["observations"] == 2
    assert rows["trust"]["observations"] == 0 and rows["trust"]["trajectory"] == "neutral"  # not yet observed
    pack = await engine.recall({"scope": SCOPE, "query": "x"})
    assert later["id"] not in [s["id"] for s in pack["signals"]]
    clock.advance(DAY)
    pack = await engine.recall({"scope": SCOPE, "query": "x"})
    assert later["id"] in [s["id"] for s in pack["signals"]]
