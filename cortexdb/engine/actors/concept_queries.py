"""The understanding reads a ScopeActor serves (reference §8.7.7-§8.7.10): concepts listed and
looked up (as of a moment: the version then recorded), their related concepts by edges, and the
scope's coverage.  Like every read they see committed state only (``queries``).

| query             | answers                                                              |
|-------------------|----------------------------------------------------------------------|
| ``ReadConcepts``  | a page of concepts (deprecated ones only with ``include_deprecated``); ``topic`` keeps those whose name or topics name it, ``depth`` > 1 adds what their edges reach |
| ``ReadConcept``   | one concept; an alias answers with its canonical concept; 410 if forgotten |
| ``ReadRelated``   | the concepts reachable by edges (``relation`` only, up to ``depth``)  |
| ``ReadCoverage``  | the scope's concept count, topics, coverage and synthesis lag         |

``candidate`` loads a concept for recall (``candidates.gather``): the understanding layer's items.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import attrs

from ...errors import NotFound, ResourceDeleted
from .. import jsoncodec
from ..derive.concepts import term_key
from ..model import Candidate, Concept, from_wire, to_wire
from ..model.text import concept_text
from ..temporal import format_ts, parse_rfc3339
from .concept_messages import ReadConcept, ReadConcepts, ReadCoverage, ReadRelated


async def held(tables: Any, concept: Concept, as_of: dt.datetime | None) -> Concept | None:
    """The version of ``concept`` recorded as of ``as_of`` (the current one without it)."""
    if as_of is None or concept.recorded_from <= as_of:
        return concept
    async for version in tables.concept_versions.rows(concept.id, after=as_of, head=concept):
        if version.recorded_to is not None and version.recorded_to <= as_of:
            continue  # keyed past its close (ConceptVersions.key_moment): already closed then
        return version if version.recorded_from <= as_of else None
    return None


def visible(concept: Concept, include_deprecated: bool) -> bool:
    return include_deprecated or (concept.stance != "deprecated" and concept.canonical_id is None)


def matches(concept: Concept, topic: str) -> bool:
    key = term_key(topic)
    topics = concept.synthesis_inputs.get("filters", {}).get("topics", ())
    return key in term_key(concept.name) or any(key == term_key(t) for t in topics)


async def _lookup(actor: Any, concept_id: str) -> Concept:
    tables = actor.tables
    concept = await tables.concepts.get(concept_id)
    if concept is None:
        note = await tables.forgotten.get(concept_id)
        if note is not None:
            raise ResourceDeleted(f"concept {concept_id} was forgotten", details={"concept_id": concept_id, **note})
        raise NotFound(f"no concept {concept_id} in {actor.scope}", details={"concept_id": concept_id})
    return concept


async def read_concept(actor: Any, query: ReadConcept) -> dict[str, Any]:
    concept = await _lookup(actor, query.concept_id)
    if concept.canonical_id is not None and query.follow_alias:
        concept = await _lookup(actor, concept.canonical_id)
    version = await held(actor.tables, concept, query.as_of)
    if version is None:
        raise NotFound(f"no concept {query.concept_id} was recorded as of {format_ts(query.as_of)}",
                       details={"concept_id": query.concept_id, "as_of": format_ts(query.as_of)})  # fmt: skip
    return to_wire(version)


async def read_concepts(actor: Any, query: ReadConcepts) -> dict[str, Any]:
    tables = actor.tables
    limit = query.limit or actor.ctx.config.read_default_limit
    chosen: set[str] | None = None
    if query.topic:
        chosen = {c.id async for _, c in tables.concepts.scan() if matches(c, query.topic)}
        chosen |= await _reach(tables, sorted(chosen), None, (query.depth or 1) - 1)

    async def convert(concept_id: str, concept: Concept) -> dict[str, Any] | None:
        if chosen is not None and concept_id not in chosen:
            return None
        version = await held(tables, concept, query.as_of)
        if version is None or not visible(version, query.include_deprecated):
            return None
        return to_wire(version)

    return await tables.concepts.page(query.cursor, limit=limit, convert=convert)


async def _reach(tables: Any, start: list[str], relation: str | None, depth: int) -> set[str]:
    """The concept ids the edges of ``start`` reach within ``depth`` steps (``start`` excluded)."""
    seen, frontier, reached = set(start), list(start), set()
    for _ in range(max(0, depth)):
        following: list[str] = []
        for concept_id in frontier:
            concept = await tables.concepts.get(concept_id)
            for edge in concept.edges if concept is not None else ():
                if (relation is None or edge["relation"] == relation) and edge["to"] not in seen:
                    seen.add(edge["to"])
                    reached.add(edge["to"])
                    following.append(edge["to"])
        frontier = following
    return reached


async def read_related(actor: Any, query: ReadRelated) -> dict[str, Any]:
    """Breadth first along the edges: each concept reached once, at its shortest depth, with the
    edge that reached it."""
    tables = actor.tables
    root = await _lookup(actor, query.concept_id)
    if root.canonical_id is not None:
        root = await _lookup(actor, root.canonical_id)
    limit = query.limit or actor.ctx.config.read_default_limit
    items: list[dict[str, Any]] = []
    seen, frontier, truncated = {root.id}, [root], False
    for depth in range(1, query.depth + 1):
        following: list[Concept] = []
        for concept in frontier:
            for edge in concept.edges:
                if (query.relation and edge["relation"] != query.relation) or edge["to"] in seen:
                    continue
                seen.add(edge["to"])
                target = await tables.concepts.get(edge["to"])
                if target is None or not visible(target, query.include_deprecated):
                    continue  # an entity without a concept of its own (yet)
                if len(items) >= limit:
                    truncated = True
                    break
                items.append({"concept": to_wire(target), "from": concept.id, "relation": edge["relation"],
                              "weight": edge.get("weight"), "vocabulary": edge.get("vocabulary"),
                              "depth": depth})  # fmt: skip
                following.append(target)
        frontier = following
    return {"concept_id": root.id, "depth": query.depth, "relation": query.relation, "items": items,
            "has_more": truncated, "next_cursor": None}  # fmt: skip


class _WireTimes:
    """A concept's wire times, parsed, as ``Clip.keeps`` reads them."""

    def __init__(self, wire: dict[str, Any]) -> None:
        self.recorded_from, self.recorded_to = _ts(wire["recorded_from"]), _ts(wire["recorded_to"])
        self.valid_from, self.valid_to = _ts(wire["valid_from"]), _ts(wire["valid_to"])


def _ts(value: Any) -> dt.datetime | None:
    return parse_rfc3339(value) if value is not None else None


def _lag(seconds: float) -> str:
    """An ISO 8601 duration of whole seconds (``PT0S``)."""
    seconds = max(0, int(seconds))
    days, rest = divmod(seconds, 86_400)
    return ("P" + (f"{days}D" if days else "") + (f"T{rest}S" if rest or not days else "")) or "PT0S"


async def read_coverage(actor: Any, query: ReadCoverage) -> dict[str, Any]:
    tables = actor.tables
    inputs: dict[str, dt.datetime] = {}
    async for _, fact in tables.facts.scan():
        if fact.recorded_to is None and fact.superseded_by is None and not fact.excluded_from_recall:
            inputs[fact.id] = fact.recorded_from
    async for _, belief in tables.beliefs.scan():
        if belief.recorded_to is None and belief.stance != "deprecated" and not belief.excluded_from_recall:
            inputs[belief.id] = belief.recorded_from
    topics: dict[str, list[float]] = {}
    consulted: set[str] = set()
    count = stale = partial = 0
    synthesized: dt.datetime | None = None
    async for _, concept in tables.concepts.scan():
        if not visible(concept, False):
            continue
        count += 1
        stale += concept.staleness_score > 0
        partial += concept.partial
        consulted.update(concept.supported_by.get("facts", ()), concept.supported_by.get("beliefs", ()))
        primary = (concept.synthesis_inputs.get("filters", {}).get("topics") or ["(none)"])[0]
        topics.setdefault(primary, []).append(concept.confidence)
        if concept.last_synthesized_at and (synthesized is None or concept.last_synthesized_at > synthesized):
            synthesized = concept.last_synthesized_at
    newest = max(inputs.values(), default=None)
    lag = _lag((newest - synthesized).total_seconds()) if newest and synthesized else ("PT0S" if not inputs else None)
    enabled = actor.ctx.config.understanding_enabled
    return {
        "scope": actor.scope, "concept_count": count,
        "by_topic": [{"topic": t, "concepts": len(c), "avg_confidence": round(sum(c) / len(c), 4)}
                     for t, c in sorted(topics.items(), key=lambda tc: (-len(tc[1]), tc[0]))],
        "coverage_score": round(len(consulted & set(inputs)) / len(inputs), 4) if inputs else 1.0,
        "inputs": len(inputs), "stale_concepts": stale, "partial_concepts": partial,
        "synthesis_lag": lag,
        "_partial": not enabled, "_partial_reason": None if enabled else "synthesis_disabled_by_policy",
    }  # fmt: skip


HANDLERS = {ReadConcepts: read_concepts, ReadConcept: read_concept, ReadRelated: read_related,
            ReadCoverage: read_coverage}  # fmt: skip


# the keys a concept's wire form always has (the converter renames ``partial`` and omits
# ``_partial_reason`` and ``_progress`` when unset)
_FIELDS = frozenset(a.name for a in attrs.fields(Concept)) - {"partial", "partial_reason", "progress"} | {"_partial"}


async def candidate(tables: Any, concept_id: str, clip: Any) -> Candidate | None:
    """A concept as a recall candidate (layer ``understanding``): the version the clip's
    ``as_of`` held (the current one without it), unless deprecated or an alias; its links and
    citation chain are the facts and beliefs it cites.  The current version is judged on its
    stored wire form, not structured (its summary embedding made that a fifth of a recall)."""
    raw = await tables.concepts.raw.get(concept_id)
    if raw is None:
        return None
    wire = jsoncodec.decode(raw)
    if not clip.pinned and wire.keys() >= _FIELDS:  # the current version, as stored
        if wire["stance"] == "deprecated" or wire["canonical_id"] is not None:
            return None
        if not clip.keeps("understanding", _WireTimes(wire)):
            return None
        cited = [*wire["supported_by"].get("facts", ()), *wire["supported_by"].get("beliefs", ())]
        return Candidate(layer="understanding", id=concept_id, record=wire, text=concept_text(wire),
                         time=wire["last_synthesized_at"] or wire["recorded_from"], importance=wire["confidence"],
                         confidence=wire["confidence"], links=cited, chain={concept_id: cited}, raw_size=len(raw))  # fmt: skip
    concept = from_wire(wire, Concept)
    version = await held(tables, concept, clip.at if clip.pinned else None)
    if version is None or not visible(version, False) or not clip.keeps("understanding", version):
        return None
    record = to_wire(version)
    cited = [*version.supported_by.get("facts", ()), *version.supported_by.get("beliefs", ())]
    when = version.last_synthesized_at or version.recorded_from
    return Candidate(layer="understanding", id=concept_id, record=record, text=concept_text(version),
                     time=format_ts(when), importance=version.confidence, confidence=version.confidence,
                     links=cited, chain={concept_id: cited}, raw_size=len(jsoncodec.encode(record)))  # fmt: skip
