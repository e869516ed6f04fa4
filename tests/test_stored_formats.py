"""The stored forms that write fewer bytes per event (decisions.md, "Fewer bytes written per
event"): a lifecycle row without what it repeats, an event state without its defaults.  What the
engine serves from them is the same as from the rows an earlier build wrote, which still read:
an old data dir opens and answers the same."""

from __future__ import annotations

import datetime as dt

import cortexdb
from cortexdb import EngineConfig
from cortexdb.backends.memory import MemoryStore
from cortexdb.engine import jsoncodec
from cortexdb.engine.model import LifecycleEvent
from cortexdb.engine.model.converter import event_state_wire, lifecycle_wire
from cortexdb.engine.spi.kv import Put
from cortexdb.engine.storage.lifecycle_rows import LifecycleRows

from .conftest import envelope

SCOPE = "org:acme/user:alice"
TS = dt.datetime(2026, 5, 13, 15, 40, tzinfo=dt.UTC)


def _record(**fields) -> LifecycleEvent:
    base = {"lifecycle_id": "lce_1", "stage": "extracted", "ts": TS, "scope": SCOPE, "event_id": "evt_1", "seq": 1}
    return LifecycleEvent(**{**base, **fields})


def test_a_lifecycle_row_leaves_out_what_it_repeats_and_reads_back_the_same():
    rows = LifecycleRows()
    record = _record(payload={"event_id": "evt_1", "derived": {"facts": 1}, "intake": []})
    raw = rows.encode(record)
    assert b"job_id" not in raw and b"batch_id" not in raw and raw.count(b"evt_1") == 1
    assert jsoncodec.decode(raw)["p"] == {"derived": {"facts": 1}, "intake": []}
    assert rows.decode(raw) == record
    assert list(rows.decode(raw).payload) == ["event_id", "derived", "intake"]  # the order served
    kept = [
        _record(batch_id="batch_1", job_id="job_1", payload={"event_id": "evt_1"}),
        _record(payload={"derived": {}, "event_id": "evt_1"}),  # not leading: stored as it is
        _record(payload={"event_id": "evt_2"}),  # another event's id
        _record(event_id=None, seq=None, stage="job.completed", job_id="job_1", payload={"job_id": "job_1"}),
        _record(payload={}),
    ]
    for record in kept:
        assert rows.decode(rows.encode(record)) == record
        assert list(rows.decode(rows.encode(record)).payload) == list(record.payload)
    assert b'"batch_id":"batch_1","job_id":"job_1"' in rows.encode(kept[0])
    assert b'"payload":{"derived":{},"event_id":"evt_1"}' in rows.encode(kept[1])
    old = jsoncodec.encode(lifecycle_wire(record := _record(payload={"event_id": "evt_1", "x": 1})))
    assert b'"job_id":null' in old and rows.decode(old) == record  # a row an earlier build wrote


async def test_an_old_data_dirs_lifecycle_rows_and_event_states_answer_the_same(clock):
    """The rows a write left, rewritten as an earlier build stored them (every field, the
    payload's event id, the states' defaults): the engine reopened on them serves the same
    lifecycle records and event state, and derives on."""
    store = MemoryStore()
    config = EngineConfig(default_caller="user:alice", episode_idle_check=3600.0)

    def opened():
        return cortexdb.open_engine("memory", store=store, clock=clock, id_seed=3, config=config)

    async with opened() as engine:
        first = await engine.experience(envelope("Grace works at Globex on the data team."), wait="consolidated")
        await engine.flush(SCOPE)
        state = await engine.memory_event(first.event_id)
        records = [await engine.lifecycle_event(i) for i in state["lifecycle_event_ids"]]
        history = await engine.lifecycle(limit=100)
    assert len(records) >= 4 and records[1]["payload"]["event_id"] == first.event_id
    rows = LifecycleRows()
    old: list = []
    async for key, raw in store.scan(prefix=b"L\x00"):
        assert b'"p":' in raw or b'"payload":' in raw
        old.append(Put(key, jsoncodec.encode(lifecycle_wire(rows.decode(raw)))))
    states = NodeStates()
    async for key, raw in store.scan(prefix=b"X\x00"):
        wire = event_state_wire(states.codec.decode(raw))
        full = {"scope": wire["scope"], "done": wire["done"], "lce": wire["lce"],
                "derives": states.codec.decode(raw).derives, "errors": wire.get("errors", []),
                "cancelled": wire.get("cancelled", False), "batch_id": wire.get("batch_id"),
                **{k: v for k, v in wire.items() if k not in {"scope", "done", "lce", "derives", "errors",
                                                              "cancelled", "batch_id"}}}  # fmt: skip
        assert len(jsoncodec.encode(full)) > len(raw)  # the earlier form is longer
        old.append(Put(key, jsoncodec.encode(full)))
    await store.write(old)
    async with opened() as engine:
        assert await engine.memory_event(first.event_id) == state
        assert [await engine.lifecycle_event(i) for i in state["lifecycle_event_ids"]] == records
        assert await engine.lifecycle(limit=100) == history
        second = await engine.experience(envelope("Grace now works at Initech."), wait="consolidated")
        assert (await engine.memory_event(second.event_id))["stages_pending"] == state["stages_pending"]


class NodeStates:
    """The event states' codec (``NodeTables.event_states``)."""

    def __init__(self) -> None:
        from cortexdb.engine.model import EventState
        from cortexdb.engine.storage.table import Records

        self.codec = Records(EventState)


async def test_an_old_data_dirs_open_episode_stored_whole_reads_the_same_and_grows_as_rows(clock):
    """An open episode as an earlier build stored it (one row holding every member: no header,
    no ``EK`` rows): the engine reopened on it lists, finds and recalls the same episode, and
    the next event stores it as a header and a row per member (storage/episodes.py)."""
    from cortexdb.engine.model import Episode
    from cortexdb.engine.spi.kv import Delete
    from cortexdb.engine.storage.table import Records

    store = MemoryStore()
    config = EngineConfig(default_caller="user:alice", episode_idle_check=3600.0)
    ep, ek = b"EP\x00" + SCOPE.encode() + b"\x00", b"EK\x00" + SCOPE.encode() + b"\x00"

    def opened():
        return cortexdb.open_engine("memory", store=store, clock=clock, id_seed=3, config=config)

    async def answers(engine, episode_id):
        return (await engine.episodes(SCOPE), await engine.episodes(SCOPE, include_superseded=True),
                await engine.get_episode(SCOPE, episode_id),
                _pack(await engine.recall({"scope": SCOPE, "query": "Grace Globex", "include": ["episodes"]})))  # fmt: skip

    texts = ["Grace works at Globex.", "Grace likes tea.", "Grace moved to Oslo.", "Grace has a cat."]
    async with opened() as engine:
        ids = [(await engine.experience(envelope(t, observed_at=f"2026-05-13T15:4{i}:00Z"), wait="consolidated")).event_id
               for i, t in enumerate(texts)]  # fmt: skip
        (episode,) = (await engine.episodes(SCOPE))["items"]
        before = await answers(engine, episode["id"])
    members = [key async for key, _ in store.scan(prefix=ek)]
    assert len(members) == len(ids)
    (header,) = [raw async for _, raw in store.scan(prefix=ep)]
    assert b'"open_members":4' in header
    wire = jsoncodec.decode(header)
    del wire["open_members"]
    wire["events"], wire["supports"] = ids, list(ids)
    wire["causal_chain"] = [{"event": i, "role": link["role"]} for i, link in zip(ids, episode["causal_chain"], strict=True)]
    codec = Records(Episode)
    whole = codec.encode(codec.decode(jsoncodec.encode(wire)))  # the row as the earlier build wrote it
    await store.write([Put(ep + episode["id"].encode(), whole), *(Delete(key) for key in members)])
    async with opened() as engine:
        assert await answers(engine, episode["id"]) == before
        more = await engine.experience(envelope("Grace bought a bike.", observed_at="2026-05-13T15:45:00Z"),
                                       wait="consolidated")  # fmt: skip
        (grown,) = (await engine.episodes(SCOPE))["items"]
        assert grown["events"] == [*ids, more.event_id] and grown["id"] == episode["id"]
        assert grown["causal_chain"][:4] == episode["causal_chain"]
    rows = [jsoncodec.decode(raw)[0] async for _, raw in store.scan(prefix=ek)]
    assert rows == [*ids, more.event_id]  # every member a row now, the old ones included


def _pack(answer: dict) -> dict:
    """A recall's answer less what each call draws anew (its ids) and its timings."""
    return {"layers": answer["layers"], "context_block": answer["context_block"]}
