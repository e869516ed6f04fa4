"""The compact index structures: BM25 arrays with tombstones, quantized vector deltas, segments
memory-mapped from files, the hash embedder without a cache (docs/decisions.md, "Index memory")."""

import os
import random
import zlib

import numpy as np
import pytest
import snowballstemmer
import trio
from rank_bm25 import BM25Okapi

import cortexdb
from cortexdb import EngineConfig
from cortexdb.engine.retrieve import tokens
from cortexdb.engine.retrieve.embedders import HashEmbedder
from cortexdb.engine.retrieve.layered import LayeredVectorIndex, scope_folder
from cortexdb.engine.retrieve.text_index import TextIndex, tokenize
from cortexdb.engine.retrieve.vector_index import VectorIndex

from .conftest import envelope


def _corpus(rng: random.Random, count: int) -> dict[str, str]:
    vocab = [f"w{i}" for i in range(80)] + ["paris", "berlin", "lisbon"]
    return {f"d{i}": " ".join(rng.choice(vocab) for _ in range(rng.randint(2, 20))) for i in range(count)}  # fmt: skip


def _assert_bm25_exact(index: TextIndex, live: dict[str, str], queries: list[str]) -> None:
    ids = sorted(live)
    reference = BM25Okapi([tokenize(live[d]) for d in ids])
    for query in queries:
        expected = dict(zip(ids, reference.get_scores(tokenize(query)), strict=True))
        got = dict(index.search(query))
        assert set(got) <= set(live)
        for doc_id, score in expected.items():
            assert got.get(doc_id, 0.0) == pytest.approx(score, abs=1e-9)
            assert index.score(query, doc_id) == pytest.approx(score, abs=1e-9)
        for doc_id, score in index.search_pruned(query, 10):
            assert score == pytest.approx(expected[doc_id], abs=1e-9)


def test_bm25_compaction_after_many_removals_and_rewrites_keeps_scores_exact():
    rng = random.Random(17)
    docs = _corpus(rng, 600)
    index = TextIndex(compact_min=50)
    for doc_id, text in docs.items():
        index.add(doc_id, text)
    live = dict(docs)
    compactions = 0
    for step in range(1500):  # removals, re-adds of removed ids and rewrites of live ones
        doc_id = f"d{rng.randrange(600)}"
        before = index.slots
        if step % 3 == 0 and doc_id in live:
            index.remove(doc_id)
            del live[doc_id]
        else:
            live[doc_id] = " ".join(rng.choice(["paris", "w3", "w9", "lisbon", "w50"]) for _ in range(rng.randint(1, 9)))  # fmt: skip
            index.add(doc_id, live[doc_id])
        compactions += index.slots < before
        # tombstones are bounded: at most max(compact_min, live pairs / 2) dead pairs
        assert index.dead_pairs <= max(50, index.live_pairs // 2)
    # (a rewrite of a document of the delta leaves no tombstone: text_delta.py)
    assert compactions >= 3 and len(index) == len(live)
    assert all(doc_id in index for doc_id in live) and "nope" not in index
    _assert_bm25_exact(index, live, ["paris", "w3 w9 w9", "lisbon w50 berlin", "w1 w2 w3"])


def test_bm25_removing_every_document_of_a_term_forgets_the_term():
    index = TextIndex(compact_min=1)  # compacts at the first dead pair beyond half the live
    for i in range(10):
        index.add(f"a{i}", "alpha beta")
    index.add("z", "zeta beta")
    index.remove("z")  # zeta's last document: the term counts for nothing now
    assert index._doc_freq("zeta") == 0 and index.search("zeta") == []
    for i in range(10):
        index.remove(f"a{i}")
    assert len(index) == 0 and index.slots == 0 and index.search("alpha beta") == []
    index.add("b", "beta gamma")
    assert [d for d, _ in index.search("beta")] == ["b"]


def test_numbers_and_ids_do_not_fill_the_stem_cache():
    """Only words take a place in the stem cache: numbers and tokens with a digit (an id's hex
    runs, cited in a concept's summary) are an unbounded vocabulary.  They stem as before."""
    tokens._stem_cached.cache_clear()
    assert tokenize("note 48213 and 7 then 2nd") == ["note", "48213", "7", "2nd"]
    cited = "likes pottery [fact_01a2209a-8129-77f0-b0dd-577170465343] 1990s"
    assert tokenize(cited) == ["like", "potteri", "fact", "01a2209a", "8129", "77f0", "b0dd",
                               "577170465343", "1990s"]
    assert tokens._stem_cached.cache_info().currsize == 4  # note, like, pottery, fact
    stemmer = snowballstemmer.stemmer("english")
    for token in ("2nd", "b0dd", "1990s", "a0ed", "mp3s", "covid19"):  # the stems are Porter2's
        assert tokenize(token) == [stemmer.stemWord(token)]
    assert tokens._stem_cached.cache_info().currsize == 4


def test_tokens_with_digits_have_a_bounded_cache_of_their_own():
    """A concept re-synthesized at each event cites the same ids again: their hex runs are
    stemmed once (Porter2 takes tens of microseconds on such a token), in a cache of their own
    that keeps at most ``STEM_CACHE_DIGIT_TOKENS`` of them, least recently used out first."""
    tokens._stem_digit_token.cache_clear()
    stemmer = snowballstemmer.stemmer("english")
    cited = "likes pottery [fact_01a2209a-8129-77f0-b0dd-577170465343] 1990s"
    first = tokenize(cited)
    assert tokenize(cited) == first
    info = tokens._stem_digit_token.cache_info()
    assert (info.misses, info.hits) == (4, 4)  # 01a2209a 77f0 b0dd 1990s; 8129 and 577170465343 are numbers
    many = [f"x{i:x}ed{i}s" for i in range(tokens.STEM_CACHE_DIGIT_TOKENS + 100)]
    assert tokenize(" ".join(many)) == [stemmer.stemWord(t) for t in many]
    assert tokens._stem_digit_token.cache_info().currsize == tokens.STEM_CACHE_DIGIT_TOKENS
    assert tokens._stem_cached.cache_info().currsize <= tokens.STEM_CACHE_WORDS


def _unit(rng, n, d):
    m = rng.normal(size=(n, d)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


@pytest.mark.parametrize(("dtype", "tolerance", "overlap"), [("float16", 2e-4, 10), ("int8", 1e-2, 9)])
def test_quantized_delta_finds_the_float32_top_k(dtype, tolerance, overlap):
    """A fixed set of 3,000 384-d vectors: the top 10 of 20 queries against float32's (exact),
    every cosine within ``tolerance``, at least ``overlap`` of the 10 the same."""
    rng = np.random.default_rng(23)
    vectors = _unit(rng, 3000, 384)
    exact = VectorIndex(384, segment_size=10_000, dtype="float32")
    small = VectorIndex(384, segment_size=10_000, dtype=dtype)
    for i, vector in enumerate(vectors):
        exact.add(f"d{i}", vector)
        small.add(f"d{i}", vector)
    for q in range(20):
        query = vectors[q * 7] * 0.6 + vectors[q * 7 + 1] * 0.4
        query /= np.linalg.norm(query)
        want = exact.search(query, 10)
        got = small.search(query, 10)
        assert len({d for d, _ in got} & {d for d, _ in want}) >= overlap
        assert got[0][0] == want[0][0]
        for doc_id, cosine in got:
            assert cosine == pytest.approx(float(vectors[int(doc_id[1:])] @ query), abs=tolerance)
    for i in (0, 1234, 2999):
        assert np.allclose(small.vector(f"d{i}"), vectors[i], atol=tolerance * 5)
        assert small.vector(f"d{i}").dtype == np.float32


async def test_the_delta_grows_in_fixed_chunks_and_a_seal_keeps_no_copy():
    rng = np.random.default_rng(2)
    vectors = _unit(rng, 2500, 16)
    index = VectorIndex(16, segment_size=2000, trees=5, dtype="float16", chunk_rows=256)
    for i in range(1900):
        index.add(f"d{i}", vectors[i])
    assert index._delta.shape == (2048, 16) and index._delta.dtype == np.float16  # not 4096
    for i in range(1900, 2500):
        index.add(f"d{i}", vectors[i])
        if index.needs_seal:
            await index.seal()
    assert index.segment_sizes == [2000] and len(index._delta_ids) == 500
    assert index._delta.shape == (512, 16)  # what is left, rounded up to a chunk
    assert np.allclose(index.vector("d2"), vectors[2], atol=1e-3)  # sealed rows decoded once
    assert np.allclose(index.vector("d2400"), vectors[2400], atol=1e-3)


async def test_segments_built_in_files_are_mapped_and_leave_no_file(tmp_path):
    """With a directory, segments are built in a file and served memory-mapped; the file is
    unlinked once mapped.  Search results are those of the same segments built in memory."""
    rng = np.random.default_rng(8)
    vectors = _unit(rng, 700, 24)
    folder = str(tmp_path / "vector-segments")
    on_disk = VectorIndex(24, segment_size=200, trees=10, dtype="float16", directory=folder)
    in_memory = VectorIndex(24, segment_size=200, trees=10, dtype="float16")
    for index in (on_disk, in_memory):
        for i, vector in enumerate(vectors):
            index.add(f"d{i}", vector)
            if i % 9 == 4:
                index.remove(f"d{i - 3}")
            if index.needs_seal:
                await index.seal()
    assert on_disk.segment_sizes == in_memory.segment_sizes and len(on_disk.segment_sizes) >= 1
    assert os.path.isdir(folder) and os.listdir(folder) == []
    maps = open("/proc/self/maps").read() if os.path.exists("/proc/self/maps") else None
    if maps is not None:  # Linux: the segment's pages come from a deleted file in the folder
        assert f"{folder}/" in maps and "(deleted)" in maps
    for q in range(10):
        query = vectors[q * 31]
        assert on_disk.search(query, 8) == in_memory.search(query, 8)
    assert np.allclose(on_disk.vector("d11"), vectors[11], atol=1e-3)


async def test_a_leveldb_engine_maps_its_segments_and_rebuilds_them_after_a_restart(tmp_path, clock):
    path = str(tmp_path / "data")
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice",
                          vector_segment_size=40, vector_trees=5)  # fmt: skip
    texts = [f"Note {i}: I met {['Ana', 'Bo', 'Cy'][i % 3]} in {['Oslo', 'Rome'][i % 2]} about {i}" for i in range(100)]  # fmt: skip
    async with cortexdb.open_engine("leveldb", path=path, config=config, id_seed=3, clock=clock) as engine:
        for start in range(0, 100, 25):
            items = [envelope(t, observed_at=f"2026-05-13T15:{(start + j) // 60:02d}:{(start + j) % 60:02d}Z")
                     for j, t in enumerate(texts[start : start + 25])]  # fmt: skip
            await engine.experience_bulk({"scope": "org:acme/user:alice", "items": [
                {k: v for k, v in item.items() if k != "scope"} for item in items]})  # fmt: skip
        await engine.flush()
        before = await engine.recall({"scope": "org:acme/user:alice", "query": "Cy in Rome", "include": ["events"]})  # fmt: skip
        lane = engine._supervisor._handles["org:acme/user:alice"].actor.lane
        with trio.fail_after(30):
            await lane.index.vector_job_finished()  # the background seal and merges
        assert lane.state.vector_index._indexes["evt_"].segment_sizes  # sealed into segments
    folder = os.path.join(path, "vector-segments")
    # no file of a build is left behind: only the scope's kept segments (a folder of its own,
    # each layer's files named by its manifest; tests/test_vector_reopen.py)
    assert os.listdir(folder) == [scope_folder("org:acme/user:alice")]
    async with cortexdb.open_engine("leveldb", path=path, config=config, id_seed=3, clock=clock) as engine:
        await engine.flush()
        after = await engine.recall({"scope": "org:acme/user:alice", "query": "Cy in Rome", "include": ["events"]})  # fmt: skip
        lane = engine._supervisor._handles["org:acme/user:alice"].actor.lane
        assert lane.state.vector_index._indexes["evt_"].segment_sizes  # rebuilt from stored vectors
    # the same events are found; scores may differ in the 4th decimal, as the rows sit in other
    # segments (sealed without the merges of the first run) and the float16 delta holds others
    ranked = [item["id"] for item in before["layers"]["events"]]
    again = [item["id"] for item in after["layers"]["events"]]
    assert ranked[0] == again[0] and len(set(ranked[:5]) & set(again[:5])) >= 3


def test_layered_vector_index_passes_its_storage_settings_on(tmp_path):
    index = LayeredVectorIndex(8, segment_size=10, trees=2, dtype="int8", directory=str(tmp_path), chunk_rows=64)  # fmt: skip
    index.add("evt_1", np.ones(8, dtype=np.float32) / np.sqrt(8))
    inner = index._indexes["evt_"]
    assert (inner.dtype, inner.directory, inner.chunk_rows) == ("int8", str(tmp_path), 64)
    with pytest.raises(ValueError):
        VectorIndex(8, dtype="float64")
    with pytest.raises(ValueError):
        EngineConfig(vector_dtype="float64")


def test_hash_embedder_equals_its_feature_by_feature_definition():
    """No token cache any more (it grew with every number and bigram seen): the vectorised sum
    must give the vector of the original definition, bit for bit."""

    def reference(text: str, dimension: int = 384) -> np.ndarray:
        vector = np.zeros(dimension, dtype=np.float32)
        words = tokens._TOKEN.findall(text.casefold())
        features = list(words) + [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)]
        for word in words:
            padded = f"#{word}#"
            features += [padded[i : i + 3] for i in range(len(padded) - 2)]
        for token in features:
            value = zlib.crc32(token.encode())
            vector[value % dimension] += 1.0 if value & 0x80000000 else -1.0
        norm = float(np.linalg.norm(vector))
        return vector / norm if norm else vector

    embedder = HashEmbedder()
    texts = ["Alice lives in Paris", "note 48213, again and again and again", "", "x" * 3000,
             "Ünïcödé straße ok", "We talked about the roadmap (note 17)."]  # fmt: skip
    for text, vector in zip(texts, embedder.embed(texts), strict=True):
        assert np.array_equal(vector, reference(text))
    assert not hasattr(HashEmbedder, "_features")
