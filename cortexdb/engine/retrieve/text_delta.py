"""Re-indexing a document of a ``Postings`` delta in place (text_postings.py), by the difference
of its terms: a concept's summary is re-indexed at every re-synthesis of its concept, and from
one version to the next most of its terms and their frequencies stay what they were.

A re-add otherwise tombstones the document's slot and gives it a new one, every term's postings
an entry more; in place, only the terms whose frequency changed touch their postings (an entry
removed, inserted at its slot's place, or its frequency set), the document frequencies of the
terms it lost or gained move by one, and the document's own (term id, tf) pairs are rewritten in
the order a fresh add writes them.  Every statistic BM25 reads (live documents, document
frequencies, lengths, term frequencies) ends as a remove and an add leave it, so scores are the
same; ties break by id, not by slot (decisions.md, "Concept summaries re-indexed by their
difference").  A sealed document is re-added as before (segments are immutable).
"""

from __future__ import annotations

from array import array
from collections import Counter
from typing import Any

import numpy as np


def _position(held: array, slot: int) -> int:
    """Where ``slot``'s (slot, tf) pair is, or belongs, in a term's interleaved postings (slots
    ascending)."""
    low, high = 0, len(held) // 2
    while low < high:
        middle = (low + high) // 2
        if held[2 * middle] < slot:
            low = middle + 1
        else:
            high = middle
    return 2 * low


def term_counts(vocab: Any, df: array, tokens: list[str]) -> dict[int, int]:
    """Each term id of ``tokens`` (new terms added to ``vocab`` and ``df``) and its frequency, in
    the order a fresh add writes them."""
    counts = Counter(tokens)
    new: dict[int, int] = {}
    for (term, count), term_id in zip(counts.items(), vocab.ids(list(counts)), strict=True):
        if term_id is None:
            term_id = vocab.add(term)
            df.append(0)
        new[term_id] = count
    return new


def update_postings(postings: dict[int, array], df: array, slot: int, old: dict[int, int], new: dict[int, int]) -> None:
    """Move ``slot``'s entries in the delta's postings from its ``old`` (term id: tf) to ``new``:
    only the terms whose frequency changed are touched."""
    for term_id in old.keys() - new.keys():
        held = postings[term_id]
        at = _position(held, slot)
        del held[at : at + 2]
        if not held:
            del postings[term_id]
        df[term_id] -= 1
    for term_id, count in new.items():
        before = old.get(term_id)
        if before == count:
            continue
        held = postings.get(term_id)
        if held is None:
            held = postings[term_id] = array("I")
        at = _position(held, slot)
        if before is None:
            held[at:at] = array("I", (slot, count))
            df[term_id] += 1
        else:
            held[at + 1] = count


def rewrite(doc_terms: array, starts: array, local: int, new: dict[int, int]) -> None:
    """The delta's ``local``-th document's (term id, tf) pairs in its forward array
    (``doc_terms``, a document's at ``starts[i]:starts[i + 1]``), the later documents' starts
    shifted when their number changed."""
    start, end = starts[local], starts[local + 1]
    flat = array("I")
    for term_id, count in new.items():
        flat.extend((term_id, count))
    doc_terms[2 * start : 2 * end] = flat
    shift = len(new) - (end - start)
    if shift:
        view = np.frombuffer(starts, dtype=np.uint64)
        if shift > 0:
            view[local + 1 :] += np.uint64(shift)
        else:
            view[local + 1 :] -= np.uint64(-shift)
        del view  # no buffer stays exported: the array still grows
