"""The closed set of messages a ScopeActor accepts (frozen attrs records).

A request carries its ``reply`` slot; the actor answers it exactly once, with a value or a
``CortexError``.  Nothing else is ever put in a mailbox.
"""

from __future__ import annotations

from typing import Any

import attrs
import trio

from ...errors import CortexError, Internal


class ReplySlot:
    """A one-shot reply: the requester awaits ``wait()``; the actor calls ``set`` or ``fail``.

    Built on ``wait_task_rescheduled`` rather than ``trio.Event``: one reply per capture makes
    the lighter primitive worth it (see bench/capture.py).
    """

    __slots__ = ("_done", "_error", "_task", "_value")

    def __init__(self) -> None:
        self._done = False
        self._value: Any = None
        self._error: BaseException | None = None
        self._task = None

    @property
    def answered(self) -> bool:
        return self._done

    def _wake(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            trio.lowlevel.reschedule(task)

    def set(self, value: Any) -> None:
        if not self._done:
            self._done, self._value = True, value
            self._wake()

    def fail(self, error: BaseException) -> None:
        if not self._done:
            self._done, self._error = True, error
            self._wake()

    async def wait(self) -> Any:
        if self._done:
            await trio.lowlevel.checkpoint()
        else:
            self._task = trio.lowlevel.current_task()

            def abort(_raise_cancel):
                self._task = None
                return trio.lowlevel.Abort.SUCCEEDED

            await trio.lowlevel.wait_task_rescheduled(abort)
        if self._error is not None:
            raise self._error
        return self._value


@attrs.frozen
class CaptureItem:
    """One validated experience, ready to become an event."""

    envelope: Any  # envelope.ValidEnvelope
    identities: Any  # envelope.Identities
    tenant_id: str
    idempotency: Any = None  # services.Reservation or None
    batch_id: str | None = None
    wait_for: tuple[str, ...] = ()  # lifecycle stages the requester will wait on


@attrs.frozen
class Capture:
    items: tuple[CaptureItem, ...]
    sync: bool
    reply: ReplySlot


@attrs.frozen
class ReadLayer:
    layer: str  # events | event | episodes | facts | timeline | beliefs | belief | event_state
    query: dict[str, Any]
    reply: ReplySlot


@attrs.frozen
class CancelEvent:
    event_id: str
    caller: str
    reply: ReplySlot


@attrs.frozen
class ForeignConsolidate:
    """Facts extracted in ``source_scope`` to be consolidated into this scope (consolidate_into)."""

    source_scope: str
    event_id: str
    payload: dict[str, Any]
    reply: ReplySlot


@attrs.frozen
class ForeignDerived:
    """Records another scope derived from one of this scope's events (derives back-pointers)."""

    event_id: str
    derives: tuple[str, ...]
    scope: str


@attrs.frozen
class Flush:
    """Answer once every queued derivation is done; ``seal`` also seals the open episode."""

    seal: bool
    reply: ReplySlot


@attrs.frozen
class Rebuild:
    reply: ReplySlot


@attrs.frozen
class Ping:
    reply: ReplySlot


@attrs.frozen
class EditScope:
    """Read-modify-write the scope's registration record inside its actor (so it never races
    the actor's own ``last_write_at`` updates).  ``edit(record or None)`` returns the new record,
    or None to delete it; it may raise a CortexError, which is the reply."""

    edit: Any
    reply: ReplySlot


@attrs.frozen
class Stop:
    pass


MESSAGE_TYPES = (
    Capture,
    ReadLayer,
    CancelEvent,
    ForeignConsolidate,
    ForeignDerived,
    Flush,
    Rebuild,
    Ping,
    EditScope,
    Stop,
)
Message = (
    Capture
    | ReadLayer
    | CancelEvent
    | ForeignConsolidate
    | ForeignDerived
    | Flush
    | Rebuild
    | Ping
    | EditScope
    | Stop
)


# -- the derivation lane's items ------------------------------------------------------------------
# What the mailbox lane hands the derivation lane (``lane.Lane.submit``) besides captured events;
# the lane runs them between batches, each by its one handler (``Lane.HANDLERS``).


@attrs.frozen
class CancelItem:
    """Cancel a captured event (§8.9.5); the reply is the cancel report."""

    event_id: str
    reply: ReplySlot


@attrs.frozen
class ForeignItem:
    """Consolidation work another scope left in table ``FW`` for one of its events."""

    event_id: str


@attrs.frozen
class DerivedItem:
    """Records another scope derived from one of this scope's events (derives back-pointers)."""

    event_id: str
    derives: tuple[str, ...]


@attrs.frozen
class FlushItem:
    """Reply once the lane is idle; ``seal`` first drains the queue and seals the open episode."""

    seal: bool
    reply: ReplySlot


@attrs.frozen
class RebuildItem:
    """Replay the scope's events into fresh derived layers; reply when done."""

    reply: ReplySlot


LANE_ITEM_TYPES = (CancelItem, ForeignItem, DerivedItem, FlushItem, RebuildItem)
LaneItem = CancelItem | ForeignItem | DerivedItem | FlushItem | RebuildItem


def fail_message(message: Message, error: CortexError | None = None) -> None:
    """Answer a message that will never be handled (actor crashed or engine stopping)."""
    reply = getattr(message, "reply", None)
    if reply is not None:
        reply.fail(error or Internal("the scope actor stopped before handling this request"))
