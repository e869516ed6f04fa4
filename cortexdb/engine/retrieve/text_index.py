"""An incremental BM25 Okapi inverted index (the ``TextIndex`` of the index stage).

rank-bm25's ``BM25Okapi`` must be rebuilt to add a document and scores every document per query;
this index adds and removes documents in O(tokens) and scores only documents that share a query
term.  Scores follow BM25Okapi's formula exactly (k1, b, and the epsilon floor for negative idf),
so rank-bm25 serves as the reference in tests.
"""

from __future__ import annotations

import functools
import math
import re
import threading
from collections import Counter

import numpy as np
import snowballstemmer

_TOKEN = re.compile(r"[0-9a-z]+")
# the passages of one event (``<id>#p<n>``, see passages.py) share its key; ties among them take
# the exact path (_duplicate_keys)
_UUID = re.compile(
    r"^([0-9a-f]{8})-([0-9a-f]{4})-([0-9a-f]{4})-[0-9a-f]{4}-[0-9a-f]{12}(?:#p\d+)?$"
)
# a Snowball stemmer keeps its state on the object: one per thread, as long texts are tokenised
# in a worker thread while recall tokenises its query on the event loop
_STEMMERS = threading.local()
# English function words: in a small scope "did" or "when" can be rare enough to outweigh the
# words that carry the question (docs/decisions.md, "BM25 terms")
STOPWORDS = frozenset(["a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are", "as", "at", "be", "because", "been", "before", "being", "below", "between", "both", "but", "by", "can", "could", "did", "do", "does", "doing", "down", "during", "each", "few", "for", "from", "further", "had", "has", "have", "having", "he", "her", "here", "hers", "herself", "him", "himself", "his", "how", "i", "if", "in", "into", "is", "it", "its", "itself", "just", "me", "more", "most", "my", "myself", "no", "nor", "not", "of", "off", "on", "once", "only", "or", "other", "our", "ours", "ourselves", "out", "over", "own", "same", "she", "should", "so", "some", "such", "than", "that", "the", "their", "theirs", "them", "themselves", "then", "there", "these", "they", "this", "those", "through", "to", "too", "under", "until", "up", "very", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom", "why", "will", "with", "would", "you", "your", "yours", "yourself", "yourselves", "s", "t", "d", "ll", "m", "re", "ve"])


@functools.lru_cache(maxsize=262_144)
def _stem(word: str) -> str:
    stemmer = getattr(_STEMMERS, "stemmer", None)
    if stemmer is None:
        stemmer = _STEMMERS.stemmer = snowballstemmer.stemmer("english")
    return stemmer.stemWord(word)


def tokenize(text: str) -> list[str]:
    """Lower-cased alphanumeric runs, English stop words dropped, Snowball (Porter2) stems."""
    return [_stem(token) for token in _TOKEN.findall(text.casefold()) if token not in STOPWORDS]


class TextIndex:
    def __init__(self, k1: float = 1.5, b: float = 0.75, epsilon: float = 0.25) -> None:
        self.k1, self.b, self.epsilon = k1, b, epsilon
        self._postings: dict[str, dict[str, int]] = {}
        self._terms: dict[str, tuple[str, ...]] = {}  # doc -> its distinct terms (O(doc) removal)
        self._lengths: dict[str, int] = {}
        self._total_length = 0
        self._average_idf: float | None = None
        # numpy view for search_pruned: a slot per document ever added, and per-term arrays of
        # (slots, term frequencies) built on demand and dropped when the term's postings change
        self._slot: dict[str, int] = {}
        self._slot_ids: list[str] = []
        self._slot_len = np.zeros(1024, dtype=np.float64)
        # ids are "<prefix>_<uuid7>": within one prefix, the uuid's first 64 bits (time + counter)
        # order slots exactly like the id strings, so ties can be broken in numpy
        self._slot_key = np.zeros(1024, dtype=np.uint64)
        self._prefixes: set[str] = set()
        self._keyed = True
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._norm: tuple[tuple[int, int, int], np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self._lengths)

    def __contains__(self, doc_id: str) -> bool:
        return doc_id in self._lengths

    def add(self, doc_id: str, text: str, tokens: list[str] | None = None) -> None:
        """Index ``text``, or its ``tokens`` when ``tokenize`` already ran (e.g. off the loop)."""
        if doc_id in self._lengths:
            self.remove(doc_id)
        if tokens is None:
            tokens = tokenize(text)
        self._lengths[doc_id] = len(tokens)
        self._total_length += len(tokens)
        counts = Counter(tokens)
        self._terms[doc_id] = tuple(counts)
        arrays = self._arrays
        for term, count in counts.items():
            self._postings.setdefault(term, {})[doc_id] = count
            arrays.pop(term, None)
        self._average_idf = None
        slot = self._slot.get(doc_id)
        if slot is None:
            slot = self._slot[doc_id] = len(self._slot_ids)
            self._slot_ids.append(doc_id)
            if slot >= len(self._slot_len):
                grown = np.zeros(len(self._slot_len) * 2, dtype=np.float64)
                grown[: len(self._slot_len)] = self._slot_len
                self._slot_len = grown
                keys = np.zeros(len(grown), dtype=np.uint64)
                keys[: len(self._slot_key)] = self._slot_key
                self._slot_key = keys
            prefix, _, rest = doc_id.rpartition("_")
            match = _UUID.match(rest)
            self._prefixes.add(prefix)
            if match and len(self._prefixes) == 1:
                self._slot_key[slot] = int(match.group(1) + match.group(2) + match.group(3), 16)
            else:
                self._keyed = False
        self._slot_len[slot] = len(tokens)

    def remove(self, doc_id: str) -> None:
        length = self._lengths.pop(doc_id, None)
        if length is None:
            return
        self._total_length -= length
        for term in self._terms.pop(doc_id, ()):
            self._arrays.pop(term, None)
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
        k1 = self.k1
        norm = self._norms(avg_len)
        acc = np.zeros(len(norm))
        generated = np.zeros(len(norm), dtype=bool)
        for term in terms:  # duplicates count twice, as in BM25Okapi.get_scores
            if term in rare:
                slots, tf = self._term_arrays(term)
                acc[slots] += self._idf(term) * tf * (k1 + 1) / (tf + norm[slots])
                generated[slots] = True
        for term in terms:
            if term in self._postings and term not in rare:
                slots, tf = self._term_arrays(term)
                keep = generated[slots]
                slots, tf = slots[keep], tf[keep]
                acc[slots] += self._idf(term) * tf * (k1 + 1) / (tf + norm[slots])
        candidates = np.flatnonzero(generated)
        ids = self._slot_ids
        if len(candidates) > limit:
            # the limit-th best score; ties with it are broken by id (largest first), exactly
            # like heapq.nlargest on (score, id), without sorting thousands of equal scores
            scores = acc[candidates]
            threshold = np.partition(scores, len(candidates) - limit)[len(candidates) - limit]
            above = candidates[scores > threshold]
            tied = candidates[scores == threshold]
            need = limit - len(above)
            if self._keyed and not self._duplicate_keys(tied):
                best = tied[np.argsort(self._slot_key[tied], kind="stable")[::-1][:need]]
                candidates = [*above.tolist(), *best.tolist()]
            else:
                chosen = heapq.nlargest(need, tied.tolist(), key=ids.__getitem__)
                candidates = [*above.tolist(), *chosen]
        ranked = sorted(((ids[i], float(acc[i])) for i in candidates), key=lambda item: (item[1], item[0]),
                        reverse=True)  # fmt: skip
        return ranked[:limit]

    def _duplicate_keys(self, slots: np.ndarray) -> bool:
        """Two ids with the same first 64 bits (different random tails) need the string order."""
        keys = self._slot_key[slots]
        return len(np.unique(keys)) != len(keys)

    def _norms(self, avg_len: float) -> np.ndarray:
        """BM25's length normalisation per slot, cached until a document is added or removed."""
        key = (len(self._slot_ids), len(self._lengths), self._total_length)
        if self._norm is None or self._norm[0] != key:
            lengths = self._slot_len[: len(self._slot_ids)]
            self._norm = (key, self.k1 * (1 - self.b + self.b * lengths / avg_len))
        return self._norm[1]

    def _term_arrays(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        cached = self._arrays.get(term)
        if cached is None:
            docs = self._postings[term]
            slot = self._slot
            slots = np.fromiter((slot[d] for d in docs), dtype=np.int64, count=len(docs))
            tf = np.fromiter(docs.values(), dtype=np.float64, count=len(docs))
            cached = self._arrays[term] = (slots, tf)
        return cached

    def score(self, query: str, doc_id: str) -> float:
        """BM25 of one document for ``query`` — rank-bm25's ``get_batch_scores`` for one id: a
        candidate found by the vector search gets its real lexical score, not 0."""
        length = self._lengths.get(doc_id)
        if length is None:
            return 0.0
        avg_len = self._total_length / len(self._lengths) or 1.0
        k1, b = self.k1, self.b
        norm = k1 * (1 - b + b * length / avg_len)
        total = 0.0
        for term in tokenize(query):
            docs = self._postings.get(term)
            tf = docs.get(doc_id) if docs else None
            if tf:
                total += self._idf(term) * tf * (k1 + 1) / (tf + norm)
        return total

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
