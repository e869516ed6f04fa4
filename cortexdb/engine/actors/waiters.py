"""What a ``wait=indexed|consolidated`` write waits on: one stage of one event.

The lifecycle bus sets a waiter when it publishes the stage's record (or when the event is
cancelled), handing it the event's ``EventState`` as the stage committed it — so the write's
answer is built from that state, with no read through the scope's actor.
"""

from __future__ import annotations

import trio

from ..model import EventState, LifecycleEvent
from ..stages import at_scope


class StageWaiter:
    """Set once a stage of one event is published (or the event is cancelled): ``wait()``
    returns the event's state as that stage committed it (None when the stage gave none)."""

    __slots__ = ("_event", "state")

    def __init__(self) -> None:
        self._event = trio.Event()
        self.state: EventState | None = None

    def set(self, state: EventState | None) -> None:
        if not self._event.is_set():
            self.state = state
            self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    @property
    def waiting(self) -> int:
        return self._event.statistics().tasks_waiting

    async def wait(self) -> EventState | None:
        await self._event.wait()
        return self.state


def waiter_key(record: LifecycleEvent) -> tuple[str, str]:
    """The (event id, stage) a record's waiters wait on: a foreign consolidation's record is the
    stage at its scope (``consolidated@org:acme``)."""
    foreign = record.payload.get("foreign")
    stage = at_scope(record.stage, record.scope) if foreign else record.stage
    return record.event_id, stage
