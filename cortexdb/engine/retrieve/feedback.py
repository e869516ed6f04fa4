"""Pseudo-relevance feedback for candidate generation (docs/decisions.md, "Candidates beyond the
question's words").

A question and the turns that answer it often share neither words nor much of an embedding
("What activities does X partake in?" — "I signed up for a pottery class"), so the evidence is
never among the first-stage hits and no re-ranking reaches it.  The best first-stage hits,
though, usually are on the subject: feedback reformulates the query from them and searches
again.

- ``feedback_docs``: the ``m`` best first-stage hits of one layer, by reciprocal-rank fusion of
  the BM25 and vector rankings (no record loaded, no score normalised);
- ``rocchio``: the query vector moved toward those hits' mean vector (Rocchio), unit length;
- ``expansion_terms``: RM3-style expansion of the BM25 query — the terms that weigh most in the
  feedback texts (each text's term frequencies over its length, summed), times an idf taken
  from the candidate pool itself (terms every candidate shares, such as a speaker's name, weigh
  nothing), the query's own terms excluded.
All three are deterministic (ties broken by id or term).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable

import numpy as np

from .text_index import tokenize

RRF_K = 60
_WORD = re.compile(r"[0-9a-z]+")  # the text index's tokens


def alternate(first: list[str], second: list[str]) -> list[str]:
    """Both rankings merged best first, one from each in turn, each id once."""
    merged: dict[str, None] = {}
    for index in range(max(len(first), len(second))):
        for ranking in (first, second):
            if index < len(ranking):
                merged.setdefault(ranking[index], None)
    return list(merged)


def feedback_docs(bm25: dict[str, float], semantic: dict[str, float], prefix: str, m: int) -> list[str]:
    """The ``m`` best ids of ``prefix`` by reciprocal-rank fusion of the two rankings."""
    fused: dict[str, float] = {}
    for ranking in (bm25, semantic):
        ranked = sorted((i for i in ranking if i.startswith(prefix)), key=lambda i: (-ranking[i], i))
        for rank, record_id in enumerate(ranked):
            fused[record_id] = fused.get(record_id, 0.0) + 1.0 / (RRF_K + rank + 1)
    return sorted(fused, key=lambda i: (-fused[i], i))[:m]


def rocchio(vector: np.ndarray, feedback: list[np.ndarray], beta: float) -> np.ndarray:
    """``vector + beta × mean(feedback)``, unit length (the query itself without feedback)."""
    if not feedback or beta <= 0:
        return vector
    moved = np.asarray(vector, dtype=np.float32) + beta * np.mean(np.stack(feedback), axis=0).astype(np.float32)
    norm = float(np.linalg.norm(moved))
    return moved / norm if norm > 0 else vector


def expansion_terms(query: str, feedback: Iterable[str], pool: Iterable[str], n: int) -> list[str]:
    """The ``n`` terms weighing most in ``feedback`` (tf over length, summed, times the pool's
    idf), not among the query's own terms; each as a word of the feedback that stems to it (so a
    query the words are appended to tokenizes to the term)."""
    if n <= 0:
        return []
    own = set(tokenize(query))
    pool_df: Counter[str] = Counter()
    size = 0
    for text in pool:
        pool_df.update(set(tokenize(text)))
        size += 1
    weights: dict[str, float] = {}
    words: dict[str, str] = {}  # term -> the first word that stems to it
    for text in feedback:
        tokens = []
        for word in _WORD.findall(text.casefold()):
            stemmed = tokenize(word)
            if len(stemmed) == 1:
                tokens.append(stemmed[0])
                words.setdefault(stemmed[0], word)
        if not tokens:
            continue
        for term, tf in Counter(tokens).items():
            if term not in own and not term.isdigit():
                weights[term] = weights.get(term, 0.0) + tf / len(tokens)
    for term in weights:
        df = pool_df.get(term, 0)
        weights[term] *= math.log((size + 1) / (df + 0.5))
    ranked = sorted((t for t in weights if weights[t] > 0), key=lambda t: (-weights[t], t))
    return [words[t] for t in ranked[:n]]
