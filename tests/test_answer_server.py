"""POST /v1/answer and view=narrative over HTTP: in process (``app.test_app()``) and on a real
loopback server (both HTTP servers), streamed as §10.2 Server-Sent Events; and backpressure
(§10.5): a client that does not read never makes the server buffer the stream."""

from __future__ import annotations

import json
import socket
from contextlib import asynccontextmanager
from importlib import resources

import httpx
import pytest
import trio
import trio.testing

from cortexdb import EngineConfig, ManualClock
from cortexdb.engine.llm import OpenAICompatibleLLM
from cortexdb.engine.spi.llm import Completion, Usage
from cortexdb.server.serve import run_server
from cortexdb.server.settings import ServerSettings

from .llm_support import KEY, chat_server
from .server_support import START, TENANT, Keys, body, server
from .test_server_api import validate

ALICE = "org:acme/user:alice"


def frames(raw: bytes | str) -> list[tuple[str, object]]:
    """(event, data) of each SSE frame of a body."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    out = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(":"))
        if "event" in fields:
            out.append((fields["event"], json.loads(fields["data"])))
    return out


async def sse(h, path: str, payload: dict, hdrs: dict | None = None) -> tuple[int, object, bytes]:
    """(status, headers, body) of a streamed response, read as it comes (``client.open`` reads a
    body only once the app is done, and its channel holds ten chunks: a stream would wait on it)."""
    headers = {**(hdrs or h.as_("user:alice")), "Content-Type": "application/json"}
    raw = bytearray()
    with trio.fail_after(30):  # a hang guard only
        async with h.client.request(path, method="POST", headers=headers) as connection:
            await connection.send(json.dumps(payload).encode())
            await connection.send_complete()
            try:
                while True:
                    raw += await connection.receive()
            except trio.EndOfChannel:
                pass
    return connection.status_code, connection.headers, bytes(raw)


async def seed(h) -> None:
    for text in ("My favorite color is blue.", "I live in Berlin.", "Acme moved to 200 seats."):
        response, _ = await h.call("POST", "/v1/experience?wait=consolidated", json=body(text))
        assert response.status_code == 200


# -- in process ------------------------------------------------------------------------------------
async def test_an_answer_over_http_with_its_audit_row(tmp_path):
    async with server(tmp_path) as h:
        await seed(h)
        response, answer = await h.call("POST", "/v1/answer", json={"scope": ALICE, "question": "What is my favorite color?"})
        assert response.status_code == 200, answer
        validate("answer_response", answer)
        assert "blue" in answer["answer"] and answer["supported"] and answer["as_of"] == START
        assert response.headers["X-Cortex-Policy"] == "tier=deployment; decision=allow; capability=llm.invoke"
        assert response.headers["X-Cortex-Stability"] == "stable"
        _, rows = await h.call("GET", "/v1/audit?capability=llm.invoke", "user:root")
        [row] = [r for r in rows["items"] if r["request_id"] == response.headers["X-Cortex-Request-ID"]]
        assert row["decision"] == "allow" and row["summary"] == {"pack_id": answer["pack_id"], "supported": True,
                                                                 "citations": len(answer["citations"])}  # fmt: skip
        # a follow-up on the same pack; someone else cannot use it
        response, again = await h.call("POST", "/v1/answer", json={"use_pack_id": answer["pack_id"], "question": "Where do I live?"})
        assert response.status_code == 200 and again["pack_id"] == answer["pack_id"] and "Berlin" in again["answer"]
        assert again["diagnostics"]["pack_reused"] is True
        response, refused = await h.call("POST", "/v1/answer", "user:bob", json={"use_pack_id": answer["pack_id"], "question": "x"})
        assert response.status_code == 404 and refused["error_code"] == "NOT_FOUND"
        # an idempotency key in the header replays the answer
        request = {"scope": ALICE, "question": "How many seats?"}
        hdrs = {**h.as_("user:alice"), "X-Cortex-Idempotency-Key": "q-1"}
        first, one = await h.call("POST", "/v1/answer", json=request, hdrs=hdrs)
        second, two = await h.call("POST", "/v1/answer", json=request, hdrs=hdrs)
        assert "X-Cortex-Replay" not in first.headers and second.headers["X-Cortex-Replay"] == "true"
        assert two == {**one, "replayed": True}
        conflict, data = await h.call("POST", "/v1/answer", json={**request, "question": "Other?"}, hdrs=hdrs)
        assert conflict.status_code == 409 and data["error_code"] == "IDEMPOTENCY_CONFLICT"


async def test_llm_invoke_is_checked_and_diagnostics_are_stripped(tmp_path):
    async with server(tmp_path, preset="cloud_shared_saas") as h:
        await seed(h)
        narrow = h.as_("user:alice", caps=["scope.read.local", "scope.read.holistic", "scope.write"])
        for path, payload in (("/v1/answer", {"scope": ALICE, "question": "color?"}),
                              ("/v1/answer", {"scope": ALICE, "question": "color?", "stream": True}),
                              ("/v1/recall", {"scope": ALICE, "query": "color", "view": "narrative", "stream": True}),
                              ("/v1/recall", {"scope": ALICE, "query": "color", "view": "narrative"})):  # fmt: skip
            status, _, raw = await sse(h, path, payload, narrow)
            data = json.loads(raw)
            assert status == 403, data
            assert data["error_code"] == "POLICY_DENIED" and data["details"]["capability"] == "llm.invoke"
            assert data["details"]["denied_by_tier"] == "token"
        response, pack = await h.call("POST", "/v1/recall", json={"scope": ALICE, "query": "color"}, hdrs=narrow)
        assert response.status_code == 200  # recall itself needs no LLM
        response, data = await h.call("POST", "/v1/answer", json={"use_pack_id": pack["pack_id"], "question": "color?"},
                                      hdrs=narrow)  # fmt: skip
        assert response.status_code == 403 and data["details"]["capability"] == "llm.invoke"
        # this preset's tenants deny diagnostics.read by default: stripped, and said so
        response, answer = await h.call("POST", "/v1/answer", json={"scope": ALICE, "question": "color?", "diagnostics": "full"})
        assert response.status_code == 200 and "diagnostics" not in answer
        assert response.headers["X-Cortex-Warning"] == "diagnostics_stripped"


async def test_a_streamed_answer_and_a_narrative_as_server_sent_events(tmp_path):
    async with server(tmp_path) as h:
        await seed(h)
        question = {"scope": ALICE, "question": "Where do I live?", "stream": True}
        status, headers, raw = await sse(h, "/v1/answer", question)
        assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
        events = frames(raw)
        names = [name for name, _ in events]
        tokens = names.count("token")
        assert tokens and names == ["token"] * tokens + ["citations", "provenance", "diagnostics", "done"]
        _, whole = await h.call("POST", "/v1/answer", json={**question, "stream": False})
        assert "".join(data["text"] for name, data in events if name == "token") == whole["answer"]
        response, story = await h.call("POST", "/v1/recall", json={"scope": ALICE, "query": "", "view": "narrative"})
        assert response.status_code == 200 and story["view"] == "narrative" and "Berlin" in story["context_block"]
        validate("stratified_pack", story)
        status, _, raw = await sse(h, "/v1/recall", {"scope": ALICE, "query": "", "view": "narrative", "stream": True})
        told = frames(raw)
        assert [n for n, _ in told if n != "token"] == ["citations", "diagnostics", "done"]
        assert "".join(d["text"] for n, d in told if n == "token") == story["context_block"]
        for bad in ({**question, "answer_max_tokens": -1}, {**question, "view": "structured"}):
            status, _, raw = await sse(h, "/v1/answer", bad)  # an envelope, not a broken stream
            assert status == 422 and json.loads(raw)["error_code"] == "INVALID_ANSWER"


# -- a real server on loopback ---------------------------------------------------------------------
@asynccontextmanager
async def live(tmp_path, http_server: str = "cortex", llm=None):
    clock = ManualClock(START)
    keys = Keys(tmp_path, clock)
    settings = ServerSettings(preset="on_prem_enterprise", backend="memory", tenant=TENANT, bind="127.0.0.1:0",
                              issuer_dirs=[str(keys.dir)], operators=("user:root",), http_server=http_server)  # fmt: skip
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(lambda task_status: run_server(
            settings, shutdown_trigger=stop.wait, clock=clock, id_seed=5, llm=llm,
            engine_config=EngineConfig(episode_idle_check=3600.0), task_status=task_status))  # fmt: skip
        try:
            yield binds[0], {"Authorization": f"Bearer {keys.paseto('user:alice')}", "X-Cortex-Actor": "user:alice"}
        finally:
            stop.set()


@pytest.mark.parametrize("http_server", ["cortex", "hypercorn"])
async def test_answers_from_a_chat_model_on_a_live_server(tmp_path, http_server):
    async with chat_server() as model:
        llm = OpenAICompatibleLLM(base_url=model.url, model="chat-1", api_key=KEY, max_retries=0)
        async with live(tmp_path, http_server, llm) as (url, auth), httpx.AsyncClient(base_url=url, timeout=30) as http:
            for text in ("My favorite color is blue.", "I live in Berlin."):
                await http.post("/v1/experience?wait=consolidated", json=body(text), headers=auth)
            question = {"scope": ALICE, "question": "What is my favorite color?"}
            answer = (await http.post("/v1/answer", json=question, headers=auth)).json()
            assert answer["answer"].startswith("According to memory,") and answer["supported"]
            assert answer["diagnostics"]["answer_model"] == "chat-1"
            async with http.stream("POST", "/v1/answer", json={**question, "stream": True}, headers=auth) as response:
                assert response.headers["content-type"].startswith("text/event-stream")
                events = frames(await response.aread())
            assert "".join(d["text"] for n, d in events if n == "token") == answer["answer"]
            assert [n for n, _ in events if n != "token"] == ["citations", "provenance", "diagnostics", "done"]
            model.script = [("status", 503)]  # before the first token: an envelope
            refused = await http.post("/v1/answer", json={**question, "stream": True}, headers=auth)
            assert refused.status_code == 503 and refused.json()["error_code"] == "LLM_UNAVAILABLE"
            assert refused.json()["retriable"] is True and KEY not in refused.text
            model.script = [("cut", 3)]  # after it: an error event, then the end
            async with http.stream("POST", "/v1/answer", json={**question, "stream": True}, headers=auth) as response:
                assert response.status_code == 200
                events = frames(await response.aread())
            assert [n for n, _ in events] == ["token", "token", "error"]
            assert events[-1][1]["error_code"] == "LLM_UNAVAILABLE" and KEY not in json.dumps(events)
        await llm.aclose()


class Flood:
    """An ``LLM`` whose answer is ``pieces`` pieces of 4 KiB, counting how many were taken."""

    provider, model = "flood", "flood"

    def __init__(self, pieces: int) -> None:
        self.pieces = pieces
        self.taken = 0

    async def complete(self, prompt):
        raise NotImplementedError  # the test streams

    async def stream(self, prompt):
        for _ in range(self.pieces):
            self.taken += 1
            yield " " + "x" * 4095
        yield Completion(text="", model=self.model, usage=Usage(0, 0, "none"))

    async def aclose(self) -> None:
        return None


@pytest.mark.parametrize("http_server", ["cortex", "hypercorn"])
async def test_a_client_that_does_not_read_holds_the_stream_back(tmp_path, http_server):
    """§10.5: the server takes the next event only when the socket takes the last one — with the
    client not reading, at most the kernel's socket buffers (a few MiB) are ever produced."""
    flood = Flood(pieces=8192)  # 32 MiB of tokens
    async with live(tmp_path, http_server, flood) as (url, auth):
        host, port = url.removeprefix("http://").split(":")
        async with httpx.AsyncClient(base_url=url) as http:
            await http.post("/v1/experience?wait=consolidated", json=body("I live in Berlin."), headers=auth)
        client = trio.socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)  # no receive-window autotuning
        await client.connect((host, int(port)))
        stream = trio.SocketStream(client)
        payload = json.dumps({"scope": ALICE, "question": "Where do I live?", "stream": True}).encode()
        head = "".join(f"{k}: {v}\r\n" for k, v in auth.items())
        await stream.send_all(f"POST /v1/answer HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                              f"Content-Length: {len(payload)}\r\n{head}\r\n".encode() + payload)  # fmt: skip
        with trio.fail_after(60):  # a hang guard only
            while True:  # until the server is stuck on the socket: nothing runs, nothing more is taken
                await trio.testing.wait_all_tasks_blocked(cushion=0.2)
                stalled = flood.taken
                await trio.testing.wait_all_tasks_blocked(cushion=0.2)
                if stalled and flood.taken == stalled:
                    break
        assert stalled * 4096 < 8 * 1024 * 1024, stalled  # bounded by the socket buffers, not 32 MiB
        received = bytearray()
        while b"event: done" not in received[-4096:]:
            chunk = await stream.receive_some(1 << 20)
            assert chunk, "the stream ended early"
            received += chunk
        await stream.aclose()
    assert flood.taken == flood.pieces and received.count(b"event: token") == flood.pieces


async def test_the_answer_model_is_chosen_per_deployment(tmp_path, monkeypatch):
    """The environment (else the preset's ``llm.*`` defaults) picks the provider; the key comes
    from the variable ``llm_api_key_env`` names; with nothing set, answers are extractive."""
    assert ServerSettings.from_env({}).llm_options({"llm.provider": "extractive"})["llm_provider"] == "extractive"
    with pytest.raises(ValueError, match="CORTEX_LLM_PROVIDER must be one of"):
        ServerSettings.from_env({"CORTEX_LLM_PROVIDER": "magic"})
    monkeypatch.setenv("CORTEX_LLM_API_KEY", KEY)
    async with chat_server() as model:
        preset = tmp_path / "preset.yaml"
        shipped = (resources.files("cortexdb.presets") / "on_prem_enterprise.yaml").read_text()
        preset.write_text(shipped.replace("llm.provider: extractive", "llm.provider: openai_compatible") +
                          f"  llm.base_url: {model.url}\n  llm.model: from-preset\n")  # fmt: skip
        clock = ManualClock(START)
        keys = Keys(tmp_path, clock)
        for env, expected in (({}, "from-preset"), ({"CORTEX_LLM_MODEL": "from-env"}, "from-env")):
            settings = ServerSettings.from_env({**env, "CORTEX_DEPLOYMENT_PRESET": str(preset)}, backend="memory",
                                               tenant=TENANT, bind="127.0.0.1:0", issuer_dirs=[str(keys.dir)],
                                               derivation_workers="thread", embedder="hash")  # fmt: skip
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                [url] = await nursery.start(lambda task_status, s=settings, stop=stop: run_server(
                    s, shutdown_trigger=stop.wait, clock=clock, id_seed=5, task_status=task_status))  # fmt: skip
                auth = {"Authorization": f"Bearer {keys.paseto('user:alice')}", "X-Cortex-Actor": "user:alice"}
                async with httpx.AsyncClient(base_url=url, timeout=30) as http:
                    await http.post("/v1/experience?wait=consolidated", json=body("I live in Berlin."), headers=auth)
                    answer = (await http.post("/v1/answer", json={"scope": ALICE, "question": "Where do I live?"},
                                              headers=auth)).json()  # fmt: skip
                    assert answer["diagnostics"]["answer_model"] == expected and "Berlin" in answer["answer"]
                    offline = (await http.post("/v1/answer", json={"scope": ALICE, "question": "Where do I live?",
                                                                   "answer_model": "extractive"}, headers=auth)).json()  # fmt: skip
                    assert offline["diagnostics"]["answer_provider"] == "extractive"
                stop.set()
    assert [r["headers"]["authorization"] for r in model.requests] == [f"Bearer {KEY}"] * 2
