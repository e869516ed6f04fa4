"""The live lifecycle feeds (reference §8.9.1, §10.3–10.5): Server-Sent Events and a WebSocket
of JSON frames, both over ``streams.lifecycle_batches`` (authorised once at connect, then per
record).  The WebSocket is policy-gated and audited like the SSE stream: one row, allow or deny."""

from __future__ import annotations

from typing import Any

from quart import websocket

from ...engine import jsoncodec
from ...engine.model import LifecycleEvent
from ...engine.policy.capabilities import LIFECYCLE_SUBSCRIBE, SCOPE_READ_LOCAL
from ...errors import CortexError, InvalidQuery
from ..call import Blueprint, Call, Route, ServerState, current_request
from ..params import query_args, scope_param
from ..pipeline import audit
from ..policy import Decision
from ..streams import lifecycle_batches, lifecycle_sse

api = Blueprint()

LIFECYCLE_PARAMS = ("scope", "since_lifecycle_id", "event_id", "batch_id", "job_id", "import_id",
                    "export_id", "erasure_id", "events")  # fmt: skip


@api("GET", "/v1/lifecycle/stream", summary="Lifecycle events as Server-Sent Events", stream=True, query=LIFECYCLE_PARAMS,
     access="filtered")
async def lifecycle_stream(call: Call):
    args = query_args()
    scope, since, filters = await subscription_args(call, args, current_request().headers.get("Last-Event-ID"))
    state = call.state
    return lifecycle_sse(state, state.frames, lifecycle_batches(state, call.principal, scope, since, filters))


async def subscription_args(call: Call, args: dict[str, str], last_event_id: str | None):
    """(scope, since, filters) of a subscription, its scope checked."""
    scope = scope_param(args["scope"]) if args.get("scope") else None
    if scope is None and args.get("event_id"):
        scope = await call.state.engine.home_scope(args["event_id"])
    call.check(LIFECYCLE_SUBSCRIBE, scope)
    if scope is not None:
        call.check(SCOPE_READ_LOCAL, scope)
    filters: dict[str, Any] = {}
    for name in ("event_id", "batch_id", "events"):
        if args.get(name):
            filters[name] = args[name]
    job = args.get("job_id") or args.get("import_id") or args.get("export_id") or args.get("erasure_id")
    if job:
        filters["job_id"] = job
    since = last_event_id or args.get("since_lifecycle_id")
    if since is None and (args.get("event_id") or args.get("batch_id") or job):
        since = ""  # one memory event, batch or job: replay what it already went through, then follow it
    return scope, since, filters


@api.websocket("/v1/lifecycle/ws", summary="Lifecycle events over a WebSocket (JSON frames)", access="filtered",
               query=LIFECYCLE_PARAMS)  # fmt: skip
async def lifecycle_ws(state: ServerState, route: Route) -> None:
    request_id = websocket.headers.get("X-Cortex-Request-ID") or state.engine.new_id("req")
    call = None
    try:
        principal = state.verifier.principal(
            websocket.headers.get("Authorization"), websocket.headers.get("X-Cortex-Actor"),
            require_signed=bool(state.policy.preset.defaults.get("actor.require_signed", True)),
            operators=state.policy.operators)  # fmt: skip
        call = Call(state, route, principal, request_id, b"")
        unknown = [k for k in websocket.args if k not in LIFECYCLE_PARAMS]
        if unknown:
            raise InvalidQuery(f"unknown query parameter {unknown[0]!r}", details={"field": unknown[0]})
        args = {k: websocket.args.get(k) for k in websocket.args}
        scope, since, filters = await subscription_args(call, args, None)
    except CortexError as exc:
        await audit_ws(call, exc.http_status, request_id, exc)
        await websocket.accept()
        await websocket.send(jsoncodec.encode({"type": "error", **exc.to_envelope(request_id)}).decode())
        await websocket.close(4000 + exc.http_status)
        return
    await audit_ws(call, 101, request_id, None)
    await websocket.accept()
    state.open_streams += 1
    try:
        async for batch in lifecycle_batches(state, principal, scope, since, filters):
            if batch is None:
                await websocket.send(jsoncodec.encode({"type": "keep-alive"}).decode())
                continue
            for item in batch:
                if isinstance(item, LifecycleEvent):
                    await websocket.send(state.frames.ws(item))
                    continue
                lce, event, data = item
                await websocket.send(jsoncodec.encode({"type": "lifecycle", "id": lce, "event": event,
                                                       "data": data}).decode())  # fmt: skip
        await websocket.close(1000)
    finally:
        state.open_streams -= 1


async def audit_ws(call: Call | None, status: int, request_id: str, error: CortexError | None) -> None:
    if call is None:
        return  # authentication failed: no principal to attribute (as for HTTP)
    if error is not None and error.details.get("capability") and error.details.get("denied_by_tier"):
        call.decisions.insert(0, (Decision(False, error.details["capability"], error.details["denied_by_tier"]), None))
    decision = call.governing()
    if decision is not None:
        await audit(call, decision, websocket, body=b"", status=status, request_id=request_id, elapsed_ms=0.0)
