"""Steps that held the event loop (server/loopwatch.py): logged and counted over the threshold,
off by default; driven by an injected timer, never by wall-clock time."""

from __future__ import annotations

import logging

import pytest
import trio

from cortexdb.server.loopwatch import SlowSteps, watching
from cortexdb.server.settings import ServerSettings


class Timer:
    """A timer the test moves: ``hold(task name, seconds)`` makes that task's steps take so long."""

    def __init__(self) -> None:
        self.now = 0.0
        self.holds: dict[str, float] = {}

    def __call__(self) -> float:
        return self.now


class Held(SlowSteps):
    """SlowSteps whose steps take the time the test's timer assigns to their task."""

    def __init__(self, threshold: float, timer: Timer) -> None:
        super().__init__(threshold, timer=timer, cpu_timer=lambda: timer.now / 2)  # half of it on the CPU
        self.clock = timer

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        self.clock.now += self.clock.holds.get(task.name, 0.0)
        super().after_task_step(task)


def run_tasks(instrument: SlowSteps) -> None:
    async def slow() -> None:
        for _ in range(3):
            await trio.lowlevel.checkpoint()

    async def quick() -> None:
        await trio.lowlevel.checkpoint()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow, name="slow")
            nursery.start_soon(quick, name="quick")

    trio.run(main, instruments=[instrument])


@pytest.mark.parametrize("slow_step, logged", [(0.030, 4), (0.019, 0)], ids=["over", "under"])
def test_steps_at_or_over_the_threshold_are_logged_with_their_task_and_counted(caplog, slow_step, logged):
    """Over 20 ms: the task's first step and one after each checkpoint, each logged with its task
    and the CPU part; under it, nothing logged or counted."""
    timer = Timer()
    timer.holds = {"slow": slow_step, "quick": 0.005}
    instrument = Held(0.020, timer)
    with caplog.at_level(logging.WARNING, logger="cortexdb.loop"):
        run_tasks(instrument)
    lines = [r.getMessage() for r in caplog.records if r.name == "cortexdb.loop"]
    assert instrument.count == len(lines) == logged
    assert all("task slow held the event loop for 30.0 ms (15.0 ms of CPU)" in line for line in lines)
    assert instrument.longest == pytest.approx(slow_step if logged else 0.0)


def test_watching_installs_only_above_zero_and_removes_at_exit():
    seen = []

    async def main() -> None:
        with watching(0) as none:
            seen.append(none)
        with watching(25, timer=Timer()) as instrument:
            assert isinstance(instrument, SlowSteps) and instrument.threshold == pytest.approx(0.025)
            await trio.lowlevel.checkpoint()
            seen.append(instrument)
        # removed: a second removal has nothing to remove
        with pytest.raises(KeyError):
            trio.lowlevel.remove_instrument(instrument)

    trio.run(main)
    assert seen[0] is None and isinstance(seen[1], SlowSteps)


def test_the_setting_is_off_by_default_and_read_from_the_environment():
    assert ServerSettings.from_env({}).loop_slow_step_ms == 0
    assert ServerSettings.from_env({"CORTEX_LOOP_SLOW_STEP_MS": "20"}).loop_slow_step_ms == 20.0
    with pytest.raises(ValueError, match="loop_slow_step_ms"):
        ServerSettings.from_env({"CORTEX_LOOP_SLOW_STEP_MS": "-1"})
    with pytest.raises(ValueError, match="CORTEX_LOOP_SLOW_STEP_MS must be a number"):
        ServerSettings.from_env({"CORTEX_LOOP_SLOW_STEP_MS": "soon"})
    with pytest.raises(ValueError):
        SlowSteps(0)


async def test_a_server_with_the_setting_logs_the_steps_that_held_its_loop(monkeypatch, caplog):
    """``run_server`` installs the instrument for its life when the setting is above 0 (here
    with a timer that makes every step last a second) and removes it when it stops."""
    import contextlib

    import httpx

    from cortexdb.server import serve

    made: list[SlowSteps] = []
    ticks = iter(range(10**9))

    @contextlib.contextmanager
    def recording(threshold_ms):
        with watching(threshold_ms, timer=lambda: float(next(ticks)), cpu_timer=lambda: 0.0) as instrument:
            made.append(instrument)
            yield instrument

    monkeypatch.setattr(serve, "watching", recording)
    settings = ServerSettings(preset="dev_local", backend="memory", bind="127.0.0.1:0", loop_slow_step_ms=20)
    stop = trio.Event()
    with caplog.at_level(logging.WARNING, logger="cortexdb.loop"):
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(lambda task_status: serve.run_server(
                settings, shutdown_trigger=stop.wait, id_seed=3, task_status=task_status))  # fmt: skip
            async with httpx.AsyncClient(base_url=binds[0], timeout=30) as http:
                assert (await http.get("/v1/admin/health")).status_code < 500  # answered (401 without an actor)
            stop.set()
    [instrument] = made
    assert instrument.threshold == pytest.approx(0.020) and instrument.count > 0
    assert any("held the event loop for 1000.0 ms (0.0 ms of CPU)" in r.getMessage() for r in caplog.records)
    with pytest.raises(KeyError):  # removed when the server stopped
        trio.lowlevel.remove_instrument(instrument)


def test_the_step_that_installs_the_instrument_is_not_counted(caplog):
    """Installed from inside a running step (as ``run_server`` does), the instrument sees that
    step's end without its start: it must not count it (it did: a step as long as the timer's
    value, the machine's uptime with ``perf_counter``)."""
    timer = Timer()
    timer.now = 10**6  # what a real timer reads long after boot

    async def main() -> None:
        with watching(20, timer=timer, cpu_timer=lambda: 0.0) as instrument:
            await trio.lowlevel.checkpoint()
            seen.append((instrument.count, instrument.longest))

    seen: list[tuple[int, float]] = []
    with caplog.at_level(logging.WARNING, logger="cortexdb.loop"):
        trio.run(main)
    assert seen == [(0, 0.0)]
    assert not [r for r in caplog.records if r.name == "cortexdb.loop"]
