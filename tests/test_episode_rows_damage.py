"""An open episode's header and member rows (storage/episodes.py) read when they do not agree:
a forget's rewrite torn between two of its chunks (a header counting rows its first deletes
removed), and a read racing a forget that deletes the episode.  Neither fails a read, crashes
the scope, or loses a recall's other candidates; the next write of a torn episode writes all its
rows again."""

from __future__ import annotations

import trio

import cortexdb
from cortexdb import EngineConfig, ManualClock, NotFound, ResourceDeleted
from cortexdb.backends.memory import MemoryStore
from cortexdb.engine.spi.kv import Delete

ALICE = "org:acme/user:alice"
EK = b"EK\x00" + ALICE.encode() + b"\x00"
CONFIG = EngineConfig(default_caller="user:alice", episode_idle_check=3600.0)


class Gated(MemoryStore):
    """Holds the first read of member rows once ``armed`` (a scan of them, or the point read of
    the first one that a read of rows kept decoded makes: storage/episode_rows.py), until
    ``resume`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.armed, self.reached, self.resume = False, trio.Event(), trio.Event()

    async def get(self, key):
        if self.armed and key.startswith(EK):
            self.armed = False
            self.reached.set()
            await self.resume.wait()
        return await super().get(key)

    def scan(self, *args, **kw):
        prefix = kw.get("prefix") or b""
        inner = super().scan(*args, **kw)

        async def held():
            if self.armed and prefix.startswith(EK):
                self.armed = False
                self.reached.set()
                await self.resume.wait()
            async for item in inner:
                yield item

        return held()


def envelope(i: int) -> dict:
    return {"scope": ALICE, "modality": "conversation",
            "content": {"kind": "message", "role": "user", "text": f"Grace mentioned item number {i} of the list."},
            "context": {"observed_at": f"2026-05-13T15:00:{i:02d}Z"}}  # fmt: skip


def opened(store, seed):
    return cortexdb.open_engine("memory", store=store, clock=ManualClock("2026-05-13T15:42:09Z"), id_seed=seed,
                                config=CONFIG)  # fmt: skip


async def test_a_torn_rewrite_is_read_with_the_rows_there_are_and_the_next_write_mends_it():
    store = MemoryStore()
    async with opened(store, 5) as engine:
        for i in range(5):
            await engine.experience(envelope(i), wait="consolidated")
    rows = [key async for key, _ in store.scan(prefix=EK)]
    assert len(rows) == 5
    await store.write([Delete(rows[0])])  # a rewrite's first chunk (its deletes) landed, not the rest
    async with opened(store, 6) as engine:
        (episode,) = (await engine.episodes(ALICE))["items"]  # the restore and the read: no failure
        assert len(episode["events"]) == 4
        assert engine.statistics().scopes[ALICE].restarts == 0
        await engine.experience(envelope(5), wait="consolidated")
        (episode,) = (await engine.episodes(ALICE, with_causal_chain=True))["items"]
    stored = [key async for key, _ in store.scan(prefix=EK)]
    assert len(episode["events"]) == 5 and len(stored) >= 5  # every row written again, in order
    assert [link["event"] for link in episode["causal_chain"]] == episode["events"]


async def _racing_a_forget(read):
    store = Gated()
    async with opened(store, 5) as engine:
        for i in range(5):
            await engine.experience(envelope(i), wait="consolidated")
        (episode,) = (await engine.episodes(ALICE))["items"]
        assert episode["status"] == "open"
        outcome = {}

        async def reader():
            try:
                outcome["read"] = await read(engine, episode["id"])
            except Exception as exc:  # the outcome under test
                outcome["read"] = exc

        async with trio.open_nursery() as nursery:
            store.armed = True
            nursery.start_soon(reader)
            await store.reached.wait()  # the reader has the header, not yet its rows
            await engine.forget({"scope": ALICE, "layers": ["episodes"], "selector": {"memory_ids": [episode["id"]]}})
            store.resume.set()
        return outcome["read"]


async def test_a_read_by_id_racing_a_forget_is_not_found_not_an_internal_error():
    outcome = await _racing_a_forget(lambda engine, episode_id: engine.get_episode(ALICE, episode_id))
    assert isinstance(outcome, NotFound | ResourceDeleted), outcome  # 404 or 410, never a 500


async def test_a_recall_racing_a_forget_keeps_its_other_candidates():
    pack = await _racing_a_forget(lambda engine, _: engine.recall(
        {"scope": ALICE, "query": "Grace item list", "include": ["episodes", "events"], "diagnostics": "full"}))
    assert not pack.get("_partial") and not pack["diagnostics"].get("degraded")
    assert pack["layers"]["episodes"] == [] and len(pack["layers"]["events"]) == 5
