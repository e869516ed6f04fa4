"""An incremental BM25 Okapi inverted index (the ``TextIndex`` of the index stage).

rank-bm25's ``BM25Okapi`` must be rebuilt to add a document and scores every document per query;
this index adds and removes documents in O(tokens) and scores only documents that share a query
term.  Scores follow BM25Okapi's formula exactly (k1, b, and the epsilon floor for negative idf),
so rank-bm25 serves as the reference in tests.
"""

from __future__ import annotations

import math
import re
from collections import Counter

_TOKEN = re.compile(r"[0-9a-z]+")


def tokenize(text: str) -> list[str]:
    return _TOKEN.findall(text.casefold())


class TextIndex:
    def __init__(self, k1: float = 1.5, b: float = 0.75, epsilon: float = 0.25) -> None:
        self.k1, self.b, self.epsilon = k1, b, epsilon
        self._postings: dict[str, dict[str, int]] = {}
        self._terms: dict[str, tuple[str, ...]] = {}  # doc -> its distinct terms (O(doc) removal)
        self._lengths: dict[str, int] = {}
        self._total_length = 0
        self._average_idf: float | None = None

    def __len__(self) -> int:
        return len(self._lengths)

    def __contains__(self, doc_id: str) -> bool:
        return doc_id in self._lengths

    def add(self, doc_id: str, text: str) -> None:
        if doc_id in self._lengths:
            self.remove(doc_id)
        tokens = tokenize(text)
        self._lengths[doc_id] = len(tokens)
        self._total_length += len(tokens)
        counts = Counter(tokens)
        self._terms[doc_id] = tuple(counts)
        for term, count in counts.items():
            self._postings.setdefault(term, {})[doc_id] = count
        self._average_idf = None

    def remove(self, doc_id: str) -> None:
        length = self._lengths.pop(doc_id, None)
        if length is None:
            return
        self._total_length -= length
        for term in self._terms.pop(doc_id, ()):
            docs = self._postings[term]
            del docs[doc_id]
            if not docs:
                del self._postings[term]
        self._average_idf = None

    def _raw_idf(self, doc_freq: int) -> float:
        n = len(self._lengths)
        return math.log(n - doc_freq + 0.5) - math.log(doc_freq + 0.5)

    def _idf(self, term: str) -> float:
        docs = self._postings.get(term)
        if not docs:
            return 0.0
        idf = self._raw_idf(len(docs))
        if idf < 0:
            if self._average_idf is None:
                total = sum(self._raw_idf(len(d)) for d in self._postings.values())
                self._average_idf = total / len(self._postings)
            idf = self.epsilon * self._average_idf
        return idf

    def search_pruned(
        self, query: str, limit: int, common: float = 0.05
    ) -> list[tuple[str, float]]:
        """Top ``limit`` by BM25, generating candidates from the query's rarer terms only.

        Terms found in more than ``common`` of the documents still add their exact contribution
        to every generated candidate, but do not enumerate their (long) posting lists: at 100k
        documents "the" or "with" would otherwise cost more than everything else together.  A
        document matching only common terms is not generated (its score would be low anyway).
        """
        import heapq

        if not self._lengths:
            return []
        terms = tokenize(query)
        cutoff = max(50, common * len(self._lengths))
        present = [t for t in dict.fromkeys(terms) if t in self._postings]
        rare = [t for t in present if len(self._postings[t]) <= cutoff]
        if not rare and present:  # only common words: the rarest of them generates
            rare = [min(present, key=lambda t: len(self._postings[t]))]
        avg_len = self._total_length / len(self._lengths) or 1.0
        k1, b = self.k1, self.b
        lengths = self._lengths
        scores: dict[str, float] = {}
        for term in terms:
            if term in rare:
                docs = self._postings[term]
                idf = self._idf(term)
                for doc_id, tf in docs.items():
                    norm = k1 * (1 - b + b * lengths[doc_id] / avg_len)
                    scores[doc_id] = scores.get(doc_id, 0.0) + idf * tf * (k1 + 1) / (tf + norm)
        for term in terms:
            if term in self._postings and term not in rare:
                docs = self._postings[term]
                idf = self._idf(term)
                for doc_id in scores:
                    tf = docs.get(doc_id)
                    if tf:
                        norm = k1 * (1 - b + b * lengths[doc_id] / avg_len)
                        scores[doc_id] += idf * tf * (k1 + 1) / (tf + norm)
        return heapq.nlargest(limit, scores.items(), key=lambda item: (item[1], item[0]))

    def search_by_prefix(self, query: str, limits: dict[str, int]) -> dict[str, float]:
        """One scoring pass, then the best ``limits[prefix]`` documents of each id prefix."""
        import heapq

        scores = self._scores(query)
        out: dict[str, float] = {}
        for prefix, limit in limits.items():
            items = [
                (doc_id, score) for doc_id, score in scores.items() if doc_id.startswith(prefix)
            ]
            out.update(heapq.nlargest(limit, items, key=lambda item: (item[1], item[0])))
        return out

    def search(
        self, query: str, limit: int | None = None, prefixes: tuple[str, ...] | None = None
    ) -> list[tuple[str, float]]:
        """Documents sharing a query term, best first, with their BM25 Okapi scores; with
        ``prefixes``, only documents whose id starts with one of them (e.g. ``("evt_",)``)."""
        scores = self._scores(query)
        items = scores.items()
        if prefixes is not None:
            items = [(doc_id, score) for doc_id, score in items if doc_id.startswith(prefixes)]
        ranked = sorted(items, key=lambda item: (-item[1], item[0]))
        return ranked if limit is None else ranked[:limit]

    def _scores(self, query: str) -> dict[str, float]:
        if not self._lengths:
            return {}
        avg_len = self._total_length / len(self._lengths) or 1.0
        scores: dict[str, float] = {}
        k1, b = self.k1, self.b
        for term in tokenize(query):
            docs = self._postings.get(term)
            if not docs:
                continue
            idf = self._idf(term)
            for doc_id, tf in docs.items():
                norm = k1 * (1 - b + b * self._lengths[doc_id] / avg_len)
                scores[doc_id] = scores.get(doc_id, 0.0) + idf * tf * (k1 + 1) / (tf + norm)
        return scores
