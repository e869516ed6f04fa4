"""The sealed parts of a vector index (vector_index.py): a segment (an annoy index or a flat run,
with its ids sorted, its dead mask and the rows kept beside it) and the annoy build."""

from __future__ import annotations

import os
import uuid

import numpy as np

from ..memtrim import release_free_memory
from .vector_ids import Dead, SortedIds
from .vector_runs import FlatRun, SegmentRows


class Segment:
    """A sealed part of a ``VectorIndex``: an annoy index or a flat run (or an IVF one), its ids
    sorted (vector_ids.py: a vector's position is its id's rank), its dead mask."""

    def __init__(self, annoy_index, ids: SortedIds, rows: FlatRun | None = None) -> None:
        self.index = annoy_index
        self.ids = ids
        # the rows as stored, by position: a flat run is its own; an annoy segment built in a
        # directory has a flat run of the same rows beside it, so a vector is read back with one
        # pread, not from annoy's item list (decisions.md, "Recall at 100k: what a candidate costs")
        self.rows = annoy_index if isinstance(annoy_index, FlatRun) else rows
        self.dead = Dead(len(ids))  # removed, or superseded by a newer vector elsewhere

    def unload(self) -> None:
        """Let the index's (and its rows') pages go now, not when the object is collected."""
        if self.index is not None:
            self.index.unload()
        if self.rows is not None and self.rows is not self.index:
            self.rows.unload()


def merged(segments: list[Segment], dead_before: list[np.ndarray]) -> tuple[SortedIds, SegmentRows]:
    """The live ids of ``segments`` (not dead in ``dead_before``, their masks when the merge
    began) in one sorted list, and the rows to build from in that order: numpy arrays of each
    row's segment and position there, no Python object per row (in the build's thread)."""
    alive = [np.flatnonzero(~dead) for dead in dead_before]
    keys = np.concatenate([segment.ids.keys[a] for segment, a in zip(segments, alive, strict=True)])
    order = np.argsort(keys, kind="stable")  # each segment's ids are sorted: its order is kept
    sources = np.concatenate([np.full(len(a), k, dtype=np.int16) for k, a in enumerate(alive)])[order]
    positions = np.concatenate(alive)[order]
    holders = [segment.rows if segment.rows is not None else segment.index for segment in segments]
    return SortedIds(keys[order]), SegmentRows(holders, sources, positions)


def died_meanwhile(segments: list[Segment], dead_before: list[np.ndarray], rows: SegmentRows) -> list[int]:
    """The positions in the merged segment (``merged``'s ``rows``) of the vectors that died in
    ``segments`` while it was built (removed, or superseded by a newer vector)."""
    out: list[int] = []
    for k, (segment, before) in enumerate(zip(segments, dead_before, strict=True)):
        died = segment.dead.mask & ~before
        if died.any():
            chosen = np.flatnonzero(rows.sources == k)
            out += chosen[died[rows.positions[chosen]]].tolist()
    return out


def build_annoy(rows, dimension: int, trees: int, directory: str | None):
    """An annoy index of ``rows`` (float32 vectors by position), built in a file of ``directory``
    and served memory-mapped from it when there is one, the file unlinked once mapped (in a
    worker thread)."""
    from annoy import AnnoyIndex

    index = AnnoyIndex(dimension, "angular")
    path = None
    if directory is not None:
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"{uuid.uuid4().hex}.ann")
        index.on_disk_build(path)
    try:
        for position in range(len(rows)):
            index.add_item(position, rows[position])
        index.build(trees, n_jobs=1)
        release_free_memory()  # the build's scratch memory (and the old delta's) goes back
    finally:
        if path is not None:  # mapped: the mapping keeps the file's pages; no name needed
            try:
                os.unlink(path)
            except OSError:
                pass
    return index
