"""Embedders and the vector index."""

import threading

import numpy as np
import pytest
import trio
import trio.testing

from cortexdb.engine.retrieve.embedders import HashEmbedder, MiniLMEmbedder, by_name
from cortexdb.engine.retrieve.vector_index import VectorIndex


def test_hash_embedder_is_deterministic_normalised_and_lexically_sensitive():
    embedder = HashEmbedder()
    a, b, c = embedder.embed(
        ["Alice lives in Paris", "Where does Alice live?", "quarterly tax filing"]
    )
    assert a.shape == (384,) and a.dtype == np.float32
    assert np.linalg.norm(a) == pytest.approx(1.0, abs=1e-5)
    assert np.array_equal(a, HashEmbedder().embed(["Alice lives in Paris"])[0])
    assert float(a @ b) > float(a @ c)
    assert not np.any(HashEmbedder().embed([""])[0])


def test_embedders_by_name():
    assert by_name("hash").name == "hash-v1"
    with pytest.raises(Exception) as info:
        by_name("gpt-9")
    assert info.value.error_code == "EMBEDDER_UNAVAILABLE"


def test_minilm_embedder_runs_offline_and_is_semantic():
    # `make test` installs the minilm extra: without it this fails with EMBEDDER_UNAVAILABLE
    embedder = MiniLMEmbedder()
    a, b, c = embedder.embed(
        ["I moved to Berlin last year.", "Where does she live now?", "The cake recipe needs eggs."]
    )
    assert a.shape == (384,) and np.linalg.norm(a) == pytest.approx(1.0, abs=1e-4)
    assert float(a @ b) > float(a @ c)


def _random_unit(rng, n, d):
    m = rng.normal(size=(n, d)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


async def test_vector_index_segments_plus_delta_match_brute_force_and_honour_deletes():
    rng = np.random.default_rng(3)
    vectors = _random_unit(rng, 2500, 32)
    index = VectorIndex(32, segment_size=1000, trees=30)
    for i, v in enumerate(vectors):
        index.add(f"d{i}", v)
        if index.needs_seal:
            await index.seal()
    assert index.segment_sizes == [2000] and len(index._delta_ids) == 500  # two sealed 1,000s merged
    index.remove("d7")
    index.add("d8", vectors[9])  # a newer vector for a sealed id wins
    query = vectors[7] * 0.9 + vectors[11] * 0.1
    query /= np.linalg.norm(query)
    got = index.search(query, 10)
    ids = [doc_id for doc_id, _ in got]
    assert "d7" not in ids
    truth = vectors @ query
    truth[7] = -9
    expected = [f"d{i}" for i in np.argsort(-truth)[:5]]
    assert ids[0] == expected[0]
    assert len(set(ids[:5]) & set(expected)) >= 4  # annoy is approximate
    for doc_id, similarity in got:
        position = int(doc_id[1:])
        reference = vectors[9] if doc_id == "d8" else vectors[position]
        assert similarity == pytest.approx(float(reference @ query), abs=1e-4)
    assert len(index) == 2499


def _live_truth(vectors: dict[str, np.ndarray], query: np.ndarray, k: int) -> list[str]:
    ids = sorted(vectors)
    scores = np.array([float(vectors[i] @ query) for i in ids])
    return [ids[j] for j in np.argsort(-scores, kind="stable")[:k]]


async def test_vector_segments_merge_like_an_lsm_tree_and_keep_deletes_and_replacements():
    rng = np.random.default_rng(11)
    dim = 16
    index = VectorIndex(dim, segment_size=100, trees=40)
    live: dict[str, np.ndarray] = {}
    for i, v in enumerate(_random_unit(rng, 1000, dim)):
        index.add(f"d{i}", v)
        live[f"d{i}"] = v
        if index.needs_seal:
            await index.seal()
        if i % 7 == 3:  # deletes and replacements land in sealed segments and in the delta
            victim = f"d{int(rng.integers(0, i + 1))}"
            index.remove(victim)
            live.pop(victim, None)
        if i % 11 == 5:
            target = f"d{int(rng.integers(0, i + 1))}"
            fresh = _random_unit(rng, 1, dim)[0]
            index.add(target, fresh)
            live[target] = fresh
    sizes = index.segment_sizes
    assert len(sizes) <= 4 and sizes == sorted(sizes, reverse=True)  # merged: few, largest first
    assert len(index) == len(live)
    for doc_id, vector in live.items():
        assert np.allclose(index.vector(doc_id), vector, atol=1e-5)
    for _ in range(5):
        query = _random_unit(rng, 1, dim)[0]
        got = index.search(query, 10)
        assert all(doc_id in live for doc_id, _ in got)
        for doc_id, similarity in got:
            assert similarity == pytest.approx(float(live[doc_id] @ query), abs=1e-4)
        assert len({d for d, _ in got} & set(_live_truth(live, query, 10))) >= 8  # annoy is approximate


async def test_vector_writes_during_a_seal_are_not_lost():
    rng = np.random.default_rng(5)
    vectors = _random_unit(rng, 60, 8)
    index = VectorIndex(8, segment_size=50, trees=10)
    for i in range(50):
        index.add(f"d{i}", vectors[i])
    gate = threading.Event()
    build = index._build
    index._build = lambda matrix: (gate.wait(), build(matrix))[1]  # the build waits for the test
    async with trio.open_nursery() as nursery:
        nursery.start_soon(index.seal)
        await trio.testing.wait_all_tasks_blocked()  # the seal is in its worker thread, gated
        index.add("d3", vectors[55])  # overwrite a row being sealed
        index.remove("d4")  # remove a row being sealed
        index.add("d50", vectors[50])  # a new row
        gate.set()
    assert index.segment_sizes == [50] and "d4" not in index and len(index) == 50
    assert np.allclose(index.vector("d3"), vectors[55])
    assert "d3" in index._delta_pos and "d50" in index._delta_pos
    got = dict(index.search(vectors[55], 3))
    assert got["d3"] == pytest.approx(1.0, abs=1e-5)
    assert "d4" not in dict(index.search(vectors[4], 60))
