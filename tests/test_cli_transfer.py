"""``cortexdb import`` and ``cortexdb export`` (cortexdb/cli_transfer.py): on a data directory
through the embedded engine, against a live server through the SDK, and their one-line errors."""

from __future__ import annotations

import io
import json
from pathlib import Path

import httpx
import orjson
import pytest
import trio

import cortexdb
from cortexdb import cli_transfer
from cortexdb.cli import main

from .sdk_support import live

DATA = Path(__file__).parent / "data" / "import"


def notes(path: Path, n: int, scope: str = "org:acme/user:alice", bad: bool = False) -> Path:
    lines = [orjson.dumps({"scope": scope, "modality": "note", "idempotency_key": f"note-{i}",
                           "content": {"kind": "text", "text": f"note number {i}"},
                           "context": {"observed_at": f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z"}})
             for i in range(n)]  # fmt: skip
    if bad:
        lines.insert(1, b"{not json")
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


async def stored_texts(data_dir: Path, scope: str) -> list[str]:
    async with cortexdb.open_engine("leveldb", str(data_dir), config=cortexdb.EngineConfig(embedder="hash")) as engine:
        return [e["content"]["text"] for e in (await engine.events(scope, limit=1000))["items"]]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- a data directory (the embedded engine) ------------------------------------------------------
def test_import_into_a_data_dir_reports_counts_and_errors_and_a_rerun_replays(tmp_path, capsys):
    source, data = notes(tmp_path / "notes.jsonl", 5, bad=True), tmp_path / "data"
    code, out, err = run(capsys, "import", "jsonl", str(source), "--scope", "org:acme", "--data-dir", str(data),
                         "--embedder", "hash", "--ordering", "batch_throughput")  # fmt: skip
    assert code == 1, err  # completed, but a record failed
    assert "created the data directory" in err and "Traceback" not in err
    assert "jsonl (cortexdb_jsonl_v1) into org:acme" in out and ": completed in " in out
    assert "read 6  written 5  replayed 0  skipped 0  failed 1" in out
    assert "first errors (1 of 1):" in out and "line 2: invalid_json:" in out
    assert sorted(trio.run(stored_texts, data, "org:acme/user:alice")) == sorted(f"note number {i}" for i in range(5))
    code, out, _ = run(capsys, "import", "jsonl", str(notes(source, 5)), "--scope", "org:acme", "--data-dir",
                       str(data))  # fmt: skip
    assert code == 0 and "read 5  written 0  replayed 5  skipped 0  failed 0" in out
    assert len(trio.run(stored_texts, data, "org:acme/user:alice")) == 5


def test_import_of_a_mem0_file_expands_the_scope_template(tmp_path, capsys):
    data = tmp_path / "data"
    code, out, err = run(capsys, "import", "mem0", str(DATA / "mem0" / "oss_v2_get_all.json"), "--scope",
                         "org:acme/user:{user_id}", "--data-dir", str(data), "--embedder", "hash",
                         "--source-format", "mem0_results")  # fmt: skip
    assert code == 0, err
    assert "mem0 (mem0_results) into org:acme" in out and "written 7 " in out
    texts = trio.run(stored_texts, data, "org:acme/user:alice")
    assert "Alice speaks French and Norwegian" in texts and len(texts) == 7


def test_on_error_abort_fails_the_job_at_the_first_bad_record(tmp_path, capsys):
    source = notes(tmp_path / "notes.jsonl", 3, bad=True)
    code, out, _ = run(capsys, "import", "jsonl", str(source), "--scope", "org:acme", "--data-dir",
                       str(tmp_path / "data"), "--embedder", "hash", "--on-error", "abort")  # fmt: skip
    assert code == 1
    assert ": failed in " in out and "error: INVALID_BODY: line 2: invalid_json" in out


@pytest.mark.parametrize("case", ["missing file", "directory", "wrong format", "declared format", "not a data dir",
                                  "locked", "no-wait embedded", "template"])  # fmt: skip
def test_import_refusals_are_one_line_and_exit_2(tmp_path, capsys, case):
    import plyvel

    source, data = notes(tmp_path / "notes.jsonl", 2), tmp_path / "data"
    args = ["import", "jsonl", str(source), "--scope", "org:acme", "--data-dir", str(data), "--embedder", "hash"]
    held = None
    if case == "missing file":
        args[2] = str(tmp_path / "nope.jsonl")
    elif case == "directory":
        args[2] = str(tmp_path)
    elif case == "wrong format":
        args[1] = "mem0"
    elif case == "declared format":
        args += ["--source-format", "jsonl_v9"]
    elif case == "not a data dir":
        data.mkdir()
        (data / "notes.txt").write_text("mine")
    elif case == "locked":
        held = plyvel.DB(str(data), create_if_missing=True)
    elif case == "no-wait embedded":
        args.append("--no-wait")
    elif case == "template":
        args[4] = "{user_id}"
    try:
        code, out, err = run(capsys, *args)
    finally:
        if held is not None:
            held.close()
    said = {"missing file": "nope.jsonl: no such file", "directory": "not a file",
            "wrong format": "UNSUPPORTED_FORMAT: not a Mem0 export", "declared format": "UNSUPPORTED_FORMAT",
            "not a data dir": "is not a CortexDB data directory", "locked": "is in use by another process",
            "no-wait embedded": "--no-wait needs a server", "template": "INVALID_BODY: the scope template"}[case]  # fmt: skip
    assert code == 2 and out == ""
    assert err.startswith("cortexdb: import: ") and said in err and err.count("\n") == 1, err


def test_an_unreachable_server_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(cli_transfer.CLIENT_OPTIONS, "sleep", lambda seconds: None)  # its retries do not wait
    code, out, err = run(capsys, "import", "jsonl", str(notes(tmp_path / "n.jsonl", 1)), "--scope", "org:acme",
                         "--server", "http://127.0.0.1:9")  # fmt: skip
    assert code == 2 and out == ""
    assert err == ("cortexdb: import: cannot reach the server at http://127.0.0.1:9 (is `cortexdb serve` running "
                   "there? --server URL or $CORTEX_URL names another)\n")  # fmt: skip


def test_server_and_data_dir_exclude_each_other(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["import", "jsonl", "f", "--scope", "org:acme", "--server", "http://x", "--data-dir", str(tmp_path)])
    assert exit_.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


# -- a live server (the SDK) ----------------------------------------------------------------------
async def test_import_through_a_server(tmp_path, capsys):
    source = notes(tmp_path / "notes.jsonl", 30, scope="user:alice/project:p1", bad=True)
    async with live(tmp_path) as (url, _):
        argv = ["import", "jsonl", str(source), "--scope", "user:alice", "--server", url, "--actor", "user:alice"]
        code = await trio.to_thread.run_sync(main, argv)
        out, err = capsys.readouterr()
        assert code == 1, err
        assert f"started on {url}: jsonl (cortexdb_jsonl_v1) into user:alice" in out
        assert "read 31  written 30  replayed 0  skipped 0  failed 1" in out and "line 2: invalid_json" in out
        code = await trio.to_thread.run_sync(main, [*argv, "--no-wait"])
        out, _ = capsys.readouterr()
        assert code == 0 and "follow it with GET /v1/import/imp_" in out and "read " not in out
        # another caller's scope: refused before a job starts
        code = await trio.to_thread.run_sync(main, [*argv[:4], "user:bob", *argv[5:]])
        err = capsys.readouterr().err
        assert code == 2 and err.startswith("cortexdb: import: NOT_A_MEMBER: ") and err.count("\n") == 1, err


# -- export (reference §8.12; the server side is built on another branch) -----------------------
class ExportServer:
    """A stand-in for §8.12's export endpoints (an httpx transport): accepts an export, reports it
    running once, then completed, and serves its file."""

    def __init__(self, body: bytes, outcome: str = "completed") -> None:
        self.body, self.outcome, self.requests, self.polls = body, outcome, [], 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append((request.method, request.url.path, request.content))
        if request.method == "POST" and request.url.path == "/v1/export":
            return httpx.Response(202, json={"export_id": "exp_1", "status": "running",
                                             "lifecycle_stream": "/v1/lifecycle/stream?export_id=exp_1"})  # fmt: skip
        if request.url.path == "/v1/export/exp_1":
            self.polls += 1
            if self.polls == 1:
                return httpx.Response(200, json={"export_id": "exp_1", "status": "running", "fraction_complete": 0.5})
            error = {"error_code": "INTERNAL", "message": "disk full"} if self.outcome == "failed" else None
            return httpx.Response(200, json={"export_id": "exp_1", "status": self.outcome, "fraction_complete": 1.0,
                                             "size_bytes": len(self.body), "error": error,
                                             "download": "/v1/export/exp_1/download"})  # fmt: skip
        if request.url.path == "/v1/export/exp_1/download":
            return httpx.Response(200, content=self.body)
        return httpx.Response(404, json={"error_code": "NOT_FOUND", "message": request.url.path})


@pytest.mark.parametrize("outcome", ["completed", "failed"])
def test_export_through_a_server_writes_the_file_only_when_complete(tmp_path, capsys, monkeypatch, outcome):
    server = ExportServer(b'{"record": "event"}\n' * 3, outcome)
    monkeypatch.setitem(cli_transfer.CLIENT_OPTIONS, "transport", httpx.MockTransport(server))
    monkeypatch.setitem(cli_transfer.CLIENT_OPTIONS, "sleep", lambda seconds: None)
    out_file = tmp_path / "alice.jsonl"
    code, _, err = run(capsys, "export", "--scope", "org:acme/user:alice", "--format", "jsonl", "--layers",
                       "events,facts", "--as-of", "2026-01-01T00:00:00Z", "--out", str(out_file), "--server",
                       "http://cortex.test")  # fmt: skip
    method, path, body = server.requests[0]
    assert (method, path) == ("POST", "/v1/export")
    assert json.loads(body) == {"scope": "org:acme/user:alice", "format": "jsonl", "layers": ["events", "facts"],
                                "as_of": "2026-01-01T00:00:00Z"}  # fmt: skip
    assert not (tmp_path / "alice.jsonl.part").exists()
    if outcome == "completed":
        assert code == 0 and out_file.read_bytes() == server.body
        assert f"export exp_1: completed, 60 bytes of jsonl to {out_file}" in err
    else:
        assert code == 1 and not out_file.exists()
        assert "export exp_1: failed: INTERNAL: disk full" in err


def test_export_refuses_an_unknown_layer_and_a_missing_data_dir(tmp_path, capsys):
    code, _, err = run(capsys, "export", "--scope", "org:acme", "--format", "mem0", "--layers", "events,moods")
    assert code == 2 and err == "cortexdb: export: --layers: unknown layer 'moods' (known: events, episodes, facts, beliefs)\n"
    code, _, err = run(capsys, "export", "--scope", "org:acme", "--format", "mem0", "--data-dir", str(tmp_path / "x"))
    assert code == 2 and "does not exist (nothing was created)" in err
    assert not (tmp_path / "x").exists()


# -- the progress bar -------------------------------------------------------------------------------
class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_progress_bar_counts_settled_records_and_ends_at_the_real_total(monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    bar = cli_transfer.Progress()
    running = {"status": "running", "total": 101, "processed": 100,
               "items": {"read": 100, "written": 40, "replayed": 9, "skipped": 0, "failed": 1}}  # fmt: skip
    bar.show(running)
    assert "50/101" in terminal.getvalue() and "written 40, replayed 9, failed 1" in terminal.getvalue()
    bar.show({**running, "status": "completed", "items": {**running["items"], "written": 90}})
    bar.close()
    assert "100/100" in terminal.getvalue()  # the estimate (lines + 1) gave way to the count
    percent = cli_transfer.Progress(percent=True)
    percent.show({"status": "running", "fraction_complete": 0.42})
    percent.close()
    assert "42/100" in terminal.getvalue()
    quiet = cli_transfer.Progress(enabled=False)
    quiet.show(running)
    assert quiet.bar is None


def test_export_from_a_data_dir_writes_what_the_import_wrote(tmp_path, capsys):
    """The embedded path end to end: import into a data dir, export it as JSONL and as Mem0."""
    source, data = notes(tmp_path / "notes.jsonl", 4), tmp_path / "data"
    code, _, err = run(capsys, "import", "jsonl", str(source), "--scope", "org:acme", "--data-dir", str(data),
                       "--embedder", "hash")  # fmt: skip
    assert code == 0, err
    out_file = tmp_path / "out.jsonl"
    code, _, err = run(capsys, "export", "--scope", "org:acme/user:alice", "--format", "jsonl", "--layers", "events",
                       "--data-dir", str(data), "--embedder", "hash", "--out", str(out_file))  # fmt: skip
    assert code == 0, err
    lines = [orjson.loads(line) for line in out_file.read_bytes().splitlines() if line.strip()]
    texts = sorted(line["envelope"]["content"]["text"] for line in lines if line.get("record") == "event")
    assert texts == [f"note number {i}" for i in range(4)] and not (tmp_path / "out.jsonl.part").exists()
    mem0_file = tmp_path / "out.json"
    code, _, err = run(capsys, "export", "--scope", "org:acme/user:alice", "--format", "mem0",
                       "--data-dir", str(data), "--embedder", "hash", "--out", str(mem0_file))  # fmt: skip
    assert code == 0, err
    memories = orjson.loads(mem0_file.read_bytes())["results"]
    assert sorted(m["memory"] for m in memories) == [f"note number {i}" for i in range(4)]
