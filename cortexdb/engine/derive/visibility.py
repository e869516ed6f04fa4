"""What a read sees "as of" a moment (reference §12.3, §18.2 items 1 and 17), pure.

| layer     | visible at T when                                                               |
|-----------|---------------------------------------------------------------------------------|
| events    | recorded by T (``as_of`` clips ``recorded_at`` only)                            |
| facts     | recorded and valid from by T; and, unless superseded versions are asked for, still current at T (``fact_visible``) |
| beliefs   | recorded and valid from by T, not retracted by T; a closed claim (every supporting fact superseded) only when closed ones are asked for or a valid-time window is given (``belief_visible``) |
| episodes  | recorded and started by T                                                       |

The ``valid_during`` / ``recorded_during`` / ``natural`` part of a read's temporal block applies
beside these (``temporal_keep``); recall candidates follow the same rules.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..model import Belief, Episode, Fact, to_wire
from ..temporal import parse_rfc3339


def fact_visible(fact: Fact, at: dt.datetime, include_superseded: bool) -> bool:
    """§12.3 and §18.2 item 1: ``as_of`` clips both axes; ``include_superseded`` lifts the
    "still current at T" upper bounds so superseded versions recorded by T come back too.

    A supersession writes ``valid_to`` and ``recorded_to`` together, so when T precedes
    ``recorded_to`` the system did not yet know that ``valid_to``: the fact is judged as it was
    recorded then (open-ended).  A ``valid_to`` known from the start (late-arriving history)
    has no ``recorded_to`` and always applies.
    """
    if fact.recorded_from > at or fact.valid_from > at:
        return False
    if include_superseded:
        return True
    if fact.recorded_to is not None:
        if fact.recorded_to <= at:
            return False
        return True  # current at T; its valid_to was learnt later
    return fact.valid_to is None or fact.valid_to > at


def belief_visible(belief: Belief, at: dt.datetime, *, include_closed: bool) -> bool:
    """A belief as of ``at``: recorded and valid by then, not retracted; a claim whose every
    supporting fact was superseded (``valid_to`` set) is history, shown only with
    ``include_closed`` (closed claims asked for, or a valid-time window)."""
    if belief.recorded_from > at or belief.valid_from > at:
        return False
    if belief.recorded_to is not None and belief.recorded_to <= at:
        return False
    if not include_closed and belief.valid_to is not None and belief.valid_to <= at:
        return False
    return True


def event_visible(wire: dict[str, Any], as_of: dt.datetime | None) -> bool:
    """An event (its wire form) as of ``as_of``: recorded by then (§18.2 item 17)."""
    return not as_of or parse_rfc3339(wire["context"]["recorded_at"]) <= as_of


def episode_visible(episode: Episode, as_of: dt.datetime | None) -> bool:
    return not as_of or not (episode.recorded_from > as_of or episode.started_at > as_of)


def temporal_keep(temporal: Any, layer: str, record: Any) -> bool:
    """The ``valid_during`` / ``recorded_during`` / ``natural`` part of a layer read's temporal
    block (a ``TemporalFilter``; ``as_of`` is applied by each layer's own rule above)."""
    if temporal is None or not (temporal.valid_during or temporal.recorded_during):
        return True
    wire = record if isinstance(record, dict) else to_wire(record)
    return temporal.matches(layer, wire)


def window(temporal: Any) -> bool:
    """A valid-time window asks about the past: superseded records are current knowledge of it."""
    return temporal is not None and temporal.valid_during is not None
