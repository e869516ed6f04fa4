"""ScopeSupervisor: spawns scope actors lazily, restarts crashed ones, releases idle ones.

It is shaped like a nursery: every actor is a child task of the supervisor's nursery, so no
actor outlives the engine.  When an actor crashes, the requests it held and those still in its
mailbox fail with a retriable ``INTERNAL``; a fresh actor then reloads its state from storage
(resuming unfinished derivations).  Consecutive crashes back off exponentially.

Releasing a scope (``release``) stops its actor only if it is idle, at a point where nothing is
in hand: no request, no queued or running derivation, no vector build (``ScopeActor.releasable``);
its indexes and decoded records are dropped, and the next message reopens it — a fresh actor
that rebuilds them from storage before it takes that message, so no request sees an empty index.
A message sent while the actor stops waits for it to be gone, then reopens it.  ``sweep`` (every
``release_check_interval`` seconds) releases what ``residency.to_release`` chooses: scopes idle
for ``idle_timeout``, and the least recently used while the open scopes' estimated memory
exceeds ``scope_memory_budget_mb``.  ``hold`` keeps a scope open for a block.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from ...errors import CortexError, Internal, ScopeOwnedElsewhere
from ..memtrim import release_free_memory_soon
from ..storage.placement import FENCE
from .messages import Flush, ForeignConsolidate, ForeignDerived, ReplySlot, Stop, fail_message
from .residency import OpenScope, to_release
from .scope_actor import ScopeActor

log = logging.getLogger("cortexdb.supervisor")
RELEASE_TRIES = 10  # a draining release gives up after this many tries while requests keep coming


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
    #: its estimated memory in bytes (``residency.scope_bytes``)
    memory_bytes: int


@attrs.frozen
class SupervisorStatistics:
    """A snapshot of the supervisor and its live actors."""

    #: live scope actors
    actors: int
    #: actor restarts after crashes, in total
    restarts: int
    #: scopes released (idle: their actor stopped, their indexes dropped), in total
    releases: int
    #: scopes opened again after a release, in total
    reopens: int
    #: the open scopes' estimated memory in bytes (``residency.scope_bytes``)
    memory_bytes: int
    #: ``EngineConfig.scope_memory_budget_mb`` in bytes (0: no budget)
    memory_budget_bytes: int
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
    last_used: float = attrs.field(factory=trio.current_time)  # Trio time of the latest send
    use: int = 0  # ScopeSupervisor.uses at the latest send (the least recently used has the lowest)


class ScopeSupervisor:
    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self._handles: dict[str, _Handle] = {}
        self._nursery: trio.Nursery | None = None
        self._closing = False
        self.restarts = 0
        self.releases = 0
        self.reopens = 0
        self.uses = 0  # messages sent, in total: orders the scopes by their latest use
        self._released: set[str] = set()  # scopes released and not opened since (to count reopens)
        self._holds: dict[str, int] = {}  # scope -> open ``hold`` blocks

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            while True:
                await trio.sleep(self.ctx.config.release_check_interval)
                try:
                    await self.sweep()
                except Exception:  # a failed sweep must not take the actors down; the next one runs
                    log.exception("the sweep for idle scopes failed")

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
            handle.last_used = trio.current_time()
            self.uses += 1
            handle.use = self.uses
            try:
                try:
                    handle.send.send_nowait(
                        message
                    )  # room in the mailbox: no scheduling round-trip
                except trio.WouldBlock:
                    await handle.send.send(message)  # full: wait (backpressure)
                return
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                # the scope is being released: let its actor finish, then reopen it
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
        if scope in self._released:
            self._released.discard(scope)
            self.reopens += 1
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
            if handle.actor is not None and handle.actor.released:
                handle.actor.drop_state()  # the indexes go now, not when a cycle is collected
                self.releases += 1
                self._released.add(handle.scope)
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

    # -- releasing -----------------------------------------------------------------------------
    async def release(self, scope: str, *, drain: bool = False) -> bool:
        """Release a scope now if it is idle: its actor stops at a point where nothing is in
        hand, its indexes and decoded records are dropped, and the next message reopens it from
        storage.  True when the scope has no open actor any more; False when it is busy or held
        (nothing changes then).  ``drain``: first let its queued derivation and vector builds
        finish (a few tries while requests keep it busy).  Callers: ``sweep``, and whoever must
        let a scope go (a node losing a scope's lease)."""
        for _ in range(RELEASE_TRIES if drain else 1):
            handle = self._handles.get(scope)
            if handle is None:
                return True
            if drain:
                await self.request(scope, lambda reply: Flush(False, reply))
                if handle.actor is not None:
                    await handle.actor.lane.index.vector_job_finished()
            if await self._release_once(handle):
                return True
        return False

    async def _release_once(self, handle: _Handle) -> bool:
        if self._holds.get(handle.scope) or self._closing:
            return False
        reply = ReplySlot()
        try:
            handle.send.send_nowait(Stop(reply))
        except trio.WouldBlock:
            return False  # a full mailbox: anything but idle
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            await handle.exited.wait()  # already stopping
            return True
        try:
            released = await reply.wait()
        except CortexError:  # it crashed meanwhile (and was restarted)
            return False
        if released:
            await handle.exited.wait()
        return released

    async def sweep(self) -> int:
        """Release what ``residency.to_release`` chooses (idle past ``idle_timeout``; least
        recently used while over the memory budget); returns how many were released."""
        if self._closing:
            return 0
        config = self.ctx.config
        now = trio.current_time()
        uses = self.uses
        open_scopes = [OpenScope(scope, handle.last_used, handle.use, handle.actor.estimated_bytes(),
                                 handle.actor.releasable() and not self._holds.get(scope))
                       for scope, handle in self._handles.items() if handle.actor is not None]  # fmt: skip
        chosen = to_release(open_scopes, now=now, idle_timeout=config.idle_timeout,
                            budget_bytes=self.budget_bytes)  # fmt: skip
        released = 0
        for scope in chosen:
            handle = self._handles.get(scope)
            if handle is not None and handle.use > uses:
                continue  # used since the choice: not the least recently used any more
            try:
                released += await self.release(scope)
            except Exception:  # a sweep must never take the supervisor down
                log.exception("releasing scope %s failed", scope)
        if released:
            await release_free_memory_soon()  # the freed heap goes back to the OS
        return released

    @asynccontextmanager
    async def hold(self, scope: str) -> AsyncIterator[None]:
        """Keep a scope from being released for the block (it may still be closed or reopen)."""
        self._holds[scope] = self._holds.get(scope, 0) + 1
        try:
            yield
        finally:
            self._holds[scope] -= 1
            if not self._holds[scope]:
                del self._holds[scope]

    @property
    def budget_bytes(self) -> int:
        return int(self.ctx.config.scope_memory_budget_mb * 1024 * 1024)

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
        """The open scopes: their actors are live (spawned and not released)."""
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
            releases=self.releases,
            reopens=self.reopens,
            memory_bytes=sum(stats.memory_bytes for stats in scopes.values()),
            memory_budget_bytes=self.budget_bytes,
            scopes=scopes,
        )
