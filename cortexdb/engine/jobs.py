"""The job runner: long operations as persisted jobs of named, idempotent phases (DESIGN §3).

A job is a JSON record in the node table ``J`` (``NodeTables.jobs``), keyed by its id (an
erasure's is its ``erasure_`` id).  Its kind (``JobKind``) lists the phases in order; each phase
is an async function of the running job (``JobRun``) that must be *idempotent*: after a crash the
job re-runs the phase it was in (or the earlier phase named by ``Phase.resume_from``, when a
phase's inputs live only in memory), so running a phase twice must be safe.

| field                 | what it says                                                        |
|-----------------------|---------------------------------------------------------------------|
| ``status``            | running, completed, cancelled or failed                             |
| ``phase``             | the phase running (or the last one run)                             |
| ``phases_started``    | every phase that began, in order (what may have been done)          |
| ``fraction_complete`` | 0..1 over the phases' weights                                       |
| ``progress``          | the kind's counts (absolute), plus ``elapsed_ms``                   |
| ``state``             | checkpoints a phase saved (``JobRun.checkpoint``)                   |
| ``interruptions``     | each restart that found the job running: ``{phase, at}``            |
| ``cancel_requested_at`` | set by ``cancel``: honoured at the next phase boundary            |
| ``error``             | why it failed (``error_code``, ``message``)                         |
| ``audit_id``          | the row the kind's ``finish`` wrote                                 |

Every change is persisted before it is published: a tick is one atomic write of the record and a
lifecycle record of the kind's ``progress_event`` (the end, of its ``complete_event``), committed
to the lifecycle bus after the write.  Jobs run in the runner's nursery, a child of the engine's:
closing the engine cancels them mid-phase, their records still say ``running``, and the next open
resumes them.  A phase failing with a retriable error is retried ``job_retry_limit`` times (with
a back-off); any other error ends the job ``failed``, its record saying where and why.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
import trio

from ..errors import CortexError, NotFound
from .storage import Op
from .temporal import format_ts, parse_rfc3339

log = logging.getLogger("cortexdb.jobs")

RUNNING, COMPLETED, CANCELLED, FAILED = "running", "completed", "cancelled", "failed"
TERMINAL = (COMPLETED, CANCELLED, FAILED)

#: a test seam: awaited with (job id, phase, "start" | "tick") at each phase start and each tick
Hook = Callable[[str, str, str], Awaitable[None]]


@attrs.frozen
class Phase:
    name: str
    run: Callable[[JobRun], Awaitable[None]]
    weight: float = 1.0  # its share of fraction_complete
    resume_from: str | None = None  # after a restart, re-run from this phase (in-memory inputs)


@attrs.frozen
class JobKind:
    name: str
    phases: tuple[Phase, ...]
    progress_event: str  # the lifecycle record of a tick
    complete_event: str  # the lifecycle record of the end
    id_field: str  # how lifecycle payloads name the job's id (``erasure_id``)
    # at the end, given the final status: writes what the kind keeps (an audit row) and returns
    # what the complete record carries besides the status (``audit_id``, ``summary``); the
    # record says the status only once this has run, so a crash before it repeats it
    finish: Callable[[JobRun, str], Awaitable[dict[str, Any]]]

    def index(self, name: str) -> int:
        return [phase.name for phase in self.phases].index(name)


class JobRun:
    """One job being driven: its persisted ``record`` and the ``scratch`` its phases hand on in
    memory."""

    def __init__(self, runner: JobRunner, kind: JobKind, record: dict[str, Any]) -> None:
        self.runner = runner
        self.kind = kind
        self.record = record
        self.scratch: dict[str, Any] = {}

    @property
    def id(self) -> str:
        return self.record["id"]

    @property
    def params(self) -> dict[str, Any]:
        return self.record["params"]

    @property
    def state(self) -> dict[str, Any]:
        return self.record["state"]

    @property
    def progress(self) -> dict[str, Any]:
        return self.record["progress"]

    async def tick(self, fraction: float | None = None, **counts: int) -> None:
        """Progress within the current phase: absolute ``counts`` and the share of the phase
        done; persisted, then published as the kind's progress record."""
        self.progress.update(counts)
        if fraction is not None:
            self.record["phase_fraction"] = min(1.0, max(0.0, fraction))
        await self.runner.save(self, self.kind.progress_event, self.tick_payload())
        await self.runner.call_hook(self, "tick")

    async def checkpoint(self, **state: Any) -> None:
        """Persist what a phase has done (a resumed phase may skip it)."""
        self.state.update(state)
        await self.runner.save(self)

    def tick_payload(self) -> dict[str, Any]:
        return {self.kind.id_field: self.id, "phase": self.record["phase"],
                "fraction_complete": self.record["fraction_complete"], **self.progress}  # fmt: skip


class JobRunner:
    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        self._table = ctx.tables.jobs
        self._kinds: dict[str, JobKind] = {}
        self._nursery: trio.Nursery | None = None
        self._runs: dict[str, JobRun] = {}
        self.hook: Hook | None = None
        # awaited once the runner opens, with the ids of the jobs it resumes (before it resumes
        # them): a kind's clean-up of what ended jobs left (an import's sorted runs)
        self.on_open: list[Callable[[set[str]], Awaitable[None]]] = []

    def register(self, kind: JobKind) -> None:
        self._kinds[kind.name] = kind

    def running(self, kind: str) -> int:
        return sum(1 for run in self._runs.values() if run.kind.name == kind)

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """The runner's nursery, for the engine's lifetime; resumes the jobs a previous run of
        the engine left running."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            unfinished = [record async for _, record in self._table.json.scan() if record["status"] == RUNNING]
            for opened in self.on_open:
                await opened({record["id"] for record in unfinished})
            task_status.started()
            for record in unfinished:
                await self._resume(record)
            await trio.sleep_forever()

    # -- records -------------------------------------------------------------------------------
    def new_record(self, kind: str, job_id: str, *, scope: str, params: dict[str, Any],
                   first: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
        now = format_ts(self._ctx.clock.now())
        return {
            "id": job_id, "kind": kind, "status": RUNNING, "scope": scope, "params": params,
            "phase": self._kinds[kind].phases[0].name, "phases_started": [], "phase_fraction": 0.0,
            "fraction_complete": 0.0, "progress": {"elapsed_ms": 0}, "state": {}, "created_at": now,
            "updated_at": now, "finished_at": None, "interruptions": [], "retries": 0,
            "cancel_requested_at": None, "error": None, "audit_id": None, **(first or {}),
        }  # fmt: skip

    async def submit(self, record: dict[str, Any], ops: Sequence[Op] = ()) -> None:
        """Persist a new job (with ``ops``, in the same atomic write) and start it."""
        await self._table.write([self._table.put_op(record["id"], record), *ops], sync=True)
        self._start(JobRun(self, self._kinds[record["kind"]], record))

    async def get(self, job_id: str) -> dict[str, Any] | None:
        run = self._runs.get(job_id)
        return run.record if run is not None else await self._table.get(job_id)

    async def cancel(self, job_id: str) -> tuple[dict[str, Any], bool]:
        """Ask a running job to stop at its next phase boundary: (record, accepted)."""
        run = self._runs.get(job_id)
        record = run.record if run is not None else await self._table.get(job_id)
        if record is None:
            raise NotFound(f"no job {job_id}", details={"job_id": job_id})
        if record["status"] != RUNNING:
            return record, False
        if record["cancel_requested_at"] is None:
            record["cancel_requested_at"] = format_ts(self._ctx.clock.now())
            if run is not None:
                await self.save(run)
            else:  # running, but not driven by this engine (yet): the resumed run will see it
                await self._table.put(job_id, record, sync=True)
        return record, True

    async def save(self, run: JobRun, event: str | None = None,
                   payload: dict[str, Any] | None = None) -> None:  # fmt: skip
        """Persist the record, with a lifecycle record of ``event`` in the same write."""
        record, bus = run.record, self._ctx.bus
        record["updated_at"] = format_ts(self._ctx.clock.now())
        # never backwards: a phase re-run after a restart starts its fraction again from 0
        record["fraction_complete"] = max(round(self._fraction(run), 4), record.get("fraction_complete") or 0.0)
        elapsed = self._ctx.clock.now() - parse_rfc3339(record["created_at"])
        record["progress"]["elapsed_ms"] = int(elapsed.total_seconds() * 1000)
        if payload is not None:
            payload = {**payload, "fraction_complete": record["fraction_complete"],
                       "elapsed_ms": record["progress"]["elapsed_ms"]}  # fmt: skip
        ops = [self._table.put_op(record["id"], record)]
        lce = None
        if event is not None:
            lce = bus.reserve(event, scope=record["scope"], job_id=record["id"], payload=payload)
            ops.append(bus.put_op(lce))
        try:
            await self._table.write(ops, sync=event == run.kind.complete_event)
        except BaseException:
            if lce is not None:
                bus.abort([lce])
            raise
        if lce is not None:
            bus.commit([lce])

    def _fraction(self, run: JobRun) -> float:
        phases, record = run.kind.phases, run.record
        total = sum(phase.weight for phase in phases) or 1.0
        if record["status"] == COMPLETED:
            return 1.0
        index = run.kind.index(record["phase"])
        done = sum(phase.weight for phase in phases[:index])
        if record["phase"] in record["phases_started"]:
            done += phases[index].weight * record["phase_fraction"]
        return done / total

    async def call_hook(self, run: JobRun, where: str) -> None:
        if self.hook is not None:
            await self.hook(run.id, run.record["phase"], where)

    # -- driving -------------------------------------------------------------------------------
    def _start(self, run: JobRun) -> None:
        if self._nursery is None:
            raise CortexError("the job runner is not running (open the engine first)", retriable=True)
        self._runs[run.id] = run
        self._nursery.start_soon(self._drive, run, name=f"job:{run.id}")

    async def _resume(self, record: dict[str, Any]) -> None:
        kind = self._kinds.get(record["kind"])
        if kind is None:
            log.error("job %s is of an unknown kind %r; left as it is", record["id"], record["kind"])
            return
        run = JobRun(self, kind, record)
        phase = kind.phases[kind.index(record["phase"])]
        record["interruptions"].append({"phase": record["phase"], "at": format_ts(self._ctx.clock.now())})
        if phase.resume_from is not None and record["status"] == RUNNING:
            record["phase"] = phase.resume_from
        record["phase_fraction"] = 0.0
        await self.save(run)
        log.warning("job %s resumes in phase %s after an interruption", run.id, record["phase"])
        self._start(run)

    async def _drive(self, run: JobRun) -> None:
        kind, record = run.kind, run.record
        try:
            index = kind.index(record["phase"])
            while index < len(kind.phases):
                if record["cancel_requested_at"] is not None:
                    return await self._end(run, CANCELLED)
                phase = kind.phases[index]
                record["phase"], record["phase_fraction"] = phase.name, 0.0
                if phase.name not in record["phases_started"]:
                    record["phases_started"].append(phase.name)
                await run.tick()
                await self.call_hook(run, "start")
                await self._attempt(run, phase)
                record["phase_fraction"] = 1.0
                index += 1
            await self._end(run, COMPLETED)
        except CortexError as exc:
            await self._fail(run, exc.error_code, exc.message)
        except Exception as exc:  # a bug: the job says so instead of hanging or vanishing
            log.error("job %s failed in phase %s", run.id, record["phase"], exc_info=exc)
            await self._fail(run, "INTERNAL", f"unexpected error: {type(exc).__name__}")
        finally:
            self._runs.pop(run.id, None)

    async def _attempt(self, run: JobRun, phase: Phase) -> None:
        limit = self._ctx.config.job_retry_limit
        attempt = 0
        while True:
            try:
                return await phase.run(run)
            except CortexError as exc:
                if not exc.retriable or attempt >= limit:
                    raise
                attempt += 1
                run.record["retries"] += 1
                run.record["error"] = {"error_code": exc.error_code, "message": exc.message, "retrying": True}
                await self.save(run)
                await trio.sleep(min(0.05 * 2**attempt, 5.0))  # a back-off before the retry, not a sync

    async def _fail(self, run: JobRun, code: str, message: str) -> None:
        run.record["error"] = {"error_code": code, "message": message, "phase": run.record["phase"]}
        try:
            await self._end(run, FAILED)
        except CortexError as exc:  # the store is closing: the job resumes on the next open
            log.warning("job %s could not record its failure: %s", run.id, exc.error_code)

    async def _end(self, run: JobRun, status: str) -> None:
        record = run.record
        extra = await run.kind.finish(run, status)
        record["status"] = status
        record["finished_at"] = format_ts(self._ctx.clock.now())
        if status != FAILED:
            record["error"] = None
        payload = {run.kind.id_field: run.id, "status": status, "phase": record["phase"], **extra}
        await self.save(run, run.kind.complete_event, payload)
