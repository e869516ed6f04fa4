"""An erasure that takes a scope whole drops its derived layers at once (``ops.drop_scope``,
``actors/stages/forget_drop.py``) instead of deleting and revising record by record; on both
backends: what stays says ``redacted:<id>``, nothing is suppressed, lookups answer 410, an event
captured after the plan is derived again, and the counts survive a crash in the drop."""

from __future__ import annotations

import pytest
import trio

import cortexdb
from cortexdb import EngineConfig
from cortexdb.backends import open_store
from cortexdb.engine.forget import ops
from cortexdb.errors import ResourceDeleted

from .conftest import envelope
from .test_erasure import ALICE, TEAM, finished

STATEMENTS = ["I live in Paris.", "I like green tea.", "I work at Acme.", "I live in Lyon.", "I own a red bike."]


async def fill(engine) -> list[str]:
    ids = [(await engine.experience(envelope(text, observed_at=f"2026-05-13T15:3{i}:00Z"), wait="consolidated")).event_id
           for i, text in enumerate(STATEMENTS)]  # fmt: skip
    await engine.flush(ALICE)
    return ids


async def suppressions(engine, scope: str) -> int:
    return await engine.tables.partition(scope).suppressions.count()


async def test_a_scope_erased_whole_leaves_no_records_no_suppressions_and_answers_410(engine):
    await fill(engine)
    facts = engine.tables.partition(ALICE).facts
    first = [fact_id async for fact_id in facts.ids()][0]
    await engine.forget({"scope": ALICE, "layers": ["facts"], "selector": {"memory_ids": [first]}})
    assert await suppressions(engine, ALICE) > 0  # a forget suppresses what it deleted
    before = await engine.layer_counts(ALICE)
    left = [fact_id async for fact_id in facts.ids()]
    assert left and before["beliefs"] and before["episodes"]

    status = await finished(engine, (await engine.erasures.execute({"scope": ALICE}))["erasure_id"])
    assert status["status"] == "completed", status
    progress = status["progress"]
    assert (progress["deleted_facts"], progress["deleted_beliefs"], progress["deleted_episodes"]) == (
        before["facts"], before["beliefs"], before["episodes"])
    assert progress["deleted_events"] == len(STATEMENTS)
    assert set((await engine.layer_counts(ALICE)).values()) == {0}
    assert await suppressions(engine, ALICE) == 0  # the erased events' own rows went with them
    for fact_id in [first, *left]:
        with pytest.raises(ResourceDeleted) as gone:
            await engine.get_fact(ALICE, fact_id)
        assert gone.value.http_status == 410


async def test_events_of_other_scopes_consolidated_into_the_erased_scope_say_redacted(engine):
    await fill(engine)
    bob = envelope("I live in Berlin.", scope=TEAM, directives={"consolidate_into": ALICE})
    bobs = (await engine.experience(bob, caller="user:bob", wait="consolidated")).event_id
    await engine.flush(ALICE)
    await engine.flush(TEAM)  # the target hands what it derived back to bob's event in TEAM
    before = (await engine.get_event(TEAM, bobs))["derives"]
    into_alice = {f["id"] for f in (await engine.facts(ALICE, include_superseded=True))["items"]} & set(before)
    assert into_alice  # bob's note made a fact in alice's scope

    erasure = await engine.erasures.execute({"scope": ALICE, "cross_workspace": False})
    status = await finished(engine, erasure["erasure_id"])
    assert status["status"] == "completed", status
    after = (await engine.get_event(TEAM, bobs))
    assert after["content"]["text"] == "I live in Berlin."  # bob's event is not alice's to erase
    assert {f"redacted:{i}" for i in into_alice} <= set(after["derives"])
    assert not into_alice & set(after["derives"])


async def test_an_event_captured_after_the_plan_is_derived_again(engine):
    erased = await fill(engine)
    late: list[str] = []

    async def capture_late(job_id: str, phase: str, where: str) -> None:
        if phase == "delete" and where == "start" and not late:
            late.append((await engine.experience(envelope("I live in Rome.", observed_at="2026-05-13T15:41:00Z"),
                                                 wait="consolidated")).event_id)  # fmt: skip

    engine.erasures.jobs.hook = capture_late
    status = await finished(engine, (await engine.erasures.execute({"scope": ALICE}))["erasure_id"])
    engine.erasures.jobs.hook = None
    assert status["status"] == "completed" and status["progress"]["deleted_events"] == len(erased)
    await engine.flush(ALICE)
    assert [e["id"] for e in (await engine.events(ALICE))["items"]] == late  # not part of the erasure
    facts = (await engine.facts(ALICE, include_superseded=True))["items"]
    assert facts and all(f["supports"] == late for f in facts)  # derived again, from itself alone
    assert {f["id"] for f in facts} <= set((await engine.get_event(ALICE, late[0]))["derives"])
    assert (await engine.recall({"scope": ALICE, "query": "Rome"}))["layers"]["events"][0]["id"] == late[0]


async def test_the_counts_of_a_drop_survive_a_crash_in_it(backend, tmp_path, clock, monkeypatch, pg_dsn):
    config = EngineConfig(default_caller="user:alice", episode_idle_check=3600.0)
    store = await open_store("memory") if backend == "memory" else None

    def opened(seed: int):
        if store is not None:
            return cortexdb.open_engine(store=store, clock=clock, id_seed=seed, config=config)
        return cortexdb.open_engine(backend, path=pg_dsn or str(tmp_path / "data"), clock=clock, id_seed=seed, config=config)

    real_drop = ops.drop_scope
    dropped = trio.Event()

    async def drop_then_die(*args, **kwargs):
        await real_drop(*args, **kwargs)  # every record is gone: a rerun's survey finds nothing
        dropped.set()
        await trio.sleep_forever()  # the engine closes around it: the job is cancelled here

    async with opened(1) as engine:
        await fill(engine)
        expected = await engine.layer_counts(ALICE)
        monkeypatch.setattr(ops, "drop_scope", drop_then_die)
        erasure_id = (await engine.erasures.execute({"scope": ALICE}))["erasure_id"]
        await dropped.wait()
    monkeypatch.setattr(ops, "drop_scope", real_drop)
    async with opened(2) as engine:
        status = await finished(engine, erasure_id)
        assert status["status"] == "completed" and [i["phase"] for i in status["interruptions"]] == ["delete"]
        progress = status["progress"]
        assert (progress["deleted_facts"], progress["deleted_beliefs"], progress["deleted_episodes"]) == (
            expected["facts"], expected["beliefs"], expected["episodes"])
        assert set((await engine.layer_counts(ALICE)).values()) == {0}
    if store is not None:
        await store.close()


async def test_compaction_ranges_separated_by_little_live_data_are_compacted_together():
    from cortexdb.backends.memory import MemoryStore
    from cortexdb.engine.spi.kv import Put
    from cortexdb.engine.storage import NodeTables
    from cortexdb.engine.storage.node import COALESCE_GAP_BYTES

    class Recording(MemoryStore):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[tuple[bytes | None, bytes | None]] = []

        async def compact(self, start=None, stop=None):
            self.calls.append((start, stop))
            return True

    store = Recording()
    await store.write([Put(b"b5", b"x" * 100), Put(b"g1", b"x" * COALESCE_GAP_BYTES)])
    tables = NodeTables(store)
    # a..b, c..d (one small row between) and e..f (nothing between) go together; i..k comes
    # after a large row, and overlaps j..l
    assert await tables.compact((b"e", b"f"), (b"a", b"b"), (b"c", b"d"), (b"i", b"k"), (b"j", b"l"))
    assert store.calls == [(b"a", b"f"), (b"i", b"l")]
    store.calls.clear()
    assert await tables.compact()  # the whole store: the backend's own default range
    assert store.calls == [(None, None)]
