"""Vector index: sealed annoy segments plus an exact numpy delta buffer (DESIGN §9).

annoy cannot take items after ``build()`` (``add_item`` silently corrupts a built index), so new
vectors go to a delta matrix searched exactly (a matrix-vector product); when the delta reaches
``segment_size`` it is sealed into an annoy index built in a worker thread, and swapped in only
once built.  Deletes are a tombstone set filtered at query time (and dropped at the next seal of
the delta).  Scores are cosine similarities.
"""

from __future__ import annotations

import numpy as np
import trio


class _Segment:
    def __init__(self, annoy_index, ids: list[str]) -> None:
        self.index = annoy_index
        self.ids = ids
        self.positions = {doc_id: i for i, doc_id in enumerate(ids)}


class VectorIndex:
    def __init__(self, dimension: int, *, segment_size: int = 20_000, trees: int = 50) -> None:
        self.dimension = dimension
        self.segment_size = segment_size
        self.trees = trees
        self._segments: list[_Segment] = []
        self._delta = np.zeros((1024, dimension), dtype=np.float32)
        self._delta_ids: list[str] = []
        self._delta_kind = np.zeros(1024, dtype=np.int16)  # id-prefix code per row (layer filters)
        self._delta_pos: dict[str, int] = {}
        self._kinds: dict[str, int] = {}
        self._removed: set[str] = set()
        self._shadowed: set[str] = set()  # sealed copies superseded by a newer vector in the delta
        self._known: set[str] = set()
        self._sealing = False

    def __len__(self) -> int:
        return len(self._known) - len(self._removed & self._known)

    def __contains__(self, doc_id: str) -> bool:
        return doc_id in self._known and doc_id not in self._removed

    def add(self, doc_id: str, vector: np.ndarray) -> None:
        if doc_id in self._delta_pos:
            self._delta[self._delta_pos[doc_id]] = vector
            self._removed.discard(doc_id)
            return
        if doc_id in self._known:  # a sealed copy exists: hide it, keep the new one in the delta
            self._removed.discard(doc_id)
            self._shadowed.add(doc_id)
        count = len(self._delta_ids)
        if count == len(self._delta):
            grown = np.zeros((len(self._delta) * 2, self.dimension), dtype=np.float32)
            grown[:count] = self._delta[:count]
            self._delta = grown
            kinds = np.zeros(len(self._delta), dtype=np.int16)
            kinds[:count] = self._delta_kind[:count]
            self._delta_kind = kinds
        self._delta[count] = vector
        self._delta_kind[count] = self._kind(doc_id)
        self._delta_ids.append(doc_id)
        self._delta_pos[doc_id] = count
        self._known.add(doc_id)

    def _kind(self, doc_id: str) -> int:
        prefix = doc_id.split("_", 1)[0] + "_"
        return self._kinds.setdefault(prefix, len(self._kinds) + 1)

    def remove(self, doc_id: str) -> None:
        if doc_id in self._known:
            self._removed.add(doc_id)

    @property
    def needs_seal(self) -> bool:
        return not self._sealing and len(self._delta_ids) >= self.segment_size

    async def seal(self) -> None:
        """Move the delta into a new annoy segment, built off the event loop."""
        if self._sealing or not self._delta_ids:
            return
        from annoy import AnnoyIndex

        self._sealing = True
        try:
            count = len(self._delta_ids)
            ids = list(self._delta_ids)
            matrix = self._delta[:count].copy()
            dimension, trees = self.dimension, self.trees

            def build():
                index = AnnoyIndex(dimension, "angular")
                for position in range(count):
                    index.add_item(position, matrix[position])
                index.build(trees, n_jobs=1)
                return index

            built = await trio.to_thread.run_sync(build)
            # swap: vectors added while building stay in the delta
            self._segments.append(_Segment(built, ids))
            rest = self._delta_ids[count:]
            rest_matrix = self._delta[count : len(self._delta_ids)].copy()
            rest_kinds = self._delta_kind[count : len(self._delta_ids)].copy()
            self._delta = np.zeros((max(1024, len(rest) * 2), self.dimension), dtype=np.float32)
            self._delta[: len(rest)] = rest_matrix
            self._delta_kind = np.zeros(len(self._delta), dtype=np.int16)
            self._delta_kind[: len(rest)] = rest_kinds
            self._delta_ids = list(rest)
            self._delta_pos = {doc_id: i for i, doc_id in enumerate(rest)}
        finally:
            self._sealing = False

    def search(
        self, query: np.ndarray, limit: int, prefixes: tuple[str, ...] | None = None
    ) -> list[tuple[str, float]]:
        """The ``limit`` nearest live vectors, best first, with cosine similarity; with
        ``prefixes``, only ids starting with one of them (annoy is asked for more to make up)."""
        results: dict[str, float] = {}
        shadowed = self._shadowed
        fetch = limit + 8 if prefixes is None else limit * 4 + 8
        for segment in self._segments:
            positions, distances = segment.index.get_nns_by_vector(
                query, fetch, search_k=-1, include_distances=True
            )
            for position, distance in zip(positions, distances, strict=True):
                doc_id = segment.ids[position]
                if doc_id in self._removed or doc_id in shadowed:
                    continue
                if prefixes is not None and not doc_id.startswith(prefixes):
                    continue
                similarity = 1.0 - (distance * distance) / 2.0  # angular distance -> cosine
                if similarity > results.get(doc_id, -2.0):
                    results[doc_id] = similarity
        count = len(self._delta_ids)
        if count:
            scores = self._delta[:count] @ query
            if prefixes is not None:
                codes = [self._kinds[p] for p in prefixes if p in self._kinds]
                keep = np.isin(self._delta_kind[:count], codes)
                scores = np.where(keep, scores, -np.inf)
            take = min(limit + len(self._removed), count)
            top = np.argpartition(-scores, take - 1)[:take] if take < count else np.arange(count)
            for position in top:
                doc_id = self._delta_ids[position]
                if doc_id not in self._removed and np.isfinite(scores[position]):
                    results[doc_id] = float(scores[position])
        ranked = sorted(results.items(), key=lambda item: (-item[1], item[0]))
        return ranked[:limit]

    def vector(self, doc_id: str) -> np.ndarray | None:
        position = self._delta_pos.get(doc_id)
        if position is not None:
            return self._delta[position]
        for segment in self._segments:
            if doc_id in segment.positions:
                return np.array(
                    segment.index.get_item_vector(segment.positions[doc_id]), dtype=np.float32
                )
        return None
