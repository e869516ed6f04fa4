"""Custom temporal phrases (reference §8.17, beta): tenant-wide, so only its admins edit them."""

from __future__ import annotations

from ...engine.policy import capabilities as cap
from ...errors import MissingRequiredField
from ..call import Blueprint, Call
from ..declare import obj
from ..responses import json_response

api = Blueprint()


@api("POST", "/v1/temporal/phrases", tier="beta", rate="write", status=201, access="tenant",
     body=obj({"name": {"type": "string"}, "pattern": {"type": "string", "description": "a regular expression"},
               "resolves_to": obj({"valid_during": {"description": "[from, to] or FROM..TO, relative to the match"}})},
              required=("name", "pattern", "resolves_to")),
     summary="Register a custom temporal phrase")
async def phrase_add(call: Call):
    body = call.json()
    call.check(cap.TEMPORAL_PHRASES_WRITE)
    call.require_admin(cap.TEMPORAL_PHRASES_WRITE, "custom phrases apply to the whole tenant: "
                       "only its admins register them (§8.17.1)")  # fmt: skip
    for field in ("name", "pattern", "resolves_to"):
        if field not in body:
            raise MissingRequiredField(f"{field} is required", details={"field": field})
    return json_response(await call.state.engine.register_temporal_phrase(
        body["name"], body["pattern"], body["resolves_to"], tenant_id=call.principal.tenant), 201)  # fmt: skip


@api("GET", "/v1/temporal/phrases", tier="beta", access="tenant", summary="List custom temporal phrases")
async def phrase_list(call: Call):
    call.check(cap.TEMPORAL_PHRASES_READ)
    return {"items": await call.state.engine.temporal_phrases(tenant_id=call.principal.tenant)}


@api("DELETE", "/v1/temporal/phrases/{name}", tier="beta", rate="write", access="tenant",
     summary="Delete a custom temporal phrase")
async def phrase_delete(call: Call, name: str):
    call.check(cap.TEMPORAL_PHRASES_WRITE)
    call.require_admin(cap.TEMPORAL_PHRASES_WRITE, "custom phrases apply to the whole tenant: "
                       "only its admins delete them (§8.17.3)")  # fmt: skip
    await call.state.engine.delete_temporal_phrase(name, tenant_id=call.principal.tenant)
    return json_response({"name": name, "deleted": True})
