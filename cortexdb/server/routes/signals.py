"""Signals (docs/signals.md): record one, read a scope's snapshot with decayed intensities and
trajectories, and the tenant's signal type settings (half-life, polarity), which only its admins
change."""

from __future__ import annotations

from ...engine.policy import capabilities as cap
from ...engine.temporal import parse_duration
from ...errors import InvalidRequest
from ..call import Blueprint, Call
from ..declare import STRING, engine_checked, obj
from ..params import page_limit, query_args, scope_param
from ..responses import json_response

api = Blueprint()


@api("POST", "/v1/signals", tier="beta", rate="write", status=201, summary="Record a signal",
     request_schema="signal_request", response_schema="signal")
async def signal_record(call: Call):
    body = call.json()
    scope = scope_param(body.get("scope"))
    call.check(cap.SIGNAL_WRITE, scope)
    signal = await call.state.engine.signals.record(body, caller=call.principal.actor, tenant=call.principal.tenant)
    call.summary = {"signal_id": signal["id"], "type": signal["type"]}
    return json_response(signal, 201)


@api("GET", "/v1/signals", tier="beta", summary="A snapshot of a scope's signals, with trajectories",
     response_schema="signal_snapshot", query=("scope!", "subject", "type", "as_of", "window", "limit"))
async def signal_snapshot(call: Call):
    args = query_args()
    scope = scope_param(args.get("scope"))
    call.check(cap.SIGNAL_READ, scope)
    window = None
    if args.get("window") is not None:
        try:
            window = parse_duration(args["window"]).total_seconds()
        except ValueError:
            raise InvalidRequest("window must be an ISO 8601 duration such as P7D", details={"field": "window"}) from None
    return await call.state.engine.signals.snapshot(
        scope, caller=call.principal.actor, tenant=call.principal.tenant, subject=args.get("subject"),
        kind=args.get("type"), as_of=args.get("as_of"), window_seconds=window,
        limit=page_limit(args.get("limit")))  # fmt: skip


@api("GET", "/v1/signals/types", tier="beta", access="tenant", summary="The tenant's signal types")
async def signal_types(call: Call):
    call.check(cap.SIGNAL_READ)
    found = await call.state.engine.signals.types(call.principal.tenant)
    return {"items": [found[name].to_wire() for name in sorted(found)]}


@api("PUT", "/v1/signals/types/{name}", tier="beta", rate="write", access="tenant",
     body=engine_checked(obj({"half_life_seconds": {"type": "number"}, "polarity": STRING})),
     summary="Set a signal type's half-life and polarity")
async def signal_type_set(call: Call, name: str):
    body = call.json()
    call.check(cap.SIGNAL_WRITE)
    call.require_admin(cap.SIGNAL_WRITE, "signal type settings apply to the whole tenant: only its admins set them")
    return await call.state.engine.signals.set_type(call.principal.tenant, name, body)


@api("DELETE", "/v1/signals/types/{name}", tier="beta", rate="write", access="tenant",
     summary="Remove the tenant's setting of a signal type")
async def signal_type_delete(call: Call, name: str):
    call.check(cap.SIGNAL_WRITE)
    call.require_admin(cap.SIGNAL_WRITE, "signal type settings apply to the whole tenant: only its admins remove them")
    existed = await call.state.engine.signals.delete_type(call.principal.tenant, name)
    return json_response({"type": name, "deleted": existed})
