"""``strict_temporal`` imports sort the whole file on disk (issue 14; transfer/extsort.py and
sorted_import.py): records held at once and runs written are counted, never timed; the order is
the whole file's within each scope; a job stopped in either step resumes exactly where its record
says; its run files go when it ends and at open; the disk limit fails the job clearly."""

from __future__ import annotations

import os

import orjson
import pytest
import trio

from cortexdb import EngineConfig, open_engine
from cortexdb.engine.transfer import extsort, sorted_import

WINDOW, BULK = 10, 5
SCOPES = ("org:acme/user:alice", "org:acme/user:bob")


def lines(n: int) -> bytes:
    """``n`` notes over two scopes, their times descending through the file (every run of the sort
    is out of order against every other)."""
    return b"\n".join(orjson.dumps({
        "scope": SCOPES[i % 2], "modality": "note", "idempotency_key": f"k{i}",
        "content": {"kind": "text", "text": f"note {i}"},
        "context": {"observed_at": f"2026-01-01T{(n - i) // 3600:02d}:{(n - i) // 60 % 60:02d}:{(n - i) % 60:02d}Z"},
    }) for i in range(n))  # fmt: skip


def config(tmp_path, **more) -> EngineConfig:
    return EngineConfig(import_window=WINDOW, bulk_max_items=BULK, episode_idle_check=3600.0,
                        transfer_dir=str(tmp_path / "transfer"), **more)  # fmt: skip


class Counted:
    """What an import held and wrote, counted at each spill and each bulk request."""

    def __init__(self, monkeypatch, engine) -> None:
        self.chunks: list[int] = []  # records of each run spilled
        self.files: list[int] = []  # run files on disk at each spill
        self.held: list[int] = []  # decoded records holding an envelope at each bulk request
        self.requests: list[tuple[str, list[str]]] = []  # (scope, observed_at of each item)
        self.decoded: list = []
        spill, decode, writes = extsort.Runs.spill, extsort.decode, engine.imports._writes
        bulk = writes.bulk

        def counted_spill(runs, name, chunk, named):
            self.chunks.append(len(chunk))
            self.files.append(len(os.listdir(runs.directory)))
            return spill(runs, name, chunk, named)

        def counted_decode(payload, *shared):
            item = decode(payload, *shared)
            self.decoded.append(item)
            return item

        async def counted_bulk(request, **kwargs):
            self.held.append(sum(1 for item in self.decoded if item.envelope is not None))
            self.requests.append((request["scope"], [i["context"]["observed_at"] for i in request["items"]]))
            return await bulk(request, **kwargs)

        monkeypatch.setattr(extsort.Runs, "spill", counted_spill)
        monkeypatch.setattr(extsort, "decode", counted_decode)
        monkeypatch.setattr(writes, "bulk", counted_bulk)


async def imported(engine, data: bytes) -> dict:
    started = await engine.imports.start("jsonl", data, {"scope_template": "org:acme"})  # strict_temporal
    return await engine.imports.wait(started["import_id"])


@pytest.mark.parametrize("windows", [3, 30])
async def test_a_strict_import_holds_a_run_then_a_request_whatever_the_file_length(tmp_path, monkeypatch, windows):
    n = windows * WINDOW
    async with open_engine("memory", id_seed=1, config=config(tmp_path, import_sort_fan_in=4)) as engine:
        seen = Counted(monkeypatch, engine)
        status = await imported(engine, lines(n))
        assert status["status"] == "completed" and status["items"]["written"] == n, status
        assert not os.listdir(tmp_path / "transfer")  # the source and the runs removed
    assert seen.chunks == [WINDOW] * windows  # a run per import_window records, read once
    assert max(seen.files) <= 4  # more than fan_in runs are merged: never more files than that
    # while writing: the request being written and the next one, read ahead: never a run's worth
    # and one record of the request after it, read past the next's end: never a run's worth
    assert 0 < max(seen.held) <= 2 * BULK + 1
    assert len(seen.decoded) == n and all(item.envelope is None for item in seen.decoded)


async def test_a_strict_import_writes_each_scope_in_observed_order_across_the_whole_file(tmp_path, monkeypatch):
    n = 7 * WINDOW
    async with open_engine("memory", id_seed=1, config=config(tmp_path, import_sort_fan_in=3)) as engine:
        seen = Counted(monkeypatch, engine)
        status = await imported(engine, lines(n))
        assert status["status"] == "completed"
    for scope in SCOPES:
        times = [t for s, batch in seen.requests if s == scope for t in batch]
        assert len(times) == n // 2 and times == sorted(times)  # the file's order was descending
    assert [s for s, _ in seen.requests] == sorted(s for s, _ in seen.requests)  # a scope at a time
    assert all(len(batch) == BULK for _, batch in seen.requests)  # full requests


@pytest.mark.parametrize("step", ["sort", "merge"])
async def test_a_strict_import_stopped_in_either_step_resumes_where_its_record_says(tmp_path, step):
    n, path = 6 * WINDOW, str(tmp_path / "data")
    cfg = config(tmp_path, import_sort_fan_in=3)
    stopped = trio.Event()
    fractions: list[float] = []
    named: set[str] = set()
    async with open_engine("leveldb", path=path, id_seed=1, config=cfg) as engine:

        async def stop_dead(job_id: str, phase: str, where: str) -> None:
            record = await engine.imports.jobs.get(job_id)
            fractions.append(record["fraction_complete"])
            sort = record["state"].get("sort", {})
            if where == "tick" and (len(sort.get("runs", ())) >= 2 and not sort["done"] if step == "sort"
                                    else record["state"].get("committed", 0) >= 2 * BULK):  # fmt: skip
                named.update(run["name"] for run in sort["runs"])  # as the record persisted at this tick
                stopped.set()
                await trio.sleep_forever()  # the engine closes around it: the job is cancelled here

        engine.imports.jobs.hook = stop_dead
        started = await engine.imports.start("jsonl", lines(n), {"scope_template": "org:acme"})
        await stopped.wait()
        at_stop = await engine.imports.status(started["import_id"])
    runs_dir = tmp_path / "transfer" / f"{started['import_id']}.runs"
    assert named and named <= set(os.listdir(runs_dir))
    (runs_dir / "run-999999").write_bytes(b"a run being written when it stopped")
    async with open_engine("leveldb", path=path, id_seed=2, config=cfg) as engine:
        engine.imports.jobs.hook = None
        status = await engine.imports.wait(started["import_id"])
        events = [e for scope in SCOPES for e in (await engine.events(scope, limit=100))["items"]]
    assert status["status"] == "completed" and [i["phase"] for i in status["interruptions"]] == ["write"]
    items = status["items"]
    # exactly what was committed is skipped: nothing written twice, nothing replayed, nothing lost
    assert (items["read"], items["written"], items["replayed"], items["failed"]) == (n, n, 0, 0), items
    assert at_stop["items"]["written"] == (0 if step == "sort" else 2 * BULK)
    assert sorted(e["idempotency_key"] for e in events) == sorted(f"k{i}" for i in range(n))
    assert fractions == sorted(fractions) and at_stop["fraction_complete"] <= status["fraction_complete"]
    assert not runs_dir.exists()


async def test_the_runs_go_when_the_job_fails_or_is_cancelled_and_at_open_for_jobs_not_running(tmp_path):
    path, cfg = str(tmp_path / "data"), config(tmp_path)
    transfer = tmp_path / "transfer"
    async with open_engine("leveldb", path=path, id_seed=1, config=cfg) as engine:
        started = await engine.imports.start("jsonl", lines(3 * WINDOW) + b"\n{bad", {
            "scope_template": "org:acme", "options": {"on_error": "abort"}})  # fmt: skip
        failed = await engine.imports.wait(started["import_id"])
        assert failed["status"] == "failed" and failed["items"]["written"] == 0  # found while sorting
        assert not (transfer / f"{started['import_id']}.runs").exists()

        async def cancel_once_sorted(job_id: str, phase: str, where: str) -> None:
            record = await engine.imports.jobs.get(job_id)
            if record["state"].get("committed", 0) == BULK:
                assert os.listdir(transfer / f"{job_id}.runs")
                await engine.imports.cancel(job_id)

        engine.imports.jobs.hook = cancel_once_sorted
        started = await engine.imports.start("jsonl", lines(3 * WINDOW), {"scope_template": "org:acme"})
        cancelled = await engine.imports.wait(started["import_id"])
        assert cancelled["status"] == "cancelled" and cancelled["items"]["written"] == BULK
        assert not (transfer / f"{started['import_id']}.runs").exists()
    (transfer / "imp_gone.runs").mkdir()  # a job whose end was not seen through, or whose record is gone
    (transfer / "imp_gone.runs" / "run-000000").write_bytes(b"x")
    async with open_engine("leveldb", path=path, id_seed=2, config=cfg):
        assert not (transfer / "imp_gone.runs").exists()


async def test_runs_beyond_the_disk_limit_fail_the_job_clearly(tmp_path):
    async with open_engine("memory", id_seed=1, config=config(tmp_path, import_sort_max_bytes=2000)) as engine:
        status = await imported(engine, lines(3 * WINDOW))
    assert status["status"] == "failed" and status["items"]["written"] == 0
    assert status["error"]["error_code"] == "PAYLOAD_TOO_LARGE"
    assert "import_sort_max_bytes (2000)" in status["error"]["message"]
    assert not os.listdir(tmp_path / "transfer")


def test_a_run_prunes_the_files_its_record_does_not_name(tmp_path):
    runs = extsort.Runs(str(tmp_path / "r"), 1 << 20, 4)
    runs.prune([])
    key = (b"org:a", 0, 1.0, 0)
    chunk = extsort.Chunk()
    chunk.add(key, b"[]")
    named = [runs.spill("run-000000", chunk, [])]
    (tmp_path / "r" / "run-000001").write_bytes(b"partial")
    runs.prune(named)
    assert os.listdir(tmp_path / "r") == ["run-000000"]
    assert [(k, bytes(payload)) for k, payload in runs.merged(named)] == [(key, b"[]")]
    assert sorted_import.SORT_SHARE < 1


async def test_runs_missing_at_a_resume_fail_the_job_clearly_and_a_failing_disk_is_named(tmp_path, monkeypatch):
    runs = extsort.Runs(str(tmp_path / "r"), 1 << 20, 4)
    with pytest.raises(Exception, match="sorted runs of this import are missing"):
        runs.prune([{"name": "run-000000", "count": 1, "bytes": 40}])

    def full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(extsort.Runs, "spill", full)
    async with open_engine("memory", id_seed=1, config=config(tmp_path, job_retry_limit=1)) as engine:
        status = await imported(engine, lines(WINDOW))
    assert status["status"] == "failed" and "No space left on device" in status["error"]["message"], status
    assert status["error"]["error_code"] == "INTERNAL" and status["items"]["written"] == 0


@pytest.mark.parametrize("setting", [{"import_sort_fan_in": 1}, {"import_sort_fan_in": 0}, {"import_sort_max_bytes": 0}])
def test_a_sort_setting_that_cannot_work_is_refused_by_name(setting):
    (name,) = setting
    with pytest.raises(ValueError, match=name):
        EngineConfig(**setting)
