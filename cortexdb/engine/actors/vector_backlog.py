"""Derived records' vectors, embedded later and together (``EngineConfig.derived_vectors``).

With a model embedder, a fact, belief, episode or concept is put in the text index when its stage
commits, and its text waits here for its vector.  The backlog is embedded — each distinct text
once, in one call, sorted into the embedder's batches — when:

- the lane has been idle ``derived_vectors_quiet`` seconds, or a flush waits (so a flush, and any
  "until idle", counts these vectors: the lane is not idle while the backlog holds one);
- it holds ``derived_vectors_backlog`` records (then into the running stage's atomic batch);
- a recall is about to search a layer that has records waiting (``candidates.gather``): what a
  recall ranks is the same as with vectors embedded at once;
- the lane stops.

A record re-derived while waiting (an episode that took another turn, a concept that took
another fact) is embedded once, with its latest text; a belief whose claim reads like its fact
shares the fact's vector computation.  Conversation turns (``evt_``) are never deferred: their
vector is what ``wait="indexed"`` promises.  A record removed while waiting is dropped.  After a
crash the waiting ones have no stored vector, and a restart embeds them (``stages.index.restore``).

A record put by a stage whose batch is not written yet is *held* until a commit releases it: a
recall's drain (which writes the vectors at once) skips it, so a group that then fails leaves no
vector row of a record never written (decisions.md, "A recall's drain skips what an uncommitted
group holds"); the lane's own drains (into a batch, or idle: no group in flight) take it.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import numpy as np
import trio

EVENT_PREFIX = "evt_"  # events and their passages: embedded at once
# a concept's summary cites its records by id ("likes pottery [fact_01a2…]"): ids say nothing to a
# language model and cost ~20 tokens each, so the vector is embedded without them (BM25 keeps them)
_CITATION = re.compile(r" ?\[(?:fact|belief|evt|ep|concept)_[0-9a-z-]+(?:#p\d+)?\]")


def embed_text(doc_id: str, text: str) -> str:
    """What a record's vector is embedded from: its indexed text, a concept's without citations."""
    return _CITATION.sub("", text) if doc_id.startswith("concept_") else text


def defers(config: Any, embedder: Any) -> bool:
    """Whether derived records' vectors wait: ``auto`` defers for a model embedder only (the hash
    embedder costs about what the bookkeeping does)."""
    mode = config.derived_vectors
    return mode == "deferred" or (mode == "auto" and not getattr(embedder, "inline", False))


def layer_prefix(doc_id: str) -> str:
    return doc_id.split("_", 1)[0] + "_"


class VectorBacklog:
    """Record id -> the text its vector will be embedded from, in arrival order."""

    def __init__(self, embed: Callable[[list[str]], Awaitable[np.ndarray]]) -> None:
        self.waiting: dict[str, str] = {}
        self.held: set[str] = set()  # put by a batch not written yet (``release`` at its commit)
        self._embed = embed
        self._lock = trio.Lock()  # one embedding at a time (a recall's and the lane's)
        self.embedded_texts = 0  # distinct texts embedded (what a bench reads)

    def __len__(self) -> int:
        return len(self.waiting)

    def __contains__(self, doc_id: str) -> bool:
        return doc_id in self.waiting

    def put(self, doc_id: str, text: str, *, held: bool = False) -> None:
        self.waiting.pop(doc_id, None)  # the latest text, at the end
        self.waiting[doc_id] = text
        if held:
            self.held.add(doc_id)

    def release(self) -> None:
        """The batch that held records is written (or given up with its actor): none is held."""
        self.held.clear()

    def drop(self, doc_id: str) -> None:
        self.waiting.pop(doc_id, None)

    def clear(self) -> None:
        """Forget every waiting record (a rebuild derives the scope's records afresh)."""
        self.waiting.clear()
        self.held.clear()

    def holds_any(self, prefixes: Iterable[str]) -> bool:
        wanted = set(prefixes)
        return any(layer_prefix(doc_id) in wanted for doc_id in self.waiting)

    async def take(self, prefixes: Iterable[str] | None = None, *,
                   skip_held: bool = False) -> list[tuple[str, np.ndarray]]:  # fmt: skip
        """Embed the waiting records (of ``prefixes`` only, when given; not those held, with
        ``skip_held``) and return (id, vector) for those still waiting with the same text
        afterwards, which leave the backlog; one removed or re-derived meanwhile is not returned
        (a re-derived one waits on), nor one held meanwhile when ``skip_held``."""
        async with self._lock:
            wanted = set(prefixes) if prefixes is not None else None
            held = self.held if skip_held else frozenset()
            items = {d: t for d, t in self.waiting.items()
                     if (wanted is None or layer_prefix(d) in wanted) and d not in held}  # fmt: skip
            if not items:
                return []
            texts = list(dict.fromkeys(items.values()))
            vectors = dict(zip(texts, await self._embed(texts), strict=True))
            self.embedded_texts += len(texts)
            out = []
            for doc_id, text in items.items():
                if self.waiting.get(doc_id) == text and not (skip_held and doc_id in self.held):
                    del self.waiting[doc_id]
                    self.held.discard(doc_id)
                    out.append((doc_id, vectors[text]))
            return out
