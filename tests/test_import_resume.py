"""An import survives the server being killed (reference §8.11; issue 14): a real ``cortexdb serve``
process on a LevelDB directory is killed with SIGKILL once its import job has committed some
windows; a new process on the same directory resumes the job, which ends with every record of the
file stored exactly once (the window in flight when it died is written again and replays)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import orjson
import pytest

from cortexdb.client import CortexClient

ROOT = Path(__file__).resolve().parents[1]
RECORDS = 4000  # batch_throughput windows (and strict_temporal's merged requests) are 1000 records at most
SCOPES = [f"user:alice/project:p{n}" for n in range(3)]  # a window is three bulk writes


def source(path: Path) -> None:
    with open(path, "wb") as out:
        for i in range(RECORDS):
            out.write(orjson.dumps({
                "scope": SCOPES[i % len(SCOPES)], "modality": "note", "idempotency_key": f"rec-{i}",
                "content": {"kind": "text", "text": f"imported note {i}"},
                "context": {"observed_at": f"2026-01-01T{i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z"},
            }) + b"\n")  # fmt: skip


def start(data: Path) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen([sys.executable, "-m", "cortexdb.cli", "serve", "--data", str(data), "--bind",
                                "127.0.0.1:0", "--preset", "dev_local", "--embedder", "hash", "--access-log", "off"],
                               stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)  # fmt: skip
    for line in process.stderr:
        found = re.search(r"serving on (http://127\.0\.0\.1:\d+)", line)
        if found:  # keep draining its log: a full pipe would block the server
            threading.Thread(target=process.stderr.read, daemon=True).start()
            return process, found.group(1)
    process.wait()
    raise AssertionError("the server did not start")


def follow(client: CortexClient, import_id: str, until) -> dict:
    """The job's status once a record of its lifecycle feed (``job_id=``: replayed from the
    job's start, then live) satisfies ``until`` — no polling."""
    for record in client.lifecycle(job_id=import_id):
        if record.stage in ("import_progress", "import_complete") and until(record.stage, record.payload):
            return client.import_status(import_id).raw
    raise AssertionError(f"the lifecycle feed of {import_id} ended first")


def stop(process: subprocess.Popen, how: int) -> None:
    if process.poll() is None:
        process.send_signal(how)
    process.wait(timeout=60)


@pytest.mark.slow
@pytest.mark.parametrize("ordering", ["batch_throughput", "strict_temporal"])
def test_an_import_killed_with_sigkill_resumes_and_stores_each_record_once(tmp_path, ordering):
    data, path = tmp_path / "data", tmp_path / "notes.jsonl"
    source(path)
    process, url = start(data)
    try:
        with CortexClient(url, actor="user:alice") as client:
            started = client.import_file("jsonl", path, scope_template="user:alice", ordering=ordering)
            # a window committed (its progress record is published once its counts are persisted):
            # killed there, the next window is in flight or not yet begun
            seen = follow(client, started.import_id, lambda stage, payload: payload.get("written", 0) > 0)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
    finally:
        stop(process, signal.SIGKILL)
    assert process.returncode == -signal.SIGKILL
    assert seen["status"] == "running" and seen["items"]["written"] < RECORDS, seen
    assert (data / "transfer" / f"{started.import_id}.src").exists()  # the spooled source waits for the resume
    runs = data / "transfer" / f"{started.import_id}.runs"
    if ordering == "strict_temporal":  # sorted before the first write: its runs wait too, durable
        assert runs.is_dir() and os.listdir(runs)

    process, url = start(data)
    try:
        with CortexClient(url, actor="user:alice") as client:
            final = follow(client, started.import_id, lambda stage, payload: stage == "import_complete")
            assert final["status"] == "completed", final
            assert [i["phase"] for i in final["interruptions"]] == ["write"]
            items = final["items"]
            # each record was read once (a window's counts persist with its commit); the part of the
            # window in flight that was stored before the kill replays (its counts died with it)
            assert items["read"] == RECORDS and items["failed"] == 0, items
            assert items["written"] + items["replayed"] == RECORDS and items["replayed"] <= 1000, items
            keys = [event.idempotency_key for scope in SCOPES for event in client.events.iter(scope, limit=1000)]
    finally:
        stop(process, signal.SIGTERM)
    assert process.returncode == 0
    assert len(keys) == RECORDS and set(keys) == {f"rec-{i}" for i in range(RECORDS)}  # each exactly once
    assert not (data / "transfer" / f"{started.import_id}.src").exists()  # removed once it ended
    assert not runs.exists()
