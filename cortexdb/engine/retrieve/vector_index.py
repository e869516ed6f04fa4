"""Vector index: sealed annoy segments plus an exact numpy delta buffer (DESIGN §9).

annoy cannot take items after ``build()`` (``add_item`` silently corrupts a built index), so new
vectors go to a delta matrix searched exactly (a matrix-vector product); when the delta reaches
``segment_size`` it is sealed into an annoy index built in a worker thread, and swapped in only
once built.  Segments merge like an LSM tree: when the newest segment is about as large as the
one before it, the two are rebuilt as one (also in a worker thread), so a scope of N vectors has
about log2(N / segment_size) segments and a query asks few annoy indexes (decisions.md, "Recall at
100k").  Deletes are per-segment dead sets (and a live mask on the delta) filtered at query time;
a merge or a seal drops the dead, and ``rewrite`` (after a forget) rebuilds every segment holding
one without it and drops the delta's dead rows.  Scores are cosine similarities.

Memory (docs/decisions.md, "Index memory"): the delta keeps its rows as ``dtype`` — float32, or
float16 (half the bytes, cosines within ~1e-4; the engine's default) or int8 with a per-row scale
(a quarter, ~2e-3) — scored with SimSIMD's mixed-precision kernels, and grows in fixed chunks of
``chunk_rows`` rows (no doubling slack).  A seal reads the rows it builds from in place (no copy).
With a ``directory`` (the data dir's ``vector-segments/``), annoy builds each segment in a file
there (``on_disk_build``) and serves it memory-mapped: its pages are file-backed, so the kernel
can drop them under memory pressure and read them again.  The file is unlinked as soon as it is
mapped (the mapping keeps it alive; nothing is left behind on a crash or restart, when the
segments are rebuilt from the stored vectors as before).  Without a directory (the memory
backend) segments stay in anonymous memory.

With a directory and ``run_rows``, the delta is sealed every ``run_rows`` vectors into a flat
*run* instead (vector_runs.py: the rows as stored, in an unlinked file read with pread and scored
exactly), runs merge like segments, and a merge reaching ``segment_size`` builds an annoy
segment: the delta stays small and sealed vectors leave the heap (decisions.md, "Soak memory").
"""

from __future__ import annotations

import numpy as np
import trio

from .vector_ivf import IvfRun
from .vector_runs import DeltaRows, EncodedRows, FlatRun, SegmentRows, scores, top
from .vector_segments import Segment as _Segment
from .vector_segments import build_annoy

MERGE_RATIO = 1.5  # merge the newest two segments when the older is at most this much larger
DTYPES = ("float32", "float16", "int8")
SEALED = ("ivf", "annoy")


class VectorIndex:
    def __init__(
        self, dimension: int, *, segment_size: int = 20_000, trees: int = 50,
        dtype: str = "float32", directory: str | None = None, chunk_rows: int = 1024,
        run_rows: int | None = None, sealed: str = "annoy",
    ) -> None:  # fmt: skip
        """``run_rows`` (with a ``directory``): seal the delta every that many rows into a flat
        run in a file (vector_runs.py), so the delta, the only rows in memory, stays small.
        ``sealed``: what a segment of ``segment_size`` rows or more is with a ``directory``,
        ``"ivf"`` (vector_ivf.py: the rows in a file, searched through a coarse quantizer) or
        ``"annoy"`` (a memory-mapped annoy index with a flat run of its rows beside it); without
        a directory it is always annoy (in memory)."""
        if dtype not in DTYPES:
            raise ValueError(f"vector dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
        if sealed not in SEALED:
            raise ValueError(f"sealed vector segments {sealed!r}: expected one of {', '.join(SEALED)}")
        self.sealed = sealed
        self.dimension = dimension
        self.segment_size = segment_size
        self.trees = trees
        self.dtype = dtype
        self.directory = directory
        self.chunk_rows = chunk_rows
        # runs only with a directory, and only below the size of an annoy segment
        self.run_rows = run_rows if directory is not None and run_rows and run_rows < segment_size else None
        self._segments: list[_Segment] = []
        self._delta = np.zeros((chunk_rows, dimension), dtype=dtype)
        self._scales = np.zeros(chunk_rows if dtype == "int8" else 0, dtype=np.float32)
        self._delta_ids: list[str] = []
        self._delta_kind = np.zeros(chunk_rows, dtype=np.int16)  # id-prefix code per row
        self._delta_live = np.zeros(chunk_rows, dtype=bool)
        self._delta_pos: dict[str, int] = {}
        self._kinds: dict[str, int] = {}
        self._where: dict[str, _Segment | None] = {}  # live ids: their segment, None = the delta
        self._sealing = False
        self._builds = trio.Lock()  # one seal, merge or rewrite at a time
        self._rewritten: set[str] = set()  # delta rows overwritten while a seal was building

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, doc_id: str) -> bool:
        return doc_id in self._where

    @property
    def segment_sizes(self) -> list[int]:
        return [len(segment.ids) for segment in self._segments]

    def add(self, doc_id: str, vector: np.ndarray) -> None:
        position = self._delta_pos.get(doc_id)
        if position is not None:  # a row in the delta (live or removed): overwrite it
            if self._sealing:
                self._rewritten.add(doc_id)  # the row being sealed is stale now
            self._put(position, vector)
            self._delta_live[position] = True
            self._where[doc_id] = None
            return
        holder = self._where.get(doc_id)
        if holder is not None:  # a sealed copy: it dies, the new vector lives in the delta
            holder.dead.add(doc_id)
        count = len(self._delta_ids)
        if count == len(self._delta):
            self._grow(count)
        self._put(count, vector)
        self._delta_kind[count] = self._kind(doc_id)
        self._delta_live[count] = True
        self._delta_ids.append(doc_id)
        self._delta_pos[doc_id] = count
        self._where[doc_id] = None

    def _put(self, position: int, vector: np.ndarray) -> None:
        if self.dtype == "int8":
            peak = float(np.max(np.abs(vector))) if len(vector) else 0.0
            scale = peak / 127.0 if peak else 1.0
            self._delta[position] = np.rint(np.asarray(vector, dtype=np.float32) / scale)
            self._scales[position] = scale
        else:
            self._delta[position] = vector

    def _row(self, position: int) -> np.ndarray:
        row = self._delta[position].astype(np.float32)
        if self.dtype == "int8":
            row *= self._scales[position]
        return row

    def _grow(self, count: int) -> None:
        """One more chunk of rows (a copy of the live part; no doubling slack)."""
        self._resize(count, len(self._delta) + self.chunk_rows, list(range(count)))

    def _resize(self, count: int, size: int, keep: list[int]) -> None:
        """New delta arrays of ``size`` rows holding the rows ``keep`` (in order) first."""
        rows = np.zeros((size, self.dimension), dtype=self.dtype)
        rows[: len(keep)] = self._delta[keep]
        if self.dtype == "int8":
            scales = np.zeros(size, dtype=np.float32)
            scales[: len(keep)] = self._scales[keep]
            self._scales = scales
        kinds = np.zeros(size, dtype=np.int16)
        kinds[: len(keep)] = self._delta_kind[keep]
        live = np.zeros(size, dtype=bool)
        live[: len(keep)] = self._delta_live[keep]
        self._delta, self._delta_kind, self._delta_live = rows, kinds, live

    def _kind(self, doc_id: str) -> int:
        prefix = doc_id.split("_", 1)[0] + "_"
        return self._kinds.setdefault(prefix, len(self._kinds) + 1)

    def remove(self, doc_id: str) -> None:
        holder = self._where.pop(doc_id, False)
        if holder is False:
            return
        if holder is None:
            self._delta_live[self._delta_pos[doc_id]] = False
        else:
            holder.dead.add(doc_id)

    @property
    def needs_seal(self) -> bool:
        return not self._sealing and len(self._delta_ids) >= (self.run_rows or self.segment_size)

    def _newest_two_similar(self) -> bool:
        segments = self._segments
        return len(segments) >= 2 and len(segments[-2].ids) <= MERGE_RATIO * len(segments[-1].ids)

    @property
    def needs_merge(self) -> bool:
        return not self._sealing and self._newest_two_similar()

    async def merge(self) -> None:
        """Merge the newest segments while they are of similar size (each in a worker thread)."""
        if self._sealing:
            return
        async with self._builds:
            self._sealing = True
            try:
                while self._newest_two_similar():
                    await self._merge_newest_two()
            finally:
                self._sealing = False

    async def seal(self, *, merge: bool = True) -> None:
        """Move the delta into a new annoy segment, built off the event loop; then (``merge``)
        merge the newest segments while they are of similar size."""
        if self._sealing or not self._delta_ids:
            return
        async with self._builds:
            await self._seal(merge)

    async def _seal(self, merge: bool) -> None:
        self._sealing = True
        try:
            count = len(self._delta_ids)
            live = np.flatnonzero(self._delta_live[:count]).tolist()
            ids = [self._delta_ids[i] for i in live]
            # the build reads the rows where they are: an overwrite meanwhile may reach the new
            # segment, but such a row is dead there (below); a grow meanwhile copies the delta and
            # the build keeps reading the old array
            carried: list[int] = []
            if live:  # (every row removed: no segment, the delta is only emptied)
                rows = DeltaRows(self._delta, self._scales, live, self.dtype)
                built, side = await trio.to_thread.run_sync(self._build, rows, abandon_on_cancel=True)
                segment = _Segment(built, ids, side)
                # swap: vectors added while building stay in the delta; rows of the sealed part that
                # were removed meanwhile are dead in the new segment, and rows overwritten meanwhile
                # are dead there too, their new vector carried over into the next delta
                for i, doc_id in zip(live, ids, strict=True):
                    if doc_id in self._rewritten and self._delta_live[i]:
                        segment.dead.add(doc_id)
                        carried.append(i)
                    elif not self._delta_live[i]:
                        segment.dead.add(doc_id)
                    else:
                        self._where[doc_id] = segment
                self._segments.append(segment)
            keep = carried + list(range(count, len(self._delta_ids)))
            rest = [self._delta_ids[i] for i in keep]
            chunks = len(rest) // self.chunk_rows + 1
            self._resize(len(self._delta_ids), chunks * self.chunk_rows, keep)
            self._delta_ids = rest
            self._delta_pos = {doc_id: i for i, doc_id in enumerate(rest)}
            self._rewritten.clear()
            while merge and self._newest_two_similar():
                await self._merge_newest_two()
        finally:
            self._sealing = False

    async def _merge_newest_two(self) -> None:
        self._segments[-2:] = [await self._rebuilt(self._segments[-2:])]

    async def _rebuilt(self, segments: list[_Segment]) -> _Segment:
        """One segment of the live vectors of ``segments``, built in a worker thread."""
        dead_before = [set(segment.dead) for segment in segments]  # an id lives in one at most

        def gather_and_build():
            ids, sources = [], []
            for segment, dead in zip(segments, dead_before, strict=True):
                for position, doc_id in enumerate(segment.ids):
                    if doc_id not in dead:
                        ids.append(doc_id)
                        sources.append((segment.rows if segment.rows is not None else segment.index, position))
            # the vectors are read from the segments' rows (a span at a time) as they are added
            return ids, self._build(SegmentRows(sources)) if ids else (None, None)

        ids, (built, side) = await trio.to_thread.run_sync(gather_and_build, abandon_on_cancel=True)
        merged = _Segment(built, ids, side)
        died_meanwhile = set().union(*(s.dead - d for s, d in zip(segments, dead_before, strict=True)))
        for doc_id in ids:
            if doc_id in died_meanwhile:
                merged.dead.add(doc_id)
            else:
                self._where[doc_id] = merged
        for segment in segments:
            segment.index.unload()  # its pages go now, not when the object is collected
            if segment.rows is not None and segment.rows is not segment.index:
                segment.rows.unload()
        return merged

    async def rewrite(self) -> int:
        """Drop every removed vector from memory: the delta keeps its live rows only, and each
        sealed segment holding a dead vector is rebuilt without it (off the loop; an emptied
        one goes).  Returns how many segments were rebuilt."""
        async with self._builds:
            self._sealing = True
            try:
                count = len(self._delta_ids)
                live = np.flatnonzero(self._delta_live[:count]).tolist()
                if len(live) < count:
                    rest = [self._delta_ids[i] for i in live]
                    self._resize(count, (len(rest) // self.chunk_rows + 1) * self.chunk_rows, live)
                    self._delta_ids, self._delta_pos = rest, {d: i for i, d in enumerate(rest)}
                for segment in (stale := [s for s in self._segments if s.dead]):
                    rebuilt = await self._rebuilt([segment])
                    self._segments = [rebuilt if s is segment else s for s in self._segments]
                self._segments = [segment for segment in self._segments if segment.ids]
                return len(stale)
            finally:
                self._sealing = False

    def _build(self, rows):
        """(index, rows kept beside it): a flat run of ``rows`` while they are fewer than
        ``segment_size`` and runs are on (its own rows); else an annoy index of them (float32
        vectors by position), built in a file of ``directory`` and served memory-mapped from it
        when there is one, with a flat run of the same rows beside it (in a worker thread)."""
        source = rows if isinstance(rows, DeltaRows) else EncodedRows(rows, self.dtype)
        if self.run_rows is not None and len(rows) < self.segment_size:  # a flat run (exact)
            run = FlatRun.write(self.directory, self.dimension, self.dtype, source, sketch=True)
            return run, run
        if self.directory is not None and self.sealed == "ivf":  # the rows in a file, in lists
            run = IvfRun.write(self.directory, self.dimension, self.dtype, source)
            return run, run
        index = build_annoy(rows, self.dimension, self.trees, self.directory)
        if self.directory is None:
            return index, None
        try:
            return index, FlatRun.write(self.directory, self.dimension, self.dtype, source)
        except BaseException:
            index.unload()
            raise

    def search(
        self, query: np.ndarray, limit: int, prefixes: tuple[str, ...] | None = None
    ) -> list[tuple[str, float]]:
        """The ``limit`` nearest live vectors, best first, with cosine similarity; with
        ``prefixes``, only ids starting with one of them (annoy is asked for more to make up)."""
        results: dict[str, float] = {}
        base = limit + 8 if prefixes is None else limit * 4 + 8
        for segment in self._segments:
            dead = segment.dead
            if isinstance(segment.index, FlatRun | IvfRun):  # noqa: UP038
                self._search_run(segment, query, base, prefixes, results)
                continue
            fetch = base + min(len(dead), 3 * base)  # make up for dead hits, within bounds
            positions, distances = segment.index.get_nns_by_vector(
                query, min(fetch, len(segment.ids)), search_k=-1, include_distances=True
            )
            ids = segment.ids
            for position, distance in zip(positions, distances, strict=True):
                doc_id = ids[position]
                if doc_id in dead or (prefixes is not None and not doc_id.startswith(prefixes)):
                    continue
                similarity = 1.0 - (distance * distance) / 2.0  # angular distance -> cosine
                if similarity > results.get(doc_id, -2.0):
                    results[doc_id] = similarity
        count = len(self._delta_ids)
        if count:
            scores = self._delta_scores(query, count)
            keep = self._delta_live[:count]
            if prefixes is not None:
                codes = [self._kinds[p] for p in prefixes if p in self._kinds]
                keep = keep & np.isin(self._delta_kind[:count], codes)
            scores = np.where(keep, scores, -np.inf)
            for position in top(scores, limit, self._delta_ids.__getitem__).tolist():  # ties by id
                results[self._delta_ids[position]] = float(scores[position])
        ranked = sorted(results.items(), key=lambda item: (-item[1], item[0]))
        return ranked[:limit]

    def _delta_scores(self, query: np.ndarray, count: int) -> np.ndarray:
        """Cosines of the query with the first ``count`` delta rows (vector_runs.scores)."""
        scales = self._scales[:count] if self.dtype == "int8" else None
        return scores(self._delta[:count], scales, query, self.dtype)

    def _search_run(self, segment: _Segment, query, limit: int, prefixes, results: dict) -> None:
        """A flat run's exact best, its dead rows (and ids of other prefixes) left out."""
        ids = segment.ids
        skip = None  # a mask of the rows left out
        if prefixes is not None:  # the rows of other kinds, by their prefix codes (as the delta)
            if segment.kinds is None:
                segment.kinds = np.fromiter((self._kind(doc_id) for doc_id in ids), np.int16, len(ids))
            codes = [self._kinds[p] for p in prefixes if p in self._kinds]
            skip = ~np.isin(segment.kinds, codes)
        if segment.dead:
            if skip is None:
                skip = np.zeros(len(ids), dtype=bool)
            skip[[segment.positions[doc_id] for doc_id in segment.dead]] = True
        for position, similarity in segment.index.nearest(query, limit, skip, ids):
            doc_id = ids[position]
            if similarity > results.get(doc_id, -2.0):
                results[doc_id] = similarity

    def vector(self, doc_id: str) -> np.ndarray | None:
        if doc_id not in self._where:
            return None
        holder = self._where[doc_id]
        if holder is None:
            return self._row(self._delta_pos[doc_id])
        if holder.rows is not None:
            return holder.rows.get_item_vector(holder.positions[doc_id])
        return np.array(holder.index.get_item_vector(holder.positions[doc_id]), dtype=np.float32)

    def vectors(self, doc_ids) -> dict[str, np.ndarray]:
        """The live vectors of ``doc_ids`` (float32, as ``vector`` gives them), read a holder at
        a time: the delta's rows in one take, a flat run's through one pass over its mapping."""
        out: dict[str, np.ndarray] = {}
        groups: dict[int, tuple[_Segment | None, list[str]]] = {}
        for doc_id in doc_ids:
            if doc_id in self._where and doc_id not in out:
                holder = self._where[doc_id]
                groups.setdefault(id(holder), (holder, []))[1].append(doc_id)
                out[doc_id] = None  # type: ignore[assignment]  # filled below, in this order
        for holder, ids in groups.values():
            if holder is None:
                positions = [self._delta_pos[doc_id] for doc_id in ids]
                rows = self._delta[positions].astype(np.float32)
                if self.dtype == "int8":
                    rows *= self._scales[positions][:, None]
            elif holder.rows is not None:
                rows = holder.rows.rows_at([holder.positions[doc_id] for doc_id in ids])
            else:
                rows = [np.array(holder.index.get_item_vector(holder.positions[d]), dtype=np.float32) for d in ids]
            for doc_id, row in zip(ids, rows, strict=True):
                out[doc_id] = row
        return out
