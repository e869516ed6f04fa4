"""Streaming: SSE recall (§10.1), the SSE lifecycle feed (§8.9.1, §10.3–10.5), the WebSocket
lifecycle feed, and the OpenAPI document.

A lifecycle stream authorises once at connect (``lifecycle.subscribe`` and ``scope.read.local``)
and then per record (``scope.read.local`` on the record's scope, cached per policy version).  A
policy mutation takes effect at the next event boundary (§5.4): the stream continues with a
``policy_changed`` event, or ends with ``policy_revoked``.  A subscriber that falls behind gets
``lagging`` and the stream closes; resume with ``Last-Event-ID`` or ``since_lifecycle_id``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import trio
from quart import Response, request, websocket

from ..engine import jsoncodec
from ..engine.engine import lifecycle_wire
from ..errors import CortexError
from .app import Call, Route, ServerState, scope_param
from .policy import Principal

log = logging.getLogger("cortexdb.server")

_CLOSING, _TIMEOUT, _END = object(), object(), object()
LIFECYCLE_PARAMS = ("scope", "since_lifecycle_id", "event_id", "batch_id", "job_id", "import_id",
                    "export_id", "erasure_id", "events")  # fmt: skip


def sse_frame(event_id: str | None, event: str, data: Any) -> bytes:
    head = f"id: {event_id}\n" if event_id else ""
    return f"{head}event: {event}\ndata: ".encode() + jsoncodec.encode(data) + b"\n\n"


def sse_response(state: ServerState, frames: AsyncIterator[tuple[str | None, str, Any]]) -> Response:
    async def body():
        state.open_streams += 1
        try:
            async for frame in frames:
                if frame is None:
                    yield b": keep-alive\n\n"
                else:
                    yield sse_frame(*frame)
        finally:
            state.open_streams -= 1

    response = Response(body(), content_type="text/event-stream; charset=utf-8")
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Accel-Buffering"] = "no"
    response.timeout = None  # type: ignore[attr-defined]  # SSE: no response timeout
    return response


async def _next_or_closing(iterator: Any, closing: trio.Event, timeout: float) -> Any:
    """The next record, or _CLOSING when the server shuts down, or _TIMEOUT after ``timeout``."""
    result: list[Any] = [_TIMEOUT]

    async with trio.open_nursery() as nursery:

        async def take() -> None:
            try:
                result[0] = await iterator.__anext__()
            except StopAsyncIteration:
                result[0] = _END
            nursery.cancel_scope.cancel()

        async def watch() -> None:
            await closing.wait()
            result[0] = _CLOSING
            nursery.cancel_scope.cancel()

        nursery.start_soon(take)
        nursery.start_soon(watch)
        nursery.cancel_scope.deadline = trio.current_time() + timeout
    return result[0]


async def lifecycle_records(state: ServerState, principal: Principal, scope: str | None,
                            since: str | None, filters: dict[str, Any]) -> AsyncIterator[tuple | None]:  # fmt: skip
    """(id, event, data) frames of a lifecycle subscription, or None for a keep-alive."""
    policy = state.policy
    readable: dict[str, bool] = {}

    def can_read(path: str) -> bool:  # the gate, per record scope, cached per policy version
        if path not in readable:
            readable[path] = state.gate.decide(principal, "scope.read.local", path).allowed
        return readable[path]

    def still_allowed() -> tuple[bool, str]:
        for capability, target in (("lifecycle.subscribe", scope), ("scope.read.local", scope)):
            if target is None and capability == "scope.read.local":
                continue
            decision = state.gate.decide(principal, capability, target)
            if not decision.allowed:
                return False, f"{capability} is now denied by the {decision.tier} tier"
        return True, ""

    async with state.engine.subscribe(since_lifecycle_id=since, scope=scope, **filters) as subscription:
        version = policy.version
        while True:
            record = await _next_or_closing(subscription, state.closing, state.settings.stream_keepalive)
            if record is _CLOSING or record is _END:
                return
            if record is _TIMEOUT:
                yield None
                continue
            if policy.version != version:
                version = policy.version
                readable.clear()
                allowed, reason = still_allowed()
                if not allowed:
                    yield None, "policy_revoked", {"reason": reason}
                    return
                yield None, "policy_changed", {**(policy.last_change or {}), "capability_diff": []}
            if record.scope and not can_read(record.scope):
                continue
            if record.stage == "lagging":
                yield None, "lagging", lifecycle_wire(record).get("payload", {})
                return
            yield record.lifecycle_id, record.stage, lifecycle_wire(record)


async def _subscription_args(call: Call, args: dict[str, str], last_event_id: str | None):
    state = call.state
    scope = scope_param(args["scope"]) if args.get("scope") else None
    if scope is None and args.get("event_id"):
        scope = await state.engine.home_scope(args["event_id"])
    call.check("lifecycle.subscribe", scope)
    if scope is not None:
        call.check("scope.read.local", scope)
    filters: dict[str, Any] = {}
    for name in ("event_id", "batch_id", "events"):
        if args.get(name):
            filters[name] = args[name]
    job = args.get("job_id") or args.get("import_id") or args.get("export_id") or args.get("erasure_id")
    if job:
        filters["job_id"] = job
    since = last_event_id or args.get("since_lifecycle_id")
    if since is None and args.get("event_id"):
        since = ""  # one memory event: replay the stages it already went through, then follow it
    return scope, since, filters


async def _audit_ws(state: ServerState, call: Call | None, status: int, request_id: str,
                    error: CortexError | None) -> None:  # fmt: skip
    """The WebSocket subscription is policy-gated like the SSE stream: one audit row, allow or deny."""
    if call is None:
        return  # authentication failed: no principal to attribute (as for HTTP)
    if error is not None and error.details.get("capability") and error.details.get("denied_by_tier"):
        from .policy import Decision

        call.decisions.insert(0, (Decision(False, error.details["capability"], error.details["denied_by_tier"]), None))
    decision = call.governing()
    if decision is None:
        return
    try:
        await state.audit.record(
            principal=call.principal, scope=call.scope, endpoint="GET /v1/lifecycle/ws", method="GET",
            path=websocket.path, capability=decision.capability,
            decision="allow" if decision.allowed else "deny", tier=decision.tier, body=b"",
            headers=websocket.headers, status=status, request_id=request_id, elapsed_ms=0.0,
            client_ip=websocket.remote_addr or None, user_agent=websocket.headers.get("User-Agent"))  # fmt: skip
    except CortexError as exc:
        log.warning("audit row not written: %s", exc.error_code)


def install(app: Any, api: Any, state: ServerState) -> None:
    from .routes import query_args

    @api("GET", "/v1/lifecycle/stream", summary="Lifecycle events as Server-Sent Events", stream=True,
         access="filtered")
    async def lifecycle_stream(call: Call):
        args = query_args(LIFECYCLE_PARAMS)
        scope, since, filters = await _subscription_args(call, args, request.headers.get("Last-Event-ID"))
        frames = lifecycle_records(state, call.principal, scope, since, filters)
        return sse_response(state, frames)

    ws_route = Route("GET", "/v1/lifecycle/ws", "stable", None,
                     "Lifecycle events over a WebSocket (JSON frames)", False, access="filtered")  # fmt: skip
    state.routes.append(ws_route)

    @app.websocket("/v1/lifecycle/ws")
    async def lifecycle_ws():
        request_id = websocket.headers.get("X-Cortex-Request-ID") or state.engine.new_id("req")
        call = None
        try:
            principal = state.verifier.principal(
                websocket.headers.get("Authorization"), websocket.headers.get("X-Cortex-Actor"),
                require_signed=bool(state.policy.preset.defaults.get("actor.require_signed", True)),
                operators=state.policy.operators)  # fmt: skip
            call = Call(state, ws_route, principal, request_id, b"")
            unknown = [k for k in websocket.args if k not in LIFECYCLE_PARAMS]
            if unknown:
                from .routes import InvalidQueryParam

                raise InvalidQueryParam(f"unknown query parameter {unknown[0]!r}", details={"field": unknown[0]})
            args = {k: websocket.args.get(k) for k in websocket.args}
            scope, since, filters = await _subscription_args(call, args, None)
        except CortexError as exc:
            await _audit_ws(state, call, exc.http_status, request_id, exc)
            await websocket.accept()
            await websocket.send(jsoncodec.encode({"type": "error", **exc.to_envelope(request_id)}).decode())
            await websocket.close(4000 + exc.http_status)
            return
        await _audit_ws(state, call, 101, request_id, None)
        await websocket.accept()
        state.open_streams += 1
        try:
            async for frame in lifecycle_records(state, principal, scope, since, filters):
                if frame is None:
                    await websocket.send(jsoncodec.encode({"type": "keep-alive"}).decode())
                    continue
                lce, event, data = frame
                await websocket.send(jsoncodec.encode({"type": "lifecycle", "id": lce, "event": event,
                                                       "data": data}).decode())  # fmt: skip
                if event in ("policy_revoked", "lagging"):
                    break
            await websocket.close(1000)
        finally:
            state.open_streams -= 1

    @api("GET", "/v1/openapi.json", open=True, rate=None, summary="This API as OpenAPI 3.1")
    async def openapi(call: Call):
        from .openapi import document

        return document(state.routes)
