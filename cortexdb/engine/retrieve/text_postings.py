"""The storage of a ``TextIndex`` (text_index.py): documents in slots, their postings in a small
mutable delta and in sealed segments (text_segments.py), tombstones and compaction.

New documents go to the *delta* (per term an ``array('I')`` of (slot, term frequency) pairs, per
document its (term id, tf) pairs and its id); every ``seal_docs`` documents it is sealed into a
segment of flat arrays, memory-mapped from an unlinked file of ``directory`` when there is one,
and the newest segments merge while of similar size (up to ``max_segment_docs`` slots).  Per slot
its length, liveness and tie-break key are numpy arrays; per term its live document frequency an
``array('I')``, so BM25's statistics span segments and delta.  A removed document is a tombstone:
its slot dies and its terms' document frequencies drop at once; seals and merges leave its
postings behind, and ``compact`` rebuilds everything without dead slots and terms.

With ``merge_inline`` False (the engine's), no file is written on the caller's thread: a seal or
a compaction builds its segment in memory, and the next ``merge_plan`` writes it to its file and
maps it (``MergePlan`` of that one segment, built in a worker thread, put in place by
``install`` unless a compaction replaced it meanwhile; decisions.md, "Text segments hold no file
descriptor").
"""

from __future__ import annotations

import bisect
import re
from array import array
from collections import Counter

import numpy as np

from . import text_delta, text_segments
from .text_kept import KeptSlots
from .text_segments import Segment, Vocabulary
from .tokens import tokenize

# the passages of one event (``<id>#p<n>``, see passages.py) share its key; ties among them take
# the exact path (_key_order)
_UUID = re.compile(
    r"^([0-9a-f]{8})-([0-9a-f]{4})-([0-9a-f]{4})-[0-9a-f]{4}-[0-9a-f]{12}(?:#p\d+)?$"
)
SEAL_DOCS = 2048  # documents in the delta before it is sealed
MAX_SEGMENT_DOCS = 65_536  # slots a merge may reach (larger segments stay as they are)


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


class Postings(KeptSlots):
    def __init__(self, *, compact_min: int = 8192, seal_docs: int = SEAL_DOCS, max_segment_docs: int = MAX_SEGMENT_DOCS,
                 directory: str | None = None, merge_inline: bool = True, persist: str | None = None) -> None:  # fmt: skip
        """``merge_inline`` False: segments due to merge, and (with a ``directory``) segments sealed
        or compacted in memory, wait for ``merge_plan`` / ``install`` (the indexer builds the
        merged or mapped segment in a worker thread).  ``persist``: text_kept.py."""
        self.merge_inline = merge_inline
        self.keep_in(persist, merge_inline, directory)
        # removed (document, term) pairs tolerated before a compaction is considered
        self.compact_min = compact_min
        self.seal_docs, self.max_segment_docs, self.directory = seal_docs, max_segment_docs, directory
        self.vocab = Vocabulary()
        self.df = array("I")  # live document frequency per term id
        self._segments: list[Segment] = []
        self._bases: list[int] = []  # each segment's first slot
        # the sealed ids: their hashes, sorted, and the slot of each (a removed id's too, until a
        # compaction: a look-up checks that the slot is alive and holds the id)
        self._id_hash = np.zeros(0, dtype=np.uint64)
        self._id_slot = np.zeros(0, dtype=np.uint32)
        # the delta: slots _delta_base onwards; per delta document its (term id, tf) pairs at
        # _delta_terms[2 * _delta_start[i] : 2 * _delta_start[i + 1]]
        self._delta_base = 0
        self._delta_slot: dict[str, int] = {}  # live delta ids
        self._delta_ids: list[str | None] = []  # None: removed
        self._delta_terms = array("I")
        self._delta_start = array("Q", [0])
        self._delta_postings: dict[int, array] = {}
        self._live = 0
        self.slot_len = np.zeros(1024, dtype=np.uint32)
        self._alive = np.zeros(1024, dtype=bool)
        # ids are "<prefix>_<uuid7>": within one prefix, the uuid's first 64 bits (time + counter)
        # order slots exactly like the id strings, so ties can be broken in numpy
        self.slot_key = np.zeros(1024, dtype=np.uint64)
        self._prefixes: set[str] = set()
        self.keyed = True
        self.total_length = 0
        self._dead = 0  # tombstoned slots since the last compaction
        self._pairs = 0  # (document, term) pairs added since the last compaction
        self._dead_pairs = 0  # those of removed documents
        self.version = 0  # bumped by every change: the key of the cached norms and average idf

    def __len__(self) -> int:
        return self._live

    def __contains__(self, doc_id: str) -> bool:
        return self.slot_of(doc_id) is not None

    @property
    def slots(self) -> int:
        """Slots in use, tombstones included."""
        return self._delta_base + len(self._delta_ids)

    @property
    def dead_pairs(self) -> int:
        """(document, term) pairs of documents removed since the last compaction (a seal or merge
        may have dropped their postings already; their terms stay in the vocabulary)."""
        return self._dead_pairs

    @property
    def live_pairs(self) -> int:
        return self._pairs - self._dead_pairs

    @property
    def segment_sizes(self) -> list[int]:
        return [segment.count for segment in self._segments]

    def terms(self):
        """Every term of the vocabulary, those of removed documents too until a compaction."""
        return self.vocab.terms()

    def estimated_bytes(self) -> int:
        """Anonymous bytes: per-slot arrays and the sealed ids' table, the vocabulary and document
        frequencies, the delta's Python objects, segments held in memory (actors/residency.py)."""
        delta = len(self._delta_ids) * 158 + 8 * len(self._delta_terms) + 100 * len(self._delta_postings)
        per_slot = len(self._alive) * 13 + self._id_hash.nbytes + self._id_slot.nbytes
        return per_slot + self.vocab.nbytes() + 4 * len(self.df) + delta + sum(s.nbytes() for s in self._segments)

    def slot_of(self, doc_id: str) -> int | None:
        slot = self._delta_slot.get(doc_id)
        if slot is not None or not len(self._id_hash):
            return slot
        hashes, key = self._id_hash, hash(doc_id) & text_segments.MASK
        position = int(np.searchsorted(hashes, np.uint64(key)))
        while position < len(hashes) and int(hashes[position]) == key:
            slot = int(self._id_slot[position])
            if self._alive[slot] and self.doc_id_at(slot) == doc_id:
                return slot
            position += 1
        return None

    def _segment_of(self, slot: int) -> Segment | None:
        if slot >= self._delta_base:
            return None
        return self._segments[bisect.bisect_right(self._bases, slot) - 1]

    def doc_id_at(self, slot: int) -> str:
        if slot >= self._delta_base:
            return self._delta_ids[slot - self._delta_base]  # type: ignore[return-value]
        return self._segments[bisect.bisect_right(self._bases, slot) - 1].doc_id(slot)

    def add(self, doc_id: str, text: str, tokens: list[str] | None = None) -> None:
        """Index ``text``, or its ``tokens`` when ``tokenize`` already ran (e.g. off the loop).
        A document of the delta indexed again changes in place (``text_delta``)."""
        if tokens is None:
            tokens = tokenize(text)
        if doc_id in self:
            slot = self._delta_slot.get(doc_id)
            if slot is not None:
                self._replace(slot, tokens)
                self._delta_hash[slot - self._delta_base] = text_segments.text_hash(text) if self.persist else 0
                return
            self.remove(doc_id)
        slot = self.slots
        if slot >= len(self._alive):
            self.slot_len = _grow(self.slot_len, slot)
            self._alive = _grow(self._alive, slot)
            self.slot_key = _grow(self.slot_key, slot)
        self._delta_slot[doc_id] = slot
        self._delta_ids.append(doc_id)
        self._delta_hash.append(text_segments.text_hash(text) if self.persist else 0)
        self._alive[slot] = True
        self.slot_len[slot] = len(tokens)
        self.total_length += len(tokens)
        self._live += 1
        vocab, postings, df, doc_terms = self.vocab, self._delta_postings, self.df, self._delta_terms
        counts = Counter(tokens)
        for (term, count), term_id in zip(counts.items(), vocab.ids(list(counts)), strict=True):
            if term_id is None:
                term_id = vocab.add(term)
                df.append(0)
            held = postings.get(term_id)
            if held is None:
                held = postings[term_id] = array("I")
            held.extend((slot, count))
            df[term_id] += 1
            doc_terms.extend((term_id, count))
        self._delta_start.append(len(doc_terms) // 2)
        self._pairs += len(doc_terms) // 2 - self._delta_start[-2]
        prefix, _, rest = doc_id.rpartition("_")
        match = _UUID.match(rest)
        self._prefixes.add(prefix)
        if match and len(self._prefixes) == 1:
            self.slot_key[slot] = int(match.group(1) + match.group(2) + match.group(3), 16)
        else:
            self.keyed = False
        self.version += 1
        if len(self._delta_ids) >= self.seal_docs:
            self.seal()

    def _replace(self, slot: int, tokens: list[str]) -> None:
        """Re-index a live document of the delta in place, by the difference of its terms
        (text_delta.py: the statistics a remove and an add leave, its slot kept)."""
        local = slot - self._delta_base
        start, end = self._delta_start[local], self._delta_start[local + 1]
        pairs = self._delta_terms[2 * start : 2 * end]
        old = dict(zip(pairs[::2], pairs[1::2], strict=True))
        new = text_delta.term_counts(self.vocab, self.df, tokens)
        text_delta.update_postings(self._delta_postings, self.df, slot, old, new)
        text_delta.rewrite(self._delta_terms, self._delta_start, local, new)
        self.total_length += len(tokens) - int(self.slot_len[slot])
        self.slot_len[slot] = len(tokens)
        self._pairs += len(new) - len(old)
        self.version += 1

    def remove(self, doc_id: str) -> None:
        slot = self._delta_slot.pop(doc_id, None)
        if slot is not None:
            local = slot - self._delta_base
            self._delta_ids[local] = None
            start, end = self._delta_start[local], self._delta_start[local + 1]
            terms = self._delta_terms[2 * start : 2 * end : 2]
        else:
            slot = self.slot_of(doc_id)
            if slot is None:
                return
            terms = self._segment_of(slot).doc_terms(slot).tolist()  # type: ignore[union-attr]
        self._alive[slot] = False
        self._live -= 1
        self.total_length -= int(self.slot_len[slot])
        df = self.df
        for term_id in terms:
            df[term_id] -= 1
        self._dead += 1
        self._dead_pairs += len(terms)
        self.version += 1
        if self._dead_pairs > max(self.compact_min, self.live_pairs // 2):
            self.compact()

    def seal(self, merge: bool = True) -> None:
        """Move the delta into a segment (its removed documents' postings left behind), then
        merge the newest segments while they are of similar size."""
        count = len(self._delta_ids)
        if not count:
            return
        base = self._delta_base
        alive = self._alive[base : base + count]
        columns = text_segments.delta_columns(base, alive, _pairs(self._delta_terms), self._delta_start, self._delta_ids,
                                              np.array(self._delta_hash, dtype=np.uint64), self.slot_key[base : base + count])  # fmt: skip
        self._segments.append(text_segments.build(base, count, columns, self._inline_directory))
        self._bases.append(base)
        live = [(hash(doc_id) & text_segments.MASK, slot) for slot, doc_id in enumerate(self._delta_ids, base) if doc_id is not None]
        self._sealed_ids(np.fromiter((h for h, _ in live), dtype=np.uint64, count=len(live)),
                         np.fromiter((s for _, s in live), dtype=np.uint32, count=len(live)))  # fmt: skip
        self._delta_base += count
        self._delta_slot, self._delta_ids, self._delta_postings = {}, [], {}
        self._delta_terms, self._delta_start, self._delta_hash = array("I"), array("Q", [0]), array("Q")
        self.vocab.freeze(self.df)
        while merge and self.merge_inline:
            plan = self.merge_plan()
            if plan is None:
                break
            self.install(plan, plan.build())

    def _sealed_ids(self, hashes: np.ndarray, slots: np.ndarray) -> None:
        order = np.argsort(hashes, kind="stable")
        at = np.searchsorted(self._id_hash, hashes[order])
        self._id_hash = np.insert(self._id_hash, at, hashes[order])
        self._id_slot = np.insert(self._id_slot, at, slots[order])

    @property
    def _inline_directory(self) -> str | None:
        """Where a seal or a compaction writes its segment: nowhere (memory) when the merges, and
        so the mapping of segments, run elsewhere (``merge_inline`` False)."""
        return self.directory if self.merge_inline else None

    @property
    def needs_merge(self) -> bool:
        return self._due() is not None or self._unmapped() is not None

    def _unmapped(self) -> int | None:
        """The first segment built in memory that belongs in a file (``_inline_directory``)."""
        if self.directory is None or self.merge_inline:
            return None
        return next((i for i, segment in enumerate(self._segments) if not segment.mapped), None)

    def _due(self) -> int | None:
        """The first pair of adjacent segments to merge: the older no larger than the newer and
        both within ``max_segment_docs`` (a binary counter of seals: each document is merged
        about log2(max_segment_docs / seal_docs) times)."""
        segments = self._segments
        for i in range(len(segments) - 1):
            older, newer = segments[i], segments[i + 1]
            if older.count <= newer.count and older.count + newer.count <= self.max_segment_docs:
                return i
        return None

    def merge_plan(self) -> text_segments.MergePlan | None:
        """What the next merge reads (its ``build`` may run in a worker thread: segments are
        immutable, and it reads a copy of the liveness), or None."""
        i, width = self._due(), 2
        if i is None:  # no merge due: a segment to write to its file and map, if any
            i, width = self._unmapped(), 1
            if i is None:
                return None
        chosen = self._segments[i : i + width]
        alive = self._alive[chosen[0].base : chosen[-1].base + chosen[-1].count].copy()
        kept = self.persist is not None  # a named file of the layer's folder (text_files.py)
        return text_segments.MergePlan(chosen, alive, self.persist if kept else self.directory, keep=kept)

    def install(self, plan: text_segments.MergePlan, merged: Segment) -> bool:
        """Put a merge's (or a mapping's) segment in place of its inputs, unless a compaction
        replaced them meanwhile (documents removed during the build are tombstones in it, as
        anywhere)."""
        width = len(plan.segments)
        for i in range(len(self._segments) - width + 1):
            if all(self._segments[i + k] is segment for k, segment in enumerate(plan.segments)):
                self._segments[i : i + width] = [merged]
                self._bases[i : i + width] = [merged.base]
                self.retired += [segment.entry["name"] for segment in plan.segments if segment.entry is not None]
                return True
        return False

    def compact(self) -> None:
        """Rebuild everything into one segment without the dead slots and terms (O(postings),
        amortised over the ``max(compact_min, live pairs / 2)`` removed pairs that trigger it; a
        forget calls it so that no term of a deleted document stays).  Slot order is kept: ties
        break as before."""
        self.seal(merge=False)
        count = self.slots
        alive = self._alive[:count].copy()
        df = np.frombuffer(self.df, dtype=np.uint32).copy()
        term_alive = df > 0
        if self._segments:
            columns = text_segments.columns_of(self._segments, self._alive)
            columns = text_segments.renumbered(columns, alive, np.cumsum(term_alive) - 1)
        live = np.flatnonzero(alive)
        # built before anything changes: a build that fails (a full disk, no descriptor left)
        # leaves the index as it was, tombstones and all, not half-compacted
        built = [text_segments.build(0, len(live), columns, self._inline_directory)] if len(live) else []
        self.retired += [segment.entry["name"] for segment in self._segments if segment.entry is not None]
        self._segments, self._bases = built, [0] if built else []
        self.vocab = self.vocab.kept(term_alive, df[term_alive])
        self.df = array("I", df[term_alive].tobytes())
        keep = alive[self._id_slot]
        self._id_hash, self._id_slot = self._id_hash[keep], (np.cumsum(alive) - 1)[self._id_slot[keep]].astype(np.uint32)
        size = max(1024, len(live) + len(live) // 4)
        for name in ("slot_len", "slot_key"):
            values = np.zeros(size, dtype=getattr(self, name).dtype)
            values[: len(live)] = getattr(self, name)[live]
            setattr(self, name, values)
        self._alive = np.zeros(size, dtype=bool)
        self._alive[: len(live)] = True
        self._delta_base = len(live)
        self._dead = 0
        self._pairs -= self._dead_pairs
        self._dead_pairs = 0
        self.version += 1

    def term_arrays(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        """The live (slots, term frequencies) of ``term`` over segments and delta, slots
        ascending, as new numpy arrays."""
        term_id = self.vocab.get(term)
        slots_parts, tf_parts = [], []
        for segment in self._segments:
            span = segment.postings(term_id)
            if span is not None:
                slots_parts.append(segment.slots[span[0] : span[1]])
                tf_parts.append(segment.tfs[span[0] : span[1]])
        held = self._delta_postings.get(term_id)
        if held:
            pairs = _pairs(held)
            slots_parts.append(pairs[:, 0])
            tf_parts.append(pairs[:, 1])
        if not slots_parts:
            return np.zeros(0, dtype=np.intp), np.zeros(0)
        slots = np.concatenate(slots_parts).astype(np.intp)
        tf = np.concatenate(tf_parts).astype(np.float64)
        if self._dead:
            keep = self._alive[slots]
            slots, tf = slots[keep], tf[keep]
        return slots, tf

    def tf_of(self, slot: int):
        """A function: term id -> ``slot``'s frequency of it (0 or None when absent)."""
        segment = self._segment_of(slot)
        if segment is not None:
            return lambda term_id: segment.tf(term_id, slot)
        local = slot - self._delta_base
        start, end = self._delta_start[local], self._delta_start[local + 1]
        pairs = self._delta_terms[2 * start : 2 * end]
        return dict(zip(pairs[::2], pairs[1::2], strict=True)).get
