"""Cheaper recall steps give the same answers as the plain computations they replace
(docs/decisions.md, "Recall latency: the same answers for less"): the candidate scores, the
BM25 of a vector-only hit, the order of tied BM25 hits."""

from __future__ import annotations

import heapq
import random
import uuid

import pytest

from cortexdb.engine.model import Candidate
from cortexdb.engine.retrieve import planner, scoring
from cortexdb.engine.retrieve.text_index import TextIndex, tokenize


def _reference_scores(candidates: list[Candidate], weights: dict[str, float]) -> list[tuple[dict, float]]:
    """score_candidates as it was written first: a signals dict per candidate, summed in order."""
    best_bm25 = max((c.bm25 for c in candidates), default=0.0) or 1.0
    cosines = [float(c.semantic) for c in candidates if c.semantic]
    low, high = (min(cosines), max(cosines)) if cosines else (0.0, 0.0)
    spread = (high - low) or 1.0
    present = {c.id for c in candidates}
    out = []
    for c in candidates:
        graph = min(1.0, sum(1 for link in c.links if link in present) / 2.0)
        signals = {
            "semantic": (float(c.semantic) - low) / spread if c.semantic else 0.0,
            "bm25": c.bm25 / best_bm25, "graph": graph, "recency": c.recency,
            "importance": c.importance, "confidence": c.confidence, "freshness": c.freshness,
        }  # fmt: skip
        out.append(({k: round(v, 4) for k, v in signals.items()},
                    round(sum(weights.get(k, 0.0) * v for k, v in signals.items()), 6)))  # fmt: skip
    return out


def _candidates(rng: random.Random, count: int) -> list[Candidate]:
    ids = [f"evt_{i}" for i in range(count)]
    out = []
    for record_id in ids:
        links = [rng.choice(ids + ["evt_elsewhere"]) for _ in range(rng.choice([0, 1, 3, 40]))]
        out.append(Candidate(
            layer="events", id=record_id, record={"id": record_id}, text="t", time="2026-01-01T00:00:00Z",
            importance=rng.choice([0.0, 0.5, 1.0, rng.random()]), confidence=rng.choice([1.0, rng.random()]),
            links=links, chain={}, raw_size=10, bm25=rng.choice([0.0, rng.random() * 12]),
            semantic=rng.choice([0.0, rng.uniform(-1, 1)]), recency=rng.random(), freshness=rng.random(),
        ))  # fmt: skip
    return out


@pytest.mark.parametrize("plan", ["EXPLORATORY_HYBRID", "TEMPORAL_SCAN", "RELATIONSHIP_EXPAND", "ENTITY_ATTRIBUTE_LOOKUP"])
def test_candidate_scores_are_bit_for_bit_the_plain_sums(plan):
    rng = random.Random(plan)
    for weights in (planner.weights_for(plan), planner.weights_for(plan, 0.2), planner.single_signal("vector"),
                    {"semantic": 0.5, "bm25": 0.5}):  # fmt: skip
        candidates = _candidates(rng, 60)
        expected = _reference_scores(candidates, weights)
        scoring.score_candidates(candidates, weights)
        for candidate, (signals, score) in zip(candidates, expected, strict=True):
            assert candidate.signals == signals
            assert candidate.score == score  # equal, not approximately


def test_the_bm25_of_one_document_is_the_same_with_the_query_tokenized_beforehand():
    index = TextIndex()
    for i, text in enumerate(["Caroline paints with her kids", "kids and paint, paint again", "nothing here"]):
        index.add(f"d{i}", text)
    for query in ("When did Caroline go painting with the kids?", "paint paint", "", "unknown words"):
        tokens = tokenize(query)
        for doc_id in ("d0", "d1", "d2", "missing"):
            assert index.score(query, doc_id, tokens) == index.score(query, doc_id)


def _uuid7ish(rng: random.Random, head: int) -> str:
    return str(uuid.UUID(int=(head << 64) | rng.getrandbits(64)))


@pytest.mark.parametrize("shared_head", [False, True])
def test_tied_bm25_hits_are_ordered_by_id_whether_or_not_two_ids_share_a_key(shared_head):
    """Hundreds of identical texts tie; the kept ones are the largest ids, as heapq.nlargest on
    (score, id) keeps them.  Two ids with the same first 64 bits take the string comparison."""
    rng = random.Random(5)
    index = TextIndex()
    ids = []
    for i in range(300):
        head = 1_000 + (7 if shared_head and i in (150, 151) else i)
        ids.append(f"evt_{_uuid7ish(rng, head)}")
    rng.shuffle(ids)
    for doc_id in ids:
        index.add(doc_id, "Elena works at Globex on the data team")
    index.add("evt_" + _uuid7ish(rng, 5), "Elena and Globex and Globex again, Elena")
    for limit in (1, 5, 20, 299):
        got = index.search_pruned("What does Elena do at Globex?", limit)
        every = index.search("What does Elena do at Globex?")
        expected = heapq.nlargest(limit, every, key=lambda item: (item[1], item[0]))
        assert got == sorted(expected, key=lambda item: (item[1], item[0]), reverse=True)
