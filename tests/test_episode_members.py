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


def _episode(count: int):
    import datetime as dt

    from cortexdb.engine.model import CausalLink, Episode

    at = dt.datetime(2026, 5, 13, 15, 40, tzinfo=dt.UTC)
    ids = [f"evt_{i}" for i in range(count)]
    return Episode(id="ep_1", scope=ALICE, name="n", summary="s", events=list(ids), supports=list(ids),
                   started_at=at, ended_at=at, valid_from=at, recorded_from=at,
                   causal_chain=[CausalLink(event=i, role="context") for i in ids])  # fmt: skip


async def test_every_reading_of_the_table_gives_the_open_episode_whole():
    from cortexdb.engine.model import CausalLink, to_wire
    from cortexdb.engine.storage.episodes import EpisodeTable

    store = MemoryStore()
    table = EpisodeTable(store, ALICE)
    episode = _episode(3)
    await store.write(await table.open_ops(episode))
    episode.events.append("evt_3")
    episode.supports.append("evt_3")
    episode.causal_chain.append(CausalLink(event="evt_3", role="decision"))
    ops = await table.open_ops(episode)
    assert len(ops) == 2  # the header and the one new member
    await store.write(ops)
    wire = to_wire(episode)
    assert await table.get("ep_1") == episode and await table.get_many(["ep_1", "ep_2"]) == {"ep_1": episode}
    assert [e async for e in table.scan()] == [("ep_1", episode)]
    assert [e async for e in table.items()] == [(("ep_1",), episode)]
    assert (await table.page(None, limit=5))["items"] == [episode]

    async def expand(name, value):
        return [value]

    assert (await table.page_many(None, limit=5, expand=expand))["items"] == [episode]
    assert await table.json.get("ep_1") == wire and [w async for _, w in table.json.scan()] == [wire]
    assert await table.json.get_many(["ep_1"]) == {"ep_1": wire}
    whole = await table.whole_ops(episode)  # four member rows deleted and the row put
    assert len(whole) == 5 and await table.held("ep_1") == 4
    await store.write(whole)
    assert await table.get("ep_1") == episode and await table.held("ep_1") == 0
    assert [k async for k, _ in store.scan(prefix=EK)] == []


async def test_a_read_that_meets_a_commit_between_header_and_rows_reads_again():
    """The header is read, then the episode is sealed (written whole, its rows deleted) before
    its rows are: the read sees the header changed and gives the whole row."""
    from cortexdb.engine.storage.episodes import EpisodeTable
    from cortexdb.engine.storage.table import JSON, Table

    store = MemoryStore()
    table = EpisodeTable(store, ALICE)
    episode = _episode(4)
    await store.write(await table.open_ops(episode))
    header = await Table(store, table.prefix, JSON).get("ep_1")  # the header as stored
    assert header["open_members"] == 4 and header["events"] == []
    episode.status = "compressed"
    await store.write(await table.whole_ops(episode))  # the commit that came between
    filled = await table.json.fill("ep_1", header)
    assert filled["status"] == "compressed" and filled["events"] == episode.events
