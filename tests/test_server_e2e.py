"""End to end against a real Hypercorn server on 127.0.0.1:0: the SDK (sync and async), raw
HTTP (httpx), the SSE lifecycle feed with disconnect and resume, policy propagation to an open
stream, the WebSocket feed (trio-websocket), and a real `cortexdb serve` process."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import trio
import trio_websocket

from cortexdb import EngineConfig, ManualClock
from cortexdb.client import AsyncCortexClient, CortexClient
from cortexdb.errors import PolicyDenied
from cortexdb.server.serve import run_server
from cortexdb.server.settings import ServerSettings

from .server_support import START, TENANT, Keys, body

ROOT = Path(__file__).resolve().parents[1]


@asynccontextmanager
async def live(tmp_path, preset: str = "on_prem_enterprise", engine_config: EngineConfig | None = None,
               **settings):  # fmt: skip
    clock = ManualClock(START)
    keys = Keys(tmp_path, clock)
    options = dict(preset=preset, backend="memory", tenant=TENANT, bind="127.0.0.1:0",
                   issuer_dirs=[str(keys.dir)], operators=("user:root",), stream_keepalive=60.0)  # fmt: skip
    options.update(settings)
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(lambda task_status: run_server(
            ServerSettings(**options), shutdown_trigger=stop.wait, clock=clock, id_seed=5,
            engine_config=engine_config or EngineConfig(episode_idle_check=3600.0),
            task_status=task_status))  # fmt: skip
        try:
            yield binds[0], keys
        finally:
            stop.set()


def auth(keys: Keys, actor: str = "user:alice", **mint) -> dict[str, str]:
    return {"Authorization": f"Bearer {keys.paseto(actor, **mint)}", "X-Cortex-Actor": actor}


async def anchor(http: httpx.AsyncClient, keys: Keys, scope: str, actor: str = "user:alice") -> str:
    """Write one event and return its captured lce id: a resume point taken before the test's writes."""
    r = await http.post("/v1/experience", json=body("anchor", scope=scope), headers=auth(keys, actor))
    rows = (await http.get(f"/v1/lifecycle?event_id={r.json()['event_id']}", headers=auth(keys, actor))).json()
    return rows["items"][0]["lifecycle_id"]


_LINES: dict[int, object] = {}


async def read_sse(response: httpx.Response, count: int) -> list[tuple[str | None, str, dict]]:
    """The next ``count`` frames (fewer if the stream ends); callable repeatedly on one response."""
    lines = _LINES.setdefault(id(response), response.aiter_lines())
    frames, current = [], {"id": None, "event": None, "data": None}
    async for line in lines:
        if line == "":
            if current["data"] is not None:
                frames.append((current["id"], current["event"], json.loads(current["data"])))
                if len(frames) == count:
                    return frames
            current = {"id": None, "event": None, "data": None}
        elif not line.startswith(":"):
            field, _, value = line.partition(": ")
            current[field] = value
    return frames


async def test_sdk_async_and_sync_against_a_live_server(tmp_path):
    async with live(tmp_path) as (url, keys):
        async with AsyncCortexClient(url, actor="user:alice", token=keys.paseto("user:alice")) as client:
            receipt = await client.experience(text="Alice works at Acme.", scope="org:acme/user:alice", wait="indexed")
            assert receipt.status == "indexed" and receipt.event_id.startswith("evt_")
            assert "extracted" in receipt.stages_completed
            pack = await client.recall(scope="org:acme/user:alice", query="where does Alice work")
            assert pack.pack_id.startswith("pack_") and pack.layers.events
            page = await client.events("org:acme/user:alice", limit=10)
            assert [e["id"] for e in page.items] == [receipt.event_id]
            with pytest.raises(PolicyDenied) as denied:  # a token whose caps leave out reads
                await _denied_recall(url, keys)
            assert denied.value.details["denied_by_tier"] == "token"
            assert denied.value.request_id.startswith("req_")

        def sync_side() -> tuple:
            with CortexClient(url, actor="user:alice", token=keys.paseto("user:alice")) as client:
                when = {"observed_at": "2026-05-13T15:00:00Z"}
                first = client.experience(text="Alice likes tea.", scope="org:acme/user:alice",
                                          idempotency_key="sync-1", context=when)  # fmt: skip
                again = client.experience(text="Alice likes tea.", scope="org:acme/user:alice",
                                          idempotency_key="sync-1", context=when)  # fmt: skip
                who = client.whoami()
                stream = client.lifecycle(event_id=first.event_id)
                stages = [next(stream).event for _ in range(2)]
                stream.close()
                return first, again, who, stages

        first, again, who, stages = await trio.to_thread.run_sync(sync_side)
        assert again.replay and again.event_id == first.event_id and not first.replay
        assert who["caller"] == "user:alice"
        assert stages == ["captured", "extracted"]


async def _denied_recall(url: str, keys: Keys):
    async with AsyncCortexClient(url, actor="user:alice",
                                 token=keys.paseto("user:alice", caps=["scope.write"])) as narrow:  # fmt: skip
        await narrow.recall(scope="org:acme/user:alice", query="x")


async def test_sdk_lifecycle_resumes_after_the_server_drops_a_lagging_stream(tmp_path):
    """A subscriber buffer of 2 makes the server close the stream with `lagging` when a bulk write
    lands at once; the SDK reconnects from the last delivered id and misses nothing."""
    scope = "org:acme/user:alice"
    config = EngineConfig(episode_idle_check=3600.0, subscriber_buffer=2)
    async with live(tmp_path, engine_config=config) as (url, keys), httpx.AsyncClient(base_url=url) as http:
        since = await anchor(http, keys, scope)
        subscribed = trio.Event()

        def follow() -> list[str]:
            with CortexClient(url, actor="user:alice", token=keys.paseto("user:alice")) as client:
                seen = []
                for event in client.lifecycle(scope=scope, events="captured", since_lifecycle_id=since):
                    seen.append(event.lifecycle_id)
                    if len(seen) == 1:  # the stream is live: let the bulk write go
                        trio.from_thread.run_sync(subscribed.set)
                    if len(seen) == 13:
                        return seen
            return seen

        async with trio.open_nursery() as nursery:
            result: list[list[str]] = []

            async def run_follow() -> None:
                result.append(await trio.to_thread.run_sync(follow))

            nursery.start_soon(run_follow)
            await http.post("/v1/experience", json=body("first"), headers=auth(keys))
            await subscribed.wait()
            items = [{k: v for k, v in body(f"bulk {i}").items() if k != "scope"} for i in range(12)]
            bulk = await http.post("/v1/experience/bulk", json={"scope": scope, "items": items}, headers=auth(keys))
            assert bulk.status_code == 202, bulk.text
        catch_up = (await http.get(f"/v1/lifecycle?scope={scope}&events=captured&since_lifecycle_id={since}",
                                   headers=auth(keys))).json()["items"]  # fmt: skip
        assert result[0] == [row["lifecycle_id"] for row in catch_up] and len(catch_up) == 13
        metrics = (await http.get("/v1/admin/metrics", headers=auth(keys))).text
        streams = re.search(r'route="/v1/lifecycle/stream",status="200"\} (\d+)', metrics)
        assert streams and int(streams.group(1)) >= 2  # the server dropped the stream; the SDK came back


@pytest.mark.parametrize("http_server", ["cortex", "hypercorn"])
async def test_sse_stream_disconnects_and_resumes_without_gaps_or_duplicates(tmp_path, http_server):
    scope = "org:acme/user:alice"
    async with live(tmp_path, http_server=http_server) as (url, keys), httpx.AsyncClient(base_url=url) as http:
        since = await anchor(http, keys, scope)
        stream_url = f"/v1/lifecycle/stream?scope={scope}&events=captured"
        written = []
        async with http.stream("GET", stream_url, headers={**auth(keys), "Last-Event-ID": since}) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            for i in range(3):
                r = await http.post("/v1/experience", json=body(f"first {i}", scope=scope), headers=auth(keys))
                written.append(r.json()["event_id"])
            first = await read_sse(response, 3)
        for i in range(3):  # written while disconnected
            r = await http.post("/v1/experience", json=body(f"second {i}", scope=scope), headers=auth(keys))
            written.append(r.json()["event_id"])
        resume = first[-1][0]
        async with http.stream("GET", stream_url + f"&since_lifecycle_id={resume}", headers=auth(keys)) as response:
            second = await read_sse(response, 3)
        frames = first + second
        assert [f[2]["event_id"] for f in frames] == written
        ids = [f[0] for f in frames]
        assert len(set(ids)) == 6 and ids == sorted(ids)
        catch_up = (await http.get(f"/v1/lifecycle?scope={scope}&events=captured&since_lifecycle_id={since}",
                                   headers=auth(keys))).json()  # fmt: skip
        assert [r["lifecycle_id"] for r in catch_up["items"]] == ids


async def test_recall_streams_as_server_sent_events(tmp_path):
    async with live(tmp_path) as (url, keys), httpx.AsyncClient(base_url=url) as http:
        await http.post("/v1/experience?wait=indexed", json=body("Alice likes green tea."), headers=auth(keys))
        request = {"scope": "org:acme/user:alice", "query": "tea", "stream": True}
        async with http.stream("POST", "/v1/recall", json=request, headers=auth(keys)) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            frames = await read_sse(response, 100)
        names = [name for _, name, _ in frames]
        assert names[0] == "plan" and names[-1] == "done"
        assert {"layer", "context_block", "provenance", "diagnostics"} <= set(names)
        layers = {data["layer"] for _, name, data in frames if name == "layer"}
        assert "events" in layers
        # a bad request is an envelope before any event is sent
        bad = await http.post("/v1/recall", json={**request, "budgets": {"max_tokens": -1}}, headers=auth(keys))
        assert bad.status_code == 422 and bad.json()["error_code"] == "INVALID_RECALL"


async def test_policy_change_revokes_an_open_stream(tmp_path):
    scope = "org:acme/user:bob"
    async with live(tmp_path, enable_experimental=True) as (url, keys), httpx.AsyncClient(base_url=url) as http:
        since = await anchor(http, keys, scope, "user:bob")
        async with http.stream("GET", f"/v1/lifecycle/stream?scope={scope}&events=captured",
                               headers={**auth(keys, "user:bob"), "Last-Event-ID": since}) as response:  # fmt: skip
            await http.post("/v1/experience", json=body("one", scope=scope), headers=auth(keys, "user:bob"))
            frames = await read_sse(response, 1)
            put = await http.put("/v1/policy/actor/user:bob", json={"deny": ["lifecycle.subscribe"]},
                                 headers=auth(keys, "user:root"))  # fmt: skip
            assert put.status_code == 200, put.text
            await http.post("/v1/experience", json=body("two", scope=scope), headers=auth(keys, "user:bob"))
            frames += await read_sse(response, 5)
        assert [f[1] for f in frames] == ["captured", "policy_revoked"]
        assert "lifecycle.subscribe" in frames[1][2]["reason"]
        refused = await http.get(f"/v1/lifecycle/stream?scope={scope}", headers=auth(keys, "user:bob"))
        assert refused.status_code == 403 and refused.json()["details"]["denied_by_tier"] == "actor"


@pytest.mark.parametrize("http_server", ["cortex", "hypercorn"])
async def test_websocket_lifecycle_feed(tmp_path, http_server):
    scope = "org:acme/user:alice"
    async with live(tmp_path, http_server=http_server) as (url, keys), httpx.AsyncClient(base_url=url) as http:
        since = await anchor(http, keys, scope)
        ws_url = url.replace("http://", "ws://") + f"/v1/lifecycle/ws?scope={scope}&events=captured&since_lifecycle_id={since}"
        headers = [(k.encode(), v.encode()) for k, v in auth(keys).items()]
        async with trio_websocket.open_websocket_url(ws_url, extra_headers=headers) as ws:
            written = []
            for i in range(2):
                r = await http.post("/v1/experience", json=body(f"ws {i}", scope=scope), headers=auth(keys))
                written.append(r.json()["event_id"])
            frames = [json.loads(await ws.get_message()) for _ in range(2)]
        assert [f["type"] for f in frames] == ["lifecycle", "lifecycle"]
        assert [f["data"]["event_id"] for f in frames] == written
        assert all(f["id"].startswith("lce_") and f["event"] == "captured" for f in frames)
        # the same authorisation as the SSE stream: a bad token is refused with an envelope
        bad = [(b"authorization", b"Bearer nope"), (b"x-cortex-actor", b"user:alice")]
        async with trio_websocket.open_websocket_url(ws_url, extra_headers=bad) as ws:
            frame = json.loads(await ws.get_message())
            with pytest.raises(trio_websocket.ConnectionClosed) as closed:
                await ws.get_message()
        assert frame["type"] == "error" and frame["error_code"] == "INVALID_TOKEN_SIGNATURE"
        assert closed.value.reason.code == 4401
        rows = (await http.get("/v1/audit?capability=lifecycle.subscribe", headers=auth(keys))).json()["items"]
        assert any(r["endpoint"] == "GET /v1/lifecycle/ws" and r["decision"] == "allow" and r["response_status"] == 101
                   for r in rows)  # fmt: skip


async def test_requests_the_http_layer_refuses_carry_the_envelope(tmp_path):
    async with live(tmp_path, max_body_bytes=1000) as (url, keys):
        host, port = url.removeprefix("http://").split(":")
        for raw, status, code in [
            (b"BROKEN\r\n\r\n", 400, "INVALID_BODY"),
            (b"POST /v1/experience HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n", 413, "PAYLOAD_TOO_LARGE"),
        ]:  # fmt: skip
            stream = await trio.open_tcp_stream(host, int(port))
            await stream.send_all(raw)
            received = b""
            while chunk := await stream.receive_some(65536):  # the server answers, then closes
                received += chunk
            head, _, payload = received.partition(b"\r\n\r\n")
            assert head.startswith(f"HTTP/1.1 {status} ".encode()), received
            envelope = json.loads(payload)
            assert envelope["error_code"] == code and envelope["request_id"].startswith("req_")
            await stream.aclose()


def _start(data: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen([sys.executable, "-m", "cortexdb.cli", "serve", "--data", str(data),
                                "--bind", "127.0.0.1:0", *extra], stderr=subprocess.PIPE, text=True,
                               env=env, cwd=ROOT)  # fmt: skip
    for line in process.stderr:
        match = re.search(r"serving on (http://127\.0\.0\.1:\d+)", line)
        if match:
            return process, match.group(1)
    raise AssertionError("the server did not start: " + process.stderr.read())


@pytest.mark.slow
def test_serve_process_shuts_down_cleanly_and_keeps_the_wal(tmp_path):
    data = tmp_path / "data"
    process, url = _start(data)
    try:
        headers = {"X-Cortex-Actor": "user:alice"}
        written = httpx.post(f"{url}/v1/experience", json=body("kept across restarts"), headers=headers).json()
        stream = httpx.stream("GET", f"{url}/v1/lifecycle/stream?scope=org:acme/user:alice", headers=headers, timeout=30)
        response = stream.__enter__()
        assert response.status_code == 200
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    log = process.stderr.read()
    assert "stopped cleanly" in log and "Bearer" not in log
    stream.__exit__(None, None, None)
    process, url = _start(data)
    try:
        page = httpx.get(f"{url}/v1/events?scope=org:acme/user:alice", headers={"X-Cortex-Actor": "user:alice"}).json()
        assert [e["id"] for e in page["items"]] == [written["event_id"]]
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("curl") is None, reason="the README walk-through uses curl")
def test_readme_curl_walkthrough_runs(tmp_path):
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- walkthrough -->\s*```bash\n(.*?)```", readme, re.S)
    assert block, "README.md has a ```bash walk-through block after <!-- walkthrough -->"
    process, url = _start(tmp_path / "data", "--preset", "dev_local")
    try:
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", block.group(1)], capture_output=True,
                                text=True, timeout=120, env={**os.environ, "CORTEX": url})  # fmt: skip
        assert result.returncode == 0, result.stderr + result.stdout
        output = result.stdout + result.stderr
        assert '"status":"consolidated"' in output and '"stages_completed":["captured"' in output
        assert "event: captured" in output and '"context_block"' in output
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
