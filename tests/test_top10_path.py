"""Session 31's cuts of the top-10 path give what the plain computations give (docs/decisions.md,
"The top-10 path, session 31"): the BM25 scorer made once a recall scores every document as
``score`` does, float for float, across sealed segments, the delta, removals and layers, and a
recall through it answers what the per-candidate ``score`` gives, on every backend."""

from __future__ import annotations

import random

import pytest

from cortexdb.engine.retrieve.layered import LayeredTextIndex
from cortexdb.engine.retrieve.text_index import TextIndex, tokenize

from .test_text_segments import QUERIES, _drive


@pytest.mark.parametrize("mapped", [False, True])
def test_the_scorer_of_a_query_scores_each_document_as_score_does(tmp_path, mapped):
    rng = random.Random(31 + mapped)
    folder = str(tmp_path / "text-segments") if mapped else None
    index = TextIndex(compact_min=200, seal_docs=37, max_segment_docs=300, directory=folder)
    live = _drive([index], rng, 1600, lambda i: f"d{i}")
    assert index.segment_sizes  # sealed segments and a delta both answer
    ids = list(live) + ["d-removed-or-unknown", "d99999"]
    for query in QUERIES + [live[d] for d in list(live)[:15]] + ["w3 w3 paris paris", ""]:
        score = index.scorer(tokenize(query))
        for doc_id in ids:
            assert score(doc_id) == index.score(query, doc_id)
    assert TextIndex().scorer(["paris"])("d1") == 0.0  # an empty index


def test_the_layered_scorer_routes_each_document_to_its_layer():
    layered = LayeredTextIndex(seal_docs=5)
    rng = random.Random(3)
    for i in range(40):
        layered.add(f"evt_{i}", " ".join(rng.choice(["paris", "tea", "run", "w1", "w2"]) for _ in range(6)))
        layered.add(f"fact_{i}", " ".join(rng.choice(["paris", "berlin", "tea"]) for _ in range(3)))
    layered.remove("evt_3")
    for query in ["paris tea", "run run w2", "berlin", "nothing"]:
        score = layered.scorer(tokenize(query))
        for doc_id in [f"evt_{i}" for i in range(42)] + [f"fact_{i}" for i in range(42)] + ["ep_1", "concept_x"]:
            assert score(doc_id) == layered.score(query, doc_id)


async def test_a_recall_ranks_as_with_one_bm25_score_a_candidate(engine, monkeypatch):
    """A top-10 recall whose vector search finds events beyond the BM25 search's top: the pack
    (items, scores, every candidate's signals) is the one the per-candidate ``score`` gives."""
    from cortexdb.engine.actors import candidate_signals

    from .conftest import envelope

    rng = random.Random(8)
    words = ["tea", "garden", "morning", "Oslo", "train", "sister", "book", "rain", "walk", "coffee"]
    for i in range(60):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))
        await engine.experience(envelope(f"{text}.", observed_at=f"2026-05-13T10:{i:02d}:00Z"), wait="indexed")
    request = {"scope": "org:acme/user:alice", "view": "granular", "query": "tea in the garden", "include": ["events"],
               "budgets": {"per_layer_limits": {"events": 10}}, "diagnostics": "full"}  # fmt: skip
    scored: list[str] = []
    make = LayeredTextIndex.scorer

    def counted(self, tokens):
        score = make(self, tokens)
        return lambda doc_id: scored.append(doc_id) or score(doc_id)

    monkeypatch.setattr(LayeredTextIndex, "scorer", counted)
    fast = await engine.recall(request)
    assert scored  # some candidate only the vector search found was scored
    monkeypatch.setattr(candidate_signals.Signals, "_lexical",
                        lambda self, record_id: self.text_index.score(self.text, record_id, self.tokens))
    plain = await engine.recall(request)
    assert fast["layers"] == plain["layers"]
    assert fast["diagnostics"]["items"] == plain["diagnostics"]["items"] and fast["diagnostics"]["items"]


# -- session 33: the vectors the vector search scored, not read back (docs/decisions.md, "The
# top-10 path, session 33") ------------------------------------------------------------------------


@pytest.mark.parametrize("sealed", ["ivf", "annoy"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
async def test_a_search_gives_the_vectors_it_scored_as_a_read_back_gives_them(tmp_path, dtype, sealed):
    """``search(rows=...)``: the vector of every hit a run, an IVF segment or the delta scored is
    the array ``vectors`` reads back, equal element for element (same dtype); an annoy segment's
    hits are left to be read; the hits themselves are those of a search without ``rows``."""
    import numpy as np

    from cortexdb.engine.retrieve.vector_index import VectorIndex

    from .test_vector_ivf import _clustered, _fill

    rng = np.random.default_rng(33)
    vectors = _clustered(rng, 2600, 24)
    index = VectorIndex(24, segment_size=600, dtype=dtype, directory=str(tmp_path), run_rows=100, sealed=sealed)
    await _fill(index, vectors)
    for i in range(0, 2600, 7):  # dead rows in sealed segments
        index.remove(f"evt_{i}")
    for i in range(1, 2600, 50):  # newer vectors in the delta, their sealed rows dead
        index.add(f"evt_{i}", vectors[(i * 7) % 2600])
    for i in range(2600, 2650):  # and ids only the delta holds
        index.add(f"evt_{i}", vectors[i - 2600])
    from cortexdb.engine.retrieve.vector_ivf import IvfRun
    from cortexdb.engine.retrieve.vector_runs import FlatRun

    in_annoy = {s.ids[p] for s in index._segments if not isinstance(s.index, FlatRun | IvfRun) for p in range(len(s.ids))}
    assert len(index._segments) >= 2 and index._delta_ids
    given = 0
    for q in range(0, 2600, 97):
        query = vectors[q]
        rows: dict = {}
        found = index.search(query, 20, rows=rows)
        assert found == index.search(query, 20)
        assert set(rows) <= {doc_id for doc_id, _ in found}
        read = index.vectors([doc_id for doc_id, _ in found])
        for doc_id, _ in found:
            if doc_id in rows:
                assert rows[doc_id].dtype == read[doc_id].dtype == np.float32
                assert np.array_equal(rows[doc_id], read[doc_id])
                given += 1
            else:  # only an annoy segment's hit is left out
                assert sealed == "annoy" and doc_id in in_annoy and doc_id not in index._delta_pos
    assert given


async def test_a_recall_ranks_as_with_every_vector_read_back(engine, monkeypatch):
    """A top-10 recall whose candidates take the vectors their search scored gives the pack (items,
    scores, every candidate's signals) the recall gives when it reads every vector back."""
    from cortexdb.engine.retrieve.layered import LayeredVectorIndex

    from .conftest import envelope

    rng = random.Random(33)
    words = ["tea", "garden", "morning", "Oslo", "train", "sister", "book", "rain", "walk", "coffee"]
    for i in range(60):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))
        await engine.experience(envelope(f"{text}.", observed_at=f"2026-05-13T10:{i:02d}:00Z"), wait="indexed")
    request = {"scope": "org:acme/user:alice", "view": "granular", "query": "tea in the garden", "include": ["events"],
               "budgets": {"per_layer_limits": {"events": 10}}, "diagnostics": "full"}  # fmt: skip
    search = LayeredVectorIndex.search
    given: list[int] = []

    def counted(self, query, limit, prefix, rows=None):
        found = search(self, query, limit, prefix, rows)
        given.append(len(rows or {}))
        return found

    monkeypatch.setattr(LayeredVectorIndex, "search", counted)
    fast = await engine.recall(request)
    assert sum(given)  # candidates took the vectors their search scored
    monkeypatch.setattr(LayeredVectorIndex, "search", lambda self, query, limit, prefix, rows=None: search(self, query, limit, prefix))
    plain = await engine.recall(request)
    assert fast["layers"] == plain["layers"] and fast["layers"]["events"]
    assert fast["diagnostics"]["items"] == plain["diagnostics"]["items"] and fast["diagnostics"]["items"]
