"""An open episode is stored as a header row (``EP``, its lists empty, ``open_members``) and a
row per member (``EK``), each written once, when its event joins (storage/episodes.py): a write
costs what the event adds, not what the episode holds.  Every reader sees the episode whole;
sealing, a forget and a crash keep the rule that member rows exist exactly under a header that
counts them."""

from __future__ import annotations

import pytest

import cortexdb
from cortexdb import EngineConfig, Internal
from cortexdb.backends.memory import MemoryStore
from cortexdb.engine import jsoncodec
from cortexdb.engine.spi.kv import Put

from .conftest import envelope

ALICE = "org:acme/user:alice"
CONFIG = EngineConfig(default_caller="user:alice", episode_idle_check=3600.0)
EP, EK = b"EP\x00" + ALICE.encode() + b"\x00", b"EK\x00" + ALICE.encode() + b"\x00"


class CountingStore(MemoryStore):
    """Records the bytes each write puts into the episode tables, and fails the first write
    holding a member row when ``fail_members`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[dict[bytes, int]] = []
        self.fail_members = False

    async def write(self, ops, *, sync=False):
        sizes = {op.key: len(op.value) for op in ops if isinstance(op, Put) and op.key[:3] in (b"EP\x00", b"EK\x00")}
        if self.fail_members and any(key.startswith(EK) for key in sizes):
            self.fail_members = False
            raise RuntimeError("the store failed the write")
        if sizes:
            self.writes.append(sizes)
        return await super().write(ops, sync=sync)

    async def rows(self, prefix: bytes) -> dict[bytes, bytes]:
        return {key: raw async for key, raw in self.scan(prefix=prefix)}


def opened(store, clock):
    return cortexdb.open_engine("memory", store=store, clock=clock, id_seed=5, config=CONFIG)


def at(i: int) -> str:
    return f"2026-05-13T15:{i // 60:02d}:{i % 60:02d}Z"


async def write(engine, count: int, start: int = 0) -> list[str]:
    return [(await engine.experience(envelope(f"Grace mentioned item number {i} of the list.", observed_at=at(i)),
                                     wait="consolidated")).event_id for i in range(start, start + count)]  # fmt: skip


async def test_a_joining_event_writes_its_member_row_and_a_header_of_constant_size(clock):
    store = CountingStore()
    async with opened(store, clock) as engine:
        ids = await write(engine, 30)
        episodes = (await engine.episodes(ALICE))["items"]
    assert len(episodes) == 1 and episodes[0]["status"] == "open"
    assert episodes[0]["events"] == episodes[0]["supports"] == ids
    assert [link["event"] for link in episodes[0]["causal_chain"]] == ids
    header_sizes = []
    for sizes in store.writes[-20:]:  # one event a commit: its member row and the header
        members = [key for key in sizes if key.startswith(EK)]
        headers = [size for key, size in sizes.items() if key.startswith(EP)]
        assert len(members) == 1 and len(headers) == 1
        header_sizes.append(headers[0])
    assert max(header_sizes) - min(header_sizes) < 16  # the count's digits; not the members
    rows = await store.rows(EK)
    assert len(rows) == 30 and [jsoncodec.decode(raw)[0] for raw in rows.values()] == ids
    header = jsoncodec.decode(next(iter((await store.rows(EP)).values())))
    assert header["open_members"] == 30 and header["events"] == header["causal_chain"] == []


async def test_sealing_writes_the_episode_whole_and_leaves_no_member_rows(clock):
    store = CountingStore()
    async with opened(store, clock) as engine:
        ids = await write(engine, 12)
        await engine.flush(ALICE, seal=True)
        episodes = (await engine.episodes(ALICE))["items"]
    assert [e["status"] for e in episodes] == ["compressed"] and episodes[0]["events"] == ids
    assert episodes[0]["causal_chain"][-1]["role"] == "outcome"
    assert await store.rows(EK) == {}
    (raw,) = (await store.rows(EP)).values()
    assert b"open_members" not in raw and jsoncodec.decode(raw)["events"] == ids


async def test_a_cancel_and_a_forget_rewrite_the_open_episode_whole_then_appends_resume(clock):
    store = CountingStore()
    async with opened(store, clock) as engine:
        ids = await write(engine, 8)
        await engine.cancel(ids[3])  # the event leaves its episode: not an append
        (episode,) = (await engine.episodes(ALICE))["items"]
        assert episode["events"] == ids[:3] + ids[4:] and episode["status"] == "open"
        assert await store.rows(EK) == {}  # the row whole again: no row names the cancelled event
        later = await write(engine, 3, start=8)  # appends again: every member a row
        (episode,) = (await engine.episodes(ALICE))["items"]
        assert episode["events"] == ids[:3] + ids[4:] + later
        assert [jsoncodec.decode(raw)[0] for raw in (await store.rows(EK)).values()] == episode["events"]
        await engine.forget({"scope": ALICE, "layers": ["episodes"], "selector": {"memory_ids": [episode["id"]]}})
        assert (await engine.episodes(ALICE))["items"] == []
        assert await store.rows(EK) == {} and await store.rows(EP) == {}
        again = await write(engine, 2, start=11)  # a new episode opens, as a header and rows
        (episode,) = (await engine.episodes(ALICE))["items"]
        assert episode["events"] == again and len(await store.rows(EK)) == 2


async def test_a_failed_write_of_a_member_loses_and_duplicates_nothing(clock):
    """The episode step's write fails (the store refuses it): neither the member row nor the
    header is stored; the restarted lane joins the event once."""
    store = CountingStore()
    async with opened(store, clock) as engine:
        ids = await write(engine, 3)
        store.fail_members = True
        result = await engine.experience(envelope("Grace adds one more item.", observed_at=at(3)), wait="captured")
        with pytest.raises(Internal):
            await engine.flush(ALICE)
        await engine.flush(ALICE)
        assert engine.statistics().scopes[ALICE].restarts == 1
        (episode,) = (await engine.episodes(ALICE))["items"]
        assert episode["events"] == [*ids, result.event_id]
        assert [link["event"] for link in episode["causal_chain"]] == episode["events"]
    rows = await store.rows(EK)
    assert [jsoncodec.decode(raw)[0] for raw in rows.values()] == [*ids, result.event_id]
