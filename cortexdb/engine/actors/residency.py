"""Which scopes stay open: an open scope's estimated memory and the choice of scopes to release.

An open scope is its actor with the derivation lane's state: the text and vector indexes and the
decoded records (``state.PartitionState``).  DESIGN §3 has the supervisor stop idle actors, their
state reloading from storage on the next message; ``supervisor.ScopeSupervisor`` does it with
the two pure functions here (``sweep``, ``release``; docs/decisions.md, "Releasing idle scopes").

**The estimate** (``scope_bytes``) counts what the scope holds and multiplies by sizes measured
once with tracemalloc (within 3 % of the allocations a release frees; bench/scopes.py prints
the estimate beside the RSS a release frees), rather than measuring RSS, which is per process,
or walking the object graph, which costs more than it tells.  It is an allocation estimate, so
an upper bound of the RSS the scope's structures hold (docs/decisions.md, "Releasing idle scopes").  An index that knows better reports its own ``estimated_bytes()``; otherwise:

| what                                       | bytes each                                      |
|--------------------------------------------|-------------------------------------------------|
| an open actor (tasks, channels, lane)      | ``ACTOR_BYTES``                                 |
| a vector id in a layer's delta (the index's maps) | ``VECTOR_ID_BYTES``                      |
| a vector id in a sealed segment (sorted bytes, a dead flag) | ``SEALED_ID_BYTES``             |
| a row of a layer's exact delta, allocated ``chunk_rows`` at a time (the capacity counts, an upper bound: zeroed pages not yet written may not be resident) | dimension × item size (2: float16) + ``DELTA_ROW_EXTRA`` |
| a vector sealed in an in-memory annoy segment | (4 × dimension + 12) × ``ANNOY_NODES``       |
| a vector sealed in a data dir's segment or run | ``SEALED_ROW_BYTES`` (its rows are file-backed pages the kernel can drop) |
| a text-index slot (per-slot arrays hold at least ``TEXT_MIN_SLOTS``) | ``TEXT_SLOT_BYTES`` + ``TEXT_SLOT_ARRAYS`` |
| a (document, term) posting, with its share of the term dictionary | ``TEXT_PAIR_BYTES``      |
| a decoded record (event, fact, belief, episode) | ``RECORD_BYTES``                           |
| a live belief in its subject's summary (``subject_beliefs``) | ``DIGEST_BYTES``              |

**The choice** (``to_release``), over the open scopes from the least recently used:

| the scope                                                   | released?                      |
|-------------------------------------------------------------|--------------------------------|
| busy: a request or read in hand, a message waiting, events  | no                             |
| queued or being derived, a lane item, a vector build; or held |                              |
| idle, unused for ``idle_timeout`` seconds or more           | yes                            |
| idle, while the open scopes' estimate exceeds the budget    | yes, until it is within it — never the most recently used scope (one scope larger than the budget would otherwise be rebuilt at every request) |
| otherwise                                                   | no                             |
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

ACTOR_BYTES = 24 * 1024
VECTOR_ID_BYTES = 200
SEALED_ID_BYTES = 48  # ``evt_<uuid>`` is 40 bytes, a passage's ``#p<n>`` 3-4 more, its dead flag 1
DELTA_ROW_EXTRA = 3  # the row's id-prefix code (int16) and live flag
SEALED_ROW_BYTES = 20  # a run's sketch figures (12), an IVF segment's two position maps (8)
ANNOY_NODES = 1.3  # annoy's split nodes: about trees × 2 / (dimension + 2) more nodes per item
TEXT_SLOT_BYTES = 160
TEXT_SLOT_ARRAYS = 17  # an index without its own estimate: length (float64), key (uint64), alive (bool)
TEXT_MIN_SLOTS = 1024
TEXT_PAIR_BYTES = 40  # 16 in the postings and the slot's pairs; ~650 terms per 1,900 pairs at 100 events
RECORD_BYTES = 1536
MEMBER_ROW_BYTES = 225  # an open episode's member row kept decoded (storage/episode_rows.py): 225 measured
DIGEST_BYTES = 500  # a live belief in its subject's summary: 413 measured, its claim key (~100) shared


@attrs.frozen
class OpenScope:
    """One open scope as a sweep sees it."""

    scope: str
    last_used: float  # Trio time of the latest message sent to it
    use: int  # the supervisor's count of messages sent when it was last used (the LRU order)
    bytes: int  # its estimate (``scope_bytes``)
    idle: bool  # releasable: nothing in hand, queued or running, and not held


def vector_bytes(index: Any) -> int:
    """One layer's ``retrieve.vector_index.VectorIndex`` (an attribute it lacks counts as none)."""
    own = getattr(index, "estimated_bytes", None)
    if callable(own):
        return int(own())
    live = len(index)
    sealed = sum(getattr(index, "segment_sizes", ()))
    chunk = max(1, getattr(index, "chunk_rows", 1))
    capacity = (max(0, live - sealed) // chunk + 1) * chunk
    dimension, dtype = getattr(index, "dimension", 0), getattr(index, "dtype", "float32")
    row = dimension * np.dtype(dtype).itemsize + DELTA_ROW_EXTRA + (4 if dtype == "int8" else 0)
    total = max(0, live - sealed) * VECTOR_ID_BYTES + sealed * SEALED_ID_BYTES + capacity * row
    if getattr(index, "directory", None) is None:  # segments in anonymous memory (memory backend)
        total += int(sealed * (4 * dimension + 12) * ANNOY_NODES)
    else:  # file-backed rows; in memory, a run's sketch figures and an IVF segment's position maps
        total += sealed * SEALED_ROW_BYTES
    return total


def text_bytes(index: Any) -> int:
    """One layer's ``retrieve.text_index.TextIndex`` (removed documents count until compacted)."""
    own = getattr(index, "estimated_bytes", None)
    if callable(own):
        return int(own())
    slots = getattr(index, "slots", len(index))
    pairs = getattr(index, "live_pairs", 0) + getattr(index, "dead_pairs", 0)
    return slots * TEXT_SLOT_BYTES + max(slots, TEXT_MIN_SLOTS) * TEXT_SLOT_ARRAYS + pairs * TEXT_PAIR_BYTES


def scope_bytes(state: Any, decoded_extra: int = 0) -> int:
    """An open scope's estimate from its lane's ``PartitionState`` (``decoded_extra``: records the
    actor keeps decoded besides, e.g. recall's episodes)."""
    vectors = sum(vector_bytes(index) for index in state.vector_index.parts())
    texts = sum(text_bytes(index) for index in state.text_index.parts())
    decoded = len(state.events) + len(state.facts) + len(state.beliefs) + len(state.belief_by_id)
    digests = getattr(getattr(state, "subject_beliefs", None), "held", 0)  # subject_beliefs.py
    return ACTOR_BYTES + vectors + texts + (decoded + decoded_extra) * RECORD_BYTES + digests * DIGEST_BYTES


def to_release(scopes: list[OpenScope], *, now: float, idle_timeout: float,
               budget_bytes: int) -> list[str]:  # fmt: skip
    """The scopes to release, least recently used first (the table above); ``budget_bytes`` 0:
    no budget."""
    order = sorted(scopes, key=lambda open_scope: open_scope.use)
    newest = order[-1].scope if order else None
    total = sum(open_scope.bytes for open_scope in order)
    chosen = []
    for open_scope in order:
        if not open_scope.idle:
            continue
        timed_out = now - open_scope.last_used >= idle_timeout
        over = budget_bytes > 0 and total > budget_bytes and open_scope.scope != newest
        if timed_out or over:
            chosen.append(open_scope.scope)
            total -= open_scope.bytes
    return chosen
