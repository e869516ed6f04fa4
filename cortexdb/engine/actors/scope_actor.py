"""ScopeActor: the one owner of a scope partition's keys (DESIGN §3).

Two sequential lanes share nothing mutable:
- the *mailbox lane* (this module) takes messages in order.  Captures are group-committed:
  every capture already waiting in the mailbox joins one atomic write (``sync`` if any asks for
  it), so throughput grows with load while each capture still waits for its own durability;
- the *derivation lane* (``lane.Lane``) owns derived state and per-event pipeline state.
Reads run as child tasks against the store, so a large scan never blocks the mailbox.  Every
other message type has its one handler (``ScopeActor.handlers``).
"""

from __future__ import annotations

import logging
from typing import Any

import attrs
import trio

from ...errors import CortexError, Internal, NotFound, WalUnavailable
from ..envelope import blob_ids_of
from ..model import Event, EventState, Scope
from ..stages import STAGE_NAME, Stage
from ..storage import Op
from ..temporal import format_ts
from . import queries
from .episode_cache import DecodedEpisodes
from .lane import Lane
from .messages import (
    MESSAGE_TYPES,
    QUERY_TYPES,
    CancelEvent,
    CancelItem,
    Capture,
    CommitProposal,
    CommitProposalItem,
    DerivedItem,
    EditScope,
    Flush,
    FlushItem,
    ForeignConsolidate,
    ForeignDerived,
    ForeignItem,
    Forget,
    ForgetItem,
    Ping,
    Query,
    Rebuild,
    RebuildItem,
    ReplySlot,
    Resegment,
    ResegmentItem,
    ScopeRecords,
    Stop,
    Synthesize,
    SynthesizeItem,
    fail_message,
)
from .releasing import Releasable
from .waiters import StageWaiter

CAPTURED = STAGE_NAME[Stage.CAPTURED]

log = logging.getLogger("cortexdb.actor")


@attrs.frozen
class Captured:
    """What a capture returns to the engine for one item."""

    event: Event
    waiters: dict[str, StageWaiter]  # stage -> what hands the event's state once it committed


class ScopeActor(Releasable):
    def __init__(self, ctx, scope: str, receive: trio.MemoryReceiveChannel) -> None:
        self.ctx = ctx
        self.scope = scope
        self.tables = ctx.tables.partition(scope)  # the partition this actor owns
        self._receive = receive
        self.lane = Lane(ctx, scope, self.tables, self)
        self.inflight: set[ReplySlot] = set()
        self._scope_known = False
        self._reads = 0
        self.handled = 0
        self.released = False  # stopped by a release (``release_if_idle``), not a shutdown or a crash
        # True until the lane has restored its indexes: no message is taken from the mailbox before
        # (a recall that times out meanwhile says so, recall/coordinator.py)
        self.restoring = True
        self.nursery: trio.Nursery | None = None
        self.last_capture = -1e9  # trio time of the latest group commit
        # recall: decoded episodes, reused while their stored bytes are unchanged (candidates.py)
        self.episode_cache = DecodedEpisodes(most_bytes=ctx.config.episode_cache_bytes)
        # and open episodes' member rows, read again only past what was read (storage/episode_rows.py)
        self.tables.episodes.keep_rows(ctx.config.episode_rows_cached)
        # Capture is group-committed by the mailbox loop and Stop ends it; every other message has
        # its one handler (bound per actor, so a test may patch a handler on the class)
        self.handlers = {
            Ping: self._ping, Flush: self._flush, Rebuild: self._rebuild, CancelEvent: self._cancel,
            ForeignConsolidate: self._foreign, EditScope: self._edit_scope, ForeignDerived: self._derived,
            Forget: self._forget, Synthesize: self._synthesize, Resegment: self._resegment,
            ScopeRecords: self._records, CommitProposal: self._commit_proposal,
            **{query: self._query for query in QUERY_TYPES},  # served by queries.HANDLERS
        }  # fmt: skip
        assert set(self.handlers) | {Capture, Stop} == set(MESSAGE_TYPES)

    # -- lifetime ------------------------------------------------------------------------------
    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            await nursery.start(self.lane.run)
            self.restoring = False
            try:
                await self._mailbox()
            finally:
                self.lane.stop()

    def fail_inflight(self, error: CortexError) -> None:
        for reply in list(self.inflight):
            reply.fail(error)
        self.inflight.clear()
        self.lane.fail_waiting(error)

    def captures_waiting(self) -> bool:
        """True while the mailbox lane has work: messages queued or in hand.  A message sent
        to a lane parked in ``receive`` is handed over directly (never buffered), so "not
        parked" counts as busy too."""
        channel = self._receive.statistics()
        return (
            channel.current_buffer_used > 0
            or channel.tasks_waiting_send > 0
            or channel.tasks_waiting_receive == 0
        )

    async def _mailbox(self) -> None:
        config = self.ctx.config
        while True:
            try:
                message = self._receive.receive_nowait()
                await trio.lowlevel.checkpoint()
            except trio.WouldBlock:
                message = await self._receive.receive()
            batch = [message]
            while len(batch) < config.capture_group:
                try:
                    batch.append(self._receive.receive_nowait())
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
            # every request taken from the mailbox is ours to answer, even if we crash
            for taken in batch:
                reply = getattr(taken, "reply", None)
                if reply is not None:
                    self.inflight.add(reply)
            index = 0
            while index < len(batch):
                message = batch[index]
                if isinstance(message, Capture):
                    group = [message]
                    index += 1
                    while index < len(batch) and isinstance(batch[index], Capture):
                        group.append(batch[index])
                        index += 1
                    await self._capture(group)
                    continue
                index += 1
                if isinstance(message, Stop) and message.reply is not None:
                    if self.release_if_idle(message, batch[index:]):
                        return
                    continue
                if isinstance(message, Stop):
                    for rest in batch[index:]:
                        fail_message(rest, Internal("the engine is shutting down", retriable=True))
                    return
                await self.handlers[type(message)](message)
            self.handled += len(batch)
            self.inflight = {reply for reply in self.inflight if not reply.answered}

    async def _query(self, message: Query) -> None:
        self._reads += 1
        self.inflight.add(message.reply)
        self.nursery.start_soon(self._serve_query, message)

    async def _flush(self, message: Flush) -> None:
        self.lane.submit(FlushItem(message.seal, message.reply))

    async def _rebuild(self, message: Rebuild) -> None:
        self.clear_rows()
        self.lane.submit(RebuildItem(message.reply))

    async def _resegment(self, message: Resegment) -> None:
        self.episode_cache.clear()  # recall's decoded episodes: the episodes are replaced
        self.clear_rows()
        self.lane.submit(ResegmentItem(message.progress, message.reply))

    async def _derived(self, message: ForeignDerived) -> None:
        self.lane.submit(DerivedItem(message.event_id, tuple(message.derives)))

    async def _forget(self, message: Forget) -> None:
        self.episode_cache.clear()  # recall's decoded episodes: none may outlive a forget
        self.clear_rows()
        self.lane.submit(ForgetItem(message.work, message.reply))

    async def _synthesize(self, message: Synthesize) -> None:
        self.lane.submit(SynthesizeItem(message))

    async def _commit_proposal(self, message: CommitProposal) -> None:
        self.lane.submit(CommitProposalItem(message))

    async def _ping(self, message: Ping) -> None:
        message.reply.set({"scope": self.scope, "handled": self.handled})

    # -- capture -------------------------------------------------------------------------------
    async def _capture(self, group: list[Capture]) -> None:
        """Every capture of the group in one atomic write; each answered once it is durable."""
        ctx = self.ctx
        self.last_capture = trio.current_time()
        now = ctx.clock.now()
        recorded_at = format_ts(now)
        ops: list[Op] = []
        records: list = []
        reservations: list = []
        answers: list[tuple[Capture, list[Captured]]] = []
        try:
            await ctx.wal.ensure(sum(len(message.items) for message in group))  # several nodes: a block
        except CortexError as exc:
            held = [item.idempotency for message in group for item in message.items if item.idempotency is not None]
            self._capture_failed(group, [], held, exc)
            return
        for message in group:
            self.inflight.add(message.reply)
            captured = [self._event_of(item, now, recorded_at, ops, records, reservations)
                        for item in message.items]
            answers.append((message, captured))
        ops.extend(await self._scope_ops(group, now))  # usually empty: see _scope_ops
        try:
            await self.tables.write(ops, sync=any(message.sync for message in group))
        except BaseException as exc:
            self._capture_failed(group, records, reservations, exc)
            if not isinstance(exc, CortexError):
                raise  # cancellation, or a bug: the supervisor restarts the actor
            return
        ctx.bus.commit(records)
        for reservation in reservations:
            ctx.idempotency.complete(reservation)
        for message, captured in answers:
            for item in captured:
                self.lane.enqueue(item.event)
            message.reply.set(captured)
            self.inflight.discard(message.reply)
        self.last_capture = trio.current_time()

    def _event_of(self, item, now, recorded_at: str, ops: list[Op], records: list,
                  reservations: list) -> Captured:  # fmt: skip
        """One captured item: its event, WAL entry, state, pending marker, ``captured`` record
        and idempotency record (added to ``ops``), and the waiters its writer asked for."""
        ctx, tables = self.ctx, self.tables
        envelope, identities = item.envelope, item.identities
        event_id = ctx.ids.new("evt")
        offset = ctx.wal.next()
        context = dict(envelope.context)
        context["recorded_at"] = recorded_at
        event = Event(
            id=event_id, scope=self.scope, tenant_id=item.tenant_id, caller=identities.caller,
            actor=identities.observed_actor["id"], observed_actor=identities.observed_actor,
            subject=identities.subject, modality=envelope.modality, content=envelope.content,
            context=context, directives=envelope.directives, wal_offset=offset,
            idempotency_key=envelope.idempotency_key, batch_id=item.batch_id,
        )  # fmt: skip
        record = ctx.bus.reserve(
            Stage.CAPTURED, scope=self.scope, event_id=event_id, batch_id=item.batch_id, ts=now,
            payload={"event_id": event_id, "actor": event.actor, "modality": event.modality,
                     "wal_offset": offset},
        )  # fmt: skip
        records.append(record)
        state = EventState(scope=self.scope, done=[CAPTURED], lce=[record.lifecycle_id],
                           batch_id=item.batch_id)  # fmt: skip
        ops.append(tables.events.put_op(event_id, event))
        ops.append(ctx.tables.wal.put_op(offset, self.scope, event_id))
        ops.append(tables.event_states.put_op(event_id, state))
        ops.append(tables.pending.put_op(event_id, True))
        if envelope.vector is not None:  # primary, like the event: rebuild and re-embed keep it
            ops.append(tables.given_vectors.put_op(event_id, envelope.vector))  # as given: float32, lossless
            self.lane.keep_given(event_id, envelope.vector)
        ops.extend(ctx.tables.blob_reference_ops(event_id, self.scope, [b for _, b in blob_ids_of(event.content)]))
        ops.append(ctx.bus.put_op(record))
        if item.idempotency is not None:
            reservations.append(item.idempotency)
            ops.append(ctx.idempotency.record_op(item.idempotency, {
                "event_id": event_id, "wal_offset": offset, "scope": self.scope,
                "batch_id": item.batch_id}, now))  # fmt: skip
        waiters = {stage: ctx.bus.stage_waiter(event_id, stage) for stage in item.wait_for}
        return Captured(event, waiters)

    def _capture_failed(self, group: list[Capture], records: list, reservations: list,
                        exc: BaseException) -> None:  # fmt: skip
        """The group's write failed: give up its records and idempotency keys, fail each capture."""
        self.ctx.bus.abort(records)
        for reservation in reservations:
            self.ctx.idempotency.abort(reservation)
        error = exc if isinstance(exc, CortexError) else WalUnavailable(f"the WAL write failed: {exc!r}")
        for message in group:
            message.reply.fail(error)
            self.inflight.discard(message.reply)

    async def _scope_ops(self, group: list[Capture], now) -> list[Op]:
        """Auto-register the scope on its first write (writer = owner); track ``last_write_at``."""
        scopes = self.ctx.tables.scopes
        if not self._scope_known:
            record = await scopes.get(self.scope)
            if record is None:
                first = group[0].items[0]
                self._scope_record = Scope(
                    path=self.scope, tenant_id=first.tenant_id,
                    members=[{"actor": first.identities.caller, "role": "owner"}],
                    auto_provisioned=True, registered_at=now, created_by=first.identities.caller,
                )  # fmt: skip
            else:
                self._scope_record = record
            self._scope_known = True
        last = self._scope_record.last_write_at
        if last is not None and (now - last).total_seconds() < 1.0:
            return []  # last_write_at is kept to the second (it feeds prune, measured in days)
        self._scope_record.last_write_at = now
        return [scopes.put_op(self.scope, self._scope_record)]

    # -- other requests ------------------------------------------------------------------------
    async def _serve_query(self, message: Query) -> None:
        try:
            result = await queries.serve(self, message)
        except CortexError as exc:
            message.reply.fail(exc)
        except Exception as exc:
            log.exception("read %s in %s failed", type(message).__name__, self.scope)
            message.reply.fail(Internal(f"the read failed: {exc!r}"))
        else:
            message.reply.set(result)
        finally:
            self._reads -= 1
            self.inflight.discard(message.reply)

    async def _cancel(self, message: CancelEvent) -> None:
        if not await self.tables.events.exists(message.event_id):
            message.reply.fail(NotFound(f"no event {message.event_id} in scope {self.scope}",
                                        details={"event_id": message.event_id}))  # fmt: skip
            return
        self.lane.submit(CancelItem(message.event_id, message.reply))

    async def _edit_scope(self, message: EditScope) -> None:
        scopes = self.ctx.tables.scopes
        current = await scopes.get(self.scope)
        try:
            updated = message.edit(current)
        except CortexError as exc:
            message.reply.fail(exc)
            return
        if updated is None:
            if current is not None:
                await scopes.delete(self.scope, sync=True)
            self._scope_known, self._scope_record = False, None
        else:
            await scopes.put(self.scope, updated, sync=True)
            self._scope_known, self._scope_record = True, updated
        self.lane.state.segmentation = None  # its segment strategy is read again
        message.reply.set(updated)

    async def _records(self, message: ScopeRecords) -> None:
        try:
            message.reply.set(await message.work(self.tables))
        except CortexError as exc:
            message.reply.fail(exc)

    async def _foreign(self, message: ForeignConsolidate) -> None:
        """Accept consolidation work from another scope: persist it, queue it, acknowledge."""
        payload = {**message.payload, "source_scope": message.source_scope}
        await self.tables.foreign_work.put(message.event_id, payload)
        self.lane.submit(ForeignItem(message.event_id))
        message.reply.set(True)

    def statistics(self) -> dict[str, Any]:
        channel = self._receive.statistics()
        return {
            "scope": self.scope,
            "mailbox_used": channel.current_buffer_used,
            "mailbox_capacity": channel.max_buffer_size,
            "senders_waiting": channel.tasks_waiting_send,
            "pipeline_queue": len(self.lane.queue),
            "processed": self.lane.processed,
            "memory_bytes": self.estimated_bytes(),
        }
