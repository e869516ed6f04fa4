"""An incremental BM25 Okapi inverted index (the ``TextIndex`` of the index stage).

rank-bm25's ``BM25Okapi`` must be rebuilt to add a document and scores every document per query;
this index adds and removes documents in O(tokens) and scores only documents that share a query
term.  Scores follow BM25Okapi's formula exactly (k1, b, and the epsilon floor for negative idf),
so rank-bm25 serves as the reference in tests.

Memory: documents are interned to integer slots.  New documents go to a small *delta* (per term
an ``array('I')`` of (slot, term frequency) pairs, per document its (term id, tf) pairs and its
id); every ``seal_docs`` documents the delta is sealed into a *segment* of flat arrays
(text_segments.py), memory-mapped from an unlinked file of ``directory`` when there is one, and
segments of similar size merge (up to ``max_segment_docs``), so a sealed document costs a few
bytes of anonymous memory a (document, term) pair, or none with a directory, instead of Python
objects (decisions.md, "BM25 in sealed segments").  Per slot, its length, liveness and tie-break
key stay numpy arrays; per term its live document frequency an ``array('I')``: BM25's statistics
span segments and delta.  A removed document is a tombstone (its slot dead, its terms' document
frequencies decremented at once, so scores never see it); seals and merges leave its postings
behind, and when the removed (document, term) pairs since the last compaction outnumber half the
live ones, ``compact`` rebuilds everything without the dead slots and terms.
"""
from __future__ import annotations

import math

import numpy as np

from .text_postings import Postings
from .tokens import STOPWORDS, tokenize  # noqa: F401 (the index's words; recall imports them here)


class TextIndex(Postings):
    def __init__(self, k1: float = 1.5, b: float = 0.75, epsilon: float = 0.25, **settings) -> None:
        """``settings``: the storage's (``Postings``: ``compact_min``, ``seal_docs``,
        ``max_segment_docs``, ``directory``)."""
        super().__init__(**settings)
        self.k1, self.b, self.epsilon = k1, b, epsilon
        self._average_idf: tuple[int, float] | None = None

    def _raw_idf(self, doc_freq: int) -> float:
        n = len(self)
        return math.log(n - doc_freq + 0.5) - math.log(doc_freq + 0.5)

    def _doc_freq(self, term: str) -> int:
        term_id = self.vocab.get(term)
        return 0 if term_id is None else self.df[term_id]

    def _idf(self, term: str) -> float:
        doc_freq = self._doc_freq(term)
        if not doc_freq:
            return 0.0
        idf = self._raw_idf(doc_freq)
        if idf < 0:
            idf = self.epsilon * self._mean_idf()
        return idf

    def _mean_idf(self) -> float:
        """BM25Okapi's average idf over the terms of the corpus, cached until the next change."""
        if self._average_idf is None or self._average_idf[0] != self.version:
            df = np.frombuffer(self.df, dtype=np.uint32).astype(np.float64)
            df = df[df > 0]
            n = len(self)
            mean = float(np.sum(np.log(n - df + 0.5) - np.log(df + 0.5))) / len(df)
            self._average_idf = (self.version, mean)
        return self._average_idf[1]

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

        if not len(self):
            return []
        terms = tokenize(query)
        cutoff = max(50, common * len(self))
        present = [t for t in dict.fromkeys(terms) if self._doc_freq(t)]
        rare = [t for t in present if self._doc_freq(t) <= cutoff]
        if not rare and present:  # only common words: the rarest of them generates
            rare = [min(present, key=self._doc_freq)]
        avg_len = self.total_length / len(self) or 1.0
        k1 = self.k1
        acc = np.zeros(self.slots)
        generated = np.zeros(self.slots, dtype=bool)
        arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for term in terms:  # duplicates count twice, as in BM25Okapi.get_scores
            if term in rare:
                slots, tf = arrays.get(term) or arrays.setdefault(term, self.term_arrays(term))
                acc[slots] += self._idf(term) * tf * (k1 + 1) / (tf + self._norms(slots, avg_len))
                generated[slots] = True
        for term in terms:
            if term in present and term not in rare:
                slots, tf = arrays.get(term) or arrays.setdefault(term, self.term_arrays(term))
                keep = generated[slots]
                slots, tf = slots[keep], tf[keep]
                acc[slots] += self._idf(term) * tf * (k1 + 1) / (tf + self._norms(slots, avg_len))
        candidates = np.flatnonzero(generated)
        if len(candidates) > limit:
            # the limit-th best score; ties with it are broken by id (largest first), exactly
            # like heapq.nlargest on (score, id), without sorting thousands of equal scores
            scores = acc[candidates]
            threshold = np.partition(scores, len(candidates) - limit)[len(candidates) - limit]
            above = candidates[scores > threshold]
            tied = candidates[scores == threshold]
            need = limit - len(above)
            order = self._key_order(tied) if self.keyed else None
            if order is not None:
                candidates = [*above.tolist(), *tied[order[::-1][:need]].tolist()]
            else:
                chosen = heapq.nlargest(need, tied.tolist(), key=self.doc_id_at)
                candidates = [*above.tolist(), *chosen]
        ranked = sorted(((self.doc_id_at(i), float(acc[i])) for i in candidates), key=lambda item: (item[1], item[0]),
                        reverse=True)  # fmt: skip
        return ranked[:limit]

    def _key_order(self, slots: np.ndarray) -> np.ndarray | None:
        """``slots``' positions in id order, or None when two share a key (the same first 64 bits
        need the string order): one sort, not an ``np.unique`` beside it (decisions.md)."""
        keys = self.slot_key[slots]
        order = np.argsort(keys, kind="stable")
        ordered = keys[order]
        return None if bool((ordered[1:] == ordered[:-1]).any()) else order

    def _norms(self, slots: np.ndarray, avg_len: float) -> np.ndarray:
        """BM25's length normalisation of ``slots``: computed for the postings read, not cached
        for every slot (8 bytes a document; the cache was rebuilt after every add anyway)."""
        return self.k1 * (1 - self.b + self.b * self.slot_len[slots] / avg_len)

    def score(self, query: str, doc_id: str, tokens: list[str] | None = None) -> float:
        """BM25 of one document for ``query`` (or its ``tokens``) — rank-bm25's
        ``get_batch_scores`` for one id: a vector hit gets its real lexical score, not 0."""
        slot = self.slot_of(doc_id)
        if slot is None:
            return 0.0
        avg_len = self.total_length / len(self) or 1.0
        k1, b = self.k1, self.b
        norm = k1 * (1 - b + b * float(self.slot_len[slot]) / avg_len)
        tf_of = self.tf_of(slot)
        total = 0.0
        vocab = self.vocab
        for term in tokenize(query) if tokens is None else tokens:
            term_id = vocab.get(term)
            if term_id is None:
                continue
            tf = tf_of(term_id)
            if tf:
                total += self._idf(term) * tf * (k1 + 1) / (tf + norm)
        return total

    def scorer(self, tokens: list[str]):
        """``score`` for many documents of one query: a function doc id -> its BM25 score, each
        query term's id and idf (and the mean length) looked up once, not per document; the
        same arithmetic in the same order as ``score``.  Valid until the index changes."""
        if not len(self):
            return lambda doc_id: 0.0
        avg_len = self.total_length / len(self) or 1.0
        k1, b = self.k1, self.b
        vocab = self.vocab
        terms = [(term_id, self._idf(term)) for term in tokens if (term_id := vocab.get(term)) is not None]

        def score(doc_id: str) -> float:
            slot = self.slot_of(doc_id)
            if slot is None:
                return 0.0
            norm = k1 * (1 - b + b * float(self.slot_len[slot]) / avg_len)
            tf_of = self.tf_of(slot)
            total = 0.0
            for term_id, idf in terms:
                tf = tf_of(term_id)
                if tf:
                    total += idf * tf * (k1 + 1) / (tf + norm)
            return total

        return score

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
        """The exact score of every document sharing a query term."""
        if not len(self):
            return {}
        avg_len = self.total_length / len(self) or 1.0
        k1 = self.k1
        acc = np.zeros(self.slots)
        hit = np.zeros(self.slots, dtype=bool)
        for term in tokenize(query):
            if not self._doc_freq(term):
                continue
            slots, tf = self.term_arrays(term)
            acc[slots] += self._idf(term) * tf * (k1 + 1) / (tf + self._norms(slots, avg_len))
            hit[slots] = True
        return {self.doc_id_at(i): float(acc[i]) for i in np.flatnonzero(hit).tolist()}
