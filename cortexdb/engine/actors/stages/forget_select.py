"""Which records a forget selector matches in one scope (reference §11.2), per layer.

The selector is conjunctive: a record matches when every filter set holds for it; with no filter
set every record of the named layers matches; ``memory_ids`` are added whatever the filters say
(and with ``memory_ids`` alone, only they match).  What each filter means per layer:

| filter           | facts                      | beliefs            | episodes, events                      |
|------------------|----------------------------|--------------------|---------------------------------------|
| ``about_subject``| subject                    | claim subject      | an event's subject (an episode: any member's) |
| ``about_entity`` | subject or object          | claim subject or object | an event derived a fact naming it |
| ``predicate``    | predicate                  | claim predicate    | an event derived a fact with it       |
| ``valid_during`` | [valid_from, valid_to) overlaps | the same      | episodes: [started_at, ended_at]; events: ``observed_at`` in it |
| ``recorded_during`` | ``recorded_from`` in it (learnt then) | the same | episodes: the same; events: ``recorded_at`` in it |

Excluded records (a cancelled event's) match too: forgetting is about what is stored.
"""

from __future__ import annotations

from typing import Any

from ...model import Fact
from ...temporal import parse_rfc3339
from .common import StageContext
from .forget import Select

TABLES = {"facts": "facts", "beliefs": "beliefs", "episodes": "episodes", "events": "events"}
PREFIXES = {"fact_": "facts", "belief_": "beliefs", "ep_": "episodes", "evt_": "events",
            "concept_": "understanding"}  # fmt: skip


def layer_of(record_id: str) -> str | None:
    return next((layer for prefix, layer in PREFIXES.items() if record_id.startswith(prefix)), None)


async def select(work: StageContext, item: Select) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {layer: [] for layer in item.layers}
    if item.filtered or not item.memory_ids:
        facts_of_events = _EventFacts(work)
        for layer in sorted(item.layers & set(TABLES)):
            table = getattr(work.tables, TABLES[layer])
            async for record_id, wire in table.json.scan():
                if await _matches(work, item, layer, wire, facts_of_events):
                    found[layer].append(record_id)
    for record_id in item.memory_ids:
        layer = layer_of(record_id)
        if layer in found and layer in TABLES and record_id not in found[layer]:
            if await getattr(work.tables, TABLES[layer]).exists(record_id):
                found[layer].append(record_id)
    return found


class _EventFacts:
    """The facts each event derived (what ``about_entity`` and ``predicate`` look at)."""

    def __init__(self, work: StageContext) -> None:
        self.work = work
        self.cache: dict[str, list[Fact]] = {}

    async def __call__(self, event_id: str) -> list[Fact]:
        if event_id not in self.cache:
            state = await self.work.read_state(event_id)
            facts = []
            for derived in state.derives if state is not None else ():
                fact = await self.work.state.fact(derived) if derived.startswith("fact_") else None
                if fact is not None:
                    facts.append(fact)
            self.cache[event_id] = facts
        return self.cache[event_id]


def _claim_terms(layer: str, wire: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
    """(subject id, object id, predicate) of a fact or a belief."""
    claim = wire if layer == "facts" else wire["claim"]
    return claim["subject"].get("id"), (claim.get("object") or {}).get("id"), claim["predicate"]


async def _matches(work: StageContext, item: Select, layer: str, wire: dict[str, Any],
                   facts_of) -> bool:  # fmt: skip
    if layer in ("facts", "beliefs"):
        subject, obj, predicate = _claim_terms(layer, wire)
        if item.subject_ids and subject not in item.subject_ids:
            return False
        if item.entity_id and item.entity_id not in (subject, obj):
            return False
        if item.predicate and predicate != item.predicate:
            return False
        return _in_time(item, layer, wire)
    events = wire["events"] if layer == "episodes" else [wire["id"]]
    if not _in_time(item, layer, wire):
        return False
    if item.subject_actors and not await _any_subject(work, item, layer, wire, events):
        return False
    if item.entity_id or item.predicate:
        facts = [fact for event_id in events for fact in await facts_of(event_id)]
        if item.entity_id and not any(item.entity_id in (f.subject.id, f.object.id) for f in facts):
            return False
        if item.predicate and not any(f.predicate == item.predicate for f in facts):
            return False
    return True


async def _any_subject(work: StageContext, item: Select, layer: str, wire: dict[str, Any],
                       events: list[str]) -> bool:  # fmt: skip
    if layer == "events":
        return wire["subject"].get("id") in item.subject_actors
    for event_id in events:
        event = await work.state.event(event_id)
        if event is not None and event.subject.get("id") in item.subject_actors:
            return True
    return False


def _within(value: str, interval) -> bool:
    start, end = interval
    moment = parse_rfc3339(value)
    return not ((start and moment < start) or (end and moment >= end))


def _in_time(item: Select, layer: str, wire: dict[str, Any]) -> bool:
    if layer == "events":  # an event is valid from when it was observed
        if item.valid is not None and not _within(wire["context"]["observed_at"], item.valid.valid_during):
            return False
        return item.recorded is None or _within(wire["context"]["recorded_at"], item.recorded.recorded_during)
    if item.valid is not None and not item.valid.matches(layer, wire):
        return False
    return item.recorded is None or _within(wire["recorded_from"], item.recorded.recorded_during)

