"""Lifecycle reads (reference §8.9): one record, one memory event's stages, cancelling queued
stages, and the catch-up list.  The live feeds (SSE, WebSocket) are ``feeds.py``."""

from __future__ import annotations

from ...engine.policy import capabilities as cap
from ...errors import InvalidBody
from ..call import Blueprint, Call
from ..declare import NOTE, obj
from ..params import decode_cursor, encode_cursor, page_limit, query_args, scope_param

api = Blueprint()


@api("GET", "/v1/lifecycle/event/{lce_id}", summary="One lifecycle event")
async def lifecycle_event(call: Call, lce_id: str):
    record = await call.state.engine.lifecycle_event(lce_id)
    scope = record.get("scope")
    if scope is None:  # node-level records (none are persisted today): admins only
        call.require_admin(cap.LIFECYCLE_SUBSCRIBE, "this lifecycle record belongs to no scope")
    call.check(cap.LIFECYCLE_SUBSCRIBE, scope)
    call.check(cap.SCOPE_READ_LOCAL, scope)
    return record


@api("GET", "/v1/lifecycle/memory-event/{event_id}", summary="Aggregated stages of one memory event")
async def memory_event(call: Call, event_id: str):
    engine = call.state.engine
    scope = await engine.home_scope(event_id)
    call.check(cap.SCOPE_READ_LOCAL, scope)
    view = await engine.memory_event(event_id, scope=scope)
    return {k: v for k, v in view.items() if k not in ("derives_by_stage", "elapsed_ms")}


@api("POST", "/v1/lifecycle/memory-event/{event_id}/cancel", rate="write", body=obj({"audit_note": NOTE}), body_required=False,
     summary="Cancel the queued stages of a captured event")
async def cancel(call: Call, event_id: str):
    body = call.json() if call.raw.strip() else {}
    note = body.get("audit_note")
    if note is not None and not isinstance(note, str):
        raise InvalidBody("audit_note must be a string", details={"field": "audit_note"})
    call.primary = cap.SCOPE_WRITE
    result = dict(await call.state.engine.cancel(event_id, caller=call.principal.actor))
    call.event_id = event_id
    if note:
        result["audit_note"] = note[:500]
    result["audit_id"] = call.audit_id  # the row this call writes (§8.9.5)
    return result


@api("GET", "/v1/lifecycle", summary="Catch-up list of lifecycle events (lce order)", access="filtered",
     query=("scope", "since_lifecycle_id", "event_id", "batch_id", "job_id", "events", "limit", "cursor"))
async def lifecycle_list(call: Call):
    args = query_args()
    scope = scope_param(args["scope"]) if args.get("scope") else None
    call.check(cap.LIFECYCLE_SUBSCRIBE, scope)
    if scope:
        call.check(cap.SCOPE_READ_LOCAL, scope)
    limit = page_limit(args.get("limit"), 100)
    after = decode_cursor(args["cursor"]).get("after") if args.get("cursor") else args.get("since_lifecycle_id")
    filters = {k: args[k] for k in ("event_id", "batch_id", "job_id", "events") if args.get(k)}
    rows = await call.state.engine.lifecycle(since_lifecycle_id=after, limit=limit + 1, scope=scope, **filters)
    more = len(rows) > limit
    rows = rows[:limit]
    admin = call.state.gate.is_admin(call.principal)
    visible = [r for r in rows
               if (call.allows(cap.SCOPE_READ_LOCAL, r["scope"]) if r.get("scope") else admin)]  # fmt: skip
    return {"items": visible, "has_more": more,
            "next_cursor": encode_cursor({"after": rows[-1]["lifecycle_id"]}) if more else None}  # fmt: skip
