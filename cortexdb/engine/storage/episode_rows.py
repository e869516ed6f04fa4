"""Open episodes' member rows kept decoded (``MemberRows``), one cache per scope actor.

A recall that meets an open episode among its candidates reads the episode whole: its header and
its member rows (``storage/episodes``), up to ``episode_max_events`` of them, decoded at every
recall (0.8 → 3.7 ms a recall as the soak's episodes grew; docs/benchmarks.md, "The soak's CPU
per write: where it grows").  While an episode is open its rows only grow at the end, so the rows
read once stay right for as long as the same *generation* of rows is stored: the header's
``members_gen``, a random token the episode step writes whenever it writes the rows from position
0 (a new header, or one written whole in between: a seal, a cancel, a forget, resegmentation) and
keeps while it appends.  A cached entry is used only under a header of the same generation; the
rows from the cached count on are read from the store (docs/decisions.md, "An open episode's
member rows read once").

Nothing here trusts a write path to invalidate it: the entry is checked against the stored header
at every read, so every writer (another process on a shared store included) is covered.  The
bound is in rows (``EngineConfig.episode_rows_cached``); the least recently used episode goes
first, and an episode with more rows than the bound is not kept.
"""

from __future__ import annotations

import collections
import os
from typing import Any


def new_generation() -> str:
    """A generation of member rows: 64 random bits, not from the engine's seeded ids (two runs
    of one seed would mint the same generation for different rows of one episode)."""
    return os.urandom(8).hex()


class MemberRows:
    """Decoded member rows (``[event id, causal role]`` lists) by episode id, each entry tagged
    with the generation it was read under; at most ``most`` rows in all."""

    def __init__(self, most: int) -> None:
        self.most = most
        self._items: collections.OrderedDict[str, tuple[str, list[Any]]] = collections.OrderedDict()
        self.rows = 0
        self.hits = self.misses = 0  # reads served (partly) from an entry, and reads without one

    def __len__(self) -> int:
        return len(self._items)

    def get(self, episode_id: str, generation: str) -> list[Any] | None:
        """The rows cached for ``episode_id`` under ``generation`` (a prefix of the stored rows),
        or None.  An entry of another generation is dropped: its rows were rewritten."""
        hit = self._items.get(episode_id)
        if hit is None or hit[0] != generation:
            if hit is not None:
                self.drop(episode_id)
            self.misses += 1
            return None
        self._items.move_to_end(episode_id)
        self.hits += 1
        return hit[1]

    def put(self, episode_id: str, generation: str, rows: list[Any]) -> None:
        """Keep ``rows`` (every row the header of ``generation`` counted, read consistently)."""
        self.drop(episode_id)
        if len(rows) > self.most:
            return
        self._items[episode_id] = (generation, rows)
        self.rows += len(rows)
        while self.rows > self.most:
            _, (_, gone) = self._items.popitem(last=False)
            self.rows -= len(gone)

    def drop(self, episode_id: str) -> None:
        old = self._items.pop(episode_id, None)
        if old is not None:
            self.rows -= len(old[1])

    def clear(self) -> None:
        self._items.clear()
        self.rows = 0
