"""The derivation lane of a ScopeActor: extract → index → consolidate → compress.

The lane is one Trio task, a child of its actor, so slow derivation never blocks the mailbox.
It exclusively owns the scope's derived state (``state.PartitionState``: facts, beliefs,
episodes, the text and vector indexes) and the per-event pipeline state (``X`` rows) once an
event is captured.  It takes events in WAL order, in batches of ``pipeline_batch``, once captures
pause (``derivation_defer``); each group of stages (``stages.LANE_GROUPS``: extract and index,
consolidate and the episode step) writes its results, the events' new state and its lifecycle
records in one atomic batch, then publishes.  An event keeps a ``P`` marker
until its last step, so a restarted lane resumes exactly the unfinished stages.

Besides events the lane takes typed items (``messages.LANE_ITEM_TYPES``), run between batches,
each by its one handler (``Lane.handlers``): cancel, foreign consolidation, derives back-pointers,
flush, rebuild and forget (``stages.forget``).  A cancel of an event in the batch being derived runs before that batch's
next stage.
"""

from __future__ import annotations

import collections
from typing import Any, Protocol

import trio

from ...errors import CortexError
from ..model import Event, EventState
from ..stages import LANE_GROUPS, LANE_STEPS
from ..storage import Partition
from .batches import BatchTracker, announce
from .indexer import Indexer
from .messages import (
    LANE_ITEM_TYPES,
    CancelItem,
    CommitProposalItem,
    DerivedItem,
    FlushItem,
    ForeignItem,
    ForgetItem,
    LaneItem,
    RebuildItem,
    ReplySlot,
    ResegmentItem,
    SynthesizeItem,
)
from .stages import (
    compress,
    consolidate,
    control,
    extract,
    forget_run,
    index,
    segment,
    understanding,
)
from .stages.common import StageBatch, StageContext
from .state import PartitionState

#: the stage each of ``stages.LANE_STEPS`` runs, in order
RUNNERS = (extract.run, index.run, consolidate.run, compress.run)


class Mailbox(Protocol):
    """What the lane asks of its actor's mailbox lane: are captures still arriving?"""

    last_capture: float  # trio time of the latest group commit

    def captures_waiting(self) -> bool: ...


class Lane:
    def __init__(self, ctx: Any, scope: str, tables: Partition, mailbox: Mailbox) -> None:
        self.ctx = ctx
        self.scope = scope
        self.mailbox = mailbox
        self.state = PartitionState.fresh(ctx, tables)
        self.index = Indexer(ctx, self.state)
        self.work = StageContext(ctx, scope, tables, self.state, self.index)
        self.queue: collections.deque[str] = collections.deque()
        self.items: collections.deque[LaneItem] = collections.deque()
        self.batches = BatchTracker()  # bulk batches with events queued: batch_complete at the end
        self.dropped_batches: list[tuple[str, int]] = []
        self._wakeup = trio.Event()
        self.stopping = False
        self.busy = False
        self.deriving = False  # a batch's stages are running: its records are not all committed
        self.processed = 0
        self._flush_waiters: list[ReplySlot] = []
        handlers = {CancelItem: self._cancel, ForeignItem: self._foreign, DerivedItem: self._derived,
                    FlushItem: self._flush, RebuildItem: self._rebuild, ForgetItem: self._forget,
                    SynthesizeItem: self._synthesize, ResegmentItem: self._resegment,
                    CommitProposalItem: self._commit_proposal}  # fmt: skip
        assert set(handlers) == set(LANE_ITEM_TYPES)  # the item set is closed: one handler each
        self.handlers = handlers

    # -- feeding -------------------------------------------------------------------------------
    def enqueue(self, event: Event) -> None:
        if len(self.state.events) < self.ctx.config.pipeline_cache_events:
            self.state.events[event.id] = event  # beyond the cache the event reloads from storage
        self.queue.append(event.id)
        self.batches.queued(event)
        self._wakeup.set()

    def keep_given(self, event_id: str, vector: Any) -> None:
        """A captured event's given vector, for its ``indexed`` stage: kept while the event cache
        has room, else read back from table ``GV`` then."""
        if len(self.state.given) < self.ctx.config.pipeline_cache_events:
            self.state.given[event_id] = vector
        else:
            self.state.given_stored = True

    def submit(self, item: LaneItem) -> None:
        self.items.append(item)
        self._wakeup.set()

    def stop(self) -> None:
        self.stopping = True
        self._wakeup.set()

    @property
    def idle(self) -> bool:
        """Nothing queued, running or owed: no event or item, no flush to answer, no vector
        seal or merge building (a release then loses no work, ``ScopeActor.releasable``)."""
        return (not self.queue and not self.items and not self.busy and not self._flush_waiters
                and not self.index.vector_job_running and not len(self.index.backlog))  # fmt: skip

    def fail_waiting(self, error: CortexError) -> None:
        """Fail every reply the lane still owes (its actor crashed)."""
        for reply in self._flush_waiters:
            reply.fail(error)
        for item in self.items:
            reply = getattr(item, "reply", None)
            if reply is not None:
                reply.fail(error)

    # -- the lane ------------------------------------------------------------------------------
    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as background:
            await self._restore()
            self.index.background = background
            task_status.started()
            if self.state.vector_index.needs_merge or self.state.text_index.needs_merge:
                self.index.start_vector_job()
            await self._loop()
            await self.index.drain()  # a graceful stop leaves no record without its vector
            background.cancel_scope.cancel()

    async def _loop(self) -> None:
        while not self.stopping:
            if not self.queue and not self.items and len(self.index.backlog):
                await self._drain_backlog()
                continue
            if not self.queue and not self.items:
                self._answer_flushes()
                self._wakeup = trio.Event()
                with trio.move_on_after(self.ctx.config.episode_idle_check):
                    await self._wakeup.wait()
                if not self.queue and not self.items and not self.stopping:
                    self.busy = True  # a release waits for the seal's write
                    try:
                        await compress.seal_if_idle(self.work)
                    finally:
                        self.busy = False
                continue
            self.busy = True
            try:
                await self._run_items()
                if self.queue and not self.stopping:
                    await self._defer_to_captures()
                    await self._run_items()  # e.g. a cancel sent meanwhile
                    batch = self._next_batch()
                    if batch:
                        await self._process(batch)
            finally:
                self.busy = False
            await trio.lowlevel.checkpoint()

    async def _drain_backlog(self) -> None:
        """Idle time: embed the derived records' backlog once nothing arrived for
        ``derived_vectors_quiet`` seconds, or at once when a flush waits (vector_backlog.py)."""
        if not self._flush_waiters:
            self._wakeup = trio.Event()
            with trio.move_on_after(self.ctx.config.derived_vectors_quiet):
                await self._wakeup.wait()
            if self.queue or self.items or self.stopping:
                return
        self.busy = True
        try:
            await self.index.drain()
        finally:
            self.busy = False

    async def _run_items(self) -> None:
        while self.items and not self.stopping:
            await self.handle(self.items.popleft())

    def _next_batch(self) -> list[str]:
        size = self.ctx.config.pipeline_batch
        return [self.queue.popleft() for _ in range(min(size, len(self.queue)))]

    async def _defer_to_captures(self) -> None:
        """Capture latency must not depend on derivation (DESIGN §3): while captures keep
        arriving, derivation waits until they pause for ``derivation_defer`` seconds — unless
        ``derivation_backlog_soft`` events are already queued, in which case it runs anyway."""
        config = self.ctx.config
        window = config.derivation_defer
        while len(self.queue) < config.derivation_backlog_soft and not self.stopping:
            quiet_for = trio.current_time() - self.mailbox.last_capture
            if quiet_for >= window and not self.mailbox.captures_waiting():
                return
            await trio.sleep(max(window - quiet_for, window / 4))

    def _answer_flushes(self) -> None:
        waiters, self._flush_waiters = self._flush_waiters, []
        for reply in waiters:
            reply.set(True)

    async def _restore(self) -> None:
        """Rebuild the indexes and requeue unfinished events and foreign work after a (re)start."""
        tables = self.work.tables
        pending = [event_id async for event_id in tables.pending.ids()]
        await index.restore(self.work, set(pending))
        for event_id in pending:
            event = await tables.events.get(event_id)
            if event is not None:
                self.enqueue(event)
        async for event_id in tables.foreign_work.ids():
            self.submit(ForeignItem(event_id))

    # -- one batch -----------------------------------------------------------------------------
    async def _process(self, batch_ids: list[str]) -> None:
        events: list[Event] = []
        states: dict[str, EventState] = {}
        for event_id in batch_ids:
            event = self.state.events.pop(event_id, None)
            if event is None:
                event = await self.work.tables.events.get(event_id)
            state = await self.work.read_state(event_id)
            if event is None or state is None:
                continue
            events.append(event)
            states[event_id] = state
        work = [e for e in events if not states[e.id].cancelled]
        self.deriving = True
        try:
            await self._stages(work, states)
        finally:
            self.deriving = False
        self.processed += len(events)
        self.state.trim_caches(self.ctx.config.derived_cache_records)
        await announce(self.work, self.batches.finished(batch_ids))

    async def _stages(self, work: list[Event], states: dict[str, EventState]) -> None:
        runners = dict(zip(LANE_STEPS, RUNNERS, strict=True))
        for group in LANE_GROUPS:
            await self._group([(stage, runners[stage]) for stage in group], work, states)

    async def _group(self, steps: list, work: list[Event], states: dict[str, EventState]) -> None:
        """Run a group of steps (``stages.LANE_GROUPS``), written in one atomic write: each
        step but the last holds its batch, which the next step's carries.  A cancel of one of the
        batch's events that arrived meanwhile has what is held written first, then runs (before
        the next step, as between groups)."""
        batches: list[StageBatch] = []
        held = None
        try:
            for position, (stage, runner) in enumerate(steps):
                if self._cancel_waiting(states):
                    await self._write_held(held, states)
                    held = None
                    await self._cancels_first(states)
                todo = [e for e in work if stage not in states[e.id].done and not states[e.id].cancelled]
                if todo:
                    batch = StageBatch(hold=position < len(steps) - 1, carries=held)
                    batches.append(batch)
                    await runner(self.work, todo, states, trio.current_time(), batch)
                    held = batch if batch.hold else None
            await self._write_held(held, states)  # the group's last step had nothing to do
        except BaseException:
            for batch in batches:
                self.ctx.bus.abort(batch.records)  # never leave the bus waiting on us
            raise
        finally:
            for batch in batches:
                self.ctx.entities.let_go(batch.entity_ids)  # committed (or given up)

    async def _write_held(self, held: StageBatch | None, states: dict[str, EventState]) -> None:
        """Write what the group's steps so far hold (``StageBatch.hold``), if anything."""
        if held is not None:
            last = StageBatch(carries=held)
            self.work.state_ops(last, [], states)
            await self.work.commit(last)

    def _cancel_waiting(self, states: dict[str, EventState]) -> bool:
        return any(isinstance(i, CancelItem) and i.event_id in states for i in self.items)

    async def _cancels_first(self, states: dict[str, EventState]) -> None:
        """A cancel of an event in the batch being derived runs before the batch's next stage
        (the stages await the store and worker threads, so one may arrive meanwhile)."""
        for item in [i for i in self.items if isinstance(i, CancelItem) and i.event_id in states]:
            self.items.remove(item)
            await self.handle(item)
            states[item.event_id] = await self.work.read_state(item.event_id) or states[item.event_id]

    async def _drain_queue(self) -> None:
        while self.queue and not self.stopping:
            await self._process(self._next_batch())

    # -- items ---------------------------------------------------------------------------------
    async def handle(self, item: LaneItem) -> None:
        """Run an item by its handler; a failure is its reply when it has one."""
        try:
            await self.handlers[type(item)](item)
            if not self.deriving:  # a cancel between a batch's stages: the batch's end trims
                self.state.trim_caches(self.ctx.config.derived_cache_records)
        except Exception as exc:
            reply = getattr(item, "reply", None)
            if reply is None:
                raise
            reply.fail(exc)

    async def _cancel(self, item: CancelItem) -> None:
        self.state.events.pop(item.event_id, None)
        try:
            self.queue.remove(item.event_id)  # its queued stages are dropped
        except ValueError:
            pass
        item.reply.set(await control.cancel(self.work, item.event_id))

    async def _foreign(self, item: ForeignItem) -> None:
        await control.foreign(self.work, item.event_id)

    async def _derived(self, item: DerivedItem) -> None:
        await control.derived(self.work, item.event_id, item.derives)

    async def _flush(self, item: FlushItem) -> None:
        """Answered once the lane is idle; with ``seal`` the open episode is sealed after every
        queued event has been through the pipeline."""
        if item.seal:
            await self._drain_queue()
            await compress.seal_open_episode(self.work)
        self._flush_waiters.append(item.reply)

    async def _forget(self, item: ForgetItem) -> None:
        """Deletion work (``stages.forget``), once every queued event is derived: what a forget
        selects and suppresses is then all the evidence captured before it."""
        await self._drain_queue()
        item.reply.set(await forget_run.run(self.work, item.work, self.unqueue, self.enqueue))
        finished, self.dropped_batches = self.dropped_batches, []
        await announce(self.work, finished)

    async def _synthesize(self, item: SynthesizeItem) -> None:
        """Re-synthesis and scoring (``stages.understanding``), once every queued event is derived."""
        await self._drain_queue()
        message = item.message
        message.reply.set(await understanding.resynthesize(self.work, message.tenant, message.topics, message.force))

    def unqueue(self, event_ids) -> None:
        """Drop events from the queue and the cache (they are being deleted)."""
        gone = set(event_ids)
        self.queue = collections.deque(e for e in self.queue if e not in gone)
        self.dropped_batches += self.batches.finished(gone)  # announced once the forget is done
        for event_id in gone:
            self.state.events.pop(event_id, None)

    def _clear_queue(self) -> None:
        self.queue.clear()
        self.batches.clear()

    async def _commit_proposal(self, item: CommitProposalItem) -> None:
        message = item.message
        message.reply.set(await control.commit_proposal(self.work, message.proposal, message.approver))

    async def _resegment(self, item: ResegmentItem) -> None:
        """Window this scope's events into episodes again, once every queued event is derived."""
        await self._drain_queue()
        item.reply.set(await segment.resegment(self.work, item.progress))

    async def _rebuild(self, item: RebuildItem) -> None:
        """Replay this scope's events into fresh derived layers."""
        self.index.backlog.clear()  # its records are derived afresh
        await control.rebuild(self.work, self._clear_queue, self.enqueue)
        await self._drain_queue()
        await compress.seal_open_episode(self.work)
        item.reply.set(True)
