"""The pending intake results (docs/intake.md): an agent reads the results of its own writes that
need it to act (conflicts, questions) and acknowledges each."""

from __future__ import annotations

from ...engine.policy import capabilities as cap
from ...errors import InvalidRequest
from ..call import Blueprint, Call
from ..declare import STRING, obj
from ..params import page_limit, query_args, scope_param

api = Blueprint()
STATUSES = ("accepted", "reinforced", "conflict_detected", "needs_clarification", "rejected")


@api("GET", "/v1/intake/pending", tier="beta", summary="The caller's pending intake results in a scope",
     query=("scope!", "status", "limit", "cursor"))
async def intake_pending(call: Call):
    args = query_args()
    scope = scope_param(args.get("scope"))
    call.check(cap.INTAKE_READ, scope)
    status = args.get("status")
    if status is not None and status not in STATUSES:
        raise InvalidRequest(f"status must be one of {list(STATUSES)}", details={"field": "status"})
    return await call.state.engine.intake.pending(scope, caller=call.principal.actor, status=status,
                                                  limit=page_limit(args.get("limit")), cursor=args.get("cursor"))  # fmt: skip


@api("POST", "/v1/intake/{item_id}/ack", tier="beta", rate="write", body=obj({"scope": STRING}, required=("scope",)), response_schema="intake_item",
     summary="Acknowledge a pending intake result")
async def intake_ack(call: Call, item_id: str):
    body = call.json()
    scope = scope_param(body.get("scope"))
    call.check(cap.INTAKE_ACK, scope)
    done = await call.state.engine.intake.ack(scope, item_id, caller=call.principal.actor)
    call.summary = {"intake_id": item_id, "status": done["status"]}
    return done
