"""What every stage of the derivation lane works with.

A stage gets a ``StageContext`` (the node context, its scope's tables, the lane's state and
indexer), the events of the batch with their ``EventState``, and a ``StageBatch`` in which it
accumulates its writes and lifecycle records.  ``StageContext.commit`` writes the batch in one
atomic write and publishes its records; the bus hands each event's committed state to whoever
waits on that stage (``wait=indexed|consolidated``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import attrs
import trio

from ...model import Event, EventState, LifecycleEvent, TypedRef, TypedValue
from ...stages import STAGE_NAME, STAGE_TIMING, Stage
from ...storage import Op, Partition
from ...temporal import parse_rfc3339
from ..indexer import Indexer
from ..state import PartitionState


class StageBatch:
    """Writes, lifecycle records and entity references accumulated by one stage, and the states
    of the events it finished (what the bus hands to their waiters).

    ``hold``: the stage is not the last of its group (``stages.LANE_GROUPS``): its commit writes
    nothing and keeps the states it would have written (``held``); the next stage's batch
    ``carries`` it and writes both in one atomic write, each event's state once."""

    def __init__(self, *, hold: bool = False, carries: StageBatch | None = None) -> None:
        self.ops: list[Op] = []
        self.records: list[LifecycleEvent] = []
        self.entity_ids: set[str] = set()  # the entities it resolved: held until the lane lets go
        self.states: dict[str, EventState] = {}
        self.committed = False
        self.now = None  # one timestamp for the stage: its lifecycle records and recorded times
        self.hold = hold
        self.carries = carries
        self.held: dict[str, EventState] = {}

    def chain(self) -> list[StageBatch]:
        """The batches this one writes: those it carries, in stage order, then itself."""
        out = [self]
        while out[0].carries is not None:
            out.insert(0, out[0].carries)
        return out

    review = False  # the scope holds its new derived facts as proposals (``review``)
    rewriting = False  # derivation versions what it changes; a forget rewrites history (``Writes``)

    def stamp(self, clock: Any) -> dt.datetime:
        """The moment this batch records (``recorded_from``/``recorded_to``, lifecycle ``ts``):
        one per commit, so what one commit changes is one version of each record."""
        if self.now is None:
            self.now = clock.now()
        return self.now


@attrs.define
class Assertion:
    """An extracted fact with its terms resolved: what fact resolution works on."""

    subject: TypedRef
    predicate: str
    object: TypedValue
    confidence: float
    single_valued: bool
    polarity: int
    extractor: str
    source: str
    valid_from: dt.datetime
    entity_ids: tuple[str, ...] = ()
    valid_to: dt.datetime | None = None  # a window the content stated (a triple's valid_to)


@attrs.define(eq=False)
class StageContext:
    ctx: Any  # the engine's NodeContext
    scope: str
    tables: Partition
    state: PartitionState
    index: Indexer

    @property
    def config(self):
        return self.ctx.config

    async def read_state(self, event_id: str) -> EventState | None:
        return await self.tables.event_states.get(event_id)

    def state_op(self, event_id: str, state: EventState) -> Op:
        return self.tables.event_states.put_op(event_id, state)

    async def commit(self, batch: StageBatch) -> None:
        """Write the batch atomically (with the entities it refers to and its lifecycle records),
        then publish the records in order; on failure the records are given up."""
        if batch.hold:  # written by the last stage of its group (``StageBatch``)
            return
        ctx = self.ctx
        chain = batch.chain()
        ops = [op for each in chain for op in each.ops]
        records = [record for each in chain for record in each.records]
        entity_ids = set().union(*(each.entity_ids for each in chain))
        if batch.rewriting:
            ops, firsts = await self.tables.rewrite_history(ops)
            self.rewritten(firsts)
        ops = ops + ctx.entities.pending_ops(entity_ids)
        for each in chain:
            each.committed = True
        ops += [ctx.bus.put_op(record) for record in records]
        try:
            await self.tables.write(ops)
        except BaseException:
            ctx.bus.abort(records)
            raise
        self.index.backlog.release()  # the records it held are written: a recall may embed them
        states = {}
        for each in chain:
            states.update(each.states)
        ctx.bus.commit(records, states)
        ctx.entities.mark_persisted(entity_ids)

    def rewritten(self, firsts: dict[str, str]) -> None:
        """The lane's cached records whose history a write rewrote (``Partition.rewrite_history``):
        one version, recorded from their first (what the rows written say)."""
        if not firsts:
            return
        state = self.state
        beliefs = {b.id: b for b in state.beliefs.values() if b is not None and b.id in firsts}
        for record_id, first in firsts.items():
            cached = [state.facts.get(record_id), state.belief_by_id.get(record_id), beliefs.get(record_id)]
            if state.episode is not None and state.episode.id == record_id:
                cached.append(state.episode)
            for record in cached:
                if record is not None:
                    record.recorded_from, record.version = parse_rfc3339(first), 1

    def finish_stage(self, batch: StageBatch, event: Event, state: EventState, stage: Stage,
                     started: float, payload: dict[str, Any] | None) -> None:  # fmt: skip
        """Mark ``stage`` done in the event's state, with its duration, and reserve its lifecycle
        record (none for the internal episode step: ``payload`` None)."""
        state.done.append(STAGE_NAME[stage])
        seconds, name = trio.current_time() - started, STAGE_TIMING[stage]
        state.set_elapsed(name, round(seconds * 1000, 3))
        if self.ctx.stage_observer is not None:
            self.ctx.stage_observer(name, seconds)
        batch.states[event.id] = state
        if payload is not None:
            record = self.ctx.bus.reserve(stage, scope=self.scope, event_id=event.id, payload=payload,
                                          batch_id=event.batch_id, ts=batch.stamp(self.ctx.clock))  # fmt: skip
            state.lce.append(record.lifecycle_id)
            batch.records.append(record)

    def state_ops(self, batch: StageBatch, events: list[Event], states: dict[str, EventState]) -> None:
        """The events' states, written with the batch (with those of the batches it carries: each
        event's once, as the last stage left it); a held batch keeps them for the next."""
        held = {}
        for each in batch.chain()[:-1]:
            held.update(each.held)
        held.update((e.id, states[e.id]) for e in events)
        if batch.hold:
            batch.held = held
        else:
            batch.ops += [self.state_op(event_id, state) for event_id, state in held.items()]
