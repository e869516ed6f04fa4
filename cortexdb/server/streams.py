"""Streaming responses: SSE bodies (recall §10.1, the lifecycle feed §8.9.1, §10.3–10.5) and a
lifecycle subscription as batches, shared by the SSE and WebSocket feeds (``routes/feeds.py``).

A lifecycle stream authorises once at connect (``lifecycle.subscribe`` and ``scope.read.local``)
and then per record (``scope.read.local`` on the record's scope, cached per policy version).  A
policy mutation takes effect at the next event boundary (§5.4): the stream continues with a
``policy_changed`` event, or ends with ``policy_revoked``.  A subscriber that falls behind gets
``lagging`` and the stream closes; resume with ``Last-Event-ID`` or ``since_lifecycle_id``.

Fan-out cost (issue 10 part 8, docs/decisions.md "Lifecycle fan-out"): a stream is one task that
waits in one cancel scope, takes every record buffered since its last wake-up and sends them as
one chunk; after a chunk it waits for the next tick the server's busy streams share
(``pacing.Pacer``: at most ``stream_coalesce`` seconds), so a busy stream sends one chunk a tick;
each published record is encoded once per server (``frames.FrameCache``), not once per subscriber.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from quart import Response

from ..engine.engine import lifecycle_wire
from ..engine.policy.capabilities import LIFECYCLE_SUBSCRIBE, SCOPE_READ_LOCAL
from .call import ServerState
from .frames import FrameCache, sse_frame
from .policy import Principal

MAX_BATCH = 1000  # most records one SSE chunk or WebSocket burst carries


def event_stream(body: AsyncIterator[bytes]) -> Response:
    """A ``text/event-stream`` response of ``body``'s chunks (no response timeout)."""
    response = Response(body, content_type="text/event-stream; charset=utf-8")
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Accel-Buffering"] = "no"
    response.timeout = None  # type: ignore[attr-defined]  # SSE: no response timeout
    return response


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

    return event_stream(body())


# One batch of a lifecycle stream: records (LifecycleEvent) and control frames (id, event, data).
Batch = list[Any]


class StreamAccess:
    """What a lifecycle stream's principal may read: decided per record scope through the gate,
    cached until the policy's version changes, when the stream's own grant is decided again."""

    def __init__(self, state: ServerState, principal: Principal, scope: str | None) -> None:
        self.state, self.principal, self.scope = state, principal, scope
        self.version = state.policy.version
        self.readable: dict[str, bool] = {}

    def can_read(self, path: str) -> bool:
        """The per-record check, through the gate: may this principal read records of ``path``?"""
        if path not in self.readable:
            self.readable[path] = self.state.gate.decide(self.principal, SCOPE_READ_LOCAL, path).allowed
        return self.readable[path]

    def still_allowed(self) -> tuple[bool, str]:
        for capability, target in ((LIFECYCLE_SUBSCRIBE, self.scope), (SCOPE_READ_LOCAL, self.scope)):
            if target is None and capability == SCOPE_READ_LOCAL:
                continue
            decision = self.state.gate.decide(self.principal, capability, target)
            if not decision.allowed:
                return False, f"{capability} is now denied by the {decision.tier} tier"
        return True, ""

    def policy_frame(self) -> tuple[None, str, dict[str, Any]] | None:
        """At a record boundary: None while the policy is unchanged, else the control frame a
        mutation takes effect with (``policy_changed``, or ``policy_revoked``, which ends the stream)."""
        policy = self.state.policy
        if policy.version == self.version:
            return None
        self.version = policy.version
        self.readable.clear()
        allowed, reason = self.still_allowed()
        if not allowed:
            return None, "policy_revoked", {"reason": reason}
        return None, "policy_changed", {**(policy.last_change or {}), "capability_diff": []}


async def lifecycle_batches(state: ServerState, principal: Principal, scope: str | None,
                            since: str | None, filters: dict[str, Any]) -> AsyncIterator[Batch | None]:  # fmt: skip
    """A lifecycle subscription as batches: every record buffered since the last batch (in
    order), or None for a keep-alive.  One task and one cancel scope per stream, whatever the
    rate; the caller encodes the records (``FrameCache``) and sends a batch at once."""
    settings, closing = state.settings, state.closing
    async with state.engine.subscribe(since_lifecycle_id=since, scope=scope, **filters) as subscription:
        access = StreamAccess(state, principal, scope)
        busy = False  # sent a batch: the next waits for the streams' shared tick (pacing.py)
        while True:
            if busy and subscription.buffered < MAX_BATCH and not subscription.ended:
                # at most one batch a tick (``stream_coalesce`` seconds): fewer, larger sends
                await state.pacer.tick(settings.stream_coalesce, closing)
            if not busy or not subscription.buffered:
                await subscription.wait(closing, settings.stream_keepalive)
            if closing.is_set():
                return
            records = subscription.take(MAX_BATCH)
            busy = bool(records)
            if not records:
                if subscription.ended:
                    return
                yield None  # quiet for ``keepalive`` seconds
                continue
            batch: Batch = []
            for record in records:
                frame = access.policy_frame()  # a policy mutation: effective at this boundary
                if frame is not None:
                    batch.append(frame)
                    if frame[1] == "policy_revoked":
                        yield batch
                        return
                if record.scope and not access.can_read(record.scope):
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
                yield cache.sse_chunk(batch)
        finally:
            state.open_streams -= 1

    return event_stream(body())


__all__ = ["FrameCache", "lifecycle_batches", "lifecycle_sse", "sse_frame", "sse_response"]
