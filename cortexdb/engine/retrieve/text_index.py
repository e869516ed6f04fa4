"""An incremental BM25 Okapi inverted index (the ``TextIndex`` of the index stage).

rank-bm25's ``BM25Okapi`` must be rebuilt to add a document and scores every document per query;
this index adds and removes documents in O(tokens) and scores only documents that share a query
term.  Scores follow BM25Okapi's formula exactly (k1, b, and the epsilon floor for negative idf),
so rank-bm25 serves as the reference in tests.

Memory: documents are interned to integer slots and every structure is a flat array — per term an
``array('I')`` of (slot, term frequency) pairs in slot order, per slot its (term, frequency)
pairs, its length and its tie-break key — about 16 bytes per distinct (document, term) pair
instead of a dict entry each (docs/decisions.md, "Index memory").  A removed document is a
tombstone (its slot dead, its terms' document frequencies decremented at once, so scores never see
it); when the dead (document, term) pairs outnumber half the live ones, ``compact`` rebuilds the
arrays without them.
"""

from __future__ import annotations

import math
import re
from array import array
from collections import Counter

import numpy as np

from .tokens import STOPWORDS, tokenize  # noqa: F401 (the index's words; recall imports them here)

# the passages of one event (``<id>#p<n>``, see passages.py) share its key; ties among them take
# the exact path (_key_order)
_UUID = re.compile(
    r"^([0-9a-f]{8})-([0-9a-f]{4})-([0-9a-f]{4})-[0-9a-f]{4}-[0-9a-f]{12}(?:#p\d+)?$"
)


def _grow(values: np.ndarray, size: int) -> np.ndarray:
    grown = np.zeros(max(1024, size + size // 4), dtype=values.dtype)
    grown[: len(values)] = values
    return grown


def _pairs(values: array) -> np.ndarray:
    """A copy of an interleaved ``array('I')`` as an (n, 2) uint32 matrix (no buffer stays
    exported, so the array can still grow)."""
    if not values:
        return np.zeros((0, 2), dtype=np.uint32)
    view = np.frombuffer(values, dtype=np.uint32)
    out = view.reshape(-1, 2).copy()
    del view
    return out


class TextIndex:
    def __init__(
        self, k1: float = 1.5, b: float = 0.75, epsilon: float = 0.25, *, compact_min: int = 8192
    ) -> None:
        self.k1, self.b, self.epsilon = k1, b, epsilon
        # dead (document, term) pairs tolerated before a compaction is considered (8 bytes each
        # in the postings and 8 in the per-slot pairs)
        self.compact_min = compact_min
        # terms: id per distinct term; per term id its postings (slot, tf pairs in slot order) and
        # its live document frequency
        self._term_id: dict[str, int] = {}
        self._postings: list[array] = []
        self._df = array("I")
        self._live_terms = 0  # terms with a live document
        # documents: a slot per added document (a re-added id gets a new slot); per slot its
        # (term id, tf) pairs at _doc_terms[2 * _doc_start[slot] : 2 * _doc_start[slot + 1]]
        self._slot: dict[str, int] = {}  # live ids only
        self._slot_ids: list[str | None] = []  # None: removed (a tombstone until compaction)
        self._doc_terms = array("I")
        self._doc_start = array("Q", [0])
        self._slot_len = np.zeros(1024, dtype=np.float64)
        self._alive = np.zeros(1024, dtype=bool)
        # ids are "<prefix>_<uuid7>": within one prefix, the uuid's first 64 bits (time + counter)
        # order slots exactly like the id strings, so ties can be broken in numpy
        self._slot_key = np.zeros(1024, dtype=np.uint64)
        self._prefixes: set[str] = set()
        self._keyed = True
        self._total_length = 0
        self._dead = 0  # tombstoned slots
        self._dead_pairs = 0  # their (term, tf) pairs, still in the postings
        self._version = 0  # bumped by every change: the key of the cached norms and average idf
        self._average_idf: tuple[int, float] | None = None
        self._norm: tuple[tuple[int, float], np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, doc_id: str) -> bool:
        return doc_id in self._slot

    @property
    def slots(self) -> int:
        """Slots in use, tombstones included."""
        return len(self._slot_ids)

    @property
    def dead_pairs(self) -> int:
        """(document, term) pairs of removed documents not compacted away yet."""
        return self._dead_pairs

    @property
    def live_pairs(self) -> int:
        return len(self._doc_terms) // 2 - self._dead_pairs

    def add(self, doc_id: str, text: str, tokens: list[str] | None = None) -> None:
        """Index ``text``, or its ``tokens`` when ``tokenize`` already ran (e.g. off the loop)."""
        if doc_id in self._slot:
            self.remove(doc_id)
        if tokens is None:
            tokens = tokenize(text)
        slot = len(self._slot_ids)
        if slot >= len(self._alive):
            self._slot_len = _grow(self._slot_len, slot)
            self._alive = _grow(self._alive, slot)
            self._slot_key = _grow(self._slot_key, slot)
        self._slot[doc_id] = slot
        self._slot_ids.append(doc_id)
        self._alive[slot] = True
        self._slot_len[slot] = len(tokens)
        self._total_length += len(tokens)
        term_ids, postings, df, doc_terms = self._term_id, self._postings, self._df, self._doc_terms
        for term, count in Counter(tokens).items():
            term_id = term_ids.get(term)
            if term_id is None:
                term_id = term_ids[term] = len(postings)
                postings.append(array("I"))
                df.append(0)
            postings[term_id].extend((slot, count))
            if not df[term_id]:
                self._live_terms += 1
            df[term_id] += 1
            doc_terms.extend((term_id, count))
        self._doc_start.append(len(doc_terms) // 2)
        prefix, _, rest = doc_id.rpartition("_")
        match = _UUID.match(rest)
        self._prefixes.add(prefix)
        if match and len(self._prefixes) == 1:
            self._slot_key[slot] = int(match.group(1) + match.group(2) + match.group(3), 16)
        else:
            self._keyed = False
        self._version += 1

    def remove(self, doc_id: str) -> None:
        slot = self._slot.pop(doc_id, None)
        if slot is None:
            return
        self._slot_ids[slot] = None
        self._alive[slot] = False
        self._total_length -= int(self._slot_len[slot])
        df = self._df
        start, end = self._doc_start[slot], self._doc_start[slot + 1]
        for term_id in self._doc_terms[2 * start : 2 * end : 2]:
            df[term_id] -= 1
            if not df[term_id]:
                self._live_terms -= 1
        self._dead += 1
        self._dead_pairs += end - start
        self._version += 1
        if self._dead_pairs > max(self.compact_min, self.live_pairs // 2):
            self.compact()

    def compact(self) -> None:
        """Rebuild every array without the dead slots and terms (O(postings), amortised over the
        ``max(compact_min, live pairs / 2)`` dead pairs that trigger it; a forget calls it so that
        no term of a deleted document stays).  Slot order is kept: ties break as before."""
        count = len(self._slot_ids)
        alive = self._alive[:count]
        starts = np.frombuffer(self._doc_start, dtype=np.uint64).astype(np.int64)
        sizes = starts[1:] - starts[:-1]
        rows = _pairs(self._doc_terms)[np.repeat(alive, sizes)]
        df = np.frombuffer(self._df, dtype=np.uint32).copy()
        term_alive = df > 0
        new_term = np.cumsum(term_alive) - 1
        rows[:, 0] = new_term[rows[:, 0]]
        live_sizes = sizes[alive]
        new_slot_of_row = np.repeat(np.arange(len(live_sizes), dtype=np.uint32), live_sizes)
        order = np.argsort(rows[:, 0], kind="stable")  # by term, slots ascending within a term
        by_term = rows[:, 0][order]
        pairs = np.stack([new_slot_of_row[order], rows[:, 1][order]], axis=1).astype(np.uint32)
        kept_terms = int(term_alive.sum())
        bounds = np.searchsorted(by_term, np.arange(kept_terms + 1))
        self._postings = [
            array("I", pairs[bounds[i] : bounds[i + 1]].tobytes()) for i in range(kept_terms)
        ]
        names = [term for term, term_id in self._term_id.items() if term_alive[term_id]]
        order_names = sorted(names, key=self._term_id.__getitem__)
        self._term_id = {term: i for i, term in enumerate(order_names)}
        self._df = array("I", df[term_alive].tobytes())
        self._doc_terms = array("I", rows.tobytes())
        self._doc_start = array("Q", np.concatenate([[0], np.cumsum(live_sizes)]).astype(np.uint64).tobytes())
        live = np.flatnonzero(alive)
        size = max(1024, len(live) + len(live) // 4)
        for name in ("_slot_len", "_slot_key"):
            values = np.zeros(size, dtype=getattr(self, name).dtype)
            values[: len(live)] = getattr(self, name)[live]
            setattr(self, name, values)
        self._alive = np.zeros(size, dtype=bool)
        self._alive[: len(live)] = True
        self._slot_ids = [self._slot_ids[i] for i in live.tolist()]
        self._slot = {doc_id: i for i, doc_id in enumerate(self._slot_ids)}
        self._dead = 0
        self._dead_pairs = 0
        self._version += 1

    def _raw_idf(self, doc_freq: int) -> float:
        n = len(self._slot)
        return math.log(n - doc_freq + 0.5) - math.log(doc_freq + 0.5)

    def _doc_freq(self, term: str) -> int:
        term_id = self._term_id.get(term)
        return 0 if term_id is None else self._df[term_id]

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
        if self._average_idf is None or self._average_idf[0] != self._version:
            df = np.frombuffer(self._df, dtype=np.uint32).astype(np.float64)
            df = df[df > 0]
            n = len(self._slot)
            mean = float(np.sum(np.log(n - df + 0.5) - np.log(df + 0.5))) / len(df)
            self._average_idf = (self._version, mean)
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

        if not self._slot:
            return []
        terms = tokenize(query)
        cutoff = max(50, common * len(self._slot))
        present = [t for t in dict.fromkeys(terms) if self._doc_freq(t)]
        rare = [t for t in present if self._doc_freq(t) <= cutoff]
        if not rare and present:  # only common words: the rarest of them generates
            rare = [min(present, key=self._doc_freq)]
        avg_len = self._total_length / len(self._slot) or 1.0
        k1 = self.k1
        norm = self._norms(avg_len)
        acc = np.zeros(len(norm))
        generated = np.zeros(len(norm), dtype=bool)
        arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for term in terms:  # duplicates count twice, as in BM25Okapi.get_scores
            if term in rare:
                slots, tf = arrays.get(term) or arrays.setdefault(term, self._term_arrays(term))
                acc[slots] += self._idf(term) * tf * (k1 + 1) / (tf + norm[slots])
                generated[slots] = True
        for term in terms:
            if term in present and term not in rare:
                slots, tf = arrays.get(term) or arrays.setdefault(term, self._term_arrays(term))
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
            order = self._key_order(tied) if self._keyed else None
            if order is not None:
                candidates = [*above.tolist(), *tied[order[::-1][:need]].tolist()]
            else:
                chosen = heapq.nlargest(need, tied.tolist(), key=ids.__getitem__)
                candidates = [*above.tolist(), *chosen]
        ranked = sorted(((ids[i], float(acc[i])) for i in candidates), key=lambda item: (item[1], item[0]),
                        reverse=True)  # fmt: skip
        return ranked[:limit]

    def _key_order(self, slots: np.ndarray) -> np.ndarray | None:
        """``slots``' positions in id order, or None when two share a key (the same first 64 bits
        need the string order): one sort, not an ``np.unique`` beside it (decisions.md)."""
        keys = self._slot_key[slots]
        order = np.argsort(keys, kind="stable")
        ordered = keys[order]
        return None if bool((ordered[1:] == ordered[:-1]).any()) else order

    def _norms(self, avg_len: float) -> np.ndarray:
        """BM25's length normalisation per slot, cached until a document is added or removed."""
        key = (self._version, avg_len)
        if self._norm is None or self._norm[0] != key:
            lengths = self._slot_len[: len(self._slot_ids)]
            self._norm = (key, self.k1 * (1 - self.b + self.b * lengths / avg_len))
        return self._norm[1]

    def _term_arrays(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        """The live (slots, term frequencies) of ``term``, as new numpy arrays."""
        pairs = _pairs(self._postings[self._term_id[term]])
        slots, tf = pairs[:, 0].astype(np.intp), pairs[:, 1].astype(np.float64)
        if self._dead:
            keep = self._alive[slots]
            slots, tf = slots[keep], tf[keep]
        return slots, tf

    def score(self, query: str, doc_id: str, tokens: list[str] | None = None) -> float:
        """BM25 of one document for ``query`` (or its ``tokens``) — rank-bm25's
        ``get_batch_scores`` for one id: a vector hit gets its real lexical score, not 0."""
        slot = self._slot.get(doc_id)
        if slot is None:
            return 0.0
        avg_len = self._total_length / len(self._slot) or 1.0
        k1, b = self.k1, self.b
        norm = k1 * (1 - b + b * float(self._slot_len[slot]) / avg_len)
        start, end = self._doc_start[slot], self._doc_start[slot + 1]
        pairs = self._doc_terms[2 * start : 2 * end]
        own = dict(zip(pairs[::2], pairs[1::2], strict=True))
        total = 0.0
        term_ids = self._term_id
        for term in tokenize(query) if tokens is None else tokens:
            tf = own.get(term_ids.get(term, -1))
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
        """The exact score of every document sharing a query term."""
        if not self._slot:
            return {}
        avg_len = self._total_length / len(self._slot) or 1.0
        k1 = self.k1
        norm = self._norms(avg_len)
        acc = np.zeros(len(norm))
        hit = np.zeros(len(norm), dtype=bool)
        for term in tokenize(query):
            if not self._doc_freq(term):
                continue
            slots, tf = self._term_arrays(term)
            acc[slots] += self._idf(term) * tf * (k1 + 1) / (tf + norm[slots])
            hit[slots] = True
        ids = self._slot_ids
        return {ids[i]: float(acc[i]) for i in np.flatnonzero(hit).tolist()}
