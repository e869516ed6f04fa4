"""Scoring, MMR and the token-budget knapsack for recall (DESIGN §7).

Candidates are ``model.Candidate`` records.  Signals per candidate, each in [0, 1]: ``semantic``
(cosine, min-max normalised over the candidates), ``bm25`` (divided by the best BM25 score of the
recall), ``graph`` (how many of its ``supports``/``derives`` neighbours are candidates too),
``recency`` (half-life decay of when it happened — valid or observed time — from the reference
time), ``freshness`` (half-life decay of when memory learned or last revised it — its recorded
time — from the reference time: a fact recorded long ago and never confirmed since is stale even
if it is about yesterday), ``importance`` and ``confidence`` (from the record).  The score is
their weighted sum; the weights are in the trail.
"""

from __future__ import annotations

import math

import numpy as np

from ..model.records import Candidate

HALF_LIFE_DAYS = 30.0
TOKEN_OVERHEAD = 2  # per item: its citation marker and line break in the rendered context


def recency(age_days: float, half_life_days: float = HALF_LIFE_DAYS) -> float:
    return math.exp(-math.log(2) * max(0.0, age_days) / half_life_days)


def learned_at(layer: str, record: dict) -> str | None:
    """When memory learned or last revised a record (RFC 3339): a fact's or an episode's current
    version's ``recorded_from``, a belief's ``last_revised_at``, an event's ``recorded_at``."""
    if layer == "events":
        return (record.get("context") or {}).get("recorded_at")
    if layer == "beliefs":
        return record.get("last_revised_at") or record.get("recorded_from")
    return record.get("recorded_from")


SIGNALS = ("semantic", "bm25", "graph", "recency", "importance", "confidence", "freshness")


def score_candidates(candidates: list[Candidate], weights: dict[str, float]) -> None:
    """Fill ``signals`` and ``score`` of every candidate in place."""
    best_bm25 = max((c.bm25 for c in candidates), default=0.0) or 1.0
    # cosine similarities sit in a narrow band whose position depends on the model: min-max
    # normalise them over the candidates, as BM25 is normalised by its best score
    cosines = [float(c.semantic) for c in candidates if c.semantic]
    low, high = (min(cosines), max(cosines)) if cosines else (0.0, 0.0)
    spread = (high - low) or 1.0
    present = {c.id for c in candidates}
    # the weights in SIGNALS order; the score sums the weighted signals in that order, unrounded
    # (the same sum, term for term, as a loop over a signals dict: the per-candidate dicts and
    # generators were a sixth of a pack's ranking)
    w_sem, w_bm25, w_graph, w_rec, w_imp, w_conf, w_fresh = (weights.get(k, 0.0) for k in SIGNALS)
    for c in candidates:
        graph = _graph(present, c.links) if c.links else 0.0
        semantic = (float(c.semantic) - low) / spread if c.semantic else 0.0
        bm25 = c.bm25 / best_bm25
        recency_, importance, confidence, freshness = c.recency, c.importance, c.confidence, c.freshness
        c.signals = {
            "semantic": round(semantic, 4), "bm25": round(bm25, 4), "graph": round(graph, 4),
            "recency": round(recency_, 4), "importance": round(importance, 4),
            "confidence": round(confidence, 4), "freshness": round(freshness, 4),
        }  # fmt: skip
        c.score = round(sum([w_sem * semantic, w_bm25 * bm25, w_graph * graph, w_rec * recency_,
                             w_imp * importance, w_conf * confidence, w_fresh * freshness]), 6)  # fmt: skip


def _graph(present: set[str], links: list[str]) -> float:
    """``min(1, n / 2)`` for ``n`` the links that are candidates (each time listed): only whether
    ``n`` is 0, 1 or more matters, so the distinct ones are counted in C (an episode links
    hundreds of events), and the links listed only when one of them is a candidate."""
    found = present.intersection(links)
    if len(found) == 1:
        return min(1.0, links.count(next(iter(found))) / 2.0)
    return min(1.0, len(found) / 2.0)


def _matrix(pool: list[Candidate]) -> np.ndarray | None:
    """Unit vectors of the pool as rows, or None when some candidate has no vector."""
    vectors = [c.vector for c in pool]
    if not vectors or any(v is None for v in vectors):
        return None
    return np.stack(vectors).astype(np.float32, copy=False)  # stacked already: a copy only to convert


def _jaccard_row(pool: list[Candidate], chosen: Candidate) -> np.ndarray:
    tokens = chosen.tokens or set()
    out = np.zeros(len(pool), dtype=np.float32)
    if tokens:
        for i, candidate in enumerate(pool):
            other = candidate.tokens or set()
            if other:
                out[i] = len(tokens & other) / len(tokens | other)
    return out


def mmr(candidates: list[Candidate], limit: int, lam: float = 0.7) -> list[Candidate]:
    """Maximal marginal relevance: relevance traded against redundancy with what is picked.

    Vectorised: the redundancy of every pooled candidate is kept as a running maximum of its
    similarity to the picked ones (cosine of embeddings; token Jaccard without them).
    """
    pool = sorted(candidates, key=lambda c: (-c.score, c.id))[: max(limit * 4, limit)]
    if not pool or limit <= 0:
        return []
    scores = np.array([c.score for c in pool], dtype=np.float64)
    matrix = _matrix(pool)
    redundancy = np.zeros(len(pool), dtype=np.float64)
    available = np.ones(len(pool), dtype=bool)
    picked: list[Candidate] = []
    while len(picked) < min(limit, len(pool)):
        values = np.where(available, lam * scores - (1 - lam) * redundancy, -np.inf)
        best = int(np.argmax(values))  # ties: the earlier (better-scored, then lower id) wins
        picked.append(pool[best])
        available[best] = False
        similarity = matrix @ matrix[best] if matrix is not None else _jaccard_row(pool, pool[best])
        np.maximum(redundancy, similarity, out=redundancy)
    return picked


def estimate_tokens(text: str | int) -> int:
    """About four characters a token, plus the item's marker; takes a text or its length."""
    size = text if isinstance(text, int) else len(text)
    return TOKEN_OVERHEAD + max(1, size // 4)


def knapsack(items: list[Candidate], budget: int | None) -> tuple[list[Candidate], int]:
    """Keep the best-scoring items whose tokens fit the budget (greedy by score, skipping what no
    longer fits).  Returns the kept items and how many were evicted — never a silent cut."""
    if budget is None:
        return items, 0
    kept, used, evicted = [], 0, 0
    for item in sorted(items, key=lambda c: (-c.score, c.id)):
        cost = item.tokens_estimate
        if used + cost <= budget:
            kept.append(item)
            used += cost
        else:
            evicted += 1
    return kept, evicted
