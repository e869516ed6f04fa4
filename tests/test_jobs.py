"""The job runner (engine/jobs.py) on a toy job kind: phases in order, progress records, cancel at
a phase boundary, retries, failures, and resuming after the runner was stopped mid-phase."""

from __future__ import annotations

import pytest
import trio

from cortexdb import EngineConfig, ManualClock
from cortexdb.backends import open_store
from cortexdb.engine.actors.bus import LifecycleFilter
from cortexdb.engine.context import node_context
from cortexdb.engine.jobs import CANCELLED, COMPLETED, FAILED, RUNNING, JobKind, JobRunner, Phase
from cortexdb.errors import Internal, InvalidBody

START = "2026-05-13T15:42:09Z"


class Toy:
    """A job of three phases a, b, c; each appends its name to ``done`` (b in two ticked halves)."""

    def __init__(self, *, fail_b: Exception | None = None, failures: int = 0) -> None:
        self.done: list[str] = []
        self.fail_b, self.failures = fail_b, failures
        self.finished: list[str] = []

    def kind(self, resume_b_from: str | None = None) -> JobKind:
        return JobKind("toy", (Phase("a", self.a), Phase("b", self.b, weight=2.0, resume_from=resume_b_from),
                               Phase("c", self.c)),
                       "toy_progress", "toy_complete", "toy_id", self.finish)  # fmt: skip

    async def a(self, run) -> None:
        self.done.append("a")
        run.scratch["from_a"] = "in memory"
        await run.tick(1.0, items=1)

    async def b(self, run) -> None:
        if self.fail_b is not None and self.failures > 0:
            self.failures -= 1
            raise self.fail_b
        for half in (1, 2):
            if half > run.state.get("b_halves", 0):
                self.done.append(f"b{half}")
                run.state["b_halves"] = half
                await run.tick(half / 2, items=1 + half)

    async def c(self, run) -> None:
        self.done.append(f"c:{run.scratch.get('from_a')}")
        await run.tick(1.0, items=4)

    async def finish(self, run, status: str) -> dict:
        self.finished.append(status)
        return {"summary": {"items": run.progress.get("items", 0)}}


def context(store, clock=None):
    return node_context(store, config=EngineConfig(job_retry_limit=2), clock=clock or ManualClock(START),
                        id_seed=1, extractor=None, policy=None, embedder=None)  # fmt: skip


async def until_end(ctx, job_id: str) -> list:
    """The job's lifecycle records from the start to its complete record (no sleeping)."""
    records = []
    subscription = await ctx.bus.subscribe(LifecycleFilter(job_id=job_id), since_lifecycle_id="")
    with subscription:
        async for record in subscription:
            records.append(record)
            if record.stage == "toy_complete":
                return records
    raise AssertionError("the subscription ended before the job did")


async def start(nursery, runner: JobRunner) -> None:
    await nursery.start(runner.run)


async def test_phases_run_in_order_and_every_tick_is_a_lifecycle_record():
    store = await open_store("memory")
    ctx, toy = context(store), Toy()
    runner = JobRunner(ctx)
    runner.register(toy.kind())
    async with trio.open_nursery() as nursery:
        await start(nursery, runner)
        await runner.submit(runner.new_record("toy", "job_1", scope="org:acme", params={}))
        records = await until_end(ctx, "job_1")
        nursery.cancel_scope.cancel()
    assert toy.done == ["a", "b1", "b2", "c:in memory"] and toy.finished == [COMPLETED]
    record = await runner.get("job_1")
    assert record["status"] == COMPLETED and record["fraction_complete"] == 1.0
    assert record["phases_started"] == ["a", "b", "c"] and record["progress"]["items"] == 4
    assert all(r.scope == "org:acme" and r.job_id == "job_1" for r in records)
    ticks = [r.payload for r in records if r.stage == "toy_progress"]
    fractions = [t["fraction_complete"] for t in ticks]
    assert fractions == [0.0, 0.25, 0.25, 0.5, 0.75, 0.75, 1.0]  # weights a 1, b 2, c 1
    assert {t["phase"] for t in ticks} == {"a", "b", "c"}
    assert [t["items"] for t in ticks if t["phase"] == "b" and t.get("items", 0) > 1] == [2, 3]
    end = records[-1].payload
    assert end["status"] == COMPLETED and end["toy_id"] == "job_1" and end["summary"] == {"items": 4}
    assert end["fraction_complete"] == 1.0


async def test_cancel_takes_effect_at_the_next_phase_boundary():
    store = await open_store("memory")
    ctx, toy = context(store), Toy()
    runner = JobRunner(ctx)
    runner.register(toy.kind())
    in_b, release = trio.Event(), trio.Event()

    async def hook(job_id, phase, where):
        if phase == "b" and where == "start":
            in_b.set()
            await release.wait()

    runner.hook = hook
    async with trio.open_nursery() as nursery:
        await start(nursery, runner)
        await runner.submit(runner.new_record("toy", "job_1", scope="org:acme", params={}))
        await in_b.wait()
        record, accepted = await runner.cancel("job_1")
        assert accepted and record["status"] == RUNNING and record["cancel_requested_at"] == START
        release.set()
        await until_end(ctx, "job_1")
        nursery.cancel_scope.cancel()
    record = await runner.get("job_1")
    assert record["status"] == CANCELLED and record["phase"] == "b" and record["phases_started"] == ["a", "b"]
    assert toy.done == ["a", "b1", "b2"] and toy.finished == [CANCELLED]
    again, accepted = await runner.cancel("job_1")
    assert not accepted and again["status"] == CANCELLED


async def test_a_retriable_error_is_retried_and_another_fails_the_job(autojump_clock):
    store = await open_store("memory")
    ctx = context(store)
    flaky, broken = Toy(fail_b=Internal("busy", retriable=True), failures=2), Toy(fail_b=InvalidBody("no"), failures=1)
    runner = JobRunner(ctx)
    async with trio.open_nursery() as nursery:
        await start(nursery, runner)
        runner.register(flaky.kind())
        await runner.submit(runner.new_record("toy", "job_1", scope="org:acme", params={}))
        await until_end(ctx, "job_1")
        runner.register(broken.kind())
        await runner.submit(runner.new_record("toy", "job_2", scope="org:acme", params={}))
        await until_end(ctx, "job_2")
        nursery.cancel_scope.cancel()
    first, second = await runner.get("job_1"), await runner.get("job_2")
    assert first["status"] == COMPLETED and first["retries"] == 2 and first["error"] is None
    assert second["status"] == FAILED and broken.finished == [FAILED]
    assert second["error"] == {"error_code": "INVALID_BODY", "message": "no", "phase": "b"}


@pytest.mark.parametrize("resume_b_from", [None, "a"])
async def test_a_job_interrupted_mid_phase_resumes_when_the_runner_starts_again(kv_factory, resume_b_from):
    store = await kv_factory.open()
    ctx, toy = context(store), Toy()
    runner = JobRunner(ctx)
    runner.register(toy.kind(resume_b_from))
    stopped_in = trio.Event()

    async def stop_in(job_id, phase, where):
        if (phase, where) == ("b", "tick") and toy.done[-1] == "b1":
            stopped_in.set()
            await trio.sleep_forever()  # the "crash": the runner's nursery is cancelled here

    runner.hook = stop_in
    async with trio.open_nursery() as nursery:
        await start(nursery, runner)
        await runner.submit(runner.new_record("toy", "job_1", scope="org:acme", params={}))
        await stopped_in.wait()
        nursery.cancel_scope.cancel()
    stored = await ctx.tables.jobs.get("job_1")
    assert stored["status"] == RUNNING and stored["phase"] == "b" and stored["state"] == {"b_halves": 1}

    ctx2, toy2 = context(store, ManualClock("2026-05-13T16:00:00Z")), Toy()
    runner2 = JobRunner(ctx2)
    runner2.register(toy2.kind(resume_b_from))
    async with trio.open_nursery() as nursery:
        await start(nursery, runner2)
        await until_end(ctx2, "job_1")
        nursery.cancel_scope.cancel()
    record = await runner2.get("job_1")
    assert record["status"] == COMPLETED
    assert record["interruptions"] == [{"phase": "b", "at": "2026-05-13T16:00:00Z"}]
    if resume_b_from is None:  # b's first half was checkpointed; a's scratch is gone
        assert toy2.done == ["b2", "c:None"]
    else:  # b needs what a keeps in memory: a runs again
        assert toy2.done == ["a", "b2", "c:in memory"]
    await store.close()
