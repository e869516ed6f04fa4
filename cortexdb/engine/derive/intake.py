"""Which part of an extractor's output one event derives (pure: no I/O).

Two rules, applied in the extractor's order (facts, then entity mentions, extraction by
extraction — one per passage of a long text):
- a fact below the event's ``confidence_floor`` is rejected (an intake entry says so);
- an event derives at most ``limit`` records (``EngineConfig.max_derived_per_event``): each fact
  costs one, plus one per entity it names that the event has not named yet; each new entity
  mention costs one.  Once a candidate does not fit, nothing after it is derived — the output
  beyond the limit is counted, and reported in one intake entry (status ``rejected``, reason
  ``derived_records_limit``), never dropped silently.
Intake entries are bounded too: at most ``limit`` below-floor rejections are listed one by one,
the rest are counted in one entry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import attrs

from ..spi.extractor import CandidateFact, Extraction, TermRef


@attrs.define
class Selection:
    # ("fact", CandidateFact) to derive, or ("intake", entry) for a rejection, in candidate order
    steps: list[tuple[str, Any]] = attrs.field(factory=list)
    entities: list[TermRef] = attrs.field(factory=list)  # mentions to resolve, in order
    facts_over: int = 0  # fact candidates beyond the limit (not derived)
    entities_over: int = 0  # new entity mentions beyond the limit (not resolved)
    floor_unlisted: int = 0  # below-floor rejections counted but not listed
    unread: bool = False

    def summary(self, limit: int) -> list[dict[str, Any]]:
        """The aggregate intake entries that follow the listed ones."""
        out = []
        if self.floor_unlisted:
            out.append({"status": "rejected", "reason": "below_confidence_floor",
                        "count": self.floor_unlisted})  # fmt: skip
        if self.facts_over or self.entities_over:
            out.append({"status": "rejected", "reason": "derived_records_limit", "limit": limit,
                        "count": self.facts_over + self.entities_over, "facts": self.facts_over,
                        "entities": self.entities_over})  # fmt: skip
        return out


def select(
    extractions: Iterable[Extraction], *, limit: int, floor: float, want_facts: bool,
    want_entities: bool, alias: Callable[[TermRef], str],
) -> Selection:  # fmt: skip
    """Apply the floor and the limit to ``extractions``; ``alias`` names an entity term."""
    out = Selection()
    named: set[str] = set()
    used = 0
    full = False
    listed = 0
    for extraction in extractions:
        out.unread = out.unread or extraction.unread
        for candidate in extraction.facts if want_facts else ():
            if candidate.confidence < floor:
                if listed < limit:
                    listed += 1
                    out.steps.append(("intake", {"status": "rejected", "predicate": candidate.predicate,
                                                 "reason": "below_confidence_floor",
                                                 "confidence": candidate.confidence}))  # fmt: skip
                else:
                    out.floor_unlisted += 1
                continue
            if full:
                out.facts_over += 1
                continue
            terms = _terms(candidate, alias) - named
            if used + 1 + len(terms) > limit:
                full = True
                out.facts_over += 1
                continue
            used += 1 + len(terms)
            named |= terms
            out.steps.append(("fact", candidate))
        for term in extraction.entities if want_entities else ():
            name = alias(term)
            if name in named:
                if not full:
                    out.entities.append(term)  # already counted: resolving it again is free
                continue
            if full or used + 1 > limit:
                full = True
                out.entities_over += 1
                named.add(name)  # a name mentioned twice beyond the limit is counted once
                continue
            used += 1
            named.add(name)
            out.entities.append(term)
    return out


def _terms(candidate: CandidateFact, alias: Callable[[TermRef], str]) -> set[str]:
    return {alias(t) for t in (candidate.subject, candidate.object_value) if isinstance(t, TermRef)}
