"""BM25 in sealed segments (retrieve/text_segments.py): the same scores, ranks and removals as the
delta alone, whether the segments are numpy arrays or mapped from unlinked files
(docs/decisions.md, "BM25 in sealed segments")."""

import os
import random
import uuid

import pytest
import trio

import cortexdb
from cortexdb import EngineConfig
from cortexdb.engine.actors.indexer import Indexer
from cortexdb.engine.retrieve.layered import LayeredTextIndex
from cortexdb.engine.retrieve.text_index import TextIndex

from .conftest import envelope
from .test_index_memory import _assert_bm25_exact

WORDS = [f"w{i}" for i in range(60)] + ["paris", "berlin", "lisbon", "the", "meeting", "ran", "long"]
QUERIES = ["paris", "w3 w9 w9", "lisbon w50 berlin", "the meeting ran long", "w1 w2 w3 note", "zzz", "n17 n400"]


def _text(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(0, 14))]
    if rng.random() < 0.4:
        words.append(f"n{rng.randrange(100_000)}")  # a vocabulary that keeps growing
    return " ".join(words)


def _drive(indexes: list[TextIndex], rng: random.Random, steps: int, ids) -> dict[str, str]:
    """The same adds, re-adds and removals on every index; the live documents."""
    live: dict[str, str] = {}
    _drive.most_segments = 0
    for step in range(steps):
        _drive.most_segments = max(_drive.most_segments, len(indexes[-1].segment_sizes))
        doc_id = ids(rng.randrange(steps // 2))
        if step % 4 == 3 and doc_id in live:
            for index in indexes:
                index.remove(doc_id)
            del live[doc_id]
        else:
            live[doc_id] = _text(rng)
            for index in indexes:
                index.add(doc_id, live[doc_id])
    return live


def _uuid_ids(rng: random.Random):
    made: dict[int, str] = {}
    return lambda i: made.setdefault(i, f"evt_{uuid.UUID(int=rng.getrandbits(128), version=4)}")


@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("mapped", [False, True])
def test_segments_score_and_rank_exactly_as_the_delta_alone(tmp_path, keyed, mapped):
    rng = random.Random(5 + keyed + 2 * mapped)
    folder = str(tmp_path / "text-segments") if mapped else None
    flat = TextIndex(compact_min=200, seal_docs=10**9)  # never sealed: the delta alone
    sealed = TextIndex(compact_min=200, seal_docs=37, max_segment_docs=300, directory=folder)
    ids = _uuid_ids(rng) if keyed else (lambda i: f"d{i}")
    live = _drive([flat, sealed], rng, 2400, ids)
    assert _drive.most_segments >= 3 and sealed.segment_sizes
    # slots differ: a re-added document of the delta keeps its slot (text_delta.py), a sealed one
    # takes a new one, and compactions come at other times
    assert len(sealed) == len(flat) == len(live)
    assert sealed.live_pairs == flat.live_pairs
    for doc_id in list(live)[:200]:
        assert doc_id in sealed
    assert "d-nope" not in sealed
    for query in QUERIES + [live[d] for d in list(live)[:20]]:
        for limit in (1, 5, 50):
            assert sealed.search_pruned(query, limit) == flat.search_pruned(query, limit)  # exact
        assert sealed.search(query) == flat.search(query)
        assert sealed.search_by_prefix(query, {"d": 7, "evt_": 7}) == flat.search_by_prefix(query, {"d": 7, "evt_": 7})
        for doc_id in list(live)[:40]:
            assert sealed.score(query, doc_id) == flat.score(query, doc_id)
    if mapped:
        assert os.listdir(folder) == []  # unlinked files, held by their mappings
        assert sum(s.nbytes() for s in sealed._segments) == 0


def test_segments_against_rank_bm25_after_removals_and_compaction(tmp_path):
    rng = random.Random(11)
    index = TextIndex(compact_min=60, seal_docs=16, max_segment_docs=128, directory=str(tmp_path))
    live = _drive([index], rng, 900, lambda i: f"d{i}")
    _assert_bm25_exact(index, live, QUERIES)


def test_a_removed_sealed_document_and_its_terms_are_gone_after_compact(tmp_path):
    index = TextIndex(seal_docs=4, directory=str(tmp_path))
    for i in range(10):
        index.add(f"d{i}", f"common words {i} here")
    index.add("secret", "common xyzzysecret")
    for i in range(10, 20):
        index.add(f"d{i}", f"common words {i} here")
    assert index._segment_of(10) is not None  # "secret" is sealed
    index.remove("secret")
    assert "secret" not in index and index.search("xyzzysecret") == []
    assert index.score("xyzzysecret common", "secret") == 0.0
    assert "xyzzysecret" in set(index.terms())  # until the compaction (a forget calls it)
    layered = LayeredTextIndex()
    layered._indexes["d"] = index
    layered.compact()
    assert "xyzzysecret" not in set(index.terms()) and index.slots == 20 == len(index)
    assert [d for d, _ in index.search("words 7")][0] == "d7"
    index.add("d7", "replaced text")  # a re-added sealed id: the old slot dies
    assert index.search("words 7") == [] or "d7" not in dict(index.search("words 7"))
    assert [d for d, _ in index.search("replaced")] == ["d7"]


def test_a_compaction_whose_build_fails_leaves_the_index_as_it_was(tmp_path, monkeypatch):
    """A compaction builds its segment before it changes anything: when the build fails (a full
    disk, no file descriptor left) the index answers as before, removals still tombstoned, and a
    later compaction does the work."""
    from cortexdb.engine.retrieve import text_segments

    index = TextIndex(seal_docs=4, directory=str(tmp_path))
    for i in range(12):
        index.add(f"d{i}", f"common words {i} here")
    index.remove("d5")
    before = index.search("common words 7")
    build = text_segments.build

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(text_segments, "build", full_disk)
    with pytest.raises(OSError):
        index.compact()
    assert index.search("common words 7") == before and "d5" not in index and len(index) == 11
    assert index.score("words 9", "d9") > 0 and index.slots == 12
    monkeypatch.setattr(text_segments, "build", build)
    index.compact()
    assert index.search("common words 7") == before and index.slots == 11


def test_layered_text_index_passes_its_directory_on(tmp_path):
    layered = LayeredTextIndex(directory=str(tmp_path), seal_docs=2)
    for i in range(5):
        layered.add(f"fact_{i}", f"alice likes tea {i}")
    inner = layered._indexes["fact_"]
    assert inner.directory == str(tmp_path) and inner.segment_sizes
    assert [d for d, _ in layered.search("tea 3", 1, "fact_")] == ["fact_3"]


async def test_a_merge_built_in_a_thread_keeps_removals_made_meanwhile(tmp_path):
    """``merge_inline=False`` (the engine's): due merges wait for ``LayeredTextIndex.merge``, which
    builds them in a worker thread; a document removed between the plan and the install stays
    removed, and one compaction between them makes the install a no-op."""
    layered = LayeredTextIndex(directory=str(tmp_path), seal_docs=8, merge_inline=False)
    flat = TextIndex(seal_docs=10**9)
    for i in range(64):
        text = f"alpha {i} beta{i % 5}"
        layered.add(f"d_{i}", text)
        flat.add(f"d_{i}", text)
    index = layered._indexes["d_"]
    assert index.segment_sizes == [8] * 8 and layered.needs_merge
    plan = index.merge_plan()
    index.remove("d_3")  # in the plan's first segment: a tombstone in the merged one
    flat.remove("d_3")
    assert index.install(plan, plan.build())
    assert index.segment_sizes == [16] + [8] * 6
    while layered.needs_merge:
        await layered.merge()
    assert index.segment_sizes == [64]
    assert "d_3" not in index and index.search("alpha 3") == flat.search("alpha 3")
    assert index.search_pruned("beta3 alpha", 5) == flat.search_pruned("beta3 alpha", 5)
    stale = TextIndex(seal_docs=4, merge_inline=False)
    for i in range(8):
        stale.add(f"s{i}", "gamma")
    plan = stale.merge_plan()
    stale.remove("s1")
    stale.compact()
    assert not stale.install(plan, plan.build()) and stale.segment_sizes == [7]


@pytest.mark.parametrize("backend", ["leveldb", "memory"])
async def test_an_engine_seals_and_merges_its_text_segments_and_rebuilds_them_at_open(tmp_path, clock, backend, monkeypatch):
    """The engine's BM25 layers seal every ``text_seal_docs`` documents (with a data dir into
    unlinked files of text-segments/), merge in the background job, and an open with
    ``text_segments_kept`` off rebuilds them from the stored records: the same lexical answers
    before and after (kept segments: tests/test_text_reopen.py)."""
    path = str(tmp_path / "data")
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", text_seal_docs=8,
                          text_segment_docs=32, recall_mode="bm25", text_segments_kept=False)  # fmt: skip
    texts = [f"Note {i}: I met {['Ana', 'Bo', 'Cy'][i % 3]} in {['Oslo', 'Rome'][i % 2]} about topic{i}" for i in range(60)]  # fmt: skip
    scope = "org:acme/user:alice"
    query = {"scope": scope, "query": "topic17 Cy", "include": ["events"]}
    kwargs = {"path": path} if backend == "leveldb" else {}
    async with cortexdb.open_engine(backend, config=config, id_seed=3, clock=clock, **kwargs) as engine:
        items = [envelope(t, observed_at=f"2026-05-13T15:{j // 60:02d}:{j % 60:02d}Z") for j, t in enumerate(texts)]
        await engine.experience_bulk({"scope": scope, "items": [{k: v for k, v in item.items() if k != "scope"} for item in items]})
        await engine.flush()
        lane = engine._supervisor._handles[scope].actor.lane
        with trio.fail_after(30):
            await lane.index.vector_job_finished()  # text merges run in the same background job
        events = lane.state.text_index._indexes["evt_"]
        assert events.segment_sizes and not events.needs_merge and max(events.segment_sizes) <= 32
        assert (events.directory is not None) == (backend == "leveldb")
        # sealed in memory on the loop, written and mapped by the background job (text_postings.py)
        assert all(segment.mapped == (backend == "leveldb") for segment in events._segments)
        before = await engine.recall(query)
    if backend == "memory":
        return
    assert os.listdir(os.path.join(path, "text-segments")) == []  # nothing left between runs
    # the restore runs before the background job exists: what it seals is mapped as it goes, not
    # held in memory for the job to map later
    unmapped_after_restore = []
    add_texts = Indexer.add_texts

    async def watched(self, documents):
        await add_texts(self, documents)
        if self.background is None and "evt_" in self.state.text_index._indexes:
            segments = self.state.text_index._indexes["evt_"]._segments
            unmapped_after_restore.append((len(segments), sum(not s.mapped for s in segments)))

    monkeypatch.setattr(Indexer, "add_texts", watched)
    async with cortexdb.open_engine(backend, config=config, id_seed=3, clock=clock, **kwargs) as engine:
        await engine.flush()
        after = await engine.recall(query)
        lane = engine._supervisor._handles[scope].actor.lane
        assert lane.state.text_index._indexes["evt_"].segment_sizes  # rebuilt, sealed again
    assert unmapped_after_restore and all(count and not unmapped for count, unmapped in unmapped_after_restore)
    ranked = [(item["id"], item["score"]) for item in before["layers"]["events"]]
    again = [(item["id"], item["score"]) for item in after["layers"]["events"]]
    assert ranked and ranked == again


def _mappings_of(directory) -> int:
    """How many of this process's mappings are of files in ``directory`` (Linux's /proc)."""
    with open("/proc/self/maps") as maps:
        return sum(1 for line in maps if str(directory) in line)


def _descriptors_of(directory) -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += str(directory) in os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the descriptor listing the directory itself, closed meanwhile
            pass
    return count


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads Linux's /proc")
def test_mapped_segments_hold_no_file_descriptor_and_unmap_when_dropped(tmp_path):
    """A sealed segment's file is mapped without keeping a descriptor open (decisions.md, "Text
    segments hold no file descriptor"): however many segments, none of their files has a
    descriptor, their arrays read what was written, and a segment no longer referenced (merged
    away, or its index dropped) is unmapped."""
    import gc

    index = TextIndex(seal_docs=4, max_segment_docs=8, directory=str(tmp_path))
    flat = TextIndex(seal_docs=10**9)
    for i in range(64):
        for target in (index, flat):
            target.add(f"d{i}", f"common words {i} note n{i % 7}")
    gc.collect()
    assert len(index.segment_sizes) >= 8  # merges stop at 8 slots: many segments
    assert _descriptors_of(tmp_path) == 0
    assert 0 < _mappings_of(tmp_path) <= len(index.segment_sizes)  # the merged-away ones are gone
    for query in ("common words 17", "n3 words", "note 63"):
        assert index.search(query) == flat.search(query)
    del index
    gc.collect()
    assert _mappings_of(tmp_path) == 0


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads Linux's /proc")
def test_with_deferred_merges_a_seal_or_compaction_writes_no_file_and_the_plan_maps_it(tmp_path):
    """``merge_inline=False`` (the engine's, whose plans build in a worker thread): a seal and a
    compaction build their segment in memory, with no file written on the caller's thread; the
    next plans write each to its file and map it, a removal made meanwhile stays removed, and a
    compaction between a plan and its install makes the install a no-op."""
    index = TextIndex(seal_docs=4, max_segment_docs=4, directory=str(tmp_path), merge_inline=False)
    flat = TextIndex(seal_docs=10**9)
    for i in range(12):
        for target in (index, flat):
            target.add(f"d{i}", f"common words {i} note n{i % 5}")
    assert index.segment_sizes == [4, 4, 4] and _mappings_of(tmp_path) == 0 and not os.listdir(tmp_path)
    assert index.needs_merge
    plan = index.merge_plan()
    assert len(plan.segments) == 1
    for target in (index, flat):
        target.remove("d1")  # in the planned segment: a tombstone in its mapped copy
    assert index.install(plan, plan.build())
    while index.needs_merge:
        plan = index.merge_plan()
        assert index.install(plan, plan.build())
    assert _mappings_of(tmp_path) == 3 and _descriptors_of(tmp_path) == 0
    for query in ("common words 1", "n1 note", "words 11"):
        assert index.search(query) == flat.search(query)
    plan = None
    for target in (index, flat):
        target.remove("d5")
    index.compact()
    flat.compact()
    assert index.segment_sizes == [10] and index.needs_merge and _mappings_of(tmp_path) == 0  # in memory
    plan = index.merge_plan()
    index.compact()  # nothing removed since: the same content, new segments
    assert not index.install(plan, plan.build())
    while index.needs_merge:
        plan = index.merge_plan()
        assert index.install(plan, plan.build())
    assert _mappings_of(tmp_path) == 1
    for query in ("common words 5", "n0 note", "words 11 d1"):
        assert index.search(query) == flat.search(query)
