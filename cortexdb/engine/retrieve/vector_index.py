"""Vector index: sealed segments plus an exact numpy delta buffer (DESIGN §9).

New vectors go to a delta matrix searched exactly (a matrix-vector product); when it reaches
``segment_size`` (or ``run_rows``, below) it is sealed into a segment built in a worker thread and
swapped in only once built (annoy cannot take items after ``build()``).  Segments merge like an
LSM tree: when the newest is about as large as the one before it, the two are rebuilt as one (in a
worker thread), so N vectors make about log2(N / segment_size) segments (decisions.md, "Recall at
100k").  Deletes are per-segment dead masks (and a live mask on the delta) filtered at query time;
a merge or a seal drops the dead, and ``rewrite`` (after a forget) rebuilds every segment holding
one without it and drops the delta's dead rows.  Scores are cosine similarities.

Memory (docs/decisions.md, "Index memory"): the delta keeps its rows as ``dtype`` (float32,
float16: the default, or int8 with a per-row scale), scored with SimSIMD's kernels, in chunks of
``chunk_rows`` rows.  With a ``directory`` (the data dir's ``vector-segments/``) a segment's rows
are in a file there: an IVF segment (vector_ivf.py, the default; with ``persist`` kept for the next
open, vector_files.py, else unlinked) or a memory-mapped annoy index.  Without a directory (the
memory backend) annoy segments stay in anonymous memory.  With a directory and ``run_rows``, the
delta is sealed every ``run_rows`` vectors into a flat *run* (vector_runs.py, exact); runs merge
like segments, and a merge reaching ``segment_size`` builds a segment (decisions.md, "Soak
memory").  A segment's ids are sorted bytes, a vector's position the rank of its id (vector_ids.py).
"""

from __future__ import annotations

import numpy as np
import trio

from . import vector_files
from .vector_ids import SortedIds, check, encode
from .vector_ivf import IvfRun
from .vector_runs import DeltaRows, FlatRun, scores, top
from .vector_segments import Segment as _Segment
from .vector_segments import build, died_meanwhile, merged

MERGE_RATIO = 1.5  # merge the newest two segments when the older is at most this much larger
DTYPES = ("float32", "float16", "int8")
SEALED = ("ivf", "annoy")


class VectorIndex:
    def __init__(
        self, dimension: int, *, segment_size: int = 20_000, trees: int = 50,
        dtype: str = "float32", directory: str | None = None, chunk_rows: int = 1024,
        run_rows: int | None = None, sealed: str = "annoy", persist: str | None = None,
    ) -> None:  # fmt: skip
        """``run_rows`` (with a ``directory``): seal the delta every that many rows into a flat
        run in a file (vector_runs.py), so the delta, the only rows in memory, stays small.
        ``sealed``: what a segment of ``segment_size`` rows or more is with a ``directory``,
        ``"ivf"`` (vector_ivf.py: the rows in a file, searched through a coarse quantizer) or
        ``"annoy"`` (a memory-mapped annoy index with a flat run of its rows beside it); without
        a directory it is always annoy (in memory).  ``persist`` (with a directory, IVF): a
        folder of this index's own where sealed segments are kept between runs (vector_files.py)."""
        if dtype not in DTYPES:
            raise ValueError(f"vector dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
        if sealed not in SEALED:
            raise ValueError(f"sealed vector segments {sealed!r}: expected one of {', '.join(SEALED)}")
        self.sealed, self.dimension, self.segment_size, self.trees = sealed, dimension, segment_size, trees
        self.dtype, self.directory, self.chunk_rows = dtype, directory, chunk_rows
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
        self._sealing = False
        self._builds = trio.Lock()  # one seal, merge or rewrite at a time
        self._rewritten: set[str] = set()  # delta rows overwritten while a seal was building
        self.persist = persist if self.directory is not None and sealed == "ivf" else None
        self.retired: list[str] = []  # kept segments replaced since the last manifest
        self.named: list[str] | None = None  # the segments the last manifest named (vector_files.py)

    def __len__(self) -> int:
        sealed = sum(len(segment.ids) - len(segment.dead) for segment in self._segments)
        return sealed + int(np.count_nonzero(self._delta_live[: len(self._delta_ids)]))

    def __contains__(self, doc_id: str) -> bool:
        return self._holder(doc_id) is not None

    def _holder(self, doc_id: str) -> tuple[_Segment | None, int] | None:
        """Where ``doc_id``'s live vector is: (None, its delta row) or (its segment, its position
        there); None when it has none.  A live id is in one place at most; a sealed one is found
        by binary search in each segment's sorted ids (vector_ids.py)."""
        position = self._delta_pos.get(doc_id)
        if position is not None and self._delta_live[position]:
            return None, position
        if self._segments:
            key = encode(doc_id)
            for segment in reversed(self._segments):
                position = segment.ids.find(key)
                if position >= 0 and position not in segment.dead:
                    return segment, position
        return None

    @property
    def segments(self) -> list[_Segment]:
        """The sealed segments, oldest first (vector_files.py, vector_reopen.py read them)."""
        return list(self._segments)

    def adopt(self, segment: _Segment) -> None:
        """Take a kept segment mapped at a reopen as the newest (vector_files.reopen)."""
        self._segments.append(segment)

    def _build(self, rows):  # one place a test may hold a build (vector_segments.build)
        return build(self, rows)
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
            return
        check(doc_id)
        found = self._holder(doc_id)
        if found is not None:  # a sealed copy: it dies, the new vector lives in the delta
            found[0].dead.add(found[1])
        count = len(self._delta_ids)
        if count == len(self._delta):
            self._grow(count)
        self._put(count, vector)
        self._delta_kind[count] = self._kind(doc_id)
        self._delta_live[count] = True
        self._delta_ids.append(doc_id)
        self._delta_pos[doc_id] = count

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
        found = self._holder(doc_id)
        if found is None:
            return
        holder, position = found
        if holder is None:
            self._delta_live[position] = False
        else:
            holder.dead.add(position)

    @property
    def needs_seal(self) -> bool:
        return not self._sealing and len(self._delta_ids) >= (self.run_rows or self.segment_size)

    def _newest_two_similar(self) -> bool:
        return self._similar(len(self._segments) - 2)

    def _similar(self, i: int) -> bool:
        segments = self._segments
        return i >= 0 and len(segments[i].ids) <= MERGE_RATIO * len(segments[i + 1].ids)

    def _similar_pair(self) -> int | None:
        """The oldest two neighbours of similar size: a restore's backlog of equal runs merges
        like a binary counter (decisions.md, "Sealed vector segments kept across a reopen")."""
        return next((i for i in range(len(self._segments) - 1) if self._similar(i)), None)

    @property
    def needs_merge(self) -> bool:
        return not self._sealing and self._similar_pair() is not None

    async def merge(self) -> None:
        """Merge segments while two neighbours are of similar size (each in a worker thread)."""
        if self._sealing:
            return
        async with self._builds:
            self._sealing = True
            try:
                while (i := self._similar_pair()) is not None:
                    await self._merge_at(i)
                await vector_files.persist(self)
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
            unsorted = np.flatnonzero(self._delta_live[:count])
            ids, order = SortedIds.sort(self._delta_ids[i] for i in unsorted.tolist())
            live = unsorted[order].tolist()  # the rows in their ids' order: a position is a rank
            # the build reads the rows where they are: an overwrite meanwhile may reach the new
            # segment, but such a row is dead there (below); a grow meanwhile copies the delta and
            # the build keeps reading the old array
            sealed: set[int] = set()  # the delta rows now live in the new segment
            if live:  # (every row removed: no segment, the delta is only emptied)
                rows = DeltaRows(self._delta, self._scales, live, self.dtype)
                built, side = await trio.to_thread.run_sync(self._build, rows, abandon_on_cancel=True)
                segment = _Segment(built, ids, side)
                # swap: vectors added while building stay in the delta; rows of the sealed part that
                # were removed meanwhile are dead in the new segment, and rows overwritten meanwhile
                # are dead there too, their new vector carried over into the next delta
                for position, i in enumerate(live):
                    if self._delta_live[i] and self._delta_ids[i] not in self._rewritten:
                        sealed.add(i)
                    else:
                        segment.dead.add(position)
                self._segments.append(segment)
            # carried: rows overwritten meanwhile (and removed rows written again meanwhile)
            carried = [i for i in np.flatnonzero(self._delta_live[:count]).tolist() if i not in sealed]
            keep = carried + list(range(count, len(self._delta_ids)))
            rest = [self._delta_ids[i] for i in keep]
            chunks = len(rest) // self.chunk_rows + 1
            self._resize(len(self._delta_ids), chunks * self.chunk_rows, keep)
            self._delta_ids = rest
            self._delta_pos = {doc_id: i for i, doc_id in enumerate(rest)}
            self._rewritten.clear()
            while merge and self._newest_two_similar():
                await self._merge_at(len(self._segments) - 2)
            await vector_files.persist(self)
        finally:
            self._sealing = False

    async def _merge_at(self, i: int) -> None:
        rebuilt = await self._rebuilt(self._segments[i : i + 2])
        self._segments[i : i + 2] = [rebuilt] if len(rebuilt.ids) else []

    async def _rebuilt(self, segments: list[_Segment]) -> _Segment:
        """One segment of the live vectors of ``segments``, built in a worker thread (their ids
        merged in order, vector_segments.merged)."""
        dead_before = [segment.dead.mask.copy() for segment in segments]  # an id lives in one at most

        def gather_and_build():
            ids, rows = merged(segments, dead_before)
            # the vectors are read from the segments' rows (a span at a time) as they are added
            return ids, rows, self._build(rows) if len(ids) else (None, None)

        ids, rows, (built, side) = await trio.to_thread.run_sync(gather_and_build, abandon_on_cancel=True)
        segment = _Segment(built, ids, side)
        for position in died_meanwhile(segments, dead_before, rows):
            segment.dead.add(position)
        for old in segments:
            old.unload()
            self.retired += old.names()
        return segment

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
                self.retired += [n for s in self._segments if not s.ids for n in s.names()]
                self._segments = [segment for segment in self._segments if segment.ids]
                await vector_files.persist(self)
                return len(stale)
            finally:
                self._sealing = False

    def search(
        self, query: np.ndarray, limit: int, prefixes: tuple[str, ...] | None = None
    ) -> list[tuple[str, float]]:
        """The ``limit`` nearest live vectors, best first, with cosine similarity; with
        ``prefixes``, only ids starting with one of them (annoy is asked for more to make up)."""
        results: dict[str, float] = {}
        base = limit + 8 if prefixes is None else limit * 4 + 8
        for segment in self._segments:
            if not len(segment.ids):
                continue
            if isinstance(segment.index, FlatRun | IvfRun):  # noqa: UP038
                self._search_run(segment, query, base, prefixes, results)
                continue
            dead = segment.dead
            fetch = base + min(len(dead), 3 * base)  # make up for dead hits, within bounds
            positions, distances = segment.index.get_nns_by_vector(
                query, min(fetch, len(segment.ids)), search_k=-1, include_distances=True
            )
            for position, distance in zip(positions, distances, strict=True):
                if position in dead:
                    continue
                doc_id = segment.ids[position]
                if prefixes is not None and not doc_id.startswith(prefixes):
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
        """A flat run's exact best, its dead rows (and ids of other prefixes: spans of its sorted
        ids) left out; equal cosines by position, which is by id (vector_ids.py)."""
        ids = segment.ids
        skip = None if prefixes is None else ids.mask(prefixes)  # a mask of the rows left out
        if segment.dead:
            skip = segment.dead.mask if skip is None else skip | segment.dead.mask
        for position, similarity in segment.index.nearest(query, limit, skip, range(len(ids))):
            doc_id = ids[position]
            if similarity > results.get(doc_id, -2.0):
                results[doc_id] = similarity

    def vector(self, doc_id: str) -> np.ndarray | None:
        found = self._holder(doc_id)
        if found is None:
            return None
        holder, position = found
        if holder is None:
            return self._row(position)
        if holder.rows is not None:
            return holder.rows.get_item_vector(position)
        return np.array(holder.index.get_item_vector(position), dtype=np.float32)

    def vectors(self, doc_ids) -> dict[str, np.ndarray]:
        """The live vectors of ``doc_ids`` (float32, as ``vector`` gives them), read a holder at
        a time: the delta's rows in one take, a flat run's through one pass over its mapping."""
        out: dict[str, np.ndarray] = {}
        groups: dict[int, tuple[_Segment | None, list[str], list[int]]] = {}
        for doc_id in doc_ids:
            if doc_id in out:
                continue
            found = self._holder(doc_id)
            if found is not None:
                group = groups.setdefault(id(found[0]), (found[0], [], []))
                group[1].append(doc_id)
                group[2].append(found[1])
                out[doc_id] = None  # type: ignore[assignment]  # filled below, in this order
        for holder, ids, positions in groups.values():
            if holder is None:
                rows = self._delta[positions].astype(np.float32)
                if self.dtype == "int8":
                    rows *= self._scales[positions][:, None]
            elif holder.rows is not None:
                rows = holder.rows.rows_at(positions)
            else:
                rows = [np.array(holder.index.get_item_vector(p), dtype=np.float32) for p in positions]
            for doc_id, row in zip(ids, rows, strict=True):
                out[doc_id] = row
        return out
