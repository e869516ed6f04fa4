"""The sealed parts of a vector index (vector_index.py): a segment (an annoy index or a flat run,
with its ids sorted, its dead mask and the rows kept beside it) and the annoy build."""

from __future__ import annotations

import os
import uuid

import numpy as np

from ..memtrim import release_free_memory
from .vector_ids import Dead, SortedIds
from .vector_ivf import IvfRun
from .vector_runs import DeltaRows, EncodedRows, FlatRun, SegmentRows

BUILDS = [0]  # segments built since the process started (tests count them; never timed)


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
        # a kept segment (vector_files.py): its manifest entry once saved; the hash of each row
        # by position until then (and, after a reopen, until the restore has checked them)
        run = getattr(annoy_index, "run", annoy_index)
        self.hashes = getattr(run, "row_hashes", None)
        self.entry: dict | None = None
        self.stale: set[int] = set()  # rows whose record has another vector now (a reopen)

    def names(self) -> list[str]:
        """The name of its kept files (``<name>.run``, ``<name>.npz``), if any."""
        run = getattr(self.index, "run", self.index)
        path = getattr(run, "path", None)
        return [os.path.basename(path)[: -len(".run")]] if path else []

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


def build(index, rows):
    """(sealed index, rows kept beside it) of ``rows`` for ``index`` (a ``VectorIndex``): a flat
    run while they are fewer than ``segment_size`` and runs are on (its own rows); else an IVF
    segment with a directory (``sealed="ivf"``), else an annoy index of them (float32 vectors by
    position), built in a file of ``directory`` and served memory-mapped from it when there is
    one, with a flat run of the same rows beside it (in a worker thread).  With ``persist`` a
    run's file is kept (vector_files.py)."""
    BUILDS[0] += 1
    source = rows if isinstance(rows, DeltaRows) else EncodedRows(rows, index.dtype)
    folder = index.persist or index.directory
    if index.run_rows is not None and len(rows) < index.segment_size:  # a flat run (exact)
        run = FlatRun.write(folder, index.dimension, index.dtype, source, sketch=True, keep=index.persist is not None)
        return run, run
    if index.directory is not None and index.sealed == "ivf":  # the rows in a file, in lists
        run = IvfRun.write(folder, index.dimension, index.dtype, source, keep=index.persist is not None)
        return run, run
    built = build_annoy(rows, index.dimension, index.trees, index.directory)
    if index.directory is None:
        return built, None
    try:
        return built, FlatRun.write(index.directory, index.dimension, index.dtype, source)
    except BaseException:
        built.unload()
        raise
