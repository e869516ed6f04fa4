"""The audit log (reference §8.10): query, one row, and checking a body against a row's hash.
One's own rows need ``audit.read``; other actors' rows ``audit.read.cross_actor``."""

from __future__ import annotations

from typing import Any

from ...engine.policy import capabilities as cap
from ...engine.temporal import parse_rfc3339
from ...errors import InvalidQuery, MissingRequiredField, NotFound
from ..call import Blueprint, Call
from ..declare import STRING, obj
from ..params import decode_cursor, encode_cursor, page_limit, query_args

api = Blueprint()


@api("GET", "/v1/audit", summary="Query the audit log", access="tenant", response_schema="page:audit_row",
     query=("scope", "actor", "capability", "decision", "since", "limit", "cursor"))
async def audit_query(call: Call):
    args = query_args()
    call.check(cap.AUDIT_READ)
    actor = args.get("actor")
    if actor != call.principal.actor:
        if actor is None and not call.allows(cap.AUDIT_READ_CROSS_ACTOR):
            actor = call.principal.actor  # no cross-actor right: one's own rows
        else:
            call.check(cap.AUDIT_READ_CROSS_ACTOR)
    limit = page_limit(args.get("limit"), 100)
    if args.get("decision") not in (None, "allow", "deny"):
        raise InvalidQuery("decision must be allow or deny", details={"field": "decision"})
    since = parse_rfc3339(args["since"], field="since") if args.get("since") else None
    after = decode_cursor(args["cursor"]).get("after") if args.get("cursor") else None
    rows, more = await call.state.audit.query(
        tenant=call.principal.tenant, actor=actor, scope=args.get("scope"),
        capability=args.get("capability"), decision=args.get("decision"), since=since,
        after=after, limit=limit)  # fmt: skip
    return {"items": rows, "has_more": more,
            "next_cursor": encode_cursor({"after": rows[-1]["id"]}) if more else None}  # fmt: skip


async def audit_row(call: Call, audit_id: str) -> dict[str, Any]:
    call.check(cap.AUDIT_READ)
    row = await call.state.audit.get(audit_id)
    if row is None or row["tenant_id"] != call.principal.tenant:
        raise NotFound(f"no audit row {audit_id}", details={"audit_id": audit_id})
    if row["actor"] != call.principal.actor:
        call.check(cap.AUDIT_READ_CROSS_ACTOR)
    return row


@api("GET", "/v1/audit/{audit_id}", summary="One audit row", access="tenant", response_schema="audit_row")
async def audit_get(call: Call, audit_id: str):
    return await audit_row(call, audit_id)


@api("POST", "/v1/audit/verify", access="tenant", summary="Check a request body against an audit row's hash",
     body=obj({"audit_id": STRING, "body": {"type": "string", "description": "the raw request body"}},
              required=("audit_id", "body")))
async def audit_verify(call: Call):
    body = call.json()
    audit_id, raw = body.get("audit_id"), body.get("body")
    if not isinstance(audit_id, str):
        raise MissingRequiredField("audit_id is required", details={"field": "audit_id"})
    if not isinstance(raw, str):
        raise MissingRequiredField("body (the raw request body as a string) is required",
                                   details={"field": "body"})  # fmt: skip
    row = await audit_row(call, audit_id)
    return await call.state.audit.verify(row, raw.encode())
