"""The lane writes each group of stages once (``stages.LANE_GROUPS``): extract and index in one
atomic write, consolidate and the episode step in another; an event's state row is written at
capture and once per group, its lifecycle records are those of every stage, and a failure
inside a group leaves none of its steps recorded, so the restarted lane derives them once."""

import pytest

import cortexdb
from cortexdb import EngineConfig, Internal
from cortexdb.backends.memory import MemoryStore
from cortexdb.engine.actors import lane as lane_module
from cortexdb.engine.spi.kv import Put
from cortexdb.engine.stages import LANE_GROUPS, LANE_STEPS

from .conftest import envelope

ALICE = "org:acme/user:alice"
CONFIG = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice")


class CountingStore(MemoryStore):
    """Counts the puts of each event's state row (table ``X``)."""

    def __init__(self) -> None:
        super().__init__()
        self.state_puts: dict[bytes, int] = {}

    async def write(self, ops, *, sync=False):
        for op in ops:
            if isinstance(op, Put) and op.key.startswith(b"X\x00"):
                self.state_puts[op.key] = self.state_puts.get(op.key, 0) + 1
        return await super().write(ops, sync=sync)


def test_the_groups_are_the_lane_steps_in_order():
    assert tuple(step for group in LANE_GROUPS for step in group) == LANE_STEPS


async def test_an_events_state_is_written_at_capture_and_once_per_group(clock):
    store = CountingStore()
    texts = ["I live in Oslo.", "I like tea.", "I have 2 cats.", "I live in Bergen."]
    async with cortexdb.open_engine(store=store, clock=clock, id_seed=7, config=CONFIG) as engine:
        await engine.experience_bulk({"scope": ALICE, "items": [
            {k: v for k, v in envelope(text, observed_at=f"2026-05-13T15:42:0{i}Z").items() if k != "scope"}
            for i, text in enumerate(texts)]})  # fmt: skip
        await engine.flush(ALICE)
        ids = [event["id"] for event in (await engine.events(ALICE, limit=100))["items"]]
        assert len(ids) == len(texts)
        for event_id in ids:
            stages = [r["stage"] for r in await engine.lifecycle(event_id=event_id)]
            assert stages == ["captured", "extracted", "indexed", "consolidated"]
            view = await engine.memory_event(event_id)
            assert view["stages_completed"][:4] == ["captured", "extracted", "indexed", "consolidated"]
        facts = (await engine.facts(ALICE))["items"]
        assert [f["object"].get("name") for f in facts if f["predicate"] == "lives_in"] == ["Bergen"]
    assert len(store.state_puts) == len(texts)
    assert set(store.state_puts.values()) == {1 + len(LANE_GROUPS)}


async def test_a_failure_inside_a_group_records_none_of_its_steps(monkeypatch, clock):
    """The index step fails once, after extraction ran: the lane's actor crashes with neither
    step written; restarted, it extracts again from the stored state and makes one fact."""
    extract, index, *rest = lane_module.RUNNERS
    calls = []

    async def counted_extract(*args):
        calls.append("extract")
        await extract(*args)

    async def failing_index(*args):
        calls.append("index")
        if calls.count("index") == 1:
            raise RuntimeError("index step failed")
        await index(*args)

    monkeypatch.setattr(lane_module, "RUNNERS", (counted_extract, failing_index, *rest))
    store = MemoryStore()
    async with cortexdb.open_engine(store=store, clock=clock, id_seed=7, config=CONFIG) as engine:
        result = await engine.experience(envelope("I live in Oslo."), wait="captured")
        with pytest.raises(Internal):  # the flush meets the crash (retriable)
            await engine.flush(ALICE)
        await engine.flush(ALICE)  # the restarted actor resumes the event's unfinished stages
        # extraction runs again: its step was held, not written, when the group failed (with
        # a commit a step, the restarted lane would resume at the index step: one extract)
        assert calls == ["extract", "index", "extract", "index"]
        assert engine.statistics().scopes[ALICE].restarts == 1
        stages = [r["stage"] for r in await engine.lifecycle(event_id=result.event_id)]
        assert stages == ["captured", "extracted", "indexed", "consolidated"]
        facts = (await engine.facts(ALICE, include_superseded=True))["items"]
        assert [(f["predicate"], f["object"]["name"]) for f in facts] == [("lives_in", "Oslo")]
        assert facts[0]["supports"] == [result.event_id]  # derived once: not reinforced by a replay
