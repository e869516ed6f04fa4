"""Embedders and the vector index."""

import numpy as np
import pytest

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
    assert len(index._segments) == 2 and len(index._delta_ids) == 500
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
