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
