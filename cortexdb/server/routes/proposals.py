"""Memory write proposals (docs/proposals.md): propose a write, list and read the scope's
proposals, approve (commit through the normal write path) or reject them.  Reviewing needs
``proposal.review``, which only the scope's owners (and tenant admins) hold."""

from __future__ import annotations

from ...engine.policy import capabilities as cap
from ...errors import InvalidRequest
from ..call import Blueprint, Call
from ..declare import STRING, engine_checked, obj
from ..params import page_limit, query_args, scope_param
from ..responses import json_response

api = Blueprint()


@api("POST", "/v1/proposals", tier="beta", rate="write", status=201, summary="Propose a memory write for review",
     body="proposal_request", response_schema="proposal")
async def proposal_create(call: Call):
    body = call.json()
    scope = scope_param(body.get("scope"))
    call.check(cap.PROPOSAL_CREATE, scope)
    proposal = await call.state.engine.proposals.propose(body, caller=call.principal.actor,
                                                         tenant=call.principal.tenant)  # fmt: skip
    call.summary = {"proposal_id": proposal["id"], "status": "pending"}
    return json_response(proposal, 201)


@api("GET", "/v1/proposals", tier="beta", summary="A page of a scope's proposals",
     query=("scope!", "status", "limit", "cursor"))
async def proposal_list(call: Call):
    args = query_args()
    scope = scope_param(args.get("scope"))
    call.check(cap.PROPOSAL_READ, scope)
    return await call.state.engine.proposals.list(scope, caller=call.principal.actor, status=args.get("status"),
                                                  limit=page_limit(args.get("limit")), cursor=args.get("cursor"))  # fmt: skip


@api("GET", "/v1/proposals/{proposal_id}", tier="beta", summary="One proposal", response_schema="proposal",
     query=("scope!",))
async def proposal_get(call: Call, proposal_id: str):
    scope = scope_param(query_args().get("scope"))
    call.check(cap.PROPOSAL_READ, scope)
    return await call.state.engine.proposals.get(scope, proposal_id, caller=call.principal.actor)


REVIEW = engine_checked(obj({"scope": STRING, "note": STRING}, required=("scope",)))


def review_body(call: Call) -> tuple[str, str | None]:
    body = call.json()
    unknown = sorted(set(body) - {"scope", "note"})
    if unknown:
        raise InvalidRequest(f"unknown field {unknown[0]}", details={"field": unknown[0]})
    scope = scope_param(body.get("scope"))
    call.check(cap.PROPOSAL_REVIEW, scope)
    return scope, body.get("note")


@api("POST", "/v1/proposals/{proposal_id}/approve", tier="beta", rate="write", response_schema="proposal",
     summary="Approve a proposal: its write commits through the normal pipeline", query=("wait",), body=REVIEW)
async def proposal_approve(call: Call, proposal_id: str):
    wait = query_args().get("wait")
    scope, note = review_body(call)
    call.check(cap.SCOPE_WRITE, scope)  # the approver commits the write
    proposal = await call.state.engine.proposals.approve(scope, proposal_id, caller=call.principal.actor,
                                                         tenant=call.principal.tenant, note=note, wait=wait)  # fmt: skip
    committed = proposal["committed"]
    call.summary = {"proposal_id": proposal_id, "status": "approved"}
    if "fact_id" in committed:  # a held derived fact (docs/proposals.md): the fact it became
        call.summary["fact_id"] = committed["fact_id"]
    else:
        call.event_id = call.summary["event_id"] = committed["event_id"]
    await call.state.registry.note_write(scope)
    return proposal


@api("POST", "/v1/proposals/{proposal_id}/reject", tier="beta", rate="write", response_schema="proposal",
     summary="Reject a proposal: nothing is written", body=REVIEW)
async def proposal_reject(call: Call, proposal_id: str):
    scope, note = review_body(call)
    proposal = await call.state.engine.proposals.reject(scope, proposal_id, caller=call.principal.actor, note=note)
    call.summary = {"proposal_id": proposal_id, "status": "rejected"}
    return proposal
