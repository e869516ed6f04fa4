"""Vector index: sealed annoy segments plus an exact numpy delta buffer (DESIGN §9).

annoy cannot take items after ``build()`` (``add_item`` silently corrupts a built index), so new
vectors go to a delta matrix searched exactly (a matrix-vector product); when the delta reaches
``segment_size`` it is sealed into an annoy index built in a worker thread, and swapped in only
once built.  Segments merge like an LSM tree: when the newest segment is about as large as the
one before it, the two are rebuilt as one (also in a worker thread), so a scope of N vectors has
about log2(N / segment_size) segments and a query asks few annoy indexes (decisions.md, "Recall at
100k").  Deletes are per-segment dead sets (and a live mask on the delta) filtered at query time;
a merge or a seal drops the dead.  Scores are cosine similarities.
"""

from __future__ import annotations

import numpy as np
import trio

MERGE_RATIO = 1.5  # merge the newest two segments when the older is at most this much larger


class _Segment:
    def __init__(self, annoy_index, ids: list[str]) -> None:
        self.index = annoy_index
        self.ids = ids
        self.positions = {doc_id: i for i, doc_id in enumerate(ids)}
        self.dead: set[str] = set()  # removed, or superseded by a newer vector elsewhere


class VectorIndex:
    def __init__(self, dimension: int, *, segment_size: int = 20_000, trees: int = 50) -> None:
        self.dimension = dimension
        self.segment_size = segment_size
        self.trees = trees
        self._segments: list[_Segment] = []
        self._delta = np.zeros((1024, dimension), dtype=np.float32)
        self._delta_ids: list[str] = []
        self._delta_kind = np.zeros(1024, dtype=np.int16)  # id-prefix code per row (layer filters)
        self._delta_live = np.zeros(1024, dtype=bool)
        self._delta_pos: dict[str, int] = {}
        self._kinds: dict[str, int] = {}
        self._where: dict[str, _Segment | None] = {}  # live ids: their segment, None = the delta
        self._sealing = False
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
                self._rewritten.add(doc_id)  # the copy being sealed is stale now
            self._delta[position] = vector
            self._delta_live[position] = True
            self._where[doc_id] = None
            return
        holder = self._where.get(doc_id)
        if holder is not None:  # a sealed copy: it dies, the new vector lives in the delta
            holder.dead.add(doc_id)
        count = len(self._delta_ids)
        if count == len(self._delta):
            self._grow(count)
        self._delta[count] = vector
        self._delta_kind[count] = self._kind(doc_id)
        self._delta_live[count] = True
        self._delta_ids.append(doc_id)
        self._delta_pos[doc_id] = count
        self._where[doc_id] = None

    def _grow(self, count: int) -> None:
        size = len(self._delta) * 2
        grown = np.zeros((size, self.dimension), dtype=np.float32)
        grown[:count] = self._delta[:count]
        kinds = np.zeros(size, dtype=np.int16)
        kinds[:count] = self._delta_kind[:count]
        live = np.zeros(size, dtype=bool)
        live[:count] = self._delta_live[:count]
        self._delta, self._delta_kind, self._delta_live = grown, kinds, live

    def _kind(self, doc_id: str) -> int:
        prefix = doc_id.split("_", 1)[0] + "_"
        return self._kinds.setdefault(prefix, len(self._kinds) + 1)

    def remove(self, doc_id: str) -> None:
        if doc_id not in self._where:
            return
        holder = self._where.pop(doc_id)
        if holder is None:
            self._delta_live[self._delta_pos[doc_id]] = False
        else:
            holder.dead.add(doc_id)

    @property
    def needs_seal(self) -> bool:
        return not self._sealing and len(self._delta_ids) >= self.segment_size

    def _newest_two_similar(self) -> bool:
        segments = self._segments
        return len(segments) >= 2 and len(segments[-2].ids) <= MERGE_RATIO * len(segments[-1].ids)

    @property
    def needs_merge(self) -> bool:
        return not self._sealing and self._newest_two_similar()

    async def merge(self) -> None:
        """Merge the newest segments while they are of similar size (each merge in a worker thread)."""
        if self._sealing:
            return
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
        self._sealing = True
        try:
            count = len(self._delta_ids)
            live = np.flatnonzero(self._delta_live[:count]).tolist()
            ids = [self._delta_ids[i] for i in live]
            matrix = self._delta[live].copy()
            built = await trio.to_thread.run_sync(self._build, matrix, abandon_on_cancel=True)
            segment = _Segment(built, ids)
            # swap: vectors added while building stay in the delta; rows of the sealed part that
            # were removed meanwhile are dead in the new segment, and rows overwritten meanwhile
            # are dead there too, their new vector carried over into the next delta
            carried = []
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
            size = max(1024, len(rest) * 2)
            delta = np.zeros((size, self.dimension), dtype=np.float32)
            delta[: len(rest)] = self._delta[keep]
            kinds = np.zeros(size, dtype=np.int16)
            kinds[: len(rest)] = self._delta_kind[keep]
            live_mask = np.zeros(size, dtype=bool)
            live_mask[: len(rest)] = self._delta_live[keep]
            self._delta, self._delta_kind, self._delta_live = delta, kinds, live_mask
            self._delta_ids = rest
            self._delta_pos = {doc_id: i for i, doc_id in enumerate(rest)}
            self._rewritten.clear()
            while merge and self._newest_two_similar():
                await self._merge_newest_two()
        finally:
            self._sealing = False

    async def _merge_newest_two(self) -> None:
        older, newer = self._segments[-2], self._segments[-1]
        dead_before = older.dead | newer.dead

        def gather_and_build():
            ids, rows = [], []
            for segment in (older, newer):
                for position, doc_id in enumerate(segment.ids):
                    if doc_id not in dead_before:
                        ids.append(doc_id)
                        rows.append(segment.index.get_item_vector(position))
            matrix = np.asarray(rows, dtype=np.float32).reshape(len(rows), self.dimension)
            return ids, self._build(matrix)

        ids, built = await trio.to_thread.run_sync(gather_and_build, abandon_on_cancel=True)
        merged = _Segment(built, ids)
        died_meanwhile = (older.dead | newer.dead) - dead_before
        for doc_id in ids:
            if doc_id in died_meanwhile:
                merged.dead.add(doc_id)
            else:
                self._where[doc_id] = merged
        self._segments[-2:] = [merged]

    def _build(self, matrix: np.ndarray):
        from annoy import AnnoyIndex

        index = AnnoyIndex(self.dimension, "angular")
        for position in range(len(matrix)):
            index.add_item(position, matrix[position])
        index.build(self.trees, n_jobs=1)
        return index

    def search(
        self, query: np.ndarray, limit: int, prefixes: tuple[str, ...] | None = None
    ) -> list[tuple[str, float]]:
        """The ``limit`` nearest live vectors, best first, with cosine similarity; with
        ``prefixes``, only ids starting with one of them (annoy is asked for more to make up)."""
        results: dict[str, float] = {}
        base = limit + 8 if prefixes is None else limit * 4 + 8
        for segment in self._segments:
            dead = segment.dead
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
            scores = self._delta[:count] @ query
            keep = self._delta_live[:count]
            if prefixes is not None:
                codes = [self._kinds[p] for p in prefixes if p in self._kinds]
                keep = keep & np.isin(self._delta_kind[:count], codes)
            scores = np.where(keep, scores, -np.inf)
            take = min(limit, int(keep.sum()))
            if take:
                top = np.argpartition(-scores, take - 1)[:take] if take < count else np.arange(count)
                for position in top.tolist():
                    value = float(scores[position])
                    if value != -np.inf:
                        results[self._delta_ids[position]] = value
        ranked = sorted(results.items(), key=lambda item: (-item[1], item[0]))
        return ranked[:limit]

    def vector(self, doc_id: str) -> np.ndarray | None:
        if doc_id not in self._where:
            return None
        holder = self._where[doc_id]
        if holder is None:
            return self._delta[self._delta_pos[doc_id]]
        return np.array(holder.index.get_item_vector(holder.positions[doc_id]), dtype=np.float32)
