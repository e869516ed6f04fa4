"""The derivation lane's hand-over: a ``wait=`` write is answered from the state its stage
committed (the bus's waiter hands it over), never by reading the event back through its actor."""

from __future__ import annotations

import pytest

from cortexdb import ManualClock
from cortexdb.backends.memory.store import MemoryStore
from cortexdb.engine.actors.bus import LifecycleBus
from cortexdb.engine.ids import IdGenerator
from cortexdb.engine.model import EventState
from cortexdb.engine.storage import NodeTables

from .conftest import envelope

ALICE, TEAM = "org:acme/user:alice", "org:acme/team:x"


def new_bus() -> LifecycleBus:
    clock = ManualClock("2026-05-13T15:42:09Z")
    return LifecycleBus(NodeTables(MemoryStore()).lifecycle, IdGenerator(clock, seed=3), clock)


async def test_a_waiter_is_handed_the_state_as_its_stage_committed_it():
    bus = new_bus()
    waiter = bus.stage_waiter("evt_1", "indexed")
    state = EventState(scope=ALICE, done=["captured", "extracted", "indexed"], derives=["fact_1"])
    record = bus.reserve("indexed", scope=ALICE, event_id="evt_1")
    bus.commit([record], {"evt_1": state})
    state.done.append("consolidated")  # the lane goes on with the same object
    handed = await waiter.wait()
    assert handed.done == ["captured", "extracted", "indexed"] and handed.derives == ["fact_1"]
    assert bus.statistics()["waiters"] == 0


async def test_a_waiter_on_an_aborted_record_is_not_woken_and_keeps_no_state():
    bus = new_bus()
    waiter = bus.stage_waiter("evt_1", "indexed")
    record = bus.reserve("indexed", scope=ALICE, event_id="evt_1")
    bus.abort([record])
    assert not waiter.is_set()
    bus.release_event("evt_1", EventState(scope=ALICE, cancelled=True))  # a cancel wakes it
    assert (await waiter.wait()).cancelled is True


@pytest.mark.parametrize("wait", ["indexed", "consolidated"])
async def test_a_waited_write_reads_nothing_back_through_its_actor(engine, wait):
    result = await engine.experience(envelope("I live in Paris."), wait=wait)
    # the actor handled the capture and nothing else: no read of the event's state
    assert (await engine.ping(ALICE))["handled"] == 1
    assert result.status == wait and result.stages_completed[-1] == wait
    assert any(d.startswith("fact_") for d in result.derives)
    view = await engine.memory_event(result.event_id)
    assert list(result.stages_completed) == view["stages_completed"][: len(result.stages_completed)]
    for stage in result.stages_completed:
        for record_id in view["derives_by_stage"].get(stage, ()):
            assert record_id in result.derives


async def test_a_consolidation_elsewhere_hands_over_what_it_derived(engine):
    body = envelope("I live in Paris.", directives={"consolidate_into": TEAM})
    result = await engine.experience(body, wait="consolidated")
    team_facts = (await engine.facts(TEAM))["items"]
    team_beliefs = (await engine.beliefs(TEAM))["items"]
    assert team_facts[0]["id"] in result.derives and team_beliefs[0]["id"] in result.derives


async def test_a_replayed_write_answers_from_the_stored_state(engine):
    first = await engine.experience(envelope("I live in Paris.", key="k1"), wait="consolidated")
    again = await engine.experience(envelope("I live in Paris.", key="k1"), wait="consolidated")
    assert again.replay and again.event_id == first.event_id
    assert (again.status, again.stages_completed, again.derives) == (
        first.status, first.stages_completed, first.derives,
    )  # fmt: skip
    assert "capture" not in again.elapsed_ms and again.elapsed_ms.keys() == first.elapsed_ms.keys() - {"capture"}


def test_an_event_state_stores_every_optional_field_it_has_in_one_order_and_reads_back():
    """``event_state_wire`` is written out field by field (speed): it must still cover every
    optional field, in ``EVENT_STATE_OPTIONAL`` order, omit the unset ones, and read back equal."""
    import attrs

    from cortexdb.engine.model.converter import event_state_from_wire, event_state_wire
    from cortexdb.engine.model.records import EVENT_STATE_OPTIONAL

    assert set(EVENT_STATE_OPTIONAL) == {f.name for f in attrs.fields(EventState)} - {
        "scope", "done", "lce", "derives", "errors", "cancelled", "batch_id"}  # fmt: skip
    full = EventState(scope=ALICE, derives=["d"], errors=[{}], cancelled=True, batch_id="b",
                      **{name: [index] for index, name in enumerate(EVENT_STATE_OPTIONAL)})  # fmt: skip
    wire = event_state_wire(full)
    assert list(wire)[7:] == list(EVENT_STATE_OPTIONAL)
    assert [wire[name] for name in EVENT_STATE_OPTIONAL] == [[i] for i in range(len(EVENT_STATE_OPTIONAL))]
    assert event_state_from_wire(wire) == full
    bare = EventState(scope=ALICE, episode_id="ep_1")
    assert list(event_state_wire(bare)) == ["scope", "done", "lce", "episode_id"]  # the defaults left out
    assert event_state_from_wire(event_state_wire(bare)) == bare
    set_ = EventState(scope=ALICE, derives=["f"], errors=[{"stage": "extracted"}], cancelled=True, batch_id="b")
    assert list(event_state_wire(set_)) == ["scope", "done", "lce", "derives", "errors", "cancelled", "batch_id"]
    assert event_state_from_wire(event_state_wire(set_)) == set_


def test_an_event_states_derives_are_stored_only_when_they_are_not_its_stage_derives_joined():
    """``derives`` is left out when it is what the stages derived, in stage order, each once;
    stored otherwise (a foreign derivation's order, a record derived twice); a state written by
    an earlier build, with every field, reads the same (decisions.md, "Fewer bytes written per
    event")."""
    from cortexdb.engine.model.converter import (
        event_state_from_wire,
        event_state_wire,
        state_derives,
    )

    stages = {"extracted": ["fact_1", "fact_2"], "consolidated": ["belief_1"], "episode": ["ep_1", "fact_1"]}
    joined = EventState(scope=ALICE, derives=["fact_1", "fact_2", "belief_1", "ep_1"], stage_derives=stages)
    wire = event_state_wire(joined)
    assert "derives" not in wire and state_derives(wire) == joined.derives
    assert event_state_from_wire(wire) == joined
    for derives in (["fact_2", "fact_1", "belief_1", "ep_1"], ["fact_1"], [], ["fact_1", "fact_2", "belief_1", "ep_1", "x"]):
        other = EventState(scope=ALICE, derives=derives, stage_derives=stages)
        assert event_state_wire(other)["derives"] == derives
        assert event_state_from_wire(event_state_wire(other)) == other
    old = {"scope": ALICE, "done": ["captured", "extracted"], "lce": ["lce_1", "lce_2"], "derives": ["fact_1"],
           "errors": [], "cancelled": False, "batch_id": None, "stage_derives": {"extracted": ["fact_1"]}}  # fmt: skip
    assert event_state_from_wire(old) == EventState(scope=ALICE, done=["captured", "extracted"], lce=["lce_1", "lce_2"],
                                                    derives=["fact_1"], stage_derives={"extracted": ["fact_1"]})  # fmt: skip
    assert state_derives(old) == ["fact_1"] and state_derives({"scope": ALICE}) == []
