"""The facts and beliefs of a scope whose current version's validity has closed, so that a recall
that keeps only what holds now skips them without reading them (decisions.md, "Recall skips
what has closed without reading it").

A record is *closed* when its stored current version (its head) has a ``valid_to`` and no
``recorded_to`` (a superseded or invalidated fact, a belief whose claim stopped holding): from
``max(valid_to, recorded_from)`` on, a read with no ``as_of``, no ``include_superseded`` and no
window keeps none of its versions (``candidates._version``: the head is judged alone, and fails
``valid_to > at``).  The set is kept where heads are written (``note``: ``extract.fact_ops``,
the belief writes) and rebuilt from the tables on restore (``stages/index.restore``); a rebuild
resets it with the rest of the state.  A record is only noted once its closing has passed (a
``valid_to`` in the future leaves it out); ``since``, the latest closing of any record ever
noted, guards a clock set back: a recall at an earlier moment skips nothing.  A record written
again open (or deleted) leaves the set.  Only ids are held: one set entry per closed record.
"""

from __future__ import annotations

import datetime as dt
from typing import Any


class ClosedRecords:
    __slots__ = ("ids", "since")

    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.since: dt.datetime | None = None  # the latest closing of any record noted

    def note(self, record: Any, now: dt.datetime) -> None:
        """A fact's or a belief's head as written (or read on restore)."""
        closed = closing(record)
        if closed is None or closed > now:
            self.ids.discard(record.id)
            return
        self.ids.add(record.id)
        if self.since is None or closed > self.since:
            self.since = closed

    def discard(self, record_id: str) -> None:
        self.ids.discard(record_id)

    def skipped(self, clip: Any) -> set[str] | frozenset[str]:
        """The ids a read with ``clip`` would drop after reading them: all of them when the clip
        keeps only what holds at its moment (now) and that moment is past every closing noted;
        none otherwise."""
        if self.since is None or clip.pinned or clip.include_superseded:
            return frozenset()
        if clip.recorded is not None or clip.valid is not None or clip.at < self.since:
            return frozenset()
        return self.ids


def closing(record: Any) -> dt.datetime | None:
    """From when a head keeps none of its record's versions in a plain read, or None."""
    if record.valid_to is None or record.recorded_to is not None:
        return None
    return max(record.valid_to, record.recorded_from)
