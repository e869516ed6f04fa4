"""Kept segments mapped at a reopen (text_reopen.py): the part of ``Postings`` (text_postings.py)
that adopts them, every slot dead, revives the slots whose stored document the restore confirms,
and computes BM25's statistics from the confirmed slots' postings."""

from __future__ import annotations

import bisect
from array import array
from typing import TYPE_CHECKING

import numpy as np

from . import text_segments

if TYPE_CHECKING:
    from .text_segments import Segment, Vocabulary


class KeptSlots:
    def keep_in(self, persist: str | None, merge_inline: bool, directory: str | None) -> None:
        """``persist``: the folder of the kept files (text_files.py; with ``merge_inline`` False and
        a ``directory``): the files replaced since the last manifest, the names the manifest
        lists, the vocabulary chunks it lists and the vocabulary they describe; and the text
        hashes of the delta's documents (when ``persist``, else 0) and of the kept slots."""
        if persist is not None and (merge_inline or directory is None):
            raise ValueError("kept text segments need merge_inline=False and a directory")
        self.persist = persist
        self._delta_hash, self._kept_hash = array("Q"), np.zeros(0, dtype=np.uint64)
        self.retired: list[str] = []
        self.named: list[str] | None = None
        self.kept_vocab: list[dict] = []
        self.kept_vocab_of: Vocabulary | None = None
        self.persist_lock: object | None = None
        self.layer: str | None = None  # the layer's id prefix (``evt_``), set by LayeredTextIndex

    @property
    def segments(self) -> list[Segment]:
        """The sealed segments, oldest first (text_files.py keeps them)."""
        return list(self._segments)

    @property
    def prefixes(self) -> set[str]:
        """The id prefixes indexed (a kept manifest's, text_files.py)."""
        return set(self._prefixes)

    def adopt(self, segments: list[Segment], vocab: Vocabulary, prefixes: list[str], keyed: bool) -> None:
        """Take kept segments (contiguous from slot 0) and the vocabulary they refer to, as an
        empty index's first slots, every slot dead until ``confirm`` finds its stored document."""
        if self.slots or len(self.vocab):
            raise ValueError("kept segments are adopted by an empty index only")
        count = segments[-1].base + segments[-1].count
        self._segments, self._bases = list(segments), [segment.base for segment in segments]
        self.vocab, self.df = vocab, array("I", bytes(4 * len(vocab)))
        size = max(1024, count + count // 4)
        self.slot_len = np.zeros(size, dtype=np.uint32)
        self._alive = np.zeros(size, dtype=bool)
        self.slot_key = np.zeros(size, dtype=np.uint64)
        hashes, slots = [], []
        for segment in segments:
            self.slot_key[segment.base : segment.base + segment.count] = segment.doc_key
            blob, starts = bytes(segment.id_blob), segment.id_start.tolist()
            for local in range(segment.count):
                start, end = starts[local], starts[local + 1]
                if end > start:  # a dead slot a merge emptied has no id
                    hashes.append(hash(blob[start:end].decode()) & text_segments.MASK)
                    slots.append(segment.base + local)
        order = np.argsort(np.array(hashes, dtype=np.uint64), kind="stable")  # the sealed ids' table, sorted
        self._id_hash, self._id_slot = np.array(hashes, dtype=np.uint64)[order], np.array(slots, dtype=np.uint32)[order]
        self._delta_base = count
        # each kept slot's text hash, until ``settle_kept`` (read per document by ``kept_slots``)
        self._kept_hash = np.zeros(count, dtype=np.uint64)
        for segment in segments:
            self._kept_hash[segment.base : segment.base + segment.count] = segment.doc_hash
        self._prefixes, self.keyed = set(prefixes), keyed
        self._dead = count
        self.version += 1

    def kept_slots(self, doc_ids: list[str], digests: list[int]) -> list[int | None]:
        """For each of ``doc_ids``: the newest kept slot, not yet confirmed, that indexed it with a
        text of hash ``digests[i]``, or None (one search of the id table for all of them)."""
        hashes, id_slot = self._id_hash, self._id_slot
        keys = np.fromiter((hash(doc_id) & text_segments.MASK for doc_id in doc_ids), dtype=np.uint64, count=len(doc_ids))
        firsts, lasts = np.searchsorted(hashes, keys, side="left"), np.searchsorted(hashes, keys, side="right")
        found = np.flatnonzero(lasts > firsts)
        kept = self._kept_hash
        out: list[int | None] = [None] * len(doc_ids)
        for i, first, last in zip(found.tolist(), firsts[found].tolist(), lasts[found].tolist(), strict=True):
            doc_id, digest, best = doc_ids[i], digests[i], None
            for slot in id_slot[first:last].tolist():
                if (slot < self._delta_base and (best is None or slot > best) and not self._alive[slot]
                        and int(kept[slot]) == digest and self.doc_id_at(slot) == doc_id):  # fmt: skip
                    best = slot
            out[i] = best
        return out

    def confirm(self, slot: int) -> None:
        self._alive[slot] = True

    def settle_kept(self) -> None:
        """After the confirmations: BM25's statistics of the confirmed slots (live documents,
        lengths, document frequencies), exactly what adding their documents would leave."""
        count = self._delta_base
        alive = self._alive[:count]
        self._kept_hash = np.zeros(0, dtype=np.uint64)
        df = np.zeros(len(self.vocab), dtype=np.int64)
        pairs = dead_pairs = 0
        for segment in self._segments:
            lengths = np.bincount(np.asarray(segment.slots, dtype=np.int64) - segment.base,
                                  weights=np.asarray(segment.tfs, dtype=np.float64), minlength=segment.count)  # fmt: skip
            self.slot_len[segment.base : segment.base + segment.count] = lengths.astype(np.uint32)
            sizes = np.diff(np.asarray(segment.fwd_start, dtype=np.int64))
            local = alive[segment.base : segment.base + segment.count]
            df += np.bincount(np.asarray(segment.fwd_terms)[np.repeat(local, sizes)], minlength=len(df))[: len(df)]
            pairs += len(segment.fwd_terms)
            dead_pairs += int(sizes[~local].sum())
        self.df = array("I", df.astype(np.uint32).tobytes())
        self.vocab.heat(self.df)
        self._live = int(alive.sum())
        self.total_length = int(self.slot_len[:count][alive].sum(dtype=np.int64))
        self._dead = count - self._live
        self._pairs, self._dead_pairs = pairs, dead_pairs
        self.version += 1

    def unconfirmed_ids(self) -> tuple[list[str], int]:
        """The ids of kept slots left dead whose document is not live (a record gone since), and
        how many kept slots left dead hold the id of a live document (its text changed: a
        redaction, a re-index, an edit)."""
        gone, changed = [], 0
        for slot in np.flatnonzero(~self._alive[: self._delta_base]).tolist():
            segment = self._segments[bisect.bisect_right(self._bases, slot) - 1]
            local = slot - segment.base  # type: ignore[union-attr]
            if segment.id_start[local + 1] > segment.id_start[local]:  # type: ignore[union-attr]
                doc_id = segment.doc_id(slot)  # type: ignore[union-attr]
                if doc_id not in self:
                    gone.append(doc_id)
                else:
                    changed += 1
        return gone, changed

    @property
    def compaction_due(self) -> bool:
        return self._dead_pairs > max(self.compact_min, self.live_pairs // 2)
