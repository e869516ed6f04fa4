"""MCP over streamable HTTP at ``/mcp``, end to end: a real loopback server (the built-in HTTP
server and Hypercorn), the ``mcp`` package's client, both protocol eras (the 2026-07-28
per-request one the client picks by default, and the initialize handshake of older hosts).

Every tool is listed and called; a token without ``forget.cascade.derived_only`` gets a tool
error (audited as a denial), not a crash; user B cannot search user A's scope; a body over
``max_body_bytes`` is a 413.  Deterministic: writes wait with ``wait=consolidated``."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager

import httpx
import httpx2
import pytest
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from cortexdb import EngineConfig, ManualClock
from cortexdb.server.mcp_api.tools import TOOLS
from cortexdb.server.serve import run_server
from cortexdb.server.settings import ServerSettings

from .server_support import START, TENANT, Keys

ALICE = "org:acme/user:alice"
BOB = "org:acme/user:bob"
LIMIT = 64 * 1024  # max_body_bytes of the servers under test


@asynccontextmanager
async def live(tmp_path, http_server: str):
    clock = ManualClock(START)
    keys = Keys(tmp_path, clock)
    settings = ServerSettings(preset="on_prem_enterprise", backend="memory", tenant=TENANT, bind="127.0.0.1:0",
                              issuer_dirs=[str(keys.dir)], operators=("user:root",), http_server=http_server,
                              max_body_bytes=LIMIT)  # fmt: skip
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(lambda task_status: run_server(
            settings, shutdown_trigger=stop.wait, clock=clock, id_seed=9,
            engine_config=EngineConfig(episode_idle_check=3600.0), task_status=task_status))  # fmt: skip
        try:
            yield binds[0], keys
        finally:
            stop.set()


def auth(keys: Keys, actor: str, **mint) -> dict[str, str]:
    return {"Authorization": f"Bearer {keys.paseto(actor, **mint)}", "X-Cortex-Actor": actor}


@asynccontextmanager
async def mcp_client(base: str, headers: dict[str, str], mode: str):
    async with (httpx2.AsyncClient(headers=headers, timeout=30) as http,
                Client(streamable_http_client(f"{base}/mcp", http_client=http), mode=mode) as client):  # fmt: skip
        yield client


def message(text: str) -> dict:
    return {"kind": "message", "role": "user", "text": text}


@pytest.mark.parametrize(("http_server", "mode", "era"), [
    ("cortex", "auto", "2026-07-28"), ("cortex", "legacy", "2025-11-25"),
    ("hypercorn", "auto", "2026-07-28"), ("hypercorn", "legacy", "2025-11-25"),
])  # fmt: skip
async def test_every_tool_over_streamable_http(tmp_path, http_server, mode, era):
    async with live(tmp_path, http_server) as (base, keys):
        async with mcp_client(base, auth(keys, "user:alice"), mode) as alice:
            assert alice.protocol_version == era
            listed = (await alice.list_tools()).tools
            assert [t.name for t in listed] == list(TOOLS)
            assert all("$ref" not in json.dumps(t.input_schema) for t in listed)

            wrote = await alice.call_tool("memory_ingest", {
                "scope": ALICE, "content": message("I live in Paris."), "observed_actor": {"id": "user:alice"},
                "wait": "consolidated"})  # fmt: skip
            assert not wrote.is_error, wrote.content
            assert wrote.structured_content["status"] == "consolidated"
            event_id = wrote.structured_content["event_id"]

            found = await alice.call_tool("memory_search", {"scope": ALICE, "query": "Where do I live?"})
            assert not found.is_error, found.content
            pack = found.structured_content
            assert "Paris" in pack["context_block"] and pack["pack_id"].startswith("pack_")
            assert pack["citations"] and all(c["marker"] in pack["context_block"] for c in pack["citations"])
            assert any(event_id in cited for cited in pack["sources"].values())  # records rest on the event
            assert "Citations:\n[1]" in found.content[0].text

            answered = await alice.call_tool("memory_answer", {"scope": ALICE, "question": "Where do I live?",
                                                               "use_pack_id": pack["pack_id"]})  # fmt: skip
            assert not answered.is_error, answered.content
            answer = answered.structured_content
            assert answer["supported"] is True and answer["pack_id"] == pack["pack_id"]
            assert "Paris" in answer["answer"] and answer["citations"]
            assert answered.content[0].text == answer["answer"]

            about = await alice.call_tool("memory_about_user", {"scope": ALICE})
            assert not about.is_error, about.content
            facts = about.structured_content["facts"]
            assert about.structured_content["actor"] == "user:alice"
            assert [(f["subject"]["name"], f["predicate"], f["object"]["name"]) for f in facts] == [
                ("user:alice", "lives_in", "Paris")]  # fmt: skip
            assert about.structured_content["beliefs"][0]["claim"]["predicate"] == "lives_in"

            forgot = await alice.call_tool("memory_forget", {"scope": ALICE, "layers": ["facts", "beliefs"],
                                                             "selector": {"predicate": "lives_in"}})  # fmt: skip
            assert not forgot.is_error, forgot.content
            assert forgot.structured_content["deleted"]["facts"] == 1
            after = await alice.call_tool("memory_about_user", {"scope": ALICE})
            assert after.structured_content["facts"] == [] and after.structured_content["beliefs"] == []

        # read isolation: bob's own credentials cannot reach alice's scope through MCP
        async with mcp_client(base, auth(keys, "user:bob"), mode) as bob:
            denied = await bob.call_tool("memory_search", {"scope": ALICE, "query": "Paris"})
            assert denied.is_error and denied.structured_content["error_code"] == "NOT_A_MEMBER"
            assert "Paris" not in denied.content[0].text
            theirs = await bob.call_tool("memory_about_user", {"scope": ALICE})
            assert theirs.is_error and theirs.structured_content["error_code"] == "NOT_A_MEMBER"

        # a capability the token lacks: a tool error naming it, audited as a denial
        narrow = auth(keys, "user:alice", caps=["scope.read.local", "scope.read.holistic", "scope.write"])
        async with mcp_client(base, narrow, mode) as limited:
            refused = await limited.call_tool("memory_forget", {"scope": ALICE, "confirm_all": True})
            assert refused.is_error
            envelope = refused.structured_content
            assert envelope["error_code"] == "POLICY_DENIED"
            assert envelope["details"]["capability"] == "forget.cascade.derived_only"
            still = await limited.call_tool("memory_search", {"scope": ALICE, "query": "Paris"})
            assert not still.is_error  # the same session goes on

        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            rows = (await http.get("/v1/audit?actor=user:alice&decision=deny", headers=auth(keys, "user:root"))).json()
            denial = next(r for r in rows["items"] if r["request_id"] == envelope["request_id"])
            assert denial["endpoint"] == "POST /v1/forget" and denial["user_agent"].startswith("cortexdb-mcp/memory_forget")


@pytest.mark.parametrize("http_server", ["cortex", "hypercorn"])
async def test_the_door_refuses_before_the_protocol(tmp_path, http_server):
    """Over each server: the body limit (413, declared or streamed), no token (401), GET (405)."""
    async with live(tmp_path, http_server) as (base, keys):
        headers = {**auth(keys, "user:alice"), "Accept": "application/json, text/event-stream"}
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            big = json.dumps({**call, "params": {"_meta": {"pad": "x" * LIMIT}}}).encode()
            too_large = await http.post("/mcp", content=big, headers={**headers, "Content-Type": "application/json"})
            assert too_large.status_code == 413 and too_large.json()["error_code"] == "PAYLOAD_TOO_LARGE"

            async def chunks():  # no Content-Length: the limit holds on what is sent
                for _ in range(4):
                    yield b" " * (LIMIT // 2)

            streamed = await http.post("/mcp", content=chunks(), headers={**headers, "Content-Type": "application/json"})
            assert streamed.status_code == 413

            anonymous = await http.post("/mcp", json=call, headers={"Accept": headers["Accept"]})
            assert anonymous.status_code == 401 and anonymous.json()["error_code"] == "MISSING_TOKEN"
            listing = await http.get("/mcp", headers=headers)
            assert listing.status_code == 405 and listing.headers["Allow"] == "POST"
            ok = await http.post("/mcp", json=call, headers={**headers, "MCP-Protocol-Version": "2025-11-25"})
            assert ok.status_code == 200 and len(ok.json()["result"]["tools"]) == len(TOOLS)
