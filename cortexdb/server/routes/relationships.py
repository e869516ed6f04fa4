"""Relationships (docs/relationships.md): the walk from an entity, and an explicit write."""

from __future__ import annotations

from ...engine.policy import capabilities as cap
from ...engine.stages import Stage
from ..call import Blueprint, Call
from ..params import query_args, scope_param
from ..responses import json_response
from .experience import authorise_write

api = Blueprint()


@api("GET", "/v1/relationships", summary="The relationships reached from an entity",
     response_schema="relationship_page",
     query=("scope!", "from", "type", "direction", "depth", "as_of", "min_confidence"))
async def relationships(call: Call):
    args = query_args()
    scope = scope_param(args.get("scope"))
    call.check(cap.SCOPE_READ_LOCAL, scope)
    return await call.state.engine.relationships.traverse(
        scope, from_=args.get("from"), type=args.get("type"), direction=args.get("direction"),
        depth=args.get("depth"), as_of=args.get("as_of"), min_confidence=args.get("min_confidence"),
        tenant_id=call.principal.tenant)  # fmt: skip


@api("POST", "/v1/relationships", rate="write", status=200, summary="Assert a relationship between two entities",
     request_schema="relationship_write")
async def relationship_write(call: Call):
    """Captured as a ``triple`` experience and derived through the normal pipeline; the answer
    waits until it is indexed and names the relationship (the fact) it derived."""
    body = call.json()
    engine = call.state.engine
    envelope = engine.relationships.envelope(body, engine.clock.now())
    authorise_write(call, envelope)
    result = await engine.experience(envelope, caller=call.principal.actor, tenant_id=call.principal.tenant,
                                     wait=Stage.INDEXED)  # fmt: skip
    call.event_id = result.event_id
    await call.state.registry.note_write(result.scope)
    facts = [d for d in (result.derives or ()) if d.startswith("fact_")]
    return json_response({**result.to_wire(), "relationship_ids": facts}, 200)
