"""Per-layer indexes behind one face: a record's id prefix (``evt_``, ``fact_``, ``ep_``,
``belief_``) routes it to its layer's own BM25 and vector index.

Separate indexes keep each layer's BM25 statistics its own (short fact texts do not skew the
length normalisation of conversation turns) and let recall take the top k of a layer without
filtering a shared index.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Callable
from typing import Any

import numpy as np
import trio

from . import text_files
from .text_index import TextIndex
from .vector_index import VectorIndex


def _prefix(doc_id: str) -> str:
    """``evt_``, ``fact_``, …: a passage (``evt_…#p3``) lives in its event's layer."""
    return doc_id.split("_", 1)[0] + "_"


def layer_folder(prefix: str) -> str:
    """A layer's folder name: its prefix without the ``_`` (``evt``), hashed if not plain."""
    name = prefix.rstrip("_")
    return name if re.fullmatch(r"[a-z0-9]{1,32}", name) else hashlib.sha256(prefix.encode()).hexdigest()[:32]


def scope_folder(scope: str) -> str:
    """A scope's folder name under ``vector-segments/`` (its path may hold any character)."""
    return hashlib.sha256(scope.encode("utf-8", "surrogatepass")).hexdigest()[:32]


class _Layered:
    """Routing shared by both faces: one index per id prefix, created on first use."""

    def __init__(self, make: Callable[[str], Any]) -> None:
        self._make = make
        self._indexes: dict[str, Any] = {}

    def _for(self, doc_id: str):
        prefix = _prefix(doc_id)
        index = self._indexes.get(prefix)
        if index is None:
            index = self._indexes[prefix] = self._make(prefix)
        return index

    def _existing(self, doc_id: str):
        return self._indexes.get(_prefix(doc_id))

    def parts(self) -> list:
        """The per-layer indexes (what a memory estimate counts, ``actors/residency.py``)."""
        return list(self._indexes.values())

    def remove(self, doc_id: str) -> None:
        index = self._existing(doc_id)
        if index is not None:
            index.remove(doc_id)

    def __contains__(self, doc_id: str) -> bool:
        index = self._existing(doc_id)
        return index is not None and doc_id in index


class LayeredTextIndex(_Layered):
    def __init__(self, directory: str | None = None, persist: str | None = None, **settings: Any) -> None:
        """``directory``: where sealed segments are written and mapped from (unlinked once
        mapped); ``None`` keeps them as arrays in memory.  ``persist``: the scope's folder where
        each layer keeps its sealed segments between runs (a sub-folder a layer, text_files.py).
        ``settings``: ``TextIndex``'s."""
        def make(prefix: str) -> TextIndex:
            index = TextIndex(directory=directory, persist=os.path.join(persist, layer_folder(prefix)) if persist else None,
                              **settings)  # fmt: skip
            index.layer = prefix  # named in its kept manifest: a hashed folder name gives it back
            return index

        super().__init__(make)
        self.directory, self.persist = directory, persist
        self.reopened: dict[str, int] = {}  # a restore's counts (text_reopen.TextReopen.counts)

    def layer(self, prefix: str) -> TextIndex:
        """The layer of ``prefix`` (``evt_``, …), made if it is not yet."""
        return self._for(prefix)

    def layer_holding(self, doc_id: str) -> TextIndex | None:
        return self._existing(doc_id)

    def detach(self, *, purge: bool = False) -> None:
        """Write no kept segment file or manifest any more (the index is being let go); with
        ``purge``, delete the scope's kept segments (its derived records are gone)."""
        for index in self._indexes.values():
            index.persist = None
        if purge and self.persist is not None:
            with text_files.FOLDERS:  # after a manifest write in flight, which then finds persist None
                shutil.rmtree(self.persist, ignore_errors=True)

    async def persist_all(self) -> None:
        """Each layer's manifest brought up to date with its segments (text_files.py)."""
        for index in list(self._indexes.values()):
            await text_files.persist(index)

    def add(self, doc_id: str, text: str, tokens: list[str] | None = None) -> None:
        self._for(doc_id).add(doc_id, text, tokens)

    def __len__(self) -> int:
        return sum(len(index) for index in self._indexes.values())

    def search(self, query: str, limit: int, prefix: str) -> list[tuple[str, float]]:
        index = self._indexes.get(prefix)
        return index.search_pruned(query, limit) if index is not None else []

    @property
    def needs_merge(self) -> bool:
        """Sealed segments are due to merge (``merge``; an index made with ``merge_inline``
        merges as it seals instead)."""
        return any(index.needs_merge for index in self._indexes.values())

    async def merge(self) -> None:
        """Build each due merge of sealed segments in a worker thread, then put it in place (a
        merge reads immutable segments and a copy of the liveness: adds and removes go on)."""
        for index in list(self._indexes.values()):
            plan = index.merge_plan()
            if plan is not None:
                merged = await trio.to_thread.run_sync(plan.build)
                index.install(plan, merged)
                text_files.drop_strays(index, merged)  # not installed, or the index let go
                await text_files.persist(index)

    def compact(self) -> None:
        """Drop what removed documents left in each index (their terms too): after a forget."""
        for index in self._indexes.values():
            if index.dead_pairs or len(index) < index.slots:
                index.compact()

    def score(self, query: str, doc_id: str, tokens: list[str] | None = None) -> float:
        """The exact BM25 score of one document (0.0 when it shares no query term);
        ``tokens``: the query's, when the caller already has them."""
        index = self._existing(doc_id)
        return index.score(query, doc_id, tokens) if index is not None else 0.0

    def scorer(self, tokens: list[str]):
        """``score`` of one query's ``tokens`` for many documents (``TextIndex.scorer`` per
        layer, made on the layer's first document): valid until the index changes."""
        scorers: dict[str, Any] = {}

        def score(doc_id: str) -> float:
            prefix = _prefix(doc_id)
            found = scorers.get(prefix)
            if found is None:
                index = self._indexes.get(prefix)
                found = scorers[prefix] = index.scorer(tokens) if index is not None else (lambda _: 0.0)
            return found(doc_id)

        return score


class LayeredVectorIndex(_Layered):
    def __init__(
        self, dimension: int, *, segment_size: int, trees: int, dtype: str = "float32",
        directory: str | None = None, chunk_rows: int = 1024, run_rows: int | None = None,
        sealed: str = "annoy", persist: str | None = None,
    ) -> None:  # fmt: skip
        """``directory``: where sealed segments are built and memory-mapped (unlinked once
        mapped); ``None`` keeps them in memory.  ``persist``: the scope's folder where each
        layer keeps its sealed segments between runs (a sub-folder a layer, vector_files.py)."""
        super().__init__(
            lambda prefix: VectorIndex(
                dimension, segment_size=segment_size, trees=trees, dtype=dtype,
                directory=directory, chunk_rows=chunk_rows, run_rows=run_rows, sealed=sealed,
                persist=os.path.join(persist, layer_folder(prefix)) if persist else None,
            )
        )  # fmt: skip
        self.dimension, self.persist = dimension, persist
        self.reopened: dict[str, int] = {}  # a restore's counts (vector_reopen.Reopen.counts)

    def detach(self, *, purge: bool = False) -> None:
        """Write no kept segment file or manifest any more (the index is being let go); with
        ``purge``, delete the scope's kept segments (its derived records are gone)."""
        for index in self._indexes.values():
            index.persist = None
        if purge and self.persist is not None:
            shutil.rmtree(self.persist, ignore_errors=True)

    def layer_holding(self, doc_id: str) -> VectorIndex | None:
        """The layer ``doc_id`` would be in, if it exists."""
        return self._existing(doc_id)

    def layer(self, prefix: str) -> VectorIndex:
        """The layer of ``prefix`` (``evt_``, …), made if it is not yet."""
        return self._for(prefix)

    def add(self, doc_id: str, vector: np.ndarray) -> None:
        self._for(doc_id).add(doc_id, vector)

    def vector(self, doc_id: str) -> np.ndarray | None:
        index = self._existing(doc_id)
        return index.vector(doc_id) if index is not None else None

    def vectors(self, doc_ids) -> dict[str, np.ndarray]:
        """The vectors of ``doc_ids`` that have one (``VectorIndex.vectors``, a layer at a time)."""
        by_prefix: dict[str, list[str]] = {}
        for doc_id in doc_ids:
            by_prefix.setdefault(_prefix(doc_id), []).append(doc_id)
        out: dict[str, np.ndarray] = {}
        for prefix, ids in by_prefix.items():
            index = self._indexes.get(prefix)
            if index is not None:
                out.update(index.vectors(ids))
        return out

    @property
    def needs_seal(self) -> bool:
        return any(index.needs_seal for index in self._indexes.values())

    @property
    def needs_merge(self) -> bool:
        return any(index.needs_merge for index in self._indexes.values())

    async def seal(self, *, merge: bool = True) -> None:
        for index in list(self._indexes.values()):
            if index.needs_seal:
                await index.seal(merge=merge)

    async def merge(self) -> None:
        for index in list(self._indexes.values()):
            if index.needs_merge:
                await index.merge()

    async def rewrite(self) -> None:
        """Rebuild every sealed segment that still holds a removed vector, without it (a
        forget: the vector is gone from the index, not filtered at query time)."""
        for index in list(self._indexes.values()):
            await index.rewrite()

    def search(self, query: np.ndarray, limit: int, prefix: str) -> list[tuple[str, float]]:
        index = self._indexes.get(prefix)
        return index.search(query, limit) if index is not None else []
