"""The node-wide lifecycle bus (DESIGN §3, reference §8.9, §10.4, §13).

- ids: ``lce_`` UUID v7, reserved when a stage builds its batch and *published in id order*:
  a record becomes visible only after every earlier reserved id is published or aborted, so a
  subscriber that resumes ``since_lifecycle_id`` never skips one that was still in flight;
- persistence: the stage that emits a record writes it in the same atomic batch as its results
  (``put_op``); the bus keeps a replay window of ``window`` seconds by arrival time;
- fan-out: each subscription has a bounded buffer; publishing never waits.  A subscriber whose
  buffer overflows receives ``lagging`` and is closed — the pipeline never stalls for it;
- waiters: ``stage_waiter(event_id, stage)`` for the ``wait=`` modes.  The stage that commits a
  waited-for record hands the event's committed ``EventState`` with it (``commit(records,
  states)``); the waiter delivers a snapshot of it, so a ``wait=`` write reads nothing back.
"""

from __future__ import annotations

import collections
import copy
import datetime as dt
import math
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import trio

from ..model import EventState, LifecycleEvent
from ..stages import STAGE_SEQ
from ..storage import Op, Table
from ..temporal import parse_rfc3339
from .waiters import StageWaiter, waiter_key

DEFAULT_BUFFER = 10_000


@attrs.frozen
class LifecycleFilter:
    scope: str | None = None  # the scope and everything below it
    event_id: str | None = None
    batch_id: str | None = None
    job_id: str | None = None
    events: frozenset[str] | None = None  # stage / event-type names

    def matches(self, record: LifecycleEvent) -> bool:
        if (
            self.events is not None
            and record.stage not in self.events
            and record.stage != "lagging"
        ):
            return False
        if self.event_id is not None and record.event_id != self.event_id:
            return False
        if self.batch_id is not None and record.batch_id != self.batch_id:
            return False
        if self.job_id is not None and record.job_id != self.job_id:
            return False
        if self.scope is not None:
            scope = record.scope or ""
            if not (scope == self.scope or scope.startswith(self.scope + "/")):
                return False
        return True


class Subscription:
    """An async iterator of lifecycle records; closed after ``lagging`` or ``close()``.

    A feed that serves many subscribers reads in batches instead: ``await wait(...)`` (one cancel
    scope, no extra task: it also ends when the ``until`` event is set or the timeout passes),
    then ``take()`` everything buffered."""

    def __init__(self, bus: LifecycleBus, filter_: LifecycleFilter, capacity: int) -> None:
        self._bus = bus
        self.filter = filter_
        self._capacity = capacity
        self._buffer: collections.deque[LifecycleEvent] = collections.deque()
        self._wakeup: trio.Event | None = None  # what ``__anext__`` sleeps on
        self._waiting: trio.CancelScope | None = None  # the scope ``wait`` sleeps in
        self.closed = False
        self.lagged = False
        self.last_id: str | None = None
        # several nodes: records other nodes committed interleave by id with this node's, so only
        # this node's own records are checked against the last one taken (a replay's overlap)
        self._last_local: str | None = None
        self._remote: set[str] = set()  # buffered records of other nodes

    def _offer(self, record: LifecycleEvent, remote: bool = False) -> None:
        if self.closed or self.lagged:
            return
        if not remote and self._last_local is not None and record.lifecycle_id <= self._last_local:
            return
        if remote:
            self._remote.add(record.lifecycle_id)
        if len(self._buffer) >= self._capacity:
            behind = len(self._buffer)
            self._buffer.clear()
            self.lagged = True
            self._buffer.append(self._bus.lagging_record(behind, self.filter.scope, self.last_id))
            self._bus._unsubscribe(self)
        else:
            self._buffer.append(record)
        if self._wakeup is not None or self._waiting is not None:  # (the fan-out's hot path: 2 tests)
            self._wake()

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()
            self._wakeup = None
        if self._waiting is not None:
            self._waiting.cancel()
            self._waiting = None

    def __aiter__(self):
        return self

    async def __anext__(self) -> LifecycleEvent:
        while not self._buffer:
            if self.closed or self.lagged:
                raise StopAsyncIteration
            self._wakeup = trio.Event()
            await self._wakeup.wait()
        record = self._buffer.popleft()
        self._took(record)
        return record

    def _took(self, record: LifecycleEvent) -> None:
        if record.stage != "lagging":
            self.last_id = record.lifecycle_id
            if self._remote and record.lifecycle_id in self._remote:
                self._remote.discard(record.lifecycle_id)
            else:
                self._last_local = record.lifecycle_id

    def receive_nowait(self) -> LifecycleEvent | None:
        if not self._buffer:
            return None
        record = self._buffer.popleft()
        self._took(record)
        return record

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    @property
    def ended(self) -> bool:
        """Closed (or lagged) and nothing left to take."""
        return (self.closed or self.lagged) and not self._buffer

    async def wait(self, until: trio.Event | None = None, timeout: float = math.inf) -> None:
        """Return once a record is buffered, the subscription ends, ``until`` is set, or
        ``timeout`` seconds pass, whichever comes first."""
        if self._buffer or self.closed or self.lagged or (until is not None and until.is_set()):
            await trio.lowlevel.checkpoint()
            return
        with trio.CancelScope(deadline=trio.current_time() + timeout) as scope:
            self._waiting = scope  # ``_offer`` and ``close`` cancel it
            try:
                if until is None:
                    await trio.sleep_forever()
                else:
                    await until.wait()
            finally:
                self._waiting = None

    def take(self, limit: int | None = None) -> list[LifecycleEvent]:
        """The buffered records in order (at most ``limit``), without waiting."""
        buffer = self._buffer
        count = len(buffer) if limit is None else min(limit, len(buffer))
        records = [buffer.popleft() for _ in range(count)]
        if self._remote:
            for record in records:
                self._took(record)
        elif records:  # this node's records only: the last one taken is what counts (a batch's cost)
            self._took(records[-1] if records[-1].stage != "lagging" or len(records) == 1 else records[-2])
        return records

    def close(self) -> None:
        self.closed = True
        self._bus._unsubscribe(self)
        self._wake()

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class LifecycleBus:
    def __init__(self, table: Table[LifecycleEvent], ids, clock, *,
                 window_seconds: float = 3600.0) -> None:  # fmt: skip
        self.table = table  # the persisted records (storage: NodeTables.lifecycle)
        self._ids = ids
        self._clock = clock
        self.window = dt.timedelta(seconds=window_seconds)
        self._reserved: dict[str, LifecycleEvent | None] = {}  # id -> record (None = aborted)
        self._ready: set[str] = set()
        self._order: collections.deque[str] = collections.deque()
        self._subscribers: set[Subscription] = set()
        # a snapshot of _subscribers for publishing, grouped by filter: a record is matched once per
        # distinct filter, not once per subscriber (the soak's 50 streams have 7 filters)
        self._fanout: tuple[tuple[LifecycleFilter, tuple[Subscription, ...]], ...] = ()
        self._waiters: dict[tuple[str, str], StageWaiter] = {}
        self._handed: dict[str, EventState] = {}  # lce id -> the state its waiter is handed
        self.published_upto: str | None = None
        self.published_count = 0

    # -- emission ------------------------------------------------------------------------------
    def reserve(self, stage: str, *, scope: str | None, event_id: str | None = None,
                payload: dict[str, Any] | None = None, batch_id: str | None = None,
                job_id: str | None = None, seq: int | None = None, ts=None) -> LifecycleEvent:  # fmt: skip
        record = LifecycleEvent(
            lifecycle_id=self._ids.new("lce"),
            stage=str(stage),  # a plain string, also when given a stages.Stage
            ts=ts or self._clock.now(),
            scope=scope,
            event_id=event_id,
            seq=STAGE_SEQ.get(stage) if seq is None and event_id else seq,
            batch_id=batch_id,
            job_id=job_id,
            payload=payload or {},
        )
        self._reserved[record.lifecycle_id] = record
        self._order.append(record.lifecycle_id)
        return record

    def put_op(self, record: LifecycleEvent) -> Op:
        return self.table.put_op(record.lifecycle_id, record)

    def commit(self, records: Iterable[LifecycleEvent],
               states: Mapping[str, EventState] | None = None) -> None:  # fmt: skip
        """The records are stored: publish them in id order.  ``states`` (event id -> its state as
        the stage committed it) are handed to the records' waiters, as a snapshot taken now."""
        for record in records:
            self._ready.add(record.lifecycle_id)
            if self._waiters and states and record.event_id in states and waiter_key(record) in self._waiters:
                self._handed[record.lifecycle_id] = copy.deepcopy(states[record.event_id])
        self._drain()

    def abort(self, records: Iterable[LifecycleEvent]) -> None:
        for record in records:
            if record.lifecycle_id in self._reserved:
                self._reserved[record.lifecycle_id] = None
                self._ready.add(record.lifecycle_id)
                self._handed.pop(record.lifecycle_id, None)
        self._drain()

    def _drain(self) -> None:
        while self._order and self._order[0] in self._ready:
            lce_id = self._order.popleft()
            self._ready.discard(lce_id)
            record = self._reserved.pop(lce_id)
            if record is not None:
                self._publish(record)

    def publish_remote(self, record: LifecycleEvent) -> None:
        """A record another node committed (several nodes on one store: engine/storage/
        placement.py hears of it): this node's subscribers receive it too."""
        self._publish(record, remote=True)

    def _publish(self, record: LifecycleEvent, remote: bool = False) -> None:
        if self.published_upto is None or record.lifecycle_id > self.published_upto:  # (remote ids interleave)
            self.published_upto = record.lifecycle_id
        self.published_count += 1
        for filter_, subscribers in self._fanout:  # a snapshot: _offer may unsubscribe a lagging one
            if filter_.matches(record):
                for subscriber in subscribers:
                    subscriber._offer(record, remote)
        if record.event_id is not None and (self._waiters or self._handed):  # bulk ingest: neither
            handed = self._handed.pop(record.lifecycle_id, None)
            waiter = self._waiters.pop(waiter_key(record), None)
            if waiter is not None:
                waiter.set(handed)

    def lagging_record(self, behind: int, scope: str | None, resume_from: str | None) -> LifecycleEvent:
        """``resume_from``: the last record the subscriber was given; resuming after it loses
        nothing (the newest published id would skip the ``behind`` records it never got)."""
        return LifecycleEvent(
            lifecycle_id=self._ids.new("lce"),
            stage="lagging",
            ts=self._clock.now(),
            scope=scope,
            payload={"behind_by": behind, "resume_from": resume_from},
        )

    # -- waiting -------------------------------------------------------------------------------
    def stage_waiter(self, event_id: str, stage: str) -> StageWaiter:
        key = (event_id, stage)
        waiter = self._waiters.get(key)
        if waiter is None:
            waiter = self._waiters[key] = StageWaiter()
        return waiter

    def forget_waiter(self, event_id: str, stage: str) -> None:
        """Drop a waiter nobody waits on (the stage had happened already): waiters for stages
        that will never be published again would otherwise stay for the life of the process."""
        waiter = self._waiters.get((event_id, stage))
        if waiter is not None and not waiter.waiting:
            del self._waiters[(event_id, stage)]

    def release_event(self, event_id: str, state: EventState | None = None) -> None:
        """Wake every waiter of one event (it was cancelled), handing each its final state."""
        for key in [k for k in self._waiters if k[0] == event_id]:
            self._waiters.pop(key).set(copy.deepcopy(state))

    # -- subscribing ---------------------------------------------------------------------------
    async def subscribe(self, filter_: LifecycleFilter | None = None, *, since_lifecycle_id: str | None = None,
                        capacity: int = DEFAULT_BUFFER) -> Subscription:  # fmt: skip
        """Subscribe to live records; with ``since_lifecycle_id``, replay what followed it first."""
        subscription = Subscription(self, filter_ or LifecycleFilter(), capacity)
        watermark = self.published_upto
        self._subscribers.add(subscription)
        self._refan()
        if (
            since_lifecycle_id is not None
            and watermark is not None
            and since_lifecycle_id < watermark
        ):
            replay = await self.history(
                subscription.filter, after=since_lifecycle_id, upto=watermark
            )
            live, remote = list(subscription._buffer), subscription._remote
            # the replay is owed in full; the live backlog keeps its own head-room on top of it;
            # what it replays is in id order, not in this node's publication order (other nodes')
            subscription._capacity = capacity + len(replay)
            subscription._buffer = collections.deque(replay)
            subscription._remote = {record.lifecycle_id for record in replay}
            for record in live:
                subscription._offer(record, record.lifecycle_id in remote)
        return subscription

    def _unsubscribe(self, subscription: Subscription) -> None:
        if subscription in self._subscribers:
            self._subscribers.discard(subscription)
            self._refan()

    def _refan(self) -> None:
        groups: dict[Any, list[Subscription]] = {}
        for subscription in self._subscribers:
            key: Any = subscription.filter
            try:
                hash(key)
            except TypeError:  # a field an embedding caller gave as a list: a group of its own
                key = id(subscription)
            groups.setdefault(key, []).append(subscription)
        self._fanout = tuple((members[0].filter, tuple(members)) for members in groups.values())

    async def history(self, filter_: LifecycleFilter, *, after: str | None = None, upto: str | None = None,
                      limit: int | None = None) -> list[LifecycleEvent]:  # fmt: skip
        """Published records in id order within the replay window: ``after < id <= upto``."""
        upto = upto or self.published_upto
        if upto is None:
            return []
        cutoff = self._clock.now() - self.window
        out: list[LifecycleEvent] = []
        async for _, record in self.table.scan(after=after or None, upto=upto):
            if record.ts < cutoff or not filter_.matches(record):
                continue
            out.append(record)
            if limit is not None and len(out) >= limit:
                break
        return out

    async def get(self, lifecycle_id: str) -> LifecycleEvent | None:
        return await self.table.get(lifecycle_id)

    async def restore(self) -> None:
        """After a restart: the newest persisted record is the publication watermark."""
        async for lifecycle_id in self.table.ids(reverse=True, limit=1):
            self.published_upto = lifecycle_id

    async def prune(self) -> int:
        """Delete persisted records that arrived before the replay window; returns how many."""
        cutoff = self._clock.now() - self.window
        doomed: list[Op] = []
        pruned = 0
        # only the timestamp is needed: structuring whole records blocked the loop for ~100 ms
        # per 2,000 rows on a large backlog (``json`` decodes without structuring)
        async for lifecycle_id, data in self.table.json.scan(limit=100_000):
            if parse_rfc3339(data["ts"]) >= cutoff:
                break
            doomed.append(self.table.delete_op(lifecycle_id))
            if len(doomed) >= 2_000:
                await self.table.write(doomed)
                pruned += len(doomed)
                doomed = []
        if doomed:
            await self.table.write(doomed)
            pruned += len(doomed)
        return pruned

    def statistics(self) -> dict[str, int]:
        return {
            "subscribers": len(self._subscribers),
            "reserved": len(self._order),
            "published": self.published_count,
            "waiters": len(self._waiters),
        }
