"""The ``temporal`` router type's handler (docs/router.md): records that happened inside the window
the question names are ranked first; the others stay, after them.

"Happened inside" is judged per layer on the record's own start, not on an open validity interval
(a fact true since 2019 is true last week, but did not happen last week):

| layer | happened at |
|---|---|
| events | ``context.observed_at`` (when it was said or done) |
| facts, beliefs | ``valid_from`` (when it became true), else ``recorded_from`` |
| episodes | its span ``[started_at, ended_at]`` overlaps the window |
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..temporal import try_parse_rfc3339

WINDOW_BONUS = 0.25  # added to an in-window candidate's score: above any out-of-window one's blend
Interval = tuple[dt.datetime | None, dt.datetime | None]


def _ts(value: Any) -> dt.datetime | None:
    return value if isinstance(value, dt.datetime) else try_parse_rfc3339(value) if value else None


def _inside(moment: dt.datetime | None, window: Interval) -> bool:
    start, end = window
    if moment is None:
        return False
    return (start is None or moment >= start) and (end is None or moment < end)


def happened_in(layer: str, record: dict[str, Any], window: Interval) -> bool:
    """Whether the record happened inside ``window`` ([start, end), either end open)."""
    if layer == "events":
        return _inside(_ts((record.get("context") or {}).get("observed_at")), window)
    if layer == "episodes":
        began, ended = _ts(record.get("started_at")), _ts(record.get("ended_at"))
        if began is None:
            return False
        start, end = window
        return (end is None or began < end) and (start is None or (ended or began) >= start)
    return _inside(_ts(record.get("valid_from")) or _ts(record.get("recorded_from")), window)


def prefer(window: Interval, candidates: list[Any]) -> dict[str, int]:
    """Raise the in-window candidates above the rest; how many records were in the window and
    how many out of it (the route phase's ``temporal`` reports both)."""
    inside: set[tuple[str, str]] = set()
    outside: set[tuple[str, str]] = set()
    for candidate in candidates:
        key = (candidate.scope, candidate.record.get("id"))
        if happened_in(candidate.layer, candidate.record, window):
            candidate.score += WINDOW_BONUS
            inside.add(key)
        else:
            outside.add(key)
    return {"in_window": len(inside), "outside_window": len(outside - inside)}
