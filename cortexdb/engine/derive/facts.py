"""Fact resolution (DESIGN §6), a pure function of a new assertion and the current facts.

For one (subject, predicate):
- the same object and polarity          -> ``reinforced``: no duplicate; confidence up, support added;
- a single-valued predicate, a different object, or the same object with the opposite polarity:
  - the newcomer is valid later         -> ``accepted`` and it *supersedes* the current fact
                                           (old: ``valid_to``, ``recorded_to``, ``superseded_by``);
  - the newcomer is valid earlier       -> ``accepted`` as history: its ``valid_to`` is the
                                           current fact's ``valid_from`` (nothing is closed);
  - both are valid from the same moment -> ``conflict_detected``: both kept, each lists the other;
- a multi-valued predicate, a different object -> ``accepted`` alongside.
Nothing is ever dropped: every outcome keeps every assertion.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import attrs

from ..model import Fact


def object_key(obj: Any) -> str:
    """A canonical comparison key for a fact object (TypedValue or its wire dict)."""
    kind = getattr(obj, "type", None)
    if kind in ("entity", "concept"):
        return f"{kind}:{obj.id}"
    value = getattr(obj, "value", None)
    if isinstance(value, str):
        return "s:" + " ".join(value.casefold().split())
    if isinstance(value, bool):
        return f"b:{value}"
    if isinstance(value, int | float):
        return f"n:{float(value)!r}"
    return f"j:{value!r}"


def noisy_or(a: float, b: float) -> float:
    """Independent corroboration: 1 - (1-a)(1-b), kept strictly below 1."""
    return round(min(0.999, 1 - (1 - a) * (1 - b)), 4)


@attrs.frozen
class Resolution:
    status: str  # accepted | reinforced | conflict_detected
    reinforce: str | None = None  # fact id reinforced
    supersede: tuple[str, ...] = ()  # fact ids the newcomer supersedes
    conflicts_with: tuple[str, ...] = ()
    valid_to: dt.datetime | None = None  # set when the newcomer is history


def resolve(
    *,
    object_key_: str,
    polarity: int,
    single_valued: bool,
    valid_from: dt.datetime,
    current: list[Fact],
    valid_to: dt.datetime | None = None,
) -> Resolution:
    """Decide how a new assertion relates to the ``current`` facts of its subject+predicate.

    ``current`` holds the facts with ``recorded_to`` unset (the system's present knowledge).
    ``valid_to``: the end of a window the assertion states (a triple's); only the facts whose
    validity overlaps ``[valid_from, valid_to)`` are compared with it.
    """
    live = [f for f in current if (f.valid_to is None or f.valid_to > valid_from)
            and (valid_to is None or f.valid_from < valid_to)]  # fmt: skip
    for fact in live:
        if object_key(fact.object) == object_key_ and fact.polarity == polarity:
            return Resolution(status="reinforced", reinforce=fact.id)
    rivals = [
        f
        for f in live
        if (single_valued and object_key(f.object) != object_key_)
        or (object_key(f.object) == object_key_ and f.polarity != polarity)
    ]
    if not rivals:
        return Resolution(status="accepted")
    later = [f for f in rivals if f.valid_from > valid_from]
    same = [f for f in rivals if f.valid_from == valid_from]
    older = [f for f in rivals if f.valid_from < valid_from]
    if same:
        return Resolution(status="conflict_detected", conflicts_with=tuple(f.id for f in same))
    if later and not older:
        earliest = min(f.valid_from for f in later)
        return Resolution(status="accepted", valid_to=earliest)
    return Resolution(status="accepted", supersede=tuple(f.id for f in older))
