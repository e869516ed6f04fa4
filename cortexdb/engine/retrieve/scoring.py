"""Scoring, MMR and the token-budget knapsack for recall (DESIGN §7).

Signals per candidate, each in [0, 1]: ``semantic`` (cosine, clipped at 0), ``bm25`` (divided by
the best BM25 score of the recall), ``graph`` (how many of its ``supports``/``derives`` neighbours
are candidates too), ``recency`` (half-life decay from the reference time), ``importance`` and
``confidence`` (from the record).  The score is their weighted sum; the weights are in the trail.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

HALF_LIFE_DAYS = 30.0
TOKEN_OVERHEAD = 12  # per item: id, layer and score in the rendered pack


def recency(age_days: float) -> float:
    return math.exp(-math.log(2) * max(0.0, age_days) / HALF_LIFE_DAYS)


def score_candidates(candidates: list[dict[str, Any]], weights: dict[str, float]) -> None:
    """Fill ``signals`` and ``score`` of every candidate in place."""
    best_bm25 = max((c["bm25"] for c in candidates), default=0.0) or 1.0
    present = {c["id"] for c in candidates}
    for c in candidates:
        links = c.get("links", ())
        graph = min(1.0, sum(1 for link in links if link in present) / 2.0)
        signals = {
            "semantic": max(0.0, float(c["semantic"])),
            "bm25": c["bm25"] / best_bm25,
            "graph": graph,
            "recency": c["recency"],
            "importance": c["importance"],
            "confidence": c["confidence"],
        }
        c["signals"] = {k: round(v, 4) for k, v in signals.items()}
        c["score"] = round(sum(weights[k] * v for k, v in signals.items()), 6)


def _similarity(a: dict[str, Any], b: dict[str, Any]) -> float:
    va, vb = a.get("vector"), b.get("vector")
    if va is not None and vb is not None:
        return float(np.dot(va, vb))
    ta, tb = a.get("tokens") or set(), b.get("tokens") or set()
    if not ta or not tb:
        return 0.0
    return len(ta & tb) / len(ta | tb)


def mmr(candidates: list[dict[str, Any]], limit: int, lam: float = 0.7) -> list[dict[str, Any]]:
    """Maximal marginal relevance: relevance traded against redundancy with what is picked."""
    pool = sorted(candidates, key=lambda c: (-c["score"], c["id"]))[: max(limit * 4, limit)]
    picked: list[dict[str, Any]] = []
    while pool and len(picked) < limit:
        best, best_value = None, -math.inf
        for candidate in pool:
            redundancy = max((_similarity(candidate, p) for p in picked), default=0.0)
            value = lam * candidate["score"] - (1 - lam) * redundancy
            if value > best_value:
                best, best_value = candidate, value
        picked.append(best)
        pool.remove(best)
    return picked


def estimate_tokens(text: str) -> int:
    return TOKEN_OVERHEAD + max(1, len(text) // 4)


def knapsack(items: list[dict[str, Any]], budget: int | None) -> tuple[list[dict[str, Any]], int]:
    """Keep the best-scoring items whose tokens fit the budget (greedy by score, skipping what no
    longer fits).  Returns the kept items and how many were evicted — never a silent cut."""
    if budget is None:
        return items, 0
    kept, used, evicted = [], 0, 0
    for item in sorted(items, key=lambda c: (-c["score"], c["id"])):
        cost = item["tokens_estimate"]
        if used + cost <= budget:
            kept.append(item)
            used += cost
        else:
            evicted += 1
    return kept, evicted
