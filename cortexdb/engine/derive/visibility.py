"""What a read sees on the two time axes (reference §3.3, §12.2, §12.3, §18.2 items 1 and 17), pure.

A read is clipped on both axes, conjunctively (``Clip``), and every version of a record
(``derive.versions``) is judged on its own:

| axis      | given                  | a version is kept when                                             |
|-----------|------------------------|--------------------------------------------------------------------|
| recorded  | nothing or ``as_of`` T | it was held at T: ``recorded_from <= T < recorded_to`` (T = now without ``as_of``); with ``include_superseded`` also the versions closed by T (``recorded_to <= T``) |
| recorded  | ``recorded_during`` R  | its ``[recorded_from, recorded_to)`` overlaps R (and, with ``as_of``, the rule above too) |
| valid     | nothing or ``as_of`` T | its claim holds at T: ``valid_from <= T < valid_to``               |
| valid     | ``valid_during`` V (or ``natural``) | its ``[valid_from, valid_to)`` overlaps V (the window replaces the point) |

An episode's validity is its span: it holds from ``started_at`` on; a window overlaps
``[started_at, ended_at]``.  Events have one time, ``recorded_at``: ``as_of`` clips it and
``valid_during`` does not apply (``event_visible``, ``temporal_keep``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any, TypeVar

import attrs

from ..model import to_wire
from ..retrieve.temporal_filter import Interval, overlaps
from ..temporal import parse_rfc3339, shift

R = TypeVar("R")
TICK = dt.timedelta(microseconds=1)


@attrs.frozen
class Clip:
    at: dt.datetime  # the instant both axes are pinned to: as_of, or now
    pinned: bool = False  # ``at`` is an as_of
    include_superseded: bool = False
    valid: Interval | None = None  # valid_during (or a natural phrase)
    recorded: Interval | None = None  # recorded_during

    @classmethod
    def of(cls, temporal: Any, *, now: dt.datetime, as_of: dt.datetime | None = None,
           include_superseded: bool = False) -> Clip:  # fmt: skip
        """A read's clip: its ``as_of`` (or the temporal block's), windows and flag."""
        as_of = as_of or getattr(temporal, "as_of", None)
        return cls(at=as_of or now, pinned=as_of is not None,
                   include_superseded=include_superseded or bool(getattr(temporal, "include_superseded", False)),
                   valid=getattr(temporal, "valid_during", None),
                   recorded=getattr(temporal, "recorded_during", None))  # fmt: skip

    def history(self, head: Any) -> bool:
        """Whether versions before a record's current one may be kept: they are when asked for
        (``include_superseded``, ``recorded_during``) or when the current one is newer than
        ``at``."""
        return self.include_superseded or self.recorded is not None or head.recorded_from > self.at

    def recorded_ok(self, recorded_from: dt.datetime, recorded_to: dt.datetime | None) -> bool:
        if self.recorded is not None:
            if not overlaps(recorded_from, recorded_to, self.recorded):
                return False
            if not self.pinned:
                return True  # the window replaces the implicit "now"
        if recorded_from > self.at:
            return False
        return recorded_to is None or recorded_to > self.at or self.include_superseded

    def valid_ok(self, layer: str, record: Any) -> bool:
        valid_from, valid_to = valid_span(layer, record)
        if self.valid is not None:
            if layer == "episodes":  # a window overlaps the span, its last moment included
                valid_to = shift(record.ended_at, TICK)
            return overlaps(valid_from, valid_to, self.valid)
        return valid_from <= self.at and (valid_to is None or valid_to > self.at)

    def keeps(self, layer: str, version: Any) -> bool:
        return self.recorded_ok(version.recorded_from, version.recorded_to) and self.valid_ok(layer, version)

    def select(self, layer: str, versions: Iterable[R]) -> list[R]:
        """The versions kept, in the order given (oldest first)."""
        return [v for v in versions if self.keeps(layer, v)]


def valid_span(layer: str, record: Any) -> tuple[dt.datetime, dt.datetime | None]:
    if layer == "episodes":
        return record.started_at, record.valid_to
    return record.valid_from, record.valid_to


def held_at(versions: Iterable[R], at: dt.datetime) -> R | None:
    """The version held at ``at`` (the recorded axis only: a direct lookup as of ``at``)."""
    for version in versions:
        if version.recorded_from <= at and (version.recorded_to is None or version.recorded_to > at):
            return version
    return None


def event_visible(wire: dict[str, Any], as_of: dt.datetime | None) -> bool:
    """An event (its wire form) as of ``as_of``: recorded by then (§18.2 item 17)."""
    return not as_of or parse_rfc3339(wire["context"]["recorded_at"]) <= as_of


def temporal_keep(temporal: Any, layer: str, record: Any) -> bool:
    """The ``recorded_during`` of an event read's temporal block (``valid_during`` does not
    apply to events; the other layers are clipped by ``Clip``)."""
    if temporal is None or not (temporal.valid_during or temporal.recorded_during):
        return True
    wire = record if isinstance(record, dict) else to_wire(record)
    return temporal.matches(layer, wire)
