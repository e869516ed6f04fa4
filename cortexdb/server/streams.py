"""Streaming: SSE recall (§10.1), the SSE lifecycle feed (§8.9.1, §10.3–10.5), the WebSocket
lifecycle feed, and the OpenAPI document.

A lifecycle stream authorises once at connect (``lifecycle.subscribe`` and ``scope.read.local``)
and then per record (``scope.read.local`` on the record's scope, cached per policy version).  A
policy mutation takes effect at the next event boundary (§5.4): the stream continues with a
``policy_changed`` event, or ends with ``policy_revoked``.  A subscriber that falls behind gets
``lagging`` and the stream closes; resume with ``Last-Event-ID`` or ``since_lifecycle_id``.

Fan-out cost (issue 10 part 8, docs/decisions.md "Lifecycle fan-out"): a stream is one task that
waits in one cancel scope, takes every record buffered since its last wake-up and sends them as
one chunk, at most one chunk per ``stream_coalesce`` seconds; each published record is encoded
once per server (``FrameCache``), not once per subscriber.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator
from typing import Any

import trio
from quart import Response, request, websocket

from ..engine import jsoncodec
from ..engine.engine import lifecycle_wire
from ..engine.model import LifecycleEvent
from ..engine.policy.capabilities import LIFECYCLE_SUBSCRIBE, SCOPE_READ_LOCAL
from ..errors import CortexError
from .app import Call, Route, ServerState, scope_param
from .policy import Principal

log = logging.getLogger("cortexdb.server")

MAX_BATCH = 1000  # most records one SSE chunk or WebSocket burst carries
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


class FrameCache:
    """The encoded frames of published lifecycle records, shared by every stream of one server:
    a record is encoded once however many subscribers receive it.  Bounded: the oldest entries
    go first (a subscriber far behind re-encodes, which is correct, only slower)."""

    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = capacity
        self._sse: dict[str, bytes] = {}
        self._ws: dict[str, str] = {}
        self.encoded = 0  # how many records were encoded (statistics, tests)

    def sse(self, record: LifecycleEvent) -> bytes:
        frame = self._sse.get(record.lifecycle_id)
        if frame is None:
            frame = sse_frame(record.lifecycle_id, record.stage, lifecycle_wire(record))
            self._keep(self._sse, record.lifecycle_id, frame)
        return frame

    def ws(self, record: LifecycleEvent) -> str:
        frame = self._ws.get(record.lifecycle_id)
        if frame is None:
            frame = jsoncodec.encode({"type": "lifecycle", "id": record.lifecycle_id, "event": record.stage,
                                      "data": lifecycle_wire(record)}).decode()  # fmt: skip
            self._keep(self._ws, record.lifecycle_id, frame)
        return frame

    def _keep(self, cache: dict[str, Any], key: str, frame: Any) -> None:
        self.encoded += 1
        if len(cache) >= self.capacity:
            del cache[next(iter(cache))]  # insertion order: the oldest
        cache[key] = frame


# One batch of a lifecycle stream: records (LifecycleEvent) and control frames (id, event, data).
Batch = list[Any]


async def lifecycle_batches(state: ServerState, principal: Principal, scope: str | None,
                            since: str | None, filters: dict[str, Any]) -> AsyncIterator[Batch | None]:  # fmt: skip
    """A lifecycle subscription as batches: every record buffered since the last batch (in
    order), or None for a keep-alive.  One task and one cancel scope per stream, whatever the
    rate; the caller encodes the records (``FrameCache``) and sends a batch at once."""
    policy = state.policy
    readable: dict[str, bool] = {}

    def can_read(path: str) -> bool:
        """The per-record check, through the gate: may this principal read records of ``path``?"""
        if path not in readable:
            readable[path] = state.gate.decide(principal, SCOPE_READ_LOCAL, path).allowed
        return readable[path]

    def still_allowed() -> tuple[bool, str]:
        for capability, target in ((LIFECYCLE_SUBSCRIBE, scope), (SCOPE_READ_LOCAL, scope)):
            if target is None and capability == SCOPE_READ_LOCAL:
                continue
            decision = state.gate.decide(principal, capability, target)
            if not decision.allowed:
                return False, f"{capability} is now denied by the {decision.tier} tier"
        return True, ""

    settings, closing = state.settings, state.closing
    async with state.engine.subscribe(since_lifecycle_id=since, scope=scope, **filters) as subscription:
        version = policy.version
        next_batch = -math.inf
        while True:
            await subscription.wait(closing, settings.stream_keepalive)
            if trio.current_time() < next_batch and subscription.buffered < MAX_BATCH and not subscription.ended:
                # a busy stream: at most one batch per ``stream_coalesce`` seconds (fewer, larger sends)
                with trio.move_on_at(next_batch):
                    await closing.wait()
            if closing.is_set():
                return
            records = subscription.take(MAX_BATCH)
            next_batch = trio.current_time() + settings.stream_coalesce
            if not records:
                if subscription.ended:
                    return
                yield None  # quiet for ``keepalive`` seconds
                continue
            batch: Batch = []
            for record in records:
                if policy.version != version:  # a policy mutation: effective at this boundary
                    version = policy.version
                    readable.clear()
                    allowed, reason = still_allowed()
                    if not allowed:
                        batch.append((None, "policy_revoked", {"reason": reason}))
                        yield batch
                        return
                    batch.append((None, "policy_changed", {**(policy.last_change or {}), "capability_diff": []}))
                if record.scope and not can_read(record.scope):
                    continue
                if record.stage == "lagging":
                    batch.append((None, "lagging", lifecycle_wire(record).get("payload", {})))
                    yield batch
                    return
                batch.append(record)
            if batch:
                yield batch


def lifecycle_sse(state: ServerState, cache: FrameCache,
                  batches: AsyncIterator[Batch | None]) -> Response:  # fmt: skip
    """The SSE response of a lifecycle stream: one body chunk per batch."""

    async def body():
        state.open_streams += 1
        try:
            async for batch in batches:
                if batch is None:
                    yield b": keep-alive\n\n"
                    continue
                yield b"".join(cache.sse(item) if isinstance(item, LifecycleEvent) else sse_frame(*item)
                               for item in batch)  # fmt: skip
        finally:
            state.open_streams -= 1

    response = Response(body(), content_type="text/event-stream; charset=utf-8")
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Accel-Buffering"] = "no"
    response.timeout = None  # type: ignore[attr-defined]  # SSE: no response timeout
    return response


async def _subscription_args(call: Call, args: dict[str, str], last_event_id: str | None):
    state = call.state
    scope = scope_param(args["scope"]) if args.get("scope") else None
    if scope is None and args.get("event_id"):
        scope = await state.engine.home_scope(args["event_id"])
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

    cache = FrameCache()

    @api("GET", "/v1/lifecycle/stream", summary="Lifecycle events as Server-Sent Events", stream=True,
         access="filtered")
    async def lifecycle_stream(call: Call):
        args = query_args(LIFECYCLE_PARAMS)
        scope, since, filters = await _subscription_args(call, args, request.headers.get("Last-Event-ID"))
        return lifecycle_sse(state, cache, lifecycle_batches(state, call.principal, scope, since, filters))

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
                from ..errors import InvalidQuery

                raise InvalidQuery(f"unknown query parameter {unknown[0]!r}", details={"field": unknown[0]})
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
            async for batch in lifecycle_batches(state, principal, scope, since, filters):
                if batch is None:
                    await websocket.send(jsoncodec.encode({"type": "keep-alive"}).decode())
                    continue
                for item in batch:
                    if isinstance(item, LifecycleEvent):
                        await websocket.send(cache.ws(item))
                        continue
                    lce, event, data = item
                    await websocket.send(jsoncodec.encode({"type": "lifecycle", "id": lce, "event": event,
                                                           "data": data}).decode())  # fmt: skip
            await websocket.close(1000)
        finally:
            state.open_streams -= 1

    @api("GET", "/v1/openapi.json", open=True, rate=None, summary="This API as OpenAPI 3.1")
    async def openapi(call: Call):
        from .openapi import document

        return document(state.routes)
