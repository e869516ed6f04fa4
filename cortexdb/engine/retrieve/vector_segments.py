"""The sealed parts of a vector index (vector_index.py): a segment (an annoy index or a flat run,
with its ids by position, its dead set and the rows kept beside it) and the annoy build."""

from __future__ import annotations

import os
import uuid

import numpy as np

from ..memtrim import release_free_memory
from .vector_runs import FlatRun


class Segment:
    """A sealed part of a ``VectorIndex``: an annoy index or a flat run, its ids by position,
    its dead set."""

    def __init__(self, annoy_index, ids: list[str], rows: FlatRun | None = None) -> None:
        self.index = annoy_index
        self.ids = ids
        # the rows as stored, by position: a flat run is its own; an annoy segment built in a
        # directory has a flat run of the same rows beside it, so a vector is read back with one
        # pread, not from annoy's item list (decisions.md, "Recall at 100k: what a candidate costs")
        self.rows = annoy_index if isinstance(annoy_index, FlatRun) else rows
        self.positions = {doc_id: i for i, doc_id in enumerate(ids)}
        self.dead: set[str] = set()  # removed, or superseded by a newer vector elsewhere
        self.kinds: np.ndarray | None = None  # a flat run's id-prefix codes, made on first need


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
