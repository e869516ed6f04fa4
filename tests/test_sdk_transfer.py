"""The SDK's import and export calls (reference §8.11, §8.12): imports against a live server
through both clients; exports against a stand-in of §8.12 (the polling and failure paths) and
against a live server; the polling schedule and its timeout."""

from __future__ import annotations

import io
import itertools

import httpx
import orjson
import pytest
import trio

from cortexdb.client import AsyncCortexClient, CortexClient, ExportJob, ImportJob
from cortexdb.client._transfer import pauses
from cortexdb.errors import NotFound

from .sdk_support import Sleeps, live
from .test_cli_transfer import ExportServer


class Recording(io.BytesIO):
    """A binary file that remembers how much each read asked for."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.asked: list[int] = []

    def read(self, size: int | None = -1) -> bytes:
        self.asked.append(-1 if size is None else size)
        return super().read(size)


def notes(n: int, scope: str = "user:alice") -> bytes:
    return b"\n".join(orjson.dumps({"scope": scope, "modality": "note", "idempotency_key": f"n{i}",
                                    "content": {"kind": "text", "text": f"note {i}"},
                                    "context": {"observed_at": "2026-01-01T00:00:00Z"}}) for i in range(n))  # fmt: skip


async def test_import_file_status_wait_and_cancel_with_the_blocking_client(tmp_path):
    path = tmp_path / "notes.jsonl"
    path.write_bytes(notes(12) + b"\n{broken\n")
    async with live(tmp_path) as (url, _):

        def scenario() -> tuple:
            seen: list[ImportJob] = []
            with CortexClient(url, actor="user:alice") as client:
                started = client.import_file("jsonl", path, ordering="batch_throughput")  # the default scope
                final = client.wait_import(started.import_id, on_status=seen.append, poll_interval=0.01)
                body = Recording(notes(12) + b"\n" + b" " * 300_000)  # blank lines: nothing to write
                again = client.import_file("jsonl", body, scope_template="user:alice")
                replayed = client.wait_import(again.import_id, poll_interval=0.01)
                assert len(body.asked) > 4 and all(0 < size <= 65536 for size in body.asked)  # streamed
                assert not body.closed  # the caller's file stays open
                cancel = client.import_cancel(again.import_id)
                with pytest.raises(NotFound):
                    client.import_status("imp_nope")
                return started, final, seen, replayed, cancel, client.import_status(started.import_id)

        started, final, seen, replayed, cancel, status = await trio.to_thread.run_sync(scenario)
    assert isinstance(started, ImportJob) and started.import_id.startswith("imp_")
    assert started.scope == "user:alice" and started.format == "cortexdb_jsonl_v1" and started.size_bytes > 0
    assert final.done and final.status == "completed" and seen[-1] == final
    assert final.items == {"read": 13, "written": 12, "replayed": 0, "skipped": 0, "failed": 1}
    assert final.errors[0]["line"] == 13 and final.errors[0]["error"] == "invalid_json"
    assert replayed.items["replayed"] == 12 and replayed.items["written"] == 0
    assert cancel.cancel_accepted is False and cancel.status == "completed"  # it had ended
    assert status == final


async def test_import_with_the_async_client(tmp_path):
    path = tmp_path / "notes.jsonl"
    path.write_bytes(notes(5))
    async with live(tmp_path) as (url, _), AsyncCortexClient(url, actor="user:alice") as client:
        started = await client.import_file("jsonl", path, scope_template="user:alice", on_error="abort")
        final = await client.wait_import(started.import_id, poll_interval=0.01)
        assert final.status == "completed" and final.items["written"] == 5
        assert (await client.import_status(started.import_id)).items == final.items
        texts = [event.text async for event in client.events.iter("user:alice")]
        assert sorted(texts) == [f"note {i}" for i in range(5)]


def test_bad_arguments_are_refused_before_a_request():
    with CortexClient("http://127.0.0.1:9", actor="user:alice") as client:
        for kwargs, says in (({"ordering": "fast"}, "ordering"), ({"on_error": "ignore"}, "on_error")):
            with pytest.raises(ValueError, match=says):
                client.import_file("jsonl", io.BytesIO(b""), **kwargs)
        with pytest.raises(ValueError, match="source"):
            client.import_file("notion", io.BytesIO(b""))
        with pytest.raises(TypeError, match="a path or a binary file"):
            client.import_file("jsonl", 42)
        with pytest.raises(ValueError, match="format"):
            client.export("user:alice", format="csv")


def test_the_polls_pause_longer_each_time_up_to_a_ceiling_and_can_time_out():
    assert list(itertools.islice(pauses(0.2, 2.0), 7)) == [0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0]

    def running(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"import_id": "imp_1", "status": "running"})

    sleeps = Sleeps()
    client = CortexClient("http://cortex.test", transport=httpx.MockTransport(running), sleep=sleeps)
    with client, pytest.raises(TimeoutError):
        client.wait_import("imp_1", timeout=0)
    assert sleeps.pauses == []  # the deadline had passed at the first read: no pause


def test_export_wait_and_download_with_the_blocking_client(tmp_path):
    server = ExportServer(b"line\n" * 4)
    sleeps, seen = Sleeps(), []
    with CortexClient("http://cortex.test", transport=httpx.MockTransport(server), sleep=sleeps,
                      actor="user:alice") as client:  # fmt: skip
        started = client.export(format="mem0", layers=["facts"])
        final = client.wait_export(started.export_id, on_status=seen.append, poll_interval=0.05)
        written = client.export_download(final, tmp_path / "out.json")
        buffer = io.BytesIO()
        assert client.export_download("exp_1", buffer) == 20 and buffer.getvalue() == server.body
    assert isinstance(started, ExportJob) and started.export_id == "exp_1" and not started.done
    assert orjson.loads(server.requests[0][2]) == {"scope": "user:alice", "format": "mem0", "layers": ["facts"]}
    assert [job.status for job in seen] == ["running", "completed"] and sleeps.pauses == [0.05]
    assert final.done and final.download == "/v1/export/exp_1/download"
    assert written == 20 and (tmp_path / "out.json").read_bytes() == server.body


async def test_export_with_the_async_client(tmp_path):
    server = ExportServer(b"{}\n")
    sleeps = Sleeps()
    async with AsyncCortexClient("http://cortex.test", transport=httpx.MockTransport(server), sleep=sleeps.asleep,
                                 actor="user:alice") as client:  # fmt: skip
        started = await client.export("user:alice", format="jsonl", as_of="2026-01-01T00:00:00Z")
        final = await client.wait_export(started.export_id)
        assert final.status == "completed"
        assert await client.export_download(final, tmp_path / "out.jsonl") == 3
    assert (tmp_path / "out.jsonl").read_bytes() == b"{}\n" and sleeps.pauses == [0.2]


async def test_export_against_a_live_server_round_trips_through_the_blocking_client(tmp_path):
    """The real export routes: import notes, export them as JSONL, download the file."""
    path = tmp_path / "notes.jsonl"
    path.write_bytes(notes(5))
    async with live(tmp_path) as (url, _):

        def scenario() -> tuple:
            with CortexClient(url, actor="user:alice") as client:
                client.wait_import(client.import_file("jsonl", path).import_id, poll_interval=0.01)
                started = client.export("user:alice", format="jsonl", layers=["events"])
                final = client.wait_export(started.export_id, poll_interval=0.01)
                out = tmp_path / "out.jsonl"
                return final, client.export_download(final, out), out.read_bytes()

        final, written, data = await trio.to_thread.run_sync(scenario)
    assert final.done and final.status == "completed" and final.download.endswith("/download")
    lines = [orjson.loads(line) for line in data.splitlines() if line.strip()]
    events = [line for line in lines if line.get("record") == "event"]
    assert written == len(data) and len(events) == 5
    assert sorted(e["envelope"]["content"]["text"] for e in events) == [f"note {i}" for i in range(5)]
