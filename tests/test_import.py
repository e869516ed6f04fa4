"""Imports (reference §8.11, §15): the job framework and the JSONL importer, on the memory backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from cortexdb import open_engine
from cortexdb.errors import InvalidBody, UnsupportedFormat

DATA = Path(__file__).parent / "data" / "import"


async def run_import(engine, source, data, **request):
    request.setdefault("scope_template", "org:acme")
    started = await engine.imports.start(source, data, request)
    return started, await engine.imports.wait(started["import_id"])


async def test_jsonl_sample_imports_every_line_and_reimport_replays():
    async with open_engine("memory", id_seed=1) as engine:
        data = (DATA / "jsonl" / "envelopes.jsonl").read_bytes()
        started, status = await run_import(engine, "jsonl", data)
        assert started["estimated_items"] >= 12
        assert status["status"] == "completed", status
        # line 6 refers to a blob this data dir does not have: reported, the rest written
        assert status["items"] == {"read": 12, "written": 11, "replayed": 0, "skipped": 0, "failed": 1}
        assert status["errors"] == [{"line": 6, "error": "invalid_envelope", "detail": status["errors"][0]["detail"]}]
        assert "names no blob" in status["errors"][0]["detail"] and "items[" not in status["errors"][0]["detail"]
        assert status["fraction_complete"] == 1.0
        page = await engine.events("org:acme/user:alice", limit=100)
        assert any(e["content"].get("text") == "Alice is vegetarian" for e in page["items"])
        _, again = await run_import(engine, "jsonl", data)
        assert again["items"]["written"] == 0 and again["items"]["replayed"] == 11


async def test_malformed_lines_are_reported_with_their_line_and_skipped():
    lines = [b'{"scope":"org:acme","modality":"note","content":{"kind":"text","text":"one"},'
             b'"context":{"observed_at":"2026-01-01T00:00:00Z"}}', b"{not json", b"[1]",
             b'{"scope":"org:acme","modality":"note","content":{"kind":"text"},"context":{"observed_at":"2026-01-01T00:00:00Z"}}',
             b'{"scope":"org:other","modality":"note","content":{"kind":"text","text":"x"},"context":{"observed_at":"2026-01-01T00:00:00Z"}}']  # fmt: skip
    async with open_engine("memory", id_seed=1) as engine:
        _, status = await run_import(engine, "jsonl", b"\n".join(lines))
        assert status["status"] == "completed"
        assert status["items"]["written"] == 1 and status["items"]["failed"] == 4
        assert [(e["line"], e["error"]) for e in status["errors"]] == [
            # read errors as the file is sorted; then the write's, a scope at a time (strict_temporal)
            (2, "invalid_json"), (3, "invalid_envelope"), (4, "invalid_envelope"), (5, "scope_outside_import")]
        _, aborted = await run_import(engine, "jsonl", b"\n".join(lines), options={"on_error": "abort"})
        assert aborted["status"] == "failed"
        assert aborted["error"]["error_code"] == "INVALID_BODY" and "line 2" in aborted["error"]["message"]


async def test_bad_requests_are_4xx_before_a_job_starts():
    async with open_engine("memory", id_seed=1) as engine:
        with pytest.raises(InvalidBody):
            await engine.imports.start("jsonl", b"", {})
        with pytest.raises(InvalidBody):
            await engine.imports.start("jsonl", b"", {"scope_template": "org:acme", "options": {"ordering": "x"}})
        with pytest.raises(UnsupportedFormat):
            await engine.imports.start("jsonl", b"", {"scope_template": "org:acme", "format": "jsonl_v9"})


def lines_of(n: int, scope: str = "org:acme") -> bytes:
    import orjson

    return b"\n".join(orjson.dumps({"scope": scope, "modality": "note", "idempotency_key": f"k{i}",
                                    "content": {"kind": "text", "text": f"note number {i}"},
                                    "context": {"observed_at": f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z"}})
                      for i in range(n))  # fmt: skip


@pytest.mark.parametrize("ordering", ["strict_temporal", "batch_throughput"])
async def test_an_import_stopped_mid_phase_resumes_without_duplicates(tmp_path, ordering):
    import trio

    from cortexdb import EngineConfig

    config = EngineConfig(import_window=4, bulk_max_items=4, episode_idle_check=3600.0)
    path = str(tmp_path / "data")
    stopped = trio.Event()
    async with open_engine("leveldb", path=path, id_seed=1, config=config) as engine:

        async def stop_dead(job_id: str, phase: str, where: str) -> None:
            record = await engine.imports.jobs.get(job_id)
            if where == "tick" and record["state"].get("committed", 0) >= 8:
                stopped.set()
                await trio.sleep_forever()  # the engine closes around it: the job is cancelled here

        engine.imports.jobs.hook = stop_dead
        started = await engine.imports.start("jsonl", lines_of(18), {"scope_template": "org:acme",
                                                                      "options": {"ordering": ordering}})  # fmt: skip
        await stopped.wait()
        status = await engine.imports.status(started["import_id"])
        assert status["status"] == "running" and status["items"]["written"] == 8
    async with open_engine("leveldb", path=path, id_seed=2, config=config) as engine:
        status = await engine.imports.wait(started["import_id"])
        assert status["status"] == "completed", status
        assert [i["phase"] for i in status["interruptions"]] == ["write"]
        assert status["items"]["written"] + status["items"]["replayed"] >= 18 - 8
        texts = [e["content"]["text"] for e in (await engine.events("org:acme", limit=100))["items"]]
        assert sorted(texts) == sorted(f"note number {i}" for i in range(18))  # each once


async def test_cancel_stops_an_import_at_its_next_window():
    import trio

    from cortexdb import EngineConfig

    config = EngineConfig(import_window=4, bulk_max_items=4)
    async with open_engine("memory", id_seed=1, config=config) as engine:
        ticked = trio.Event()

        async def pause(job_id: str, phase: str, where: str) -> None:
            record = await engine.imports.jobs.get(job_id)
            if where == "tick" and record["state"].get("committed", 0) == 4 and not ticked.is_set():
                ticked.set()
                await engine.imports.cancel(job_id)

        engine.imports.jobs.hook = pause
        started = await engine.imports.start("jsonl", lines_of(20), {"scope_template": "org:acme"})
        status = await engine.imports.wait(started["import_id"])
        assert status["status"] == "cancelled" and status["items"]["written"] == 4


@pytest.mark.parametrize(("name", "fmt", "count"), [
    ("platform_v1.0_list.json", "mem0_v1_list", 6), ("oss_v0.1_get_all_graph.json", "mem0_results", 8),
    ("oss_v2_get_all.json", "mem0_results", 7), ("platform_v3_get_all_page.json", "mem0_page", 7)])  # fmt: skip
async def test_every_mem0_shape_imports_with_both_time_axes_and_labels(name, fmt, count):
    import json

    raw = json.loads((DATA / "mem0" / name).read_text())
    items = raw if isinstance(raw, list) else raw["results"]
    async with open_engine("memory", id_seed=1) as engine:
        started, status = await run_import(engine, "mem0", (DATA / "mem0" / name).read_bytes(),
                                           scope_template="org:acme/user:{user_id}")  # fmt: skip
        assert (status["format"], status["status"], status["items"]["written"]) == (fmt, "completed", count), status
        user = items[0]["user_id"]
        events = (await engine.events(f"org:acme/user:{user}", limit=100))["items"]
        by_id = {e["context"]["labels"]["mem0_source_id"]: e for e in events if "mem0_source_id" in e["context"]["labels"]}
        first = by_id[items[0]["id"]]
        assert first["content"]["text"] == items[0]["memory"] and first["modality"] == "imported"
        assert first["context"]["labels"]["mem0_created_at"] == items[0]["created_at"]  # as written, zone kept
        assert first["context"]["source_recorded_at"] is not None and first["context"]["observed_at"]
        _, again = await run_import(engine, "mem0", (DATA / "mem0" / name).read_bytes(),
                                    scope_template="org:acme/user:{user_id}")  # fmt: skip
        assert again["items"]["written"] == 0 and again["items"]["replayed"] == count


async def test_mem0_history_rows_are_events_and_an_unknown_shape_is_422():
    async with open_engine("memory", id_seed=1) as engine:
        _, status = await run_import(engine, "mem0", (DATA / "mem0" / "oss_v2_history.json").read_bytes(),
                                     scope_template="org:acme/user:alice")  # fmt: skip
        assert status["format"] == "mem0_history" and status["items"]["written"] == 4
        events = (await engine.events("org:acme/user:alice", limit=100))["items"]
        assert sorted(e["context"]["labels"]["mem0_event"] for e in events) == ["ADD", "ADD", "DELETE", "UPDATE"]
        with pytest.raises(UnsupportedFormat):
            await engine.imports.start("mem0", b'{"memories": []}', {"scope_template": "org:acme"})
        with pytest.raises(UnsupportedFormat):
            await engine.imports.start("mem0", b'"hello"', {"scope_template": "org:acme"})


async def test_a_reimport_replays_after_the_idempotency_window_and_another_scope_gets_its_own_copy():
    """Import keys do not expire with ``idempotency_ttl_seconds`` (a re-sync a week later writes
    nothing new), and they are bound to the scope: the same file into another scope is written
    there, not replayed from the first."""
    import datetime as dt

    from cortexdb import ManualClock

    clock = ManualClock(dt.datetime(2026, 3, 1, tzinfo=dt.UTC))
    data = (DATA / "mem0" / "oss_v2_get_all.json").read_bytes()
    async with open_engine("memory", id_seed=1, clock=clock) as engine:
        _, first = await run_import(engine, "mem0", data, scope_template="org:acme/user:{user_id}")
        written = first["items"]["written"]
        assert first["status"] == "completed" and written > 0
        clock.advance(days=8)  # far past the 24 h an ordinary key lives
        _, again = await run_import(engine, "mem0", data, scope_template="org:acme/user:{user_id}")
        assert again["items"]["written"] == 0 and again["items"]["replayed"] == written
        _, other = await run_import(engine, "mem0", data, scope_template="org:beta/user:{user_id}")
        assert other["items"]["written"] == written and other["items"]["replayed"] == 0
        for org in ("org:acme", "org:beta"):
            users = [s for s in await engine.scope_paths(org) if s.count("/") == 1]
            counts = [len((await engine.events(s, limit=100))["items"]) for s in users]
            assert sum(counts) == written, (org, users, counts, written)


async def test_a_source_over_the_import_limit_is_413_and_its_partial_spool_file_is_removed(tmp_path):
    from cortexdb import EngineConfig
    from cortexdb.errors import PayloadTooLarge

    config = EngineConfig(transfer_dir=str(tmp_path), import_max_bytes=10_000)
    async with open_engine("memory", id_seed=1, config=config) as engine:
        with pytest.raises(PayloadTooLarge) as caught:
            await engine.imports.start("jsonl", lines_of(200), {"scope_template": "org:acme"})
        assert caught.value.http_status == 413 and caught.value.details["limit"] == 10_000
        with pytest.raises(PayloadTooLarge):  # a caller's smaller limit (the server's setting) wins
            await engine.imports.start("jsonl", lines_of(20), {"scope_template": "org:acme"}, max_bytes=500)
        assert list(tmp_path.iterdir()) == [] and engine.imports.jobs.running("import") == 0


async def test_a_truncated_mem0_document_keeps_what_came_before_and_names_where_it_breaks():
    """The job reads the next window while it writes one: what came before the break is written
    whole, the break is a record error (not an internal one), and abort fails the job on it."""
    import orjson

    from cortexdb import EngineConfig

    memories = [{"id": f"m{i}", "memory": f"fact {i}", "user_id": "alice", "created_at": f"2026-01-01T00:00:{i:02d}Z"}
                for i in range(7)]  # fmt: skip
    document = orjson.dumps({"results": memories})
    cut = document[: document.index(b'"id":"m5"')]
    request = {"scope_template": "org:acme/user:{user_id}", "options": {"ordering": "batch_throughput"}}
    async with open_engine("memory", id_seed=1, config=EngineConfig(bulk_max_items=2)) as engine:
        _, status = await run_import(engine, "mem0", cut, **request)
        assert status["status"] == "completed", status
        assert status["items"] == {"read": 6, "written": 5, "replayed": 0, "skipped": 0, "failed": 1}
        (error,) = status["errors"]
        assert error["record"] == 5 and error["error"] == "invalid_json", error
        assert error["detail"].startswith("the JSON breaks at or after record 5")
        texts = {e["content"]["text"] for e in (await engine.events("org:acme/user:alice", limit=100))["items"]}
        assert texts == {f"fact {i}" for i in range(5)}
        _, aborted = await run_import(engine, "mem0", cut, **{**request, "options": {"on_error": "abort"}})
        assert aborted["status"] == "failed" and aborted["error"]["error_code"] == "INVALID_BODY", aborted
        assert "record 5: invalid_json" in aborted["error"]["message"]


async def test_a_memory_engine_keeps_one_transfer_dir_and_its_close_removes_it():
    import os

    from cortexdb.engine.transfer import spool

    async with open_engine("memory", id_seed=1) as engine:
        ctx = engine._ctx
        assert ctx.transfer_tmp is None  # made on first use, not by every engine
        for _ in range(3):
            _, status = await run_import(engine, "jsonl", lines_of(3))
            assert status["status"] == "completed", status
        started = await engine.exports.start({"scope": "org:acme", "format": "jsonl"})
        assert (await engine.exports.wait(started["export_id"]))["status"] == "completed"
        directory = ctx.transfer_tmp
        assert directory is not None and spool.transfer_dir(ctx) == directory  # one for the engine's life
        assert os.path.isdir(directory) and engine.exports.directory() == directory
        assert os.listdir(directory)  # the export's file, kept until the engine closes
    assert not os.path.exists(directory) and ctx.transfer_tmp is None
