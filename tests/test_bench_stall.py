"""bench/stall.py reads the server's log: its access lines and loopwatch's slow-step lines,
formatted as the server formats them, each put in the phase its request or step began in."""

from __future__ import annotations

import datetime
import importlib.util
import logging
import os

from cortexdb.cli import LOG_FORMAT
from cortexdb.server.loopwatch import SlowSteps

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def stall_module():
    spec = importlib.util.spec_from_file_location("bench_stall", os.path.join(ROOT, "bench", "stall.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def logged(caplog, at: str, emit) -> str:
    """The server's log line (``cortexdb serve``'s format) when ``emit`` logs, stamped ``at``."""
    caplog.clear()
    emit()
    record = caplog.records[-1]
    formatter = logging.Formatter(LOG_FORMAT)
    record.created = datetime.datetime.strptime(at, "%Y-%m-%d %H:%M:%S,%f").timestamp()
    record.msecs = int(at[-3:])
    return formatter.format(record) + "\n"


def test_the_server_view_splits_requests_and_loop_steps_by_phase(caplog):
    stall = stall_module()

    def ts(text: str) -> float:
        return datetime.datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()

    marks = {"during": ts("2026-11-29 03:00:10,000"), "after": ts("2026-11-29 03:00:20,000")}
    access = logging.getLogger("cortexdb.access")
    caplog.set_level(logging.INFO)

    class Task:
        name = "cortexdb.engine.actors.lane.Lane.run"

    ticks = iter([0.0, 0.050])  # a step of 50 ms, 20 ms of it on the CPU
    cpu = iter([1.0, 1.020])
    steps = SlowSteps(0.020, timer=lambda: next(ticks), cpu_timer=lambda: next(cpu))

    def slow_step() -> None:
        steps.before_task_step(Task())
        steps.after_task_step(Task())

    lines = [
        logged(caplog, "2026-11-29 03:00:05,000", lambda: access.info('{"path":"/v1/recall","status":200,"ms":12.5}')),
        # began 03:00:09.9: before, though it ended during
        logged(caplog, "2026-11-29 03:00:10,050", lambda: access.info('{"path":"/v1/experience","status":202,"ms":150.0}')),
        logged(caplog, "2026-11-29 03:00:12,000", lambda: access.info('{"path":"/v1/recall","status":200,"ms":80.0}')),
        # the document itself (answered 200 after wait=consolidated): not another client's
        logged(caplog, "2026-11-29 03:00:19,000", lambda: access.info('{"path":"/v1/experience","status":200,"ms":9000.0}')),
        logged(caplog, "2026-11-29 03:00:15,000", slow_step),
        logged(caplog, "2026-11-29 03:00:25,000", lambda: access.info('{"path":"/v1/recall","status":200,"ms":5.0}')),
        "a line without a stamp\n",
    ]
    timed, held = stall.server_view(lines, marks)
    assert timed == {"before": [12.5, 150.0], "during": [80.0], "after": [5.0]}
    assert held == {"before": [], "during": [(50.0, Task.name, 20.0)], "after": []}
