"""The ``temporal`` router type's handler (docs/router.md).  When the question's window resolves,
each scope also *retrieves* the records that happened inside it (``actors.candidates``: its
BM25 and vector hits beyond the plain ``recall_candidates`` cut, kept when they happened in the
window); here, after scoring, every in-window candidate is ranked ahead of the others, which stay
after them as the fallback (a window that holds nothing still gets an answer).

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

from ..retrieve.temporal_filter import happened_in

# every in-window candidate ends up scoring at least this much above every out-of-window one:
# more than MMR's redundancy penalty can take back ((1 - 0.7) / 0.7 < 0.5), so they are picked first
WINDOW_MARGIN = 0.5
Interval = tuple[dt.datetime | None, dt.datetime | None]

__all__ = ["WINDOW_MARGIN", "happened_in", "prefer"]


def prefer(window: Interval, candidates: list[Any]) -> dict[str, Any]:
    """Rank the in-window candidates ahead of the rest (their order among themselves kept); what
    the route phase's ``temporal`` reports: how many records were in the window and out of it,
    how many of those in it only the windowed retrieval found, and whether the answer falls back
    on out-of-window records alone (nothing happened in the window)."""
    inside = [c for c in candidates if happened_in(c.layer, c.record, window)]
    chosen = {id(c) for c in inside}
    outside = [c for c in candidates if id(c) not in chosen]
    if inside:
        top_out = max((c.score for c in outside), default=0.0)
        lift = max(0.0, top_out - min(c.score for c in inside)) + WINDOW_MARGIN
        for candidate in inside:
            candidate.score += lift
    keys = {(c.scope, c.record.get("id")) for c in inside}
    out_keys = {(c.scope, c.record.get("id")) for c in outside} - keys
    retrieved = {(c.scope, c.record.get("id")) for c in inside if c.in_window}
    return {"in_window": len(keys), "outside_window": len(out_keys),
            "retrieved_in_window": len(retrieved), "fallback": not inside}  # fmt: skip
