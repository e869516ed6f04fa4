"""Flat vector runs: sealed rows of a vector index kept in a file, out of the process's memory.

With a directory (an engine with a data dir) a ``VectorIndex`` seals its exact delta every
``run_rows`` vectors into a *run*: the rows exactly as the delta held them (float16, float32, or
int8 with its per-row scales, which stay in memory at 4 bytes a row) written to a file of
``<data dir>/vector-segments/``.  The file is unlinked as soon as it is written and open (the
descriptor keeps it; nothing is left behind after a crash or a restart, when the index is rebuilt
from the stored vectors as before).  A search scores the rows a block at a time with the delta's
own kernels (``scores``), so a run answers what the delta answered, bit for bit, reading them
through a read-only shared mapping of the file whose pages it lets go (``MADV_DONTNEED``) before
it returns: the pages live in the kernel's page cache, shared, reclaimable and re-read on demand,
and they are in the process's resident set only while a search reads them (docs/decisions.md,
"Soak memory", "Runs by default": a ``pread`` copy of every row cost 5-10x the delta's search).  Runs merge like the annoy segments (``VectorIndex``), and
once a merge reaches ``segment_size`` rows it becomes an annoy segment as before.
"""

from __future__ import annotations

import mmap
import os
import threading
import uuid

import numpy as np

from . import vector_sketch
from .vector_hash import row_hashes

_MAP_LOCK = threading.Lock()  # making a run's mapping (``FlatRun._mapped``)

BLOCK_ROWS = 4096  # rows scored (and written) at a time


def _simsimd():
    try:
        import simsimd
    except ImportError:  # pragma: no cover - a dependency; numpy scores the same, slower
        return None
    return simsimd


def scores(rows: np.ndarray, scales: np.ndarray | None, query: np.ndarray, dtype: str) -> np.ndarray:
    """Cosines of a unit query with ``rows`` (float32 in numpy's BLAS; float16 and int8 in
    SimSIMD's kernels, which read the small rows as they are)."""
    if dtype == "float32":
        return rows @ query
    query = np.asarray(query, dtype=np.float32)
    simsimd = _simsimd()
    if dtype == "float16":
        if simsimd is None:
            return rows.astype(np.float32) @ query
        out = simsimd.cdist(query.astype(np.float16)[None, :], rows, metric="dot")
        return np.asarray(out, dtype=np.float64)[0]
    peak = float(np.max(np.abs(query))) if len(query) else 0.0
    if simsimd is None or not peak:
        return (rows.astype(np.float32) @ query) * scales
    quantized = np.rint(query * (127.0 / peak)).astype(np.int8)
    out = np.asarray(simsimd.cdist(quantized[None, :], rows, metric="dot"), dtype=np.float64)
    return out[0] * (peak / 127.0) * scales


def top(values: np.ndarray, limit: int, key=None) -> np.ndarray:
    """Positions of the ``limit`` largest finite ``values``, ascending; among values equal to
    the last of them, those of the smallest ``key(position)`` (the row's id), not whichever the
    partition left first (decisions.md, "Vector ties").  Without ``key``, every tied one."""
    finite = values > -np.inf
    if int(finite.sum()) <= limit:
        return np.flatnonzero(finite)
    kth = np.partition(values, len(values) - limit)[len(values) - limit]
    chosen = np.flatnonzero(values >= kth)
    if key is None or len(chosen) == limit:
        return chosen
    tied = np.flatnonzero(values == kth).tolist()
    need = limit - (len(chosen) - len(tied))
    kept = sorted(sorted(tied, key=key)[:need])
    return np.sort(np.concatenate([np.flatnonzero(values > kth), np.asarray(kept, dtype=np.intp)]))


def encode(vector: np.ndarray, dtype: str) -> tuple[np.ndarray, float]:
    """A float32 vector as a row of ``dtype`` and its scale (int8's; 1.0 otherwise)."""
    if dtype != "int8":
        return np.asarray(vector, dtype=dtype), 1.0
    vector = np.asarray(vector, dtype=np.float32)
    peak = float(np.max(np.abs(vector))) if len(vector) else 0.0
    scale = peak / 127.0 if peak else 1.0
    return np.rint(vector / scale).astype(np.int8), scale


class FlatRun:
    """``count`` rows of ``dimension`` in an unlinked file, read by block (see the module)."""

    def __init__(self, fd: int, count: int, dimension: int, dtype: str, scales: np.ndarray | None,
                 sketch: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> None:  # fmt: skip
        self.fd, self.count, self.dimension, self.dtype = fd, count, dimension, dtype
        self.scales = scales
        self.row_bytes = dimension * np.dtype(dtype).itemsize
        # an int8 sketch of the rows after them in the file, and its (scale, a‖xi‖, ‖e‖) per
        # row (vector_sketch.py): what ``nearest`` reads first
        self.sketch = sketch
        self._map: mmap.mmap | None = None  # made on the first search (nearest)
        self.path: str | None = None  # a kept file's name (``write``'s ``keep``; vector_files.py)
        self.row_hashes: np.ndarray | None = None

    @classmethod
    def write(cls, directory: str, dimension: int, dtype: str, rows, sketch: bool = False,
              keep: bool = False) -> FlatRun:  # fmt: skip
        """A run of ``rows`` (``len`` and ``block(start, stop) -> (rows of dtype, scales)``),
        written a block at a time (in a worker thread); ``sketch`` (float16 rows, a kernel that
        accumulates in float32): with an int8 sketch of them after them (vector_sketch.py).
        ``keep``: the file keeps its name (``path``; vector_files.py) and ``row_hashes`` the
        hash of each row as written."""
        sketch = sketch and dtype == "float16" and vector_sketch.usable()
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"{uuid.uuid4().hex}.run")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        hashes = np.empty(len(rows), dtype=np.uint64) if keep else None
        try:
            if not keep:
                os.unlink(path)  # the descriptor keeps the file; its name is never needed again
            count = len(rows)
            scales = np.empty(count, dtype=np.float32) if dtype == "int8" else None
            kept = [np.empty(count, dtype=np.float32) for _ in range(3)] if sketch else None
            row_bytes = dimension * np.dtype(dtype).itemsize
            for start in range(0, count, BLOCK_ROWS):
                block, block_scales = rows.block(start, min(count, start + BLOCK_ROWS))
                _pwrite_all(fd, np.ascontiguousarray(block, dtype=dtype).tobytes(), start * row_bytes)
                if hashes is not None:
                    hashes[start : start + len(block)] = row_hashes(np.asarray(block, dtype=dtype), block_scales)
                if scales is not None:
                    scales[start : start + len(block)] = block_scales
                if kept is not None:
                    small, *per_row = vector_sketch.encode(block)
                    _pwrite_all(fd, small.tobytes(), count * row_bytes + start * dimension)
                    for into, values in zip(kept, per_row, strict=True):
                        into[start : start + len(block)] = values
        except BaseException:
            os.close(fd)
            if keep:
                os.unlink(path)
            raise
        run = cls(fd, count, dimension, dtype, scales, tuple(kept) if kept is not None else None)
        run.path, run.row_hashes = (path, hashes) if keep else (None, None)
        return run

    def __len__(self) -> int:
        return self.count

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start`` to ``stop`` as stored (a fresh buffer: nothing of the file stays mapped)."""
        size = (stop - start) * self.row_bytes
        data = os.pread(self.fd, size, start * self.row_bytes)
        if len(data) != size:
            raise OSError(f"vector run: short read ({len(data)} of {size} bytes)")
        return np.frombuffer(data, dtype=self.dtype).reshape(stop - start, self.dimension)

    def block(self, positions: list[int]) -> tuple[np.ndarray, np.ndarray | None]:
        """The stored rows (and scales) at ``positions`` (ascending), read as one span."""
        first, last = positions[0], positions[-1] + 1
        rows = self.read(first, last)[np.asarray(positions) - first]
        scales = self.scales[positions] if self.scales is not None else None
        return rows, scales

    def get_item_vector(self, position: int) -> np.ndarray:
        row = self.read(position, position + 1)[0].astype(np.float32)
        if self.scales is not None:
            row *= self.scales[position]
        return row

    def rows_at(self, positions: list[int]) -> np.ndarray:
        """The rows at ``positions`` (any order) as float32, decoded as ``get_item_vector``
        decodes one: a ``pread`` each (a fault on the shared mapping cost 10-20x one here)."""
        out = np.empty((len(positions), self.dimension), dtype=np.float32)
        for i, position in enumerate(positions):
            out[i] = self.read(position, position + 1)[0]
        if self.scales is not None:
            out *= self.scales[positions][:, None]
        return out

    def _mapped(self) -> mmap.mmap:
        """The run's one mapping, made on first use; a search (the event loop's thread) and a
        merge's reads (``stored``, a worker thread) may both ask first, so it is made under a lock."""
        if self._map is None:
            with _MAP_LOCK:
                if self._map is None:
                    size = self.count * (self.row_bytes + (self.dimension if self.sketch is not None else 0))
                    self._map = mmap.mmap(self.fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
        return self._map

    def nearest(self, query: np.ndarray, limit: int, skip: np.ndarray | None,
                ids: list[str] | None = None, spans: list[tuple[int, int]] | None = None) -> list[tuple[int, float]]:  # fmt: skip
        """The ``limit`` best (position, cosine) pairs, exact, best first, equal cosines by
        their ``ids`` (without ids, every row tied with the last is kept too), rows where the
        boolean ``skip`` is true left out, only the rows of ``spans`` (``(start, stop)``,
        ascending) when given (an IVF segment's probed lists, vector_ivf.py); through the int8
        sketch when the run has one (``_sketched``).  The rows are scored where the kernel's
        page cache holds them, through a read-only mapping whose pages are let go
        (``MADV_DONTNEED``) before returning: no copy, and nothing of the run stays in the
        resident set between searches (decisions.md, "Runs by default")."""
        best: list[tuple[int, float]] = []
        if not self.count:
            return best
        mapped = self._mapped()
        try:
            rows = np.frombuffer(mapped, dtype=self.dtype, count=self.count * self.dimension)
            rows = rows.reshape(self.count, self.dimension)
            if self.sketch is not None:
                best = self._sketched(mapped, rows, query, limit, skip, ids, spans)
            else:
                best = self._scan(rows, query, limit, skip, ids, spans)
        finally:
            mapped.madvise(mmap.MADV_DONTNEED)
        best.sort(key=lambda item: (-item[1], item[0] if ids is None else ids[item[0]]))
        if len(best) > limit:
            if ids is not None:
                return best[:limit]
            last = best[limit - 1][1]  # every one tied with the last
            best = [item for item in best if item[1] >= last]
        return best

    def _scan(self, rows: np.ndarray, query: np.ndarray, limit: int, skip: np.ndarray | None,
              ids: list[str] | None = None, spans: list[tuple[int, int]] | None = None) -> list[tuple[int, float]]:  # fmt: skip
        best: list[tuple[int, float]] = []
        for first, last in spans if spans is not None else [(0, self.count)]:
            for start in range(first, last, BLOCK_ROWS):
                stop = min(last, start + BLOCK_ROWS)
                scales = self.scales[start:stop] if self.scales is not None else None
                found = np.asarray(scores(rows[start:stop], scales, query, self.dtype), dtype=np.float64)
                if skip is not None:
                    found[skip[start:stop]] = -np.inf
                key = None if ids is None else (lambda p, start=start: ids[start + p])
                best += [(start + int(p), float(found[p])) for p in top(found, limit, key).tolist()]
        return best

    def _sketched(self, mapped, rows: np.ndarray, query: np.ndarray, limit: int,
                  skip: np.ndarray | None, ids: list[str] | None = None,
                  spans: list[tuple[int, int]] | None = None) -> list[tuple[int, float]]:  # fmt: skip
        """The exact best through the sketch: every row that can be among the ``limit`` best
        (vector_sketch.shortlist) scored exactly, with the kernel ``_scan`` uses."""
        small = np.frombuffer(mapped, dtype=np.int8, offset=self.count * self.row_bytes)
        small = small.reshape(self.count, self.dimension)
        sketch_query = vector_sketch.query_for(np.asarray(query, dtype=np.float32).astype(np.float16))
        scale, norms, errors = self.sketch
        kernel = _simsimd().cdist
        if spans is None:
            found = np.asarray(kernel(sketch_query.int8, small, metric="dot"), dtype=np.float64)[0]
        else:  # the spans' rows scored where they are (no gathered copy), then side by side
            found = np.concatenate([np.asarray(kernel(sketch_query.int8, small[a:b], metric="dot"),
                                               dtype=np.float64)[0] for a, b in spans])  # fmt: skip
            at = np.concatenate([np.arange(a, b) for a, b in spans])
            scale, norms, errors = scale[at], norms[at], errors[at]
        found *= scale * sketch_query.b  # in float64
        if skip is not None:
            found[skip if spans is None else skip[at]] = -np.inf
        shortlist = vector_sketch.shortlist_of(found, sketch_query, norms, errors, limit)
        if not len(shortlist):
            return []
        if spans is not None:
            shortlist = at[shortlist]
        exact = np.asarray(scores(rows[shortlist], None, query, self.dtype), dtype=np.float64)
        listed = shortlist.tolist()  # plain ints: a tie's key is a list look-up, not a numpy scalar's
        key = None if ids is None else (lambda p: ids[listed[p]])
        return [(listed[p], float(exact[p])) for p in top(exact, limit, key).tolist()]

    def stored(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """The stored rows (a copy) and scales at ``positions`` (any order), read through the
        mapping, whose pages are let go before returning (a build's reads, in its thread)."""
        mapped = self._mapped()
        try:
            rows = np.frombuffer(mapped, dtype=self.dtype, count=self.count * self.dimension)
            taken = rows.reshape(self.count, self.dimension)[positions]
        finally:
            mapped.madvise(mmap.MADV_DONTNEED)
        return taken, self.scales[positions] if self.scales is not None else None

    def decoded(self, positions: np.ndarray) -> np.ndarray:
        """The rows at ``positions`` as float32 (``stored``, decoded)."""
        rows, scales = self.stored(positions)
        rows = rows.astype(np.float32)
        if scales is not None:
            rows *= scales[:, None]
        return rows

    def unload(self) -> None:
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # a search still reads it (another thread): its collection closes it
                pass
            self._map = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:  # a run dropped without unload (an index let go) closes its file
        try:
            self.unload()
        except OSError:
            pass


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    while data:
        written = os.pwrite(fd, data, offset)
        offset += written
        data = data[written:]


class DeltaRows:
    """Rows of the delta to seal, decoded to float32 one at a time (in the build's thread)."""

    def __init__(self, rows: np.ndarray, scales: np.ndarray, positions: list[int], dtype: str) -> None:
        self._rows, self._scales = rows, scales  # the arrays of the moment (a grow replaces them)
        self._positions = positions
        self._dtype = dtype

    def __len__(self) -> int:
        return len(self._positions)

    def __getitem__(self, i: int) -> np.ndarray:
        position = self._positions[i]
        row = self._rows[position].astype(np.float32)
        if self._dtype == "int8":
            row *= self._scales[position]
        return row

    def block(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Rows ``start`` to ``stop`` as the delta stores them (a run keeps them so)."""
        positions = self._positions[start:stop]
        return self._rows[positions], self._scales[positions] if self._dtype == "int8" else None




class EncodedRows:
    """Merged rows for a run: ``block`` in the index's dtype (``SegmentRows.block``)."""

    def __init__(self, rows: SegmentRows, dtype: str) -> None:
        self._rows, self._dtype = rows, dtype

    def __len__(self) -> int:
        return len(self._rows)

    def block(self, start: int, stop: int):
        return self._rows.block(start, stop, self._dtype)


class SegmentRows:
    """Rows of segments to merge (in a build's thread): row ``i`` is row ``positions[i]`` of
    ``holders[sources[i]]`` (numpy arrays: no Python object per row), each holder's positions
    ascending (a merge of id-sorted segments keeps each one's order)."""

    def __init__(self, holders: list, sources: np.ndarray, positions: np.ndarray) -> None:
        self._holders, self.sources, self.positions = holders, sources, positions

    def __len__(self) -> int:
        return len(self.positions)

    def __getitem__(self, i: int) -> list[float]:
        return self._holders[int(self.sources[i])].get_item_vector(int(self.positions[i]))

    def block(self, start: int, stop: int, dtype: str = "float32") -> tuple[np.ndarray, np.ndarray | None]:
        """Rows ``start`` to ``stop`` as ``dtype`` (and int8 scales): a run's read as stored, a
        span per holder; an annoy segment's encoded one by one."""
        sources, positions = self.sources[start:stop], self.positions[start:stop]
        rows: np.ndarray | None = None
        scales = np.ones(stop - start, dtype=np.float32)
        for source in np.unique(sources).tolist():
            chosen = sources == source
            index, taken = self._holders[source], positions[chosen].tolist()
            if getattr(index, "dtype", None) == dtype:  # a flat run's or an IVF segment's rows, as stored
                block, block_scales = index.block(taken)
            else:
                encoded = [encode(index.get_item_vector(p), dtype) for p in taken]
                block = np.stack([row for row, _ in encoded])
                block_scales = np.array([scale for _, scale in encoded], dtype=np.float32)
            if rows is None:
                rows = np.empty((stop - start, block.shape[1]), dtype=dtype)
            rows[chosen] = block
            if block_scales is not None:
                scales[chosen] = block_scales
        assert rows is not None  # a block has a row
        return rows, scales if dtype == "int8" else None
