"""The end of a bulk write (``POST /v1/experience/bulk``): a ``batch_complete`` lifecycle record.

A bulk write's items are captured into one scope with one ``batch_id``; the lane tracks, for each
batch, how many of its events are still queued.  When the last one has been through every lane
step (extracted, indexed, consolidated, in its episode window) — or was cancelled or forgotten
on the way — the lane publishes ``batch_complete`` (reference §13 names no batch record;
docs/decisions.md) with ``{batch_id, events}``: a client following ``?batch_id=`` sees the end.

The count is in memory: after a restart the lane re-queues a batch's unfinished events and
announces the batch when they are done (``events`` then counts those); a batch whose events had
all finished before the restart, but whose record was not yet written, is not announced.  A
rebuild re-derives every event and announces each batch again.
"""

from __future__ import annotations

import collections

from ..model import Event
from ..stages import BATCH_COMPLETE
from .stages.common import StageContext


class BatchTracker:
    def __init__(self) -> None:
        self._batch_of: dict[str, str] = {}  # queued event id -> its batch id
        self._left: collections.Counter[str] = collections.Counter()
        self._events: collections.Counter[str] = collections.Counter()

    def queued(self, event: Event) -> None:
        batch_id = event.batch_id
        if batch_id is not None and event.id not in self._batch_of:
            self._batch_of[event.id] = batch_id
            self._left[batch_id] += 1
            self._events[batch_id] += 1

    def finished(self, event_ids) -> list[tuple[str, int]]:
        """Mark events done (derived, cancelled or dropped); the batches this completes."""
        done = []
        for event_id in event_ids:
            batch_id = self._batch_of.pop(event_id, None)
            if batch_id is None:
                continue
            self._left[batch_id] -= 1
            if self._left[batch_id] == 0:
                del self._left[batch_id]
                done.append((batch_id, self._events.pop(batch_id)))
        return done

    def clear(self) -> None:
        self._batch_of.clear()
        self._left.clear()
        self._events.clear()


async def announce(work: StageContext, finished: list[tuple[str, int]]) -> None:
    """Write and publish one ``batch_complete`` record per finished batch."""
    if not finished:
        return
    bus, now = work.ctx.bus, work.ctx.clock.now()
    records = [bus.reserve(BATCH_COMPLETE, scope=work.scope, batch_id=batch_id, ts=now,
                           payload={"batch_id": batch_id, "events": events})
               for batch_id, events in finished]  # fmt: skip
    try:
        await work.tables.write([bus.put_op(record) for record in records])
    except BaseException:
        bus.abort(records)
        raise
    bus.commit(records)
