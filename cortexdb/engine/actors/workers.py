"""Derivation's CPU work off the event loop: worker threads or processes, and the GIL hand-over.

CPU work on more text than ``OFF_LOOP_CHARS`` characters (extraction, tokenising, hash
embedding) runs in a worker — a process of the engine's trio-parallel context when
``derivation_workers = "process"``, else a thread — at most ``derivation_worker_limit`` at once,
so the rest of the cores serve requests (decisions.md, "Bounded work per request").
"""

from __future__ import annotations

import logging
import os
import threading
import time

import trio

log = logging.getLogger("cortexdb.pipeline")

# CPU work on more text than this (characters) runs in a worker (thread or process), not on the
# event loop: about 20 ms of extraction, tokenising or hash-embedding (decisions.md, "Bounded work")
OFF_LOOP_CHARS = 16_384
HANDOVER_EVERY = 0.001  # seconds of a worker thread's work between two hand-overs of the GIL
_handover = threading.local()


def handover() -> None:
    """In a worker thread, once a millisecond: sleep 0 s, which hands the GIL to the event loop's
    thread if it waits for it — otherwise the loop waits up to ``sys.getswitchinterval()`` (5 ms)
    each time it wants it back (decisions.md, "Bounded work per request").  Nothing on a main
    thread: the event loop's own (a short text read inline), or a worker process's."""
    if threading.current_thread() is threading.main_thread():
        return
    now = time.perf_counter()
    if now - getattr(_handover, "last", 0.0) >= HANDOVER_EVERY:
        time.sleep(0)
        _handover.last = time.perf_counter()


def lower_priority() -> None:
    """A derivation worker process's start: yield the CPU to the server's own threads (os.nice;
    a process of its own, so no lock is held at the lower priority)."""
    try:
        os.nice(10)
    except (AttributeError, OSError):  # no nice on this platform, or not allowed
        pass


def in_slices(work, items: list, size: int) -> list:
    """``work`` over ``items``, ``size`` at a time (one at a time when 1), handing the GIL over
    between calls: what a worker runs (a module-level function, so a process can run it too)."""
    out = []
    for start in range(0, len(items), size):
        out.append(work(items[start : start + size]) if size > 1 else work(items[start]))
        handover()
    return out


async def off_loop(ctx, work):
    """Pure CPU work (a picklable call) off the event loop: in a worker process, or a worker
    thread when processes are off or cannot run it; at most ``derivation_worker_limit`` at
    once in the engine (the rest of the cores serve requests).  Shutdown need not wait."""
    if ctx.cpu_workers == "process" and ctx.cpu_processes is not None:
        try:
            if ctx.cpu_started or await _started(ctx):
                return await ctx.cpu_processes.run_sync(
                    work, kill_on_cancel=True, limiter=ctx.cpu_limiter
                )
            raise TimeoutError(f"no worker process answered within "
                               f"{ctx.config.derivation_worker_start_seconds:g} s")  # fmt: skip
        except Exception as exc:  # unpicklable extractor, a worker that cannot start, …
            if ctx.cpu_workers == "process":
                log.warning("derivation runs in worker threads from now on: a worker process "
                            "could not run it (%r)", exc)  # fmt: skip
                ctx.cpu_workers = "thread"
    return await trio.to_thread.run_sync(work, abandon_on_cancel=True, limiter=ctx.cpu_limiter)


async def _started(ctx) -> bool:
    """Whether a worker process answers a trivial call within ``derivation_worker_start_seconds``
    of real time.  A spawned worker re-imports the program's main module; one that starts work
    there (no ``if __name__ == "__main__"`` guard: a server, a prompt) never answers, and every
    derivation would wait on it for ever (docs/decisions.md, "A worker process that never
    starts").  One probe an engine: calls meanwhile wait for its outcome.  The deadline is kept
    by one thread's wait (its own limiter: none of trio's shared thread tokens), not trio's
    clock, so a test's virtual clock cannot end it early."""
    while ctx.cpu_probe is not None:  # a probe is under way: its outcome is this call's too
        await ctx.cpu_probe.wait()
    if ctx.cpu_started or ctx.cpu_workers != "process":  # answered, or fallen back meanwhile
        return ctx.cpu_started
    ctx.cpu_probe = trio.Event()  # (a probe cancelled from outside leaves the next call to probe)
    try:
        await _probe(ctx, ctx.config.derivation_worker_start_seconds)
    finally:
        ctx.cpu_probe.set()
        ctx.cpu_probe = None
    return ctx.cpu_started


async def _probe(ctx, seconds: float) -> None:
    answered = threading.Event()

    async def call(cancel_scope: trio.CancelScope) -> None:
        try:
            await ctx.cpu_processes.run_sync(os.getpid, kill_on_cancel=True, limiter=ctx.cpu_limiter)
            ctx.cpu_started = True
        finally:
            answered.set()  # ends the watch's wait either way
            cancel_scope.cancel()

    async def watch(cancel_scope: trio.CancelScope) -> None:
        if not seconds:
            await trio.sleep_forever()
        elif not await trio.to_thread.run_sync(answered.wait, min(seconds, threading.TIMEOUT_MAX),
                                               limiter=trio.CapacityLimiter(1)):  # fmt: skip
            cancel_scope.cancel()  # no answer in time: the call is cancelled, its worker killed

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call, nursery.cancel_scope)
        nursery.start_soon(watch, nursery.cancel_scope)
