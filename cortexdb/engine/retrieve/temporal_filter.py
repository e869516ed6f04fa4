"""The temporal block (reference §12.2, §12.3, §18.2 items 1 and 17) as one predicate per layer.

- ``as_of`` T pins both axes (``derive.visibility.Clip`` judges each version of a derived
  record; ``matches`` here clips an event's ``recorded_at`` only).
- ``valid_during`` [a, b) keeps records whose [valid_from, valid_to) overlaps it.  Events have no
  validity interval, so it never filters them (the raw view warns that it was ignored).
- ``recorded_during`` [a, b) keeps records whose [recorded_from, recorded_to) overlaps it
  (events: ``recorded_at`` in [a, b)).
- ``natural`` is resolved (against ``reference_date``, default now) to ``valid_during``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import attrs

from ...errors import InvalidTemporal
from ..temporal import parse_rfc3339, shift, try_parse_rfc3339
from ..timephrases import resolve_phrase

Interval = tuple[dt.datetime | None, dt.datetime | None]



def _ts(value: Any) -> dt.datetime | None:
    if value is None or isinstance(value, dt.datetime):
        return value
    return try_parse_rfc3339(value)


def bound(value: Any, field: str) -> dt.datetime | None:
    """An RFC 3339 timestamp or a bare date (``2026-04-01``: its midnight, UTC)."""
    if value in (None, ""):
        return None
    if isinstance(value, dt.datetime):
        return value
    if isinstance(value, str) and len(value) == 10:  # a bare date
        value = value + "T00:00:00Z"
    return parse_rfc3339(value, field=field)


def parse_interval(value: Any, field: str) -> Interval | None:
    """``[from, to]`` (array) or ``"FROM..TO"`` (query string); either end may be empty."""
    if value is None:
        return None
    if isinstance(value, str):
        if ".." not in value:
            raise InvalidTemporal(f"{field} must be FROM..TO", details={"field": field})
        value = value.split("..", 1)
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise InvalidTemporal(f"{field} must be a [from, to] pair", details={"field": field})
    start, end = bound(value[0], field), bound(value[1], field)
    if start and end and end < start:
        raise InvalidTemporal(f"{field} ends before it starts", details={"field": field})
    return start, end


def happened_in(layer: str, record: dict[str, Any], window: Interval) -> bool:
    """Whether a record happened inside ``window`` ([start, end), either end open): on its own
    start, not on an open validity interval (the temporal router handler, docs/router.md):
    an event's ``context.observed_at``; a fact's or belief's ``valid_from`` (else
    ``recorded_from``); an episode whose span ``[started_at, ended_at]`` overlaps the window."""
    start, end = window
    if layer == "episodes":
        began, ended = _ts(record.get("started_at")), _ts(record.get("ended_at"))
        if began is None:
            return False
        return (end is None or began < end) and (start is None or (ended or began) >= start)
    if layer == "events":
        moment = _ts((record.get("context") or {}).get("observed_at"))
    else:
        moment = _ts(record.get("valid_from")) or _ts(record.get("recorded_from"))
    return moment is not None and (start is None or moment >= start) and (end is None or moment < end)


def overlaps(lo: dt.datetime | None, hi: dt.datetime | None, interval: Interval) -> bool:
    start, end = interval
    if end is not None and lo is not None and lo >= end:
        return False
    return not (start is not None and hi is not None and hi <= start)


@attrs.frozen
class TemporalFilter:
    as_of: dt.datetime | None = None
    valid_during: Interval | None = None
    recorded_during: Interval | None = None
    include_superseded: bool = False
    natural: str | None = None
    reference: dt.datetime | None = None

    @classmethod
    def from_query(cls, block: dict | None, now: dt.datetime, custom: dict | None = None,
                   include_superseded: bool = False) -> TemporalFilter:  # fmt: skip
        block = block or {}
        if not isinstance(block, dict):
            raise InvalidTemporal("temporal must be an object", details={"field": "temporal"})
        reference = bound(block.get("reference_date"), "temporal.reference_date") or now
        valid = parse_interval(block.get("valid_during"), "temporal.valid_during")
        natural = block.get("natural")
        if natural:
            if not isinstance(natural, str):
                raise InvalidTemporal(
                    "temporal.natural must be a string", details={"field": "temporal.natural"}
                )
            phrase = resolve_phrase(natural, reference, custom)
            valid = (
                phrase
                if valid is None
                else (max(_lo(valid[0]), _lo(phrase[0])), min(_hi(valid[1]), _hi(phrase[1])))
            )
        return cls(
            as_of=bound(block.get("as_of"), "temporal.as_of"),
            valid_during=valid,
            recorded_during=parse_interval(
                block.get("recorded_during"), "temporal.recorded_during"
            ),
            include_superseded=include_superseded,
            natural=natural,
            reference=reference,
        )

    @property
    def active(self) -> bool:
        return any((self.as_of, self.valid_during, self.recorded_during))

    def describe(self) -> list[str]:
        out = []
        if self.as_of:
            out.append("temporal.as_of")
        if self.valid_during:
            out.append("temporal.natural" if self.natural else "temporal.valid_during")
        if self.recorded_during:
            out.append("temporal.recorded_during")
        return out

    def matches(self, layer: str, record: dict[str, Any]) -> bool:
        if layer == "events":
            recorded = _ts(record["context"].get("recorded_at"))
            if self.as_of and recorded and recorded > self.as_of:
                return False
            if self.recorded_during and not overlaps(recorded, recorded, self.recorded_during):
                return False
            return True
        if layer == "episodes":  # an episode describes the span of its events
            valid_from = _ts(record["started_at"])
            valid_to = shift(_ts(record["ended_at"]), dt.timedelta(microseconds=1))
        else:
            valid_from, valid_to = _ts(record.get("valid_from")), _ts(record.get("valid_to"))
        recorded_from, recorded_to = _ts(record.get("recorded_from")), _ts(record.get("recorded_to"))
        if self.valid_during and not overlaps(valid_from, valid_to, self.valid_during):
            return False
        if self.recorded_during and not overlaps(recorded_from, recorded_to, self.recorded_during):
            return False
        return True


def _lo(value):
    return value or dt.datetime.min.replace(tzinfo=dt.UTC)


def _hi(value):
    return value or dt.datetime.max.replace(tzinfo=dt.UTC)
