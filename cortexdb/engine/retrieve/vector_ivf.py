"""A sealed vector segment searched through a coarse quantizer (IVF), its rows in a file.

A large sealed segment of a ``VectorIndex`` with a data dir (``sealed="ivf"``, the engine's
default; decisions.md, "Sealed vectors: IVF lists over a flat run") is a flat run
(vector_runs.py: the rows as stored, float16 by default, an int8 sketch after them when the
kernel allows, in an unlinked file read through a mapping let go after each search) whose rows
are ordered by *list*: a spherical k-means of about ``sqrt(N)`` centroids (``lists_for``) trained
on a sample of the rows, each row in the list of its nearest centroid.  A search scores the
centroids (float32, in memory: ``lists × dimension × 4`` bytes), takes the best lists until they
hold ``probe_fraction`` of the rows (at least ``min_probe_rows``), and searches exactly those rows
of the run (the sketch first, then the exact float16 rows of its shortlist): the answer is the
exact best of the probed rows.  What stays in memory is the centroids and 8 bytes a row (the
position of each row in the run and back) besides the run's own 12 bytes a row of sketch norms;
annoy's trees, by contrast, are touched all over by a search and stayed resident (about 2 KB a
vector).  Positions outside are the segment's own (the order its ids were given in).
"""

from __future__ import annotations

import math

import numpy as np

from .vector_runs import FlatRun

PROBE_FRACTION = 0.05  # of a segment's rows, searched exactly by a query (the best lists)
MIN_PROBE_ROWS = 2048  # at least this many rows probed
SAMPLE_PER_LIST = 64  # k-means is trained on at most this many rows a list
ITERATIONS = 10
BLOCK = 4096


def lists_for(count: int) -> int:
    """How many lists a segment of ``count`` rows gets: about ``sqrt(count)``."""
    return max(1, int(round(math.sqrt(count))))


class _Permuted:
    """The rows of a run in another order (``FlatRun.write``'s ``block`` source)."""

    def __init__(self, run: FlatRun, order: np.ndarray) -> None:
        self._run, self._order = run, order

    def __len__(self) -> int:
        return len(self._order)

    def block(self, start: int, stop: int):
        return self._run.stored(self._order[start:stop])


def _normalized(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.where(norms > 0, norms, 1.0)


def _nearest_centroid(rows: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """The list of each row: the centroid of the largest dot product, a block of rows at a time
    (the k-means sample of a 1M-row segment would otherwise score 64 x 1,000 rows against 1,000
    centroids at once: 512 MB of float64s).  SimSIMD's all-pairs kernel,
    not numpy's matrix product: OpenBLAS keeps a buffer of tens of MB for every thread that ran a
    large product (the build's worker threads: measured +18 MB of anonymous RSS at 25k events)."""
    if len(rows) > BLOCK:  # a block of rows at a time: the scores are rows x lists float64s
        return np.concatenate([_nearest_centroid(rows[start : start + BLOCK], centroids)
                               for start in range(0, len(rows), BLOCK)])  # fmt: skip
    try:
        import simsimd
    except ImportError:  # pragma: no cover - a dependency
        return np.argmax(rows @ centroids.T, axis=1)
    found = simsimd.cdist(np.ascontiguousarray(rows, dtype=np.float32), centroids, metric="dot")
    return np.argmax(np.asarray(found), axis=1)


def _sums(rows: np.ndarray, labels: np.ndarray, lists: int) -> np.ndarray:
    """The sum of each list's rows: the rows in list order, added a list's span at a time
    (``np.add.reduceat``; ``np.add.at`` took a quarter of a build of 16,384 rows)."""
    order = np.argsort(labels, kind="stable")
    starts = np.searchsorted(labels[order], np.arange(lists))
    sums = np.zeros((lists, rows.shape[1]), dtype=rows.dtype)
    present = np.flatnonzero(np.bincount(labels, minlength=lists))
    if len(present):
        sums[present] = np.add.reduceat(rows[order], starts[present], axis=0)
    return sums


TRAININGS = [0]  # k-means trainings since the process started (tests count them; never timed)


def train(run: FlatRun, lists: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(centroids, the list of each row): spherical k-means on a sample of the run's rows, then
    every row assigned to its nearest centroid (a block at a time, in the build's thread)."""
    TRAININGS[0] += 1
    rng = np.random.default_rng(seed)
    count = len(run)
    sample_size = min(count, SAMPLE_PER_LIST * lists)
    sample = _normalized(run.decoded(np.sort(rng.choice(count, sample_size, replace=False)))).astype(np.float32)
    centroids = sample[rng.choice(sample_size, lists, replace=False)].copy()
    for _ in range(ITERATIONS):
        labels = _nearest_centroid(sample, centroids)
        sums = _sums(sample, labels, lists)
        sizes = np.bincount(labels, minlength=lists)
        empty = np.flatnonzero(sizes == 0)
        sums[empty] = sample[rng.choice(sample_size, len(empty), replace=False)]  # reseeded
        centroids = _normalized(sums).astype(np.float32)
    labels = np.empty(count, dtype=np.int32)
    for start in range(0, count, BLOCK):
        positions = np.arange(start, min(count, start + BLOCK))
        labels[start : start + len(positions)] = _nearest_centroid(run.decoded(positions), centroids)
    return centroids, labels


class _InRowOrder:
    """``ids`` (by the segment's position) read by the run's row: the ties' key, made per look-up
    (a tie is rare), not a list of the ids in row order kept beside the segment."""

    __slots__ = ("_ids", "_order")

    def __init__(self, ids, order: np.ndarray) -> None:
        self._ids, self._order = ids, order

    def __getitem__(self, slot: int):
        return self._ids[int(self._order[slot])]


class IvfRun:
    """A segment's rows in a flat run ordered by list, with the lists' centroids (the module)."""

    def __init__(self, run: FlatRun, centroids: np.ndarray, offsets: np.ndarray, order: np.ndarray,
                 probe_fraction: float = PROBE_FRACTION, min_probe_rows: int = MIN_PROBE_ROWS) -> None:  # fmt: skip
        self.run, self.centroids, self.offsets = run, centroids, offsets
        self.order = order  # the run's row (slot) -> the segment's position
        self.slots = np.empty_like(order)  # the segment's position -> its row in the run
        self.slots[order] = np.arange(len(order), dtype=order.dtype)
        self.dtype, self.count, self.dimension = run.dtype, run.count, run.dimension
        self.probe_fraction, self.min_probe_rows = probe_fraction, min_probe_rows

    @classmethod
    def write(cls, directory: str, dimension: int, dtype: str, rows, keep: bool = False, **probes) -> IvfRun:
        """An IVF segment of ``rows`` (``FlatRun.write``'s source): a run in their order, the
        lists trained on it, then the run rewritten in list order with its sketch (in a worker
        thread; the first run is dropped).  ``keep``: the run's file keeps its name, and
        ``row_hashes`` are by the segment's position (vector_files.py)."""
        plain = FlatRun.write(directory, dimension, dtype, rows)
        try:
            lists = lists_for(len(plain))
            centroids, labels = train(plain, lists)
            order = np.argsort(labels, kind="stable").astype(np.int32)
            offsets = np.searchsorted(labels[order], np.arange(lists + 1)).astype(np.int64)
            run = FlatRun.write(directory, dimension, dtype, _Permuted(plain, order), sketch=True, keep=keep)
        finally:
            plain.unload()
        if keep:  # by the run's row (slot) -> by position
            by_position = np.empty_like(run.row_hashes)
            by_position[order] = run.row_hashes
            run.row_hashes = by_position
        return cls(run, centroids, offsets, order, **probes)

    def __len__(self) -> int:
        return self.count

    def probed(self, query: np.ndarray) -> list[tuple[int, int]]:
        """The spans of the run's rows a search of ``query`` reads (ascending, adjacent lists
        joined): the best lists' rows until they are ``probe_fraction`` of the segment (at least
        ``min_probe_rows``)."""
        want = max(self.min_probe_rows, int(math.ceil(self.probe_fraction * self.count)))
        if want >= self.count:
            return [(0, self.count)]
        closeness = self.centroids @ np.asarray(query, dtype=np.float32)
        ranked = np.argsort(-closeness, kind="stable")
        sizes = np.diff(self.offsets)[ranked]
        taken = int(np.searchsorted(np.cumsum(sizes), want)) + 1
        spans: list[tuple[int, int]] = []
        for i in np.sort(ranked[:taken]).tolist():
            start, stop = int(self.offsets[i]), int(self.offsets[i + 1])
            if spans and spans[-1][1] == start:
                spans[-1] = (spans[-1][0], stop)
            elif stop > start:
                spans.append((start, stop))
        return spans

    def nearest(self, query: np.ndarray, limit: int, skip: np.ndarray | None,
                ids: list[str] | None = None) -> list[tuple[int, float]]:  # fmt: skip
        """As ``FlatRun.nearest``, over the probed lists only; positions are the segment's."""
        order = self.order
        key = None if ids is None else _InRowOrder(ids, order)  # the ids by the run's row
        found = self.run.nearest(query, limit, None if skip is None else skip[order], key, self.probed(query))
        return [(int(order[slot]), similarity) for slot, similarity in found]

    def get_item_vector(self, position: int) -> np.ndarray:
        return self.run.get_item_vector(int(self.slots[position]))

    def rows_at(self, positions: list[int]) -> np.ndarray:
        return self.run.rows_at(self.slots[positions].tolist())

    def block(self, positions: list[int]) -> tuple[np.ndarray, np.ndarray | None]:
        """The stored rows (and scales) at ``positions`` (a merge's reads)."""
        return self.run.stored(self.slots[positions])

    def unload(self) -> None:
        self.run.unload()

    def heap_bytes(self) -> int:
        """What the segment keeps in memory besides its ids: centroids, list offsets, the two
        position maps and the run's per-row sketch figures."""
        sketch = sum(part.nbytes for part in self.run.sketch) if self.run.sketch is not None else 0
        scales = self.run.scales.nbytes if self.run.scales is not None else 0
        maps = self.order.nbytes + self.slots.nbytes
        return self.centroids.nbytes + self.offsets.nbytes + maps + sketch + scales
