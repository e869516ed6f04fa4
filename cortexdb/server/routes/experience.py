"""Capture (reference §8.1, §8.2): one experience, a bulk batch, and a write found by its key."""

from __future__ import annotations

from typing import Any

from ...engine.policy import capabilities as cap
from ...engine.scopes import canonical_scope
from ...engine.stages import Stage
from ...errors import InvalidRequest
from ..call import Blueprint, Call, current_request
from ..declare import array, engine_checked, obj, ref
from ..params import query_args
from ..responses import json_response

api = Blueprint()
ITEM = {"type": "object", "description": "an experience envelope; its scope, when absent, the request's; "
        "its optional vector, the event's own (docs/embedding.md, \"Given vectors\")",
        "properties": {"vector": ref("experience_envelope", "/properties/vector")}}  # fmt: skip
BULK = engine_checked(obj({
    "scope": ref("common", "/$defs/scope_path"),
    "actor": {"type": "string", "description": "the observed actor of every item (type:id)"},
    "observed_actor": {"type": "string", "description": "the observed actor of every item (type:id)"},
    "subject": {"type": "object"}, "directives": {"type": "object"},
    "ordering": {"enum": ["strict_temporal", "batch_throughput"]},
    "items": array(ITEM, minItems=1, maxItems=1000),
}, required=("items",)))  # fmt: skip


def authorise_write(call: Call, body: dict[str, Any]) -> None:
    """``scope.write`` on the body's scope, or ``scope.write.elevated`` above the caller's
    natural level (§18.2 item 5); a body without a scope is the engine's to refuse."""
    scope = body.get("scope")
    if not isinstance(scope, str):
        return
    scope = canonical_scope(scope)
    call.primary = cap.SCOPE_WRITE
    call.check(cap.SCOPE_WRITE, scope)
    governing = call.state.registry.write_capability(call.principal, scope)
    if governing == cap.SCOPE_WRITE_ELEVATED:
        call.primary = governing
        call.check(governing, scope)


def held_for_review(call: Call, body: dict[str, Any]) -> bool:
    """The scope is registered with ``policies.require_review`` and the caller does not own it."""
    if not isinstance(body.get("scope"), str):
        return False
    scope = canonical_scope(body["scope"])
    acl = call.state.registry.acl(scope)
    return acl is not None and acl.review and call.state.gate.role(call.principal, scope) != "owner"


@api("POST", "/v1/experience", rate="write", status=202, summary="Capture one experience",
     body="experience_envelope", response_schema="experience_result", query=("wait",))
async def experience(call: Call):
    body = call.json()
    header_key = current_request().headers.get("X-Cortex-Idempotency-Key")
    if header_key and "idempotency_key" not in body:
        body = {**body, "idempotency_key": header_key}
    wait = query_args().get("wait")
    authorise_write(call, body)
    if held_for_review(call, body):  # docs/proposals.md: a proposal instead of a capture
        proposal = await call.state.engine.proposals.propose(
            {"scope": body["scope"], "experience": body}, caller=call.principal.actor,
            tenant=call.principal.tenant, source="require_review")  # fmt: skip
        call.summary = {"proposal_id": proposal["id"], "status": "pending"}
        return json_response({"status": "pending_review", "proposal_id": proposal["id"],
                              "scope": proposal["scope"]}, 202)  # fmt: skip
    result = await call.state.engine.experience(body, caller=call.principal.actor, tenant_id=call.principal.tenant,
                                                wait=wait)  # fmt: skip
    call.event_id = result.event_id
    await call.state.registry.note_write(result.scope)
    if result.replay:
        call.headers["X-Cortex-Replay"] = "true"
    return json_response(result.to_wire(), 200 if wait in (Stage.INDEXED, Stage.CONSOLIDATED) else 202)


@api("POST", "/v1/experience/bulk", rate="write", status=202, summary="Capture up to 1000 experiences", body=BULK)
async def experience_bulk(call: Call):
    body = call.json()
    authorise_write(call, body)
    if held_for_review(call, body):
        raise InvalidRequest("this scope holds its non-owners' writes for review (policies.require_review): "
                             "send them one at a time, or as proposals", details={"field": "scope", "reason": "require_review"})  # fmt: skip
    result = await call.state.engine.experience_bulk(body, caller=call.principal.actor,
                                                     tenant_id=call.principal.tenant)  # fmt: skip
    await call.state.registry.note_write(result.scope)
    if result.accepted == 0 and result.replayed:
        call.headers["X-Cortex-Replay"] = "true"
    return json_response(result.to_wire(), 202)


@api("GET", "/v1/experience/by-idempotency-key/{key}", summary="Find a write by its idempotency key")
async def by_key(call: Call, key: str):
    found = await call.state.engine.experience_by_idempotency_key(key, caller=call.principal.actor,
                                                                  tenant_id=call.principal.tenant)  # fmt: skip
    call.check(cap.SCOPE_READ_LOCAL, found["scope"])
    return found
