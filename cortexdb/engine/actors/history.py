"""Reading a record's versions (docs/time.md): the current one is its row, the closed ones are
rows of its layer's versions table (``storage.versions``).  What a read keeps of them is
``derive.visibility.Clip``'s; what each holds is ``derive.versions``'s.

Only what a read can keep is loaded: a record never revised (``version`` 1) is its row alone;
without ``include_superseded`` or ``recorded_during`` only the version held at the read's moment
is looked up (one seek), and none when the current one already is.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..derive.versions import expand_episode, is_full, legacy, split_legacy
from ..derive.visibility import Clip
from ..model import Belief, Episode, Fact, to_wire

#: an episode's three lists, empty: recall structures a head without them (up to 500 causal
#: links) and passes its wire form as ``later`` (``episode_versions``)
NO_LISTS: dict[str, list] = {"events": [], "supports": [], "causal_chain": []}


def _wanted(clip: Clip | None, at: dt.datetime | None, head: Any) -> tuple[bool, dt.datetime | None]:
    """(whether closed versions are needed, the moment to seek past: None for all of them)."""
    if clip is None:  # a direct lookup as of ``at``
        return (at is not None and head.recorded_from > at), at
    if clip.include_superseded or clip.recorded is not None:
        return True, None
    return head.recorded_from > clip.at, clip.at


async def fact_versions(tables: Any, head: Fact, clip: Clip | None = None,
                        at: dt.datetime | None = None) -> list[Fact]:  # fmt: skip
    """The versions of a fact a read may keep, oldest first (the current one last)."""
    if legacy(head):
        return split_legacy(head)
    needed, after = _wanted(clip, at, head)
    if head.version == 1 or not needed:
        return [head]
    limit = None if after is None else 1
    return [v async for v in tables.fact_versions.rows(head.id, after=after, limit=limit)] + [head]


async def belief_versions(tables: Any, belief_id: str, head: Belief | None, clip: Clip | None = None,
                          at: dt.datetime | None = None) -> list[Belief]:  # fmt: skip
    """The versions of a belief a read may keep, oldest first; ``head`` None for a belief that
    was deleted (its last version closed when it was)."""
    if head is not None:
        needed, after = _wanted(clip, at, head)
        if head.version == 1 or not needed:
            return [head]
    else:
        after = at if clip is None else (None if clip.include_superseded or clip.recorded else clip.at)
    limit = None if after is None else 1
    rows = [v async for v in tables.belief_versions.rows(belief_id, after=after, limit=limit)]
    return rows + ([head] if head is not None else [])


async def episode_versions(tables: Any, head: Episode, clip: Clip | None = None,
                           at: dt.datetime | None = None, later: dict[str, Any] | None = None) -> list[Episode]:  # fmt: skip
    """The versions of an episode a read may keep, oldest first.  A compact version reads its
    lists from the next one stored whole, so the rows are read on until one is (or the end).
    ``later``: the head's wire form, when the caller has it (then only the head's times are
    read from ``head``: recall structures it without its lists)."""
    needed, after = _wanted(clip, at, head)
    if head.version == 1 or not needed:
        return [head]
    rows: list[dict[str, Any]] = []
    async for row in tables.episode_versions.rows(head.id, after=after):
        rows.append(row)
        if after is not None and is_full(row):
            break
    later = to_wire(head) if later is None else later
    versions: list[Episode] = []
    for row in reversed(rows):
        if is_full(row):
            later = row
        versions.append(expand_episode(row, later))
    if after is not None:
        versions = versions[-1:]  # the first row past ``after``: the one held then, if any
    return list(reversed(versions)) + [head]
