"""The relationship walk a ScopeActor serves (``messages.ReadRelationships``; docs/relationships.md).

A relationship is a fact whose object is an entity: ``from`` is its subject, ``type`` its
predicate, ``to`` its object.  The walk goes breadth first from the start entities, ``depth``
hops, outgoing through the ``FI`` index (facts by subject) and incoming through ``FO`` (facts by
their entity object).  The filters — the version held ``as_of`` (both time axes), the types,
``min_confidence``, negated and excluded facts — decide which edges the walk may *take*: an edge
that fails them is never followed, so nothing is reached through it (filtering during the walk,
not after it).
"""

from __future__ import annotations

from typing import Any

from ..derive.visibility import Clip
from ..model import Fact, from_wire
from ..temporal import format_ts
from . import candidates, history
from .messages import ReadRelationships

DIRECTIONS = ("out", "in", "both")


def edge_wire(fact: Fact, scope: str, hop: int) -> dict[str, Any]:
    """One relationship as the API returns it: the fact it is, read as an edge."""
    return {
        "id": fact.id, "scope": scope,
        "from": {"id": fact.subject.id, "name": fact.subject.name},
        "type": fact.predicate,
        "to": {"id": fact.object.id, "name": fact.object.name},
        "confidence": fact.confidence,
        "valid_from": format_ts(fact.valid_from),
        "valid_to": format_ts(fact.valid_to) if fact.valid_to else None,
        "recorded_from": format_ts(fact.recorded_from),
        "citations": list(fact.supports), "hop": hop,
    }  # fmt: skip


async def _ids(table: Any, entity_id: str, types: tuple[str, ...]) -> list[str]:
    return [fact_id for under in ([(entity_id, t) for t in types] or [(entity_id,)])
            async for fact_id in table.ids(under)]  # fmt: skip


async def _hop_ids(actor: Any, frontier: list[str], query: ReadRelationships, first: bool,
                   rows: dict[str, bool] | None = None) -> list[str]:  # fmt: skip
    """The fact ids touching the frontier in the query's direction (typed: only those types),
    from the index keys alone: on the first hop, the facts joining two start entities come
    first; then the newest first (fact ids are time-ordered), which are the likeliest current.
    ``rows``: filled with whether each entity has any row in either index, when the hop read
    both whole (both directions, no types)."""
    tables, outgoing, incoming = actor.tables, {}, {}
    for entity_id in frontier:
        if query.direction in ("out", "both"):
            outgoing[entity_id] = await _ids(tables.fact_index, entity_id, query.types)
        if query.direction in ("in", "both"):
            incoming[entity_id] = await _ids(tables.fact_objects, entity_id, query.types)
    if rows is not None and query.direction == "both" and not query.types:
        for entity_id in frontier:
            rows[entity_id] = bool(outgoing[entity_id] or incoming[entity_id])
    every = {fact_id for ids in (*outgoing.values(), *incoming.values()) for fact_id in ids}
    joining: set[str] = set()
    if first and len(query.starts) > 1:
        out_ids = {f for ids in outgoing.values() for f in ids}
        in_ids = {f for ids in incoming.values() for f in ids}
        joining = out_ids & in_ids  # out of one start and into one: between two named entities
    return sorted(joining, reverse=True) + sorted(every - joining, reverse=True)


def _takes(fact: Fact, query: ReadRelationships) -> bool:
    """Whether the walk may take this (visible) fact as an edge."""
    if fact.excluded_from_recall or fact.polarity < 0:
        return False
    if fact.object.type != "entity" or not fact.object.id:
        return False
    if query.types and fact.predicate not in query.types:
        return False
    return query.min_confidence is None or fact.confidence >= query.min_confidence


def _passed_over(wire: dict[str, Any], clip: Clip, query: ReadRelationships) -> bool:
    """Whether a fact (its stored wire form) is certainly not an edge of the walk, decided without
    structuring it: when only its current version can be held (``candidates._version``'s rule: a
    row without ``recorded_to``, never revised or recorded by the clip's moment), that version is
    the fact the walk judges, so the clip's verdict and ``_takes``'s checks can be read off the
    wire.  False when older versions may count: the structured path decides."""
    if wire.get("recorded_to") is not None:
        return False
    times = candidates.Times(wire)
    if wire.get("version", 1) != 1 and clip.history(times):
        return False
    if not clip.keeps("facts", times):
        return True
    target, polarity, confidence = wire.get("object"), wire.get("polarity"), wire.get("confidence")
    if not isinstance(target, dict) or not isinstance(polarity, int | float) or not isinstance(confidence, int | float):
        return False  # an unusual row: the structured path decides (and says what is wrong)
    if wire.get("excluded_from_recall") or polarity < 0:
        return True
    if target.get("type") != "entity" or not target.get("id"):
        return True
    if query.types and wire.get("predicate") not in query.types:
        return True
    return query.min_confidence is not None and not confidence >= query.min_confidence


async def walk(actor: Any, query: ReadRelationships) -> dict[str, Any]:
    tables = actor.tables
    clip = Clip.of(None, now=actor.ctx.clock.now(), as_of=query.as_of)
    seen_nodes: dict[str, int] = {start: 0 for start in query.starts}
    names: dict[str, str | None] = {}
    edges: dict[str, dict[str, Any]] = {}
    frontier, truncated, examined = list(query.starts), False, 0
    rows: dict[str, bool] = {}  # start -> any relationship row here (read by the first hop)
    for hop in range(1, query.depth + 1):
        following: list[str] = []
        for fact_id in await _hop_ids(actor, frontier, query, hop == 1, rows if hop == 1 else None):
            if fact_id in edges:
                continue
            if len(edges) == query.max_edges or examined == query.max_examined > 0:
                truncated = True
                break
            wire = await tables.facts.json.get(fact_id)
            if wire is None:
                continue
            examined += 1
            if _passed_over(wire, clip, query):
                continue  # what the structured path below would decide, without structuring it
            head = from_wire(wire, Fact)
            held = clip.select("facts", await history.fact_versions(tables, head, clip))
            fact = held[-1] if held else None
            if fact is None or not _takes(fact, query):
                continue  # not an edge at that moment, or filtered: the walk does not go through it
            edges[fact_id] = edge_wire(fact, actor.scope, hop)
            for end in (fact.subject, fact.object):
                names.setdefault(end.id, end.name)
                if end.id not in seen_nodes:
                    seen_nodes[end.id] = hop
                    following.append(end.id)
        frontier = following
        if truncated or not frontier:
            break
    nodes = [{"id": node, "name": names.get(node), "hop": hop} for node, hop in seen_nodes.items()]
    known = []  # the starts with any relationship row here at all, whatever the filters
    for start in query.starts:
        if start in rows:  # the first hop read its rows whole
            if rows[start] and start not in known:
                known.append(start)
            continue
        for table in (tables.fact_index, tables.fact_objects):
            if start not in known and [i async for i in table.ids((start,), limit=1)]:
                known.append(start)
    return {"scope": actor.scope, "edges": list(edges.values()), "nodes": nodes,
            "edges_examined": examined, "truncated": truncated, "known": known}  # fmt: skip
