"""The vocabulary of a ``TextIndex``'s sealed parts (text_segments.py): terms numbered in the order
they were first seen (the order of BM25's document frequencies, so that the average idf sums them
as before); terms seen since the last seal are in a dict, the rest in a blob of UTF-8 bytes with a
sorted table of their hashes.  A kept vocabulary (text_files.py) is read back with ``loaded``."""

from __future__ import annotations

from array import array

import numpy as np

MASK = (1 << 64) - 1


class Vocabulary:
    """Term → id, ids in first-seen order; ``freeze`` moves the recent terms into the blob and
    keeps the frequent ones (``HOT_DF`` documents or more) in a dict as well: a document's common
    words are found without a search (their number is bounded by the language, not the corpus)."""

    HOT_DF = 4

    def __init__(self, terms: list[str] | None = None, df=None) -> None:
        self._new: dict[str, int] = {}
        self._hot: dict[str, int] = {}
        self._blob = bytearray()
        self._offsets = array("Q", [0])  # frozen term i: _blob[_offsets[i] : _offsets[i + 1]]
        self._hashes = np.zeros(0, dtype=np.uint64)  # sorted
        self._ids = np.zeros(0, dtype=np.uint32)  # the term id of each hash
        for term in terms or ():
            self.add(term)
        self.freeze(df)

    def __len__(self) -> int:
        return len(self._offsets) - 1 + len(self._new)

    def get(self, term: str) -> int | None:
        return self.ids([term])[0]

    def ids(self, terms: list[str]) -> list[int | None]:
        """The id of each of ``terms`` (None: not in the vocabulary), one search for the rare."""
        new, hot = self._new, self._hot
        out = [new.get(term) for term in terms]
        missing = [i for i, term_id in enumerate(out) if term_id is None and terms[i] not in hot]
        for i, term_id in enumerate(out):
            if term_id is None and terms[i] in hot:
                out[i] = hot[terms[i]]
        if not missing or not len(self._hashes):
            return out
        hashes, blob, offsets = self._hashes, self._blob, self._offsets
        keys = np.fromiter((hash(terms[i]) & MASK for i in missing), dtype=np.uint64, count=len(missing))
        for i, key, position in zip(missing, keys.tolist(), np.searchsorted(hashes, keys).tolist(), strict=True):
            encoded = terms[i].encode()
            while position < len(hashes) and int(hashes[position]) == key:
                term_id = int(self._ids[position])
                if blob[offsets[term_id] : offsets[term_id + 1]] == encoded:
                    out[i] = term_id
                    break
                position += 1
        return out

    def add(self, term: str) -> int:
        term_id = self._new[term] = len(self)
        return term_id

    def terms(self):
        """Every term, in id order (dead ones too, until a compaction drops them)."""
        for term_id in range(len(self._offsets) - 1):
            yield self._blob[self._offsets[term_id] : self._offsets[term_id + 1]].decode()
        yield from self._new

    def freeze(self, df=None) -> None:
        """Move the recent terms into the blob; those of ``df[id] >= HOT_DF`` stay in the dict."""
        if not self._new:
            return
        first = len(self._offsets) - 1
        for term, term_id in self._new.items():
            self._blob += term.encode()
            self._offsets.append(len(self._blob))
            if df is not None and df[term_id] >= self.HOT_DF:
                self._hot[term] = term_id
        hashes = np.fromiter((hash(t) & MASK for t in self._new), dtype=np.uint64, count=len(self._new))
        ids = np.arange(first, first + len(self._new), dtype=np.uint32)
        order = np.argsort(hashes, kind="stable")
        hashes, ids = hashes[order], ids[order]
        at = np.searchsorted(self._hashes, hashes)
        self._hashes, self._ids = np.insert(self._hashes, at, hashes), np.insert(self._ids, at, ids)
        self._new = {}

    def kept(self, keep: np.ndarray, df) -> Vocabulary:
        """A vocabulary of the terms where ``keep`` (by id) is true, in the same order; ``df``:
        their document frequencies (the kept ones, in order)."""
        self.freeze()
        blob, offsets = self._blob, self._offsets
        return Vocabulary([blob[offsets[i] : offsets[i + 1]].decode() for i in np.flatnonzero(keep).tolist()], df)

    @property
    def frozen(self) -> int:
        """Terms in the blob (ids ``0..frozen - 1``): what a sealed segment may refer to."""
        return len(self._offsets) - 1

    def frozen_terms(self, first: int, last: int) -> tuple[bytes, np.ndarray]:
        """Frozen terms ``first..last - 1``: their UTF-8 bytes and each one's end in them (a
        kept vocabulary chunk, text_files.py)."""
        offsets = np.frombuffer(self._offsets, dtype=np.uint64)[first : last + 1].astype(np.int64)
        return bytes(self._blob[int(offsets[0]) : int(offsets[-1])]), (offsets[1:] - offsets[0]).astype(np.uint64)

    @classmethod
    def loaded(cls, blob: bytes, ends: np.ndarray) -> Vocabulary:
        """A frozen vocabulary of the terms ``blob[ends[i - 1]:ends[i]]`` in id order (kept
        chunks, text_files.py), their hashes computed here (``hash`` is per process); the hot
        terms are set once their document frequencies are known (``heat``)."""
        self = cls()
        self._blob = bytearray(blob)
        self._offsets = array("Q", [0])
        self._offsets.extend(np.asarray(ends, dtype=np.uint64).tolist())
        view = memoryview(self._blob)
        starts = [0, *self._offsets[1:-1]]
        terms = [bytes(view[a:b]).decode() for a, b in zip(starts, self._offsets[1:], strict=True)]
        del view
        hashes = np.fromiter((hash(t) & MASK for t in terms), dtype=np.uint64, count=len(terms))
        order = np.argsort(hashes, kind="stable")
        self._hashes, self._ids = hashes[order], order.astype(np.uint32)
        return self

    def heat(self, df) -> None:
        """The frozen terms of ``df[id] >= HOT_DF`` in the dict too (``freeze``'s rule)."""
        hot = np.flatnonzero(np.frombuffer(df, dtype=np.uint32)[: self.frozen] >= self.HOT_DF)
        blob, offsets = self._blob, self._offsets
        self._hot = {blob[offsets[i] : offsets[i + 1]].decode(): i for i in hot.tolist()}

    def nbytes(self) -> int:
        # a recent or frequent term: its str (~60 B) and dict entry (~40 B)
        return (len(self._blob) + self._offsets.itemsize * len(self._offsets) + self._hashes.nbytes
                + self._ids.nbytes + 100 * (len(self._new) + len(self._hot)))  # fmt: skip
