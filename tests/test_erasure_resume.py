"""An erasure interrupted mid-phase resumes when the engine opens again (reference §8.6; issue 12:
"crash-safe").  In process (the engine closed while the job is in its delete phase: its nursery
cancels it), on both backends; and a real process killed with SIGKILL, on LevelDB."""

from __future__ import annotations

import os
import signal
import sys

import trio

import cortexdb
from cortexdb import EngineConfig
from cortexdb.backends import open_store

from .conftest import envelope
from .test_erasure import ALICE, finished

HELPER = os.path.join(os.path.dirname(__file__), "helpers", "erasure_crasher.py")


async def test_an_erasure_stopped_mid_phase_resumes_and_completes(backend, tmp_path, clock):
    config = EngineConfig(erasure_chunk=2, default_caller="user:alice", episode_idle_check=3600.0)
    store = await open_store("memory") if backend == "memory" else None

    def opened(seed: int):
        if store is not None:
            return cortexdb.open_engine(store=store, clock=clock, id_seed=seed, config=config)
        return cortexdb.open_engine("leveldb", path=str(tmp_path / "data"), clock=clock, id_seed=seed, config=config)

    stopped = trio.Event()
    async with opened(1) as engine:
        events = [(await engine.experience(envelope(f"I have {i} cats."), wait="consolidated")).event_id
                  for i in range(7)]  # fmt: skip

        async def stop_dead(job_id: str, phase: str, where: str) -> None:
            record = await engine.erasures.jobs.get(job_id)
            if phase == "delete" and record["state"].get("delete_steps_done", 0) >= 2:
                stopped.set()
                await trio.sleep_forever()  # the engine closes around it: the job is cancelled here

        engine.erasures.jobs.hook = stop_dead
        erasure_id = (await engine.erasures.execute({"scope": ALICE}))["erasure_id"]
        await stopped.wait()
        status = await engine.erasures.status(erasure_id)
        assert status["status"] == "running" and status["scope_state"] == "partially_erased"
    clock.advance(60)
    async with opened(2) as engine:
        status = await finished(engine, erasure_id)
        assert status["status"] == "completed" and status["scope_state"] == "erased", status
        assert [i["phase"] for i in status["interruptions"]] == ["delete"]
        assert status["progress"]["deleted_events"] == len(events)
        assert (await engine.events(ALICE))["items"] == []
        assert await engine.layer_counts(ALICE) == {layer: 0 for layer in await engine.layer_counts(ALICE)}
    if store is not None:
        await store.close()


async def test_an_erasure_killed_with_sigkill_resumes_after_restart(tmp_path):
    path = str(tmp_path / "data")
    process = await trio.lowlevel.open_process([sys.executable, HELPER, path], stdout=-1)
    try:
        buffer = b""
        with trio.fail_after(120):  # a hang guard only
            while b"\n" not in buffer:
                chunk = await process.stdout.receive_some(4096)
                assert chunk, "the helper exited early"
                buffer += chunk
        word, erasure_id = buffer.split(b"\n")[0].decode().split()
        assert word == "stopped"
        process.send_signal(signal.SIGKILL)
        await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == -signal.SIGKILL

    async with cortexdb.open_engine("leveldb", path=path) as engine:
        status = await finished(engine, erasure_id)
        assert status["status"] == "completed" and status["scope_state"] == "erased", status
        assert [i["phase"] for i in status["interruptions"]] == ["delete"]
        assert status["progress"]["deleted_events"] + status["progress"]["redacted_events"] == 40
        assert status["progress"]["redacted_events"] == 1  # the note the team workspace cites
        assert [e["content"]["kind"] for e in (await engine.events(ALICE))["items"]] == ["redacted"]
        row = await engine.tables.audit_rows.get(status["audit_id"])
        assert row["gdpr"] is True and row["summary"]["scope_state"] == "erased"
