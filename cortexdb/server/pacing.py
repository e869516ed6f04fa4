"""The shared clock of busy lifecycle streams (issue 10 part 8, docs/decisions.md "One tick for
every busy stream").

A stream that has just sent a chunk waits for the next *tick* before it takes what arrived
meanwhile (``stream_coalesce`` seconds at most), so a busy stream sends one chunk a tick however
fast records come.  Every stream of one server waits for the same tick: the first stream to wait
keeps the time (one timer, one cancel scope) and the others wait on its ``trio.Event`` — no
timer, no cancel scope and no ``Cancelled`` to raise and unwind per stream and chunk, which was
what the busy streams' per-chunk waits cost (``Deadlines.expire`` and the cancel by ``_offer``
made ~2.5 % of the soak server's samples).
"""

from __future__ import annotations

import trio


class Pacer:
    """One tick at a time, shared by whoever waits for it."""

    def __init__(self) -> None:
        self._tick: trio.Event | None = None
        self.ticks = 0  # ticks kept (statistics, tests)

    async def tick(self, period: float, until: trio.Event) -> None:
        """Return at the next tick: at most ``period`` seconds from now, at once when ``until``
        is set (shutdown).  The stream that keeps the time sets the tick however it leaves
        (a client that went away cancels it): the others then go on at once, and the next to
        wait keeps the time."""
        tick = self._tick
        if tick is not None:
            await tick.wait()
            return
        tick = self._tick = trio.Event()
        try:
            with trio.move_on_after(period):
                await until.wait()
        finally:
            self._tick = None
            self.ticks += 1
            tick.set()
