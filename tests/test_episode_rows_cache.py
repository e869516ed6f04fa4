"""An open episode's member rows kept decoded between reads (storage/episode_rows.py): a read
with the rows kept gives exactly what a read without them gives, through appends, seals,
cancels, forgets (whole and torn between chunks), deletions, rebuilds that reuse an episode's
id, an older build's header without a generation, and commits landing in the middle of a read;
and a recall reads only the member rows added since the last one."""

from __future__ import annotations

import datetime as dt
import random

import pytest

import cortexdb
from cortexdb import EngineConfig, ManualClock
from cortexdb.backends.memory import MemoryStore
from cortexdb.engine import jsoncodec
from cortexdb.engine.model import CausalLink, Episode
from cortexdb.engine.spi.kv import Delete, Put
from cortexdb.engine.storage.episodes import GENERATION, EpisodeTable
from cortexdb.engine.storage.table import JSON, Table

from .conftest import envelope

ALICE = "org:acme/user:alice"
EP, EK = b"EP\x00" + ALICE.encode() + b"\x00", b"EK\x00" + ALICE.encode() + b"\x00"
ROLES = ("trigger", "decision", "context", "outcome")
AT = dt.datetime(2026, 5, 13, 15, 40, tzinfo=dt.UTC)


class Interrupting(MemoryStore):
    """Runs ``between`` (a commit) the next time a member row is read, then reads on."""

    def __init__(self) -> None:
        super().__init__()
        self.between = None

    async def _interrupt(self, key: bytes) -> None:
        if self.between is not None and key.startswith(EK):
            commit, self.between = self.between, None
            await commit()

    async def get(self, key):
        await self._interrupt(key)
        return await super().get(key)

    def scan(self, *args, **kw):
        inner_args, inner_kw = args, kw

        async def reading():
            await self._interrupt(inner_kw.get("start") or inner_kw.get("prefix") or b"")
            async for item in MemoryStore.scan(self, *inner_args, **inner_kw):
                yield item

        return reading()


class World:
    """The episodes as they should be, the store, and two tables over it: one keeping rows."""

    def __init__(self, rng: random.Random, store: MemoryStore) -> None:
        self.rng, self.store = rng, store
        self.cached, self.plain = EpisodeTable(store, ALICE), EpisodeTable(store, ALICE)
        self.cached.keep_rows(rng.choice((40, 1000)))  # a small bound evicts, a large one keeps
        self.episodes: dict[str, Episode] = {}
        self.events = 0

    def new(self, episode_id: str) -> Episode:
        episode = Episode(id=episode_id, scope=ALICE, name=f"n{episode_id}", summary="s", events=[], supports=[],
                          started_at=AT, ended_at=AT, valid_from=AT, recorded_from=AT, causal_chain=[])  # fmt: skip
        self.episodes[episode_id] = episode
        return episode

    def grow(self, episode: Episode) -> None:
        for _ in range(self.rng.randint(1, 6)):
            event = f"evt_{self.events:05d}"
            self.events += 1
            episode.events.append(event)
            episode.supports.append(event)
            episode.causal_chain.append(CausalLink(event=event, role=self.rng.choice(ROLES)))

    def remove(self, episode: Episode, count: int) -> None:
        for _ in range(min(count, len(episode.events) - 1)):
            i = self.rng.randrange(len(episode.events))
            del episode.events[i], episode.supports[i], episode.causal_chain[i]

    async def step(self) -> list[list]:
        """One random change; returns its writes (a list of atomic writes, in order)."""
        rng, table = self.rng, self.plain
        opened = [e for e in self.episodes.values() if e.status == "open"]
        kind = rng.choice(("append", "append", "append", "append", "seal", "cancel", "forget", "delete", "rebuild"))
        if kind == "append" or not opened and kind in ("seal", "cancel", "forget"):
            free = [f"ep_{i}" for i in range(4) if f"ep_{i}" not in self.episodes]  # ids a deletion freed
            if opened and (rng.random() < 0.8 or not free):
                episode = rng.choice(opened)
            elif free:
                episode = self.new(rng.choice(free))
            else:
                return []
            self.grow(episode)
            return [await table.open_ops(episode)]
        episode = rng.choice(opened) if kind in ("seal", "cancel", "forget") else None
        if kind == "seal":
            episode.status = "compressed"
            return [await table.whole_ops(episode)]
        if kind in ("cancel", "forget"):  # not an append: written whole, rows deleted
            self.remove(episode, 1 if kind == "cancel" else rng.randint(1, 4))
            ops = await table.whole_ops(episode)
            if kind == "cancel":
                return [ops]
            size = rng.randint(1, 4)  # a forget writes in chunks: reads meet every torn state
            return [ops[i:i + size] for i in range(0, len(ops), size)]
        if kind == "delete" and self.episodes:  # a forget of the episode, resegmentation's retiring
            episode_id = rng.choice(sorted(self.episodes))
            del self.episodes[episode_id]
            return [await table.delete_ops(episode_id)]
        # a rebuild (or a scope's drop): both tables emptied; ids come back with other members
        self.episodes.clear()
        return [[Delete(key) async for key, _ in self.store.scan(prefix=prefix)] for prefix in (EK, EP)]

    async def same(self) -> None:
        names = sorted(self.episodes) + ["ep_9"]
        for name in names:
            assert await self.cached.get(name) == await self.plain.get(name)
        assert await self.cached.get_many(names) == await self.plain.get_many(names)
        assert [x async for x in self.cached.scan()] == [x async for x in self.plain.scan()]
        assert await self.cached.json.get_many(names) == await self.plain.json.get_many(names)

    async def matches_the_model(self) -> None:
        stored = {name: episode async for name, episode in self.plain.scan()}
        assert stored == self.episodes


@pytest.mark.parametrize("seed", range(12))
async def test_reads_with_rows_kept_equal_reads_without_through_random_changes(seed):
    rng = random.Random(seed)
    world = World(rng, MemoryStore())
    for _ in range(160):
        for write in await world.step():
            await world.store.write(write)
            await world.same()  # every torn state of a chunked forget too
        await world.matches_the_model()
        if rng.random() < 0.3:
            await world.same()  # again: now from the rows kept
    rows = world.cached.rows_cache
    assert rows.hits > 0 and rows.rows <= rows.most


@pytest.mark.parametrize("seed", range(8))
async def test_a_read_meeting_a_commit_gives_what_a_read_after_it_gives(seed):
    """The header is read, then a random change commits before the member rows are read (a
    recall reading while the lane commits): the read gives the episode as a read after the
    commit gives it, with rows kept or not."""
    rng = random.Random(100 + seed)
    store = Interrupting()
    world = World(rng, store)
    headers = Table(store, world.cached.prefix, JSON)
    for _ in range(120):
        names = sorted(world.episodes)
        name = rng.choice(names) if names else "ep_0"
        header = await headers.get(name)
        writes = await world.step()

        async def commit(writes=writes):
            for write in writes:
                await store.write(write)

        if header is None:
            await commit()
            continue
        before = await world.plain.json.get(name)
        store.between = commit
        filled = await world.cached.json.fill(name, dict(header))
        if store.between is not None:  # the read met no member row (a row stored whole): before it
            store.between = None
            assert filled == before
            await commit()
        else:
            assert filled == await world.plain.json.get(name)
        await world.same()
    assert world.cached.rows_cache.hits > 0


async def test_an_older_builds_header_without_a_generation_reads_whole_then_gets_one():
    store = MemoryStore()
    world = World(random.Random(7), store)
    episode = world.new("ep_1")
    world.grow(episode)
    await store.write(await world.plain.open_ops(episode))
    (key, raw), = [item async for item in store.scan(prefix=EP)]
    wire = jsoncodec.decode(raw)
    assert GENERATION in wire
    del wire[GENERATION]  # the header as main 8b66046 wrote it
    await store.write([Put(key, jsoncodec.encode(wire))])
    for _ in range(2):
        assert await world.cached.get("ep_1") == episode
    assert world.cached.rows_cache.hits == 0 and len(world.cached.rows_cache) == 0  # nothing kept without one
    world.grow(episode)
    await store.write(await world.plain.open_ops(episode))  # an append gives the header a generation
    assert GENERATION in jsoncodec.decode(await store.get(key))
    for _ in range(2):
        assert await world.cached.get("ep_1") == episode
    assert world.cached.rows_cache.hits == 1


async def test_an_append_keeps_the_generation_and_a_rewrite_draws_a_new_one():
    store = MemoryStore()
    world = World(random.Random(8), store)
    episode = world.new("ep_1")

    async def generation():
        return jsoncodec.decode(await store.get(world.plain.key("ep_1")))[GENERATION]

    world.grow(episode)
    await store.write(await world.plain.open_ops(episode))
    first = await generation()
    world.grow(episode)
    await store.write(await world.plain.open_ops(episode))
    assert await generation() == first
    world.remove(episode, 1)
    await store.write(await world.plain.whole_ops(episode))  # a cancel: the row whole
    world.grow(episode)
    await store.write(await world.plain.open_ops(episode))  # its rows again from position 0
    assert await generation() != first


class CountingRows(MemoryStore):
    """Counts the member rows scans read."""

    def __init__(self) -> None:
        super().__init__()
        self.member_rows = 0

    def scan(self, *args, **kw):
        inner = super().scan(*args, **kw)
        counted = (kw.get("prefix") or b"").startswith(EK)

        async def reading():
            async for item in inner:
                self.member_rows += counted
                yield item

        return reading()


async def test_a_recall_reads_only_the_member_rows_added_since_the_last_one():
    store = CountingRows()
    config = EngineConfig(default_caller="user:alice", episode_idle_check=3600.0)
    request = {"scope": ALICE, "query": "Grace item list", "include": ["episodes", "events"]}
    async with cortexdb.open_engine("memory", store=store, clock=ManualClock("2026-05-13T15:42:09Z"), id_seed=5,
                                    config=config) as engine:  # fmt: skip
        for i in range(30):
            await engine.experience(envelope(f"Grace mentioned item number {i} of the list.",
                                             observed_at=f"2026-05-13T15:00:{i:02d}Z"), wait="consolidated")  # fmt: skip
        first = await engine.recall(request)
        assert len(first["layers"]["episodes"]) == 1
        await engine.experience(envelope("Grace mentioned the last item of the list.",
                                         observed_at="2026-05-13T15:00:40Z"), wait="consolidated")  # fmt: skip
        store.member_rows = 0
        again = await engine.recall(request)
        assert again["layers"]["episodes"][0]["events"][:30] == first["layers"]["episodes"][0]["events"]
        assert len(again["layers"]["episodes"][0]["events"]) == 31
        assert store.member_rows <= 1  # the one new member (31 read whole before)


def _answer(pack: dict) -> dict:
    """A recall's answer less what each call draws anew (its ids) and its timings."""
    return {"layers": pack["layers"], "context_block": pack["context_block"]}


@pytest.mark.parametrize("seed", range(3))
async def test_an_engines_answers_with_rows_kept_equal_its_answers_without(seed):
    """Seeded random writes, cancels, forgets of events, seals, resegmentation and recalls on
    one scope: after each, the episodes listed and recalled with the actor's rows kept equal
    the same reads with none kept."""
    rng = random.Random(seed)
    config = EngineConfig(default_caller="user:alice", episode_idle_check=3600.0, episode_max_events=15)
    texts = ("Grace mentioned item {} of the list.", "Bob asked about the order {}.", "Grace moved box {} to Oslo.")
    request = {"scope": ALICE, "query": "Grace list item order", "include": ["episodes", "events"]}
    async with cortexdb.open_engine("memory", store=MemoryStore(), clock=ManualClock("2026-05-13T15:42:09Z"),
                                    id_seed=seed, config=config) as engine:  # fmt: skip
        written: list[str] = []

        async def reads() -> list:
            return [_answer(await engine.recall(request)), await engine.episodes(ALICE, with_causal_chain=True),
                    await engine.episodes(ALICE, include_superseded=True)]  # fmt: skip

        for step in range(60):
            kind = rng.choice(("write",) * 6 + ("cancel", "forget", "seal", "resegment"))
            if kind == "write" or not written:
                role = rng.choice(("user", "assistant"))
                minute = len(written) + (30 if rng.random() < 0.1 else 0)  # now and then a gap
                written.append((await engine.experience(
                    envelope(rng.choice(texts).format(step), observed_at=f"2026-05-13T{10 + minute // 60:02d}:{minute % 60:02d}:00Z",
                             role=role), wait="consolidated")).event_id)  # fmt: skip
            elif kind == "cancel":
                await engine.cancel(written.pop(rng.randrange(len(written))))
            elif kind == "forget":
                await engine.forget({"scope": ALICE, "layers": ["events"], "cascade": "redact_events",
                                     "selector": {"memory_ids": [written.pop(rng.randrange(len(written)))]}})  # fmt: skip
            elif kind == "seal":
                await engine.flush(ALICE, seal=True)
            else:
                strategy = rng.choice(("turn_pair", "time_gap"))
                job = await engine.segmentation.set(ALICE, {"strategy": strategy}, caller="user:alice")
                await engine.segmentation.wait(job["job_id"])
            await engine.flush(ALICE)
            if rng.random() < 0.5:
                continue  # some changes follow each other unread (a cancel, then an append)
            episodes = engine._supervisor.actor(ALICE).tables.episodes
            kept = await reads()
            assert await reads() == kept  # again, from the rows kept
            rows, episodes.json.cache = episodes.json.cache, None
            try:
                assert await reads() == kept  # every member row read from the store
            finally:
                episodes.json.cache = rows
        assert rows.hits > 0


async def test_an_open_episode_judged_through_its_history_is_the_version_the_whole_head_gave():
    """Recall structures an episode's head without its lists when history must judge it (a head
    recorded after the recall's moment, ``as_of``, ``include_superseded``) and cuts compact
    versions' lists from the head's wire form: the version kept is the one main's rule keeps
    (the head structured whole, the lists from ``to_wire(head)``), at every moment."""
    from cortexdb.engine.actors import candidates, history
    from cortexdb.engine.derive.visibility import Clip
    from cortexdb.engine.model import from_wire, to_wire

    clock = ManualClock("2026-05-13T15:42:09Z")
    config = EngineConfig(default_caller="user:alice", episode_idle_check=3600.0)
    async with cortexdb.open_engine("memory", store=MemoryStore(), clock=clock, id_seed=9, config=config) as engine:
        for i in range(15):
            if i == 4:  # a cancel rewrites the episode (and its history) whole
                await engine.cancel((await engine.episodes(ALICE))["items"][0]["events"][2])
            await engine.experience(envelope(f"Grace mentioned item number {i} of the list.",
                                             observed_at=f"2026-05-13T15:00:{i:02d}Z"), wait="consolidated")  # fmt: skip
            clock.advance(1.0)  # every commit that grows the episode closes a version of it
        tables = engine._supervisor.actor(ALICE).tables
        (listed,) = (await engine.episodes(ALICE))["items"]
        record = await tables.episodes.json.get(listed["id"])
        every = Clip.of(None, now=clock.now(), include_superseded=True)
        versions = await history.episode_versions(tables, from_wire(record, Episode), every)
        assert len(versions) > 8
        moments = [v.recorded_from + dt.timedelta(milliseconds=ms) for v in versions for ms in (-1, 0, 500)]
        judged = 0
        for at in moments:
            for include in (False, True):
                clip = Clip.of(None, now=clock.now(), as_of=at, include_superseded=include)
                got = await candidates._version(tables, "episodes", dict(record), clip)
                head = from_wire(record, Episode)  # main's rule
                kept = [v for v in clip.select("episodes", await history.episode_versions(tables, head, clip))
                        if not v.excluded_from_recall]  # fmt: skip
                assert got == (None if not kept else record if kept[-1] is head else to_wire(kept[-1]))
                judged += got is not None and got != record
        assert judged > 8  # closed versions were kept, their lists cut from the head's


async def test_rows_kept_count_in_the_scopes_estimate_and_a_release_or_forget_lets_them_go():
    from cortexdb.engine.actors.residency import MEMBER_ROW_BYTES

    config = EngineConfig(default_caller="user:alice", episode_idle_check=3600.0)
    request = {"scope": ALICE, "query": "Grace item list", "include": ["episodes", "events"]}
    async with cortexdb.open_engine("memory", clock=ManualClock("2026-05-13T15:42:09Z"), id_seed=5,
                                    config=config) as engine:  # fmt: skip
        written = [await engine.experience(envelope(f"Grace mentioned item number {i} of the list.",
                                                    observed_at=f"2026-05-13T15:00:{i:02d}Z"),
                                           wait="consolidated") for i in range(12)]  # fmt: skip
        assert len((await engine.recall(request))["layers"]["episodes"]) == 1
        actor = engine._ctx.supervisor.actor(ALICE)
        kept = actor.tables.episodes.rows_cache
        rows, estimate = kept.rows, actor.estimated_bytes()
        assert rows == 12
        kept.clear()
        assert estimate - actor.estimated_bytes() == rows * MEMBER_ROW_BYTES
        await engine.recall(request)
        assert kept.rows == 12
        assert await engine._ctx.supervisor.release(ALICE)  # the actor stops: its rows go with it
        assert kept.rows == 0
        await engine.recall(request)
        actor = engine._ctx.supervisor.actor(ALICE)
        kept = actor.tables.episodes.rows_cache
        assert kept.rows == 12
        await engine.forget({"scope": ALICE, "layers": ["events"], "cascade": "redact_events",
                             "selector": {"memory_ids": [written[3].event_id]}})
        assert kept.rows == 0
