"""ScopeSupervisor: spawns scope actors lazily, restarts crashed ones, evicts idle ones.

It is shaped like a nursery: every actor is a child task of the supervisor's nursery, so no
actor outlives the engine.  When an actor crashes, the requests it held and those still in its
mailbox fail with a retriable ``INTERNAL``; a fresh actor then reloads its state from storage
(resuming unfinished derivations).  Consecutive crashes back off exponentially.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import attrs
import trio

from ...errors import CortexError, Internal, ScopeOwnedElsewhere
from ..storage.placement import FENCE
from .messages import ForeignConsolidate, ForeignDerived, ReplySlot, Stop, fail_message
from .scope_actor import ScopeActor

log = logging.getLogger("cortexdb.supervisor")


@attrs.frozen
class ActorStatistics:
    """A snapshot of one scope actor."""

    scope: str
    #: messages waiting in the mailbox
    mailbox_used: int
    #: the mailbox bound; senders wait when it is reached (backpressure)
    mailbox_capacity: int
    #: tasks blocked sending to the full mailbox
    senders_waiting: int
    #: events captured but not yet through the derivation pipeline
    pipeline_queue: int
    #: events the derivation lane has finished since this actor started
    processed: int
    #: how many times this scope's actor was restarted after a crash
    restarts: int


@attrs.frozen
class SupervisorStatistics:
    """A snapshot of the supervisor and its live actors."""

    #: live scope actors
    actors: int
    #: actor restarts after crashes, in total
    restarts: int
    #: actors that stopped after being idle
    evictions: int
    #: per-actor detail, by scope
    scopes: dict[str, ActorStatistics]


@attrs.define(eq=False)
class _Handle:
    scope: str
    send: trio.MemorySendChannel
    receive: trio.MemoryReceiveChannel
    actor: ScopeActor | None = None
    restarts: int = 0
    exited: trio.Event = attrs.field(factory=trio.Event)


class ScopeSupervisor:
    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self._handles: dict[str, _Handle] = {}
        self._nursery: trio.Nursery | None = None
        self._closing = False
        self.restarts = 0
        self.evictions = 0

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    # -- sending -------------------------------------------------------------------------------
    async def send(self, scope: str, message) -> None:
        for _ in range(5):
            if self._closing:
                fail_message(message, Internal("the engine is shutting down", retriable=True))
                return
            placement = self.ctx.placement
            if placement is not None and not placement.holds(scope) and not await self._admit(scope, message):
                return
            handle = self._handles.get(scope) or self._spawn(scope)
            try:
                try:
                    handle.send.send_nowait(
                        message
                    )  # room in the mailbox: no scheduling round-trip
                except trio.WouldBlock:
                    await handle.send.send(message)  # full: wait (backpressure)
                return
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                # the actor is stopping after being idle: let it finish, then spawn afresh
                await handle.exited.wait()
        fail_message(
            message, Internal(f"could not reach the actor of scope {scope}", retriable=True)
        )

    async def request(self, scope: str, build) -> Any:
        """Send ``build(reply)`` to the scope's actor and wait for its answer."""
        reply = ReplySlot()
        await self.send(scope, build(reply))
        return await reply.wait()  # always a checkpoint, even when the send did not block

    async def consolidate_foreign(
        self, target: str, source: str, event_id: str, payload: dict
    ) -> None:
        await self.request(
            target, lambda reply: ForeignConsolidate(source, event_id, payload, reply)
        )

    async def notify_derived(
        self, scope: str, event_id: str, derives: list[str], from_scope: str
    ) -> None:
        await self.send(scope, ForeignDerived(event_id, tuple(derives), from_scope))

    # -- actors --------------------------------------------------------------------------------
    def _spawn(self, scope: str) -> _Handle:
        send, receive = trio.open_memory_channel(self.ctx.config.mailbox_size)
        handle = _Handle(scope, send, receive)
        self._handles[scope] = handle
        self._nursery.start_soon(self._supervise, handle, name=f"actor:{scope}")
        return handle

    async def _supervise(self, handle: _Handle) -> None:
        backoff = 0.0
        try:
            while True:
                if self.ctx.placement is not None and not self._fence(handle):
                    break
                actor = ScopeActor(self.ctx, handle.scope, handle.receive)
                handle.actor = actor
                try:
                    await actor.run()
                    break
                except Exception as exc:
                    self.restarts += 1
                    handle.restarts += 1
                    log.error(
                        "scope actor %s crashed (%r); restarting", handle.scope, exc, exc_info=exc
                    )
                    error = Internal("the scope actor crashed while handling this request; retry it",
                                     details={"scope": handle.scope}, retriable=True)  # fmt: skip
                    actor.fail_inflight(error)
                    while True:
                        try:
                            fail_message(handle.receive.receive_nowait(), error)
                        except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                            break
                    if self._closing:
                        break
                    if backoff:  # consecutive crashes: back off before restarting, not a sync
                        await trio.sleep(backoff)
                    backoff = min(self.ctx.config.restart_backoff_max, (backoff or 0.025) * 2)
        finally:
            if self._handles.get(handle.scope) is handle:
                del self._handles[handle.scope]
                if not self._closing:
                    self.evictions += 1
            handle.receive.close()
            handle.exited.set()

    # -- several nodes (engine/placement.py): actors only for the partitions this node holds -----
    async def _admit(self, scope: str, message) -> bool:
        """Claim the scope's partition before its actor starts; a stale actor (its lease was
        lost) stops first.  False when the message was failed (another node holds it)."""
        stale = self._handles.get(scope)
        if stale is not None:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await stale.send.send(Stop())
            await stale.exited.wait()
        try:
            await self.ctx.placement.claim(scope)
        except CortexError as exc:
            fail_message(message, exc)
            return False
        return True

    def _fence(self, handle: _Handle) -> bool:
        """The actor's tasks write under its partition's lease (``placement.FENCE``); False (and
        its mailbox failed) once the partition is no longer held."""
        lease = self.ctx.placement.lease(handle.scope)
        if lease is not None:
            FENCE.set(lease)
            return True
        error = ScopeOwnedElsewhere(f"this node no longer holds the partition of scope {handle.scope}",
                                    details={"scope": handle.scope})  # fmt: skip
        while True:
            try:
                fail_message(handle.receive.receive_nowait(), error)
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                return False

    def retire(self, belongs) -> None:
        """Ask the actors of the scopes ``belongs(scope)`` says to stop (a lost partition)."""
        for scope, handle in list(self._handles.items()):
            if belongs(scope):
                with contextlib.suppress(trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                    handle.send.send_nowait(Stop())

    async def stop(self) -> None:
        """Graceful shutdown: every actor handles what is in its mailbox, then stops at a batch
        boundary of its pipeline (unfinished derivations resume on the next start)."""
        handles = list(self._handles.values())
        for handle in handles:
            try:
                await handle.send.send(Stop())
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        self._closing = True
        with trio.move_on_after(self.ctx.config.shutdown_grace) as grace:
            for handle in handles:
                await handle.exited.wait()
        if grace.cancelled_caught:
            log.warning(
                "scope actors did not stop within %.1fs; cancelling them",
                self.ctx.config.shutdown_grace,
            )
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    def scopes(self) -> list[str]:
        """The scopes whose actors are live (spawned and not evicted)."""
        return list(self._handles)

    def actor(self, scope: str) -> ScopeActor | None:
        handle = self._handles.get(scope)
        return handle.actor if handle else None

    def statistics(self) -> SupervisorStatistics:
        scopes = {}
        for scope, handle in self._handles.items():
            if handle.actor is None:
                continue
            stats = handle.actor.statistics()
            scopes[scope] = ActorStatistics(restarts=handle.restarts, **stats)
        return SupervisorStatistics(
            actors=len(self._handles),
            restarts=self.restarts,
            evictions=self.evictions,
            scopes=scopes,
        )
