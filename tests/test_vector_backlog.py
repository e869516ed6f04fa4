"""Derived records' vectors in a backlog (``EngineConfig.derived_vectors``, actors/vector_backlog.py)
and the embedder's padding-aware batches: the same vectors and the same recall as embedding at
once, each record embedded once with its latest text, nothing left waiting at a flush."""

from __future__ import annotations

import numpy as np
import pytest
import trio
import trio.testing

import cortexdb
from cortexdb import EngineConfig, ManualClock
from cortexdb.engine.actors.vector_backlog import VectorBacklog, embed_text
from cortexdb.engine.retrieve.embedders import PAD_SHARE, PAD_SLACK, HashEmbedder, batches

from .conftest import START, envelope

SCOPE = "org:acme/user:alice"
TEXTS = [
    "I live in Paris and I work as a nurse.", "My sister Anna lives in Berlin.",
    "I like hiking in the Alps with Anna.", "I started learning the cello last week.",
    "My favourite food is ramen.", "I moved to Paris in 2019.",
]  # fmt: skip


class CountingHash(HashEmbedder):
    """The hash embedder, but not inline (like a model: ``auto`` defers), counting what it embeds."""

    inline = False

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def embed(self, texts):
        self.texts += texts
        return super().embed(texts)


def open_engine(mode: str, embedder):
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", derived_vectors=mode,
                          derived_vectors_quiet=3600.0)  # fmt: skip
    return cortexdb.open_engine("memory", clock=ManualClock(START), id_seed=7, config=config, embedder=embedder)


def lane_of(engine):
    return engine._supervisor.actor(SCOPE).lane


async def write(engine) -> None:
    for i, text in enumerate(TEXTS):
        await engine.experience(envelope(text, observed_at=f"2026-05-13T15:{i:02d}:00Z"), wait="consolidated")


def request(include):
    return {"scope": SCOPE, "query": "where does my sister live", "include": include, "view": "granular",
            "diagnostics": "none", "citation_mode": "none"}  # fmt: skip


async def test_deferred_vectors_match_eager_ones_and_each_record_is_embedded_once():
    results = {}
    for mode in ("eager", "auto"):
        embedder = CountingHash()
        async with open_engine(mode, embedder) as engine:
            await write(engine)
            lane = lane_of(engine)
            waiting = set(lane.index.backlog.waiting)
            if mode == "auto":  # derived records wait; events never do
                assert waiting and not any(d.startswith("evt_") for d in waiting)
                assert not lane.idle  # a release would lose them: the lane is not idle
                assert all(d not in lane.state.vector_index and d in lane.state.text_index for d in waiting)
            else:
                assert not waiting
            await engine.flush(SCOPE, seal=True)
            assert not lane.index.backlog.waiting
            ids = sorted(d for d in (await stored_vector_ids(lane)) if not d.startswith("evt_"))
            vectors = {d: lane.state.vector_index.vector(d) for d in ids}
            pack = await engine.recall(request(["events", "facts", "beliefs", "episodes"]))
            results[mode] = (ids, vectors, ranked(pack), list(embedder.texts))
    eager, deferred = results["eager"], results["auto"]
    assert deferred[0] == eager[0] and deferred[0]  # the same records have vectors, stored too
    for doc_id in eager[0]:
        assert np.allclose(deferred[1][doc_id], eager[1][doc_id], atol=1e-3)  # float16 delta
    assert deferred[2] == eager[2]  # the same ranked items and scores
    # each episode (re-derived at every turn) and each belief (the fact's text) embedded once
    assert len(deferred[3]) < len(eager[3])
    assert len(deferred[3]) == len(set(deferred[3]))


async def stored_vector_ids(lane) -> list[str]:
    return [doc_id async for doc_id, _ in lane.state.tables.vectors.scan()]


def ranked(pack) -> list[tuple[str, float]]:
    return [(item["id"], round(item["score"], 6)) for layer in pack["layers"].values() for item in layer]


async def test_a_recall_embeds_the_waiting_records_of_its_layers_only():
    async with open_engine("deferred", CountingHash()) as engine:
        await write(engine)
        lane = lane_of(engine)
        before = set(lane.index.backlog.waiting)
        assert any(d.startswith("fact_") for d in before) and any(d.startswith("ep_") for d in before)
        pack = await engine.recall(request(["facts"]))
        after = set(lane.index.backlog.waiting)
        assert not any(d.startswith("fact_") for d in after)  # searched: embedded first
        assert {d for d in before if not d.startswith("fact_")} == after  # the others still wait
        assert all(item.get("id") for item in pack["layers"]["facts"])
        assert all(lane.state.vector_index.vector(d) is not None for d in before - after)
        stored = set(await stored_vector_ids(lane))
        assert before - after <= stored and not (after & stored)


async def test_a_full_backlog_is_embedded_in_the_running_stage():
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", derived_vectors="deferred",
                          derived_vectors_quiet=3600.0, derived_vectors_backlog=2)  # fmt: skip
    async with cortexdb.open_engine("memory", clock=ManualClock(START), id_seed=7, config=config,
                                    embedder=CountingHash()) as engine:  # fmt: skip
        await write(engine)
        assert len(lane_of(engine).index.backlog) < 2


async def test_the_backlog_returns_only_what_still_waits_with_the_same_text():
    gate = trio.Event()
    seen: list[list[str]] = []

    async def embed(texts):
        seen.append(list(texts))
        await gate.wait()
        return np.stack([np.full(4, float(len(t)), dtype=np.float32) for t in texts])

    backlog = VectorBacklog(embed)
    backlog.put("fact_1", "same")
    backlog.put("belief_1", "same")  # a belief reading like its fact: one text embedded
    backlog.put("ep_1", "first")
    backlog.put("ep_2", "gone soon")
    taken: list = []
    async with trio.open_nursery() as nursery:

        async def take():
            taken.extend(await backlog.take())

        nursery.start_soon(take)
        await trio.testing.wait_all_tasks_blocked()
        backlog.put("ep_1", "first and second")  # re-derived while embedding: waits on
        backlog.drop("ep_2")  # removed while embedding: dropped
        gate.set()
    assert seen == [["same", "first", "gone soon"]]
    assert sorted(d for d, _ in taken) == ["belief_1", "fact_1"]
    assert backlog.waiting == {"ep_1": "first and second"}
    assert backlog.holds_any(["ep_"]) and not backlog.holds_any(["fact_"])
    rest = await backlog.take(["fact_"])
    assert rest == [] and len(backlog) == 1
    assert [d for d, _ in await backlog.take(["ep_"])] == ["ep_1"] and not len(backlog)


def test_a_concepts_vector_text_leaves_out_its_citations():
    summary = "user:melanie. user:melanie: likes pottery [fact_01a22009-ed66-717c]; a mom (supported, 0.64) [belief_9]."
    assert embed_text("concept_1", summary) == "user:melanie. user:melanie: likes pottery; a mom (supported, 0.64)."
    assert embed_text("fact_1", "see [fact_2]") == "see [fact_2]"  # only concepts cite records


@pytest.mark.parametrize("seed", range(5))
def test_batches_cover_every_text_once_with_bounded_padding(seed):
    rng = np.random.default_rng(seed)
    lengths = [int(x) for x in rng.integers(3, 257, size=int(rng.integers(1, 120)))]
    out = batches(lengths, 16)
    assert sorted(p for batch in out for p in batch) == list(range(len(lengths)))
    for batch in out:
        assert 1 <= len(batch) <= 16
        sizes = [lengths[p] for p in batch]
        if len(batch) > 1:
            assert len(batch) * max(sizes) <= (1 + PAD_SHARE) * sum(sizes) + PAD_SLACK * len(batch)


def test_a_long_text_is_not_batched_with_short_ones():
    out = batches([60] * 15 + [256], 16)
    assert out == [list(range(15)), [15]]


async def test_a_recall_during_a_group_that_fails_writes_no_vector_of_its_unwritten_facts():
    """The first group's write (extract and index: the new facts, their backlog entries held)
    waits, and a recall of the facts layer runs meanwhile; then the write fails.  The recall's
    drain skipped the held facts, so no ``V`` row names a fact never written; the restarted lane
    derives the event again and its facts get their vectors (decisions.md, "A recall's drain
    skips what an uncommitted group holds")."""
    from cortexdb import Internal
    from cortexdb.backends.memory import MemoryStore
    from cortexdb.engine.spi.kv import Put

    class GatedStore(MemoryStore):
        def __init__(self) -> None:
            super().__init__()
            self.reached, self.resume, self.armed = trio.Event(), trio.Event(), True

        async def write(self, ops, *, sync=False):
            if self.armed and any(isinstance(op, Put) and op.key.startswith(b"F\x00") for op in ops):
                self.armed = False
                self.reached.set()
                await self.resume.wait()
                raise RuntimeError("the store failed the write")
            return await super().write(ops, sync=sync)

    store = GatedStore()
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", derived_vectors="deferred",
                          derived_vectors_quiet=3600.0)  # fmt: skip
    async with cortexdb.open_engine("memory", store=store, clock=ManualClock(START), id_seed=7, config=config,
                                    embedder=CountingHash()) as engine:  # fmt: skip
        await engine.experience(envelope(TEXTS[0]), wait="captured")
        async with trio.open_nursery() as nursery:

            async def flush() -> None:
                with pytest.raises(Internal):  # the flush meets the failed write
                    await engine.flush(SCOPE)

            nursery.start_soon(flush)
            await store.reached.wait()
            held = {d for d in lane_of(engine).index.backlog.waiting if d.startswith("fact_")}
            assert held  # the group's new facts, waiting for their vectors
            await engine.recall(request(["facts"]))
            store.resume.set()
        await engine.flush(SCOPE)
        lane = lane_of(engine)
        stored = {d for d in await stored_vector_ids(lane) if d.startswith("fact_")}
        facts = {f["id"] for f in (await engine.facts(SCOPE))["items"]}
        assert facts and not (held & facts)  # derived again: new ids
        assert not (held & stored) and stored <= facts


async def test_records_the_restore_defers_are_not_held_from_a_recall():
    """Derived records left without vectors (a crash before the backlog drained) are embedded at
    the restore, deferred, and written: nothing holds them, so a recall's drain takes them."""
    from cortexdb.backends.memory import MemoryStore
    from cortexdb.engine.spi.kv import Delete

    scope = "org:acme/user:alice"
    vectors = b"V\x00" + scope.encode() + b"\x00"
    config = EngineConfig(default_caller="user:alice", episode_idle_check=3600.0, derived_vectors="deferred",
                          derived_vectors_quiet=3600.0)  # fmt: skip
    store, clock = MemoryStore(), ManualClock("2026-05-13T15:42:09Z")
    question = {"scope": scope, "query": "where does she live", "include": ["facts"]}
    async with cortexdb.open_engine("memory", store=store, clock=clock, id_seed=5, config=config) as engine:
        for i, text in enumerate(["I live in Paris.", "I work at Acme as an engineer.", "My sister Ana likes chess."]):
            await engine.experience(envelope(text, scope=scope, observed_at=f"2026-05-13T15:00:{i:02d}Z"),
                                    wait="consolidated")  # fmt: skip
        before = len((await engine.recall(question))["layers"]["facts"])
    derived = [key async for key, _ in store.scan(prefix=vectors) if not key[len(vectors):].startswith(b"evt_")]
    assert derived
    await store.write([Delete(key) for key in derived])
    async with cortexdb.open_engine("memory", store=store, clock=clock, id_seed=6, config=config) as engine:
        await engine.ping(scope)  # its mailbox serves once the restore is done
        backlog = engine._supervisor.actor(scope).lane.index.backlog
        assert len(backlog.waiting) == len(derived) and not backlog.held
        assert len((await engine.recall(question))["layers"]["facts"]) == before
