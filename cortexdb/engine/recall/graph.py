"""Relationships (docs/relationships.md) and the router's handlers (docs/router.md).

``RelationshipService`` is the face of the relationship walk (``actors/relations.py``): the
``GET /v1/relationships`` read, the explicit write's envelope, and recall's ``graph_expand``.
``Handlers`` is what each query type of the router (``retrieve/router.py``) does in a recall.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from typing import Any

import trio

from ...errors import CortexError, InvalidQuery, NotFound
from ..actors.messages import ReadRelationships
from ..model import aspects
from ..retrieve import router
from ..scopes import canonical_scope
from ..temporal import format_ts, parse_rfc3339

DIRECTIONS = ("out", "in", "both")
MAX_TYPES = 32  # predicates one walk's ``type`` may name (each is one index range a hop reads)
WRITE_FIELDS = {"scope", "from", "type", "to", "confidence", "valid_from", "valid_to", "observed_at",
                "idempotency_key"}  # fmt: skip
# how deep recall walks from the entities a question names, per query type
RECALL_DEPTH = {"relationship": 2, "entity_lookup": 1}
_WORD = re.compile(r"[a-z][a-z'-]{3,}")
_ACTOR = re.compile(r"\b[a-z]+:[\w.-]+")  # an actor id (user:alice) is an entity, not a topic
_STOP = frozenset("that this with from have were they them their there what when where which about would could "
                  "should been into just also than then some your yours ours mine here very more most".split())


class RelationshipService:
    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx  # the engine's NodeContext

    # -- GET /v1/relationships -------------------------------------------------------------------
    async def traverse(self, scope: str, *, from_: Any, type: Any = None, direction: Any = None,
                       depth: Any = None, as_of: Any = None, min_confidence: Any = None,
                       tenant_id: str | None = None) -> dict[str, Any]:  # fmt: skip
        """The relationships reached from the entity ``from_`` (an ``ent_`` id, an actor id or a
        name) in ``scope``; every filter is applied while walking (``actors/relations.py``)."""
        scope = canonical_scope(scope)
        config = self.ctx.config
        if not isinstance(from_, str) or not from_.strip():
            raise InvalidQuery("from is required: an entity id, an actor id or a name", details={"field": "from"})
        direction = direction or "both"
        if direction not in DIRECTIONS:
            raise InvalidQuery(f"direction must be one of {list(DIRECTIONS)}", details={"field": "direction"})
        depth = _integer(depth if depth is not None else 1, "depth", 1, config.relationship_max_depth)
        types = _types(type)
        at = parse_rfc3339(as_of, field="as_of") if isinstance(as_of, str) else as_of
        if at is not None and not isinstance(at, dt.datetime):
            raise InvalidQuery("as_of must be an RFC 3339 timestamp", details={"field": "as_of"})
        confidence = _confidence(min_confidence)
        tenant = tenant_id or config.tenant_id
        entity = await self.ctx.entities.find(tenant, from_.strip())
        walk = None
        if entity is not None:
            walk = await self.ctx.supervisor.request(scope, lambda reply: ReadRelationships(
                reply=reply, starts=(entity.id,), types=types, direction=direction, depth=depth, as_of=at,
                min_confidence=confidence, max_edges=config.relationship_max_edges))  # fmt: skip
        if walk is None or not walk["known"]:  # the same answer whether or not another scope knows it
            raise NotFound(f"no entity {from_[:64]!r} has relationships in {scope}",
                           details={"from": from_[:64], "scope": scope})  # fmt: skip
        for node in walk["nodes"]:
            if node["id"] == entity.id and node["name"] is None:
                node["name"] = entity.name  # a start no edge named
        return {"scope": scope, "from": {"id": entity.id, "name": entity.name}, "direction": direction,
                "depth": depth, "types": list(types), "as_of": format_ts(at) if at else None,
                "min_confidence": confidence, "items": walk["edges"], "nodes": walk["nodes"],
                "edges_examined": walk["edges_examined"], "truncated": walk["truncated"]}  # fmt: skip

    # -- POST /v1/relationships ------------------------------------------------------------------
    def envelope(self, body: Any, now: dt.datetime) -> dict[str, Any]:
        """An explicit relationship as the experience that asserts it: a ``triple`` whose object
        is an entity (it derives the relationship's fact through the normal pipeline)."""
        if not isinstance(body, dict):
            raise InvalidQuery("the body must be an object", details={"field": "$"})
        unknown = sorted(set(body) - WRITE_FIELDS)
        if unknown:
            raise InvalidQuery(f"unknown field {unknown[0]!r}; fields: {sorted(WRITE_FIELDS)}",
                               details={"field": unknown[0]})  # fmt: skip
        for field in ("scope", "from", "type", "to"):
            if not isinstance(body.get(field), str) or not body[field].strip():
                raise InvalidQuery(f"{field} is required (a non-empty string)", details={"field": field})
        content: dict[str, Any] = {"kind": "triple", "subject": body["from"], "predicate": body["type"],
                                   "object": body["to"], "datatype": "entity", "single_valued": False}  # fmt: skip
        if body.get("confidence") is not None:
            content["confidence"] = _confidence(body["confidence"], "confidence")
        for field in ("valid_from", "valid_to"):
            if body.get(field) is not None:
                content[field] = body[field]
        envelope = {"scope": body["scope"], "modality": "observation", "content": content,
                    "context": {"observed_at": body.get("observed_at") or format_ts(now)}}  # fmt: skip
        if body.get("idempotency_key") is not None:
            envelope["idempotency_key"] = body["idempotency_key"]
        return envelope

    # -- recall: graph_expand --------------------------------------------------------------------
    async def resolve(self, names: tuple[str, ...], tenant: str) -> list[dict[str, Any]]:
        """The entities the names a question spells resolve to (tenant-wide: the walk then keeps
        only those with relationships in a scope the recall reads)."""
        out = []
        for name in names:
            entity = await self.ctx.entities.find(tenant, name)
            if entity is not None and all(h["id"] != entity.id for h in out):
                out.append({"id": entity.id, "name": entity.name})
        return out

    async def expand(self, kind: str, hints: list[dict[str, Any]], scopes: list[str], as_of: Any,
                     min_confidence: float | None) -> dict[str, Any]:  # fmt: skip
        """The walk from the resolved hints in every scope of the recall, concurrently; edges that
        join two of the named entities first, then by hop and confidence."""
        starts = tuple(h["id"] for h in hints if h["id"])
        depth = RECALL_DEPTH.get(kind, 0)
        if not starts or not depth:
            return {"edges": [], "nodes": 0, "examined": 0, "truncated": False, "known": []}
        config, results = self.ctx.config, {}

        async def ask(path: str) -> None:
            try:
                results[path] = await self.ctx.supervisor.request(path, lambda reply: ReadRelationships(
                    reply=reply, starts=starts, depth=depth, as_of=as_of, min_confidence=min_confidence,
                    max_edges=config.recall_relationships_limit,
                    max_examined=config.recall_relationships_examined))  # fmt: skip
            except CortexError:
                results[path] = None  # a degraded scope: its candidates said so already

        async with trio.open_nursery() as nursery:
            for path in scopes:
                nursery.start_soon(ask, path)
        named = set(starts)
        edges, nodes = [], set()
        for path in scopes:
            walk = results.get(path) or {"edges": [], "nodes": []}
            edges += walk["edges"]
            nodes |= {n["id"] for n in walk["nodes"]} - named
        edges.sort(key=lambda e: (-((e["from"]["id"] in named) + (e["to"]["id"] in named)), e["hop"],
                                  -e["confidence"], e["id"]))  # fmt: skip
        known = {k for w in results.values() if w for k in w["known"]}
        return {"edges": edges, "nodes": len(nodes),
                "examined": sum(w["edges_examined"] for w in results.values() if w),
                "truncated": any(w["truncated"] for w in results.values() if w),
                "known": [h for h in hints if h["id"] in known]}  # fmt: skip


def facets(candidates: list[Any], limit: int) -> dict[str, Any]:
    """``temporal_facets``: what the window's records are about — topics (frequent content words),
    entities, predicates, aspects — each ``[{value, count}]``, most frequent first."""
    topics, entities, predicates, kinds = Counter(), Counter(), Counter(), Counter()
    seen = set()
    for candidate in candidates:
        key = (candidate.scope, candidate.record.get("id"))
        if key in seen:
            continue
        seen.add(key)
        record = candidate.record
        kinds[aspects.of_record(candidate.layer, record) or candidate.layer] += 1
        topics.update({w for w in _WORD.findall(_ACTOR.sub(" ", (candidate.text or "").lower())) if w not in _STOP})
        if candidate.layer == "facts":
            predicates[record["predicate"]] += 1
            for end in (record["subject"], record["object"]):
                if end.get("type") == "entity" and end.get("name"):
                    entities[end["name"]] += 1

    def top(counter: Counter) -> list[dict[str, Any]]:
        return [{"value": v, "count": c} for v, c in sorted(counter.items(), key=lambda i: (-i[1], i[0]))[:limit]]

    return {"records": len(seen), "topics": top(topics), "entities": top(entities),
            "predicates": top(predicates), "aspects": top(kinds)}  # fmt: skip


def route_of(query: str, has_temporal_block: bool) -> router.Route:
    return router.route(query, has_temporal_block)


def _integer(value: Any, field: str, low: int, high: int) -> int:
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidQuery(f"{field} must be an integer from {low} to {high}", details={"field": field, "max": high})
    return value


def _confidence(value: Any, field: str = "min_confidence") -> float | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise InvalidQuery(f"{field} must be a number between 0 and 1", details={"field": field})
    return float(value)


def _types(value: Any) -> tuple[str, ...]:
    """``type``: one predicate, a comma-separated list or an array of them."""
    if value is None or value == "":
        return ()
    parts = value.split(",") if isinstance(value, str) else value
    if not isinstance(parts, list | tuple) or not all(isinstance(p, str) and p.strip() for p in parts):
        raise InvalidQuery("type must be a predicate or a comma-separated list of predicates", details={"field": "type"})
    if len(parts) > MAX_TYPES:
        raise InvalidQuery(f"type names at most {MAX_TYPES} predicates", details={"field": "type", "max": MAX_TYPES})
    return tuple(dict.fromkeys(p.strip() for p in parts))
