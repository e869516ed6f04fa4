"""Steps that held the event loop: a Trio instrument for ``cortexdb serve``.

Everything a server does for its clients runs on one Trio loop, so any step of any task that
runs long (CPU work left on the loop, a blocking call) delays every other request by as much.
With ``ServerSettings.loop_slow_step_ms`` above 0 (``CORTEX_LOOP_SLOW_STEP_MS``; default 0: not
installed, no cost) each task step that held the loop at least that long is logged as one
warning line on ``cortexdb.loop``, naming the task, the milliseconds and how many of them the
loop's thread spent on the CPU (fewer when the system ran something else meanwhile), and counted
(``SlowSteps.count``, ``SlowSteps.longest``).  bench/stall.py turns it on to tell a loop held by
one step from latency that comes from sharing the machine's cores.

The instrument reads a monotonic timer and the thread's CPU clock around each step (four reads a
step); both are injectable, so tests drive them without wall-clock time.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator

import trio

log = logging.getLogger("cortexdb.loop")


class SlowSteps(trio.abc.Instrument):
    """Log and count task steps of ``threshold`` seconds or more."""

    def __init__(self, threshold: float, *, timer: Callable[[], float] = time.perf_counter,
                 cpu_timer: Callable[[], float] = time.thread_time) -> None:  # fmt: skip
        if not threshold > 0:
            raise ValueError("the slow-step threshold must be above 0 seconds")
        self.threshold = threshold
        self.timer = timer
        self.cpu_timer = cpu_timer
        self.count = 0
        self.longest = 0.0  # seconds
        self._started: float | None = None  # None: no step began since the instrument was added
        self._cpu = 0.0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._cpu = self.cpu_timer()
        self._started = self.timer()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if self._started is None:  # the step that installed the instrument: its start unseen
            return
        held = self.timer() - self._started
        self._started = None
        if held >= self.threshold:
            self.count += 1
            self.longest = max(self.longest, held)
            cpu = self.cpu_timer() - self._cpu
            log.warning("a step of task %s held the event loop for %.1f ms (%.1f ms of CPU)",
                        task.name, held * 1000, cpu * 1000)  # fmt: skip


@contextlib.contextmanager
def watching(threshold_ms: float, **timers: Callable[[], float]) -> Iterator[SlowSteps | None]:
    """Install :class:`SlowSteps` on the running loop for the block (nothing when 0)."""
    if threshold_ms <= 0:
        yield None
        return
    instrument = SlowSteps(threshold_ms / 1000, **timers)
    trio.lowlevel.add_instrument(instrument)
    try:
        yield instrument
    finally:
        with contextlib.suppress(KeyError):  # already removed (an instrument that raised is dropped)
            trio.lowlevel.remove_instrument(instrument)
