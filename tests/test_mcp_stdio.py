"""MCP over stdio: ``python -m cortexdb.cli mcp`` spawned by the ``mcp`` package's client, on a
temporary LevelDB directory, as a configured actor with a signed token (on_prem_enterprise).

Two sessions, one after the other on the same directory: alice (the 2026-07-28 era) lists and
calls every tool; bob (the initialize handshake), whose token lacks the forget capabilities,
cannot search alice's scope and gets a tool error for forgetting.  Then the directory, opened
directly, holds what alice wrote and the audit rows of both.  Deterministic: wait=consolidated."""

from __future__ import annotations

import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

import cortexdb
from cortexdb.server import auth
from cortexdb.server.mcp_api.tools import TOOLS

from .server_support import TENANT

ROOT = Path(__file__).resolve().parents[1]
ALICE = "org:acme/user:alice"
pytestmark = pytest.mark.slow  # spawns processes


@asynccontextmanager
async def session(tmp_path: Path, actor: str, mode: str, **mint):
    issuer = tmp_path / "issuer"
    if not issuer.exists():
        auth.keygen(issuer)
    # a real process checks the token against the real clock: mint it now
    token = auth.mint(issuer, sub=actor, tenant=TENANT, now=int(time.time()), ttl=3600, **mint)
    params = StdioServerParameters(
        command=sys.executable, cwd=ROOT,
        args=["-m", "cortexdb.cli", "mcp", "--preset", "on_prem_enterprise", "--data", str(tmp_path / "data"),
              "--issuer-keys", str(issuer), "--tenant", TENANT, "--embedder", "hash", "--actor", actor],
        env={"PYTHONPATH": str(ROOT), "CORTEX_TOKEN": token},
    )  # fmt: skip
    with open(tmp_path / f"{actor.replace(':', '_')}.log", "w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode=mode) as client:
            yield client


def message(text: str) -> dict:
    return {"kind": "message", "role": "user", "text": text}


async def test_every_tool_over_stdio_as_the_configured_actor(tmp_path):
    async with session(tmp_path, "user:alice", "auto") as alice:
        assert alice.protocol_version == "2026-07-28"
        assert [t.name for t in (await alice.list_tools()).tools] == list(TOOLS)
        for text in ("I live in Reykjavik.", "My favorite color is teal."):
            wrote = await alice.call_tool("memory_ingest", {"scope": ALICE, "content": message(text),
                                                            "observed_actor": {"id": "user:alice"}, "wait": "consolidated"})  # fmt: skip
            assert not wrote.is_error and wrote.structured_content["status"] == "consolidated", wrote.content
        found = await alice.call_tool("memory_search", {"scope": ALICE, "query": "Where do I live?"})
        assert not found.is_error and "Reykjavik" in found.structured_content["context_block"]
        assert found.structured_content["citations"]
        about = await alice.call_tool("memory_about_user", {"scope": ALICE, "view": "local"})
        assert sorted(f["predicate"] for f in about.structured_content["facts"]) == ["favorite_color", "lives_in"]
        forgot = await alice.call_tool("memory_forget", {"scope": ALICE, "layers": ["facts", "beliefs"],
                                                         "selector": {"predicate": "favorite_color"}})  # fmt: skip
        assert not forgot.is_error and forgot.structured_content["deleted"]["facts"] == 1

    caps = ["scope.read.local", "scope.read.holistic", "scope.write"]  # no forget.cascade.*
    async with session(tmp_path, "user:bob", "legacy", caps=caps) as bob:
        assert bob.protocol_version == "2025-11-25"
        theirs = await bob.call_tool("memory_search", {"scope": ALICE, "query": "Reykjavik"})
        assert theirs.is_error and theirs.structured_content["error_code"] == "NOT_A_MEMBER"
        assert "Reykjavik" not in theirs.content[0].text
        mine = await bob.call_tool("memory_ingest", {"scope": "org:acme/user:bob", "content": message("Hi."),
                                                     "wait": "indexed"})  # fmt: skip
        assert not mine.is_error, mine.content
        refused = await bob.call_tool("memory_forget", {"scope": "org:acme/user:bob", "confirm_all": True})
        assert refused.is_error and refused.structured_content["error_code"] == "POLICY_DENIED"
        assert refused.structured_content["details"]["capability"] == "forget.cascade.derived_only"

    async with cortexdb.open_engine("leveldb", str(tmp_path / "data")) as engine:
        texts = [e["content"]["text"] for e in (await engine.events(ALICE))["items"]]
        assert texts == ["I live in Reykjavik.", "My favorite color is teal."]
        rows = [row async for _, row in engine.tables.audit_rows.scan()]
        denials = {(r["actor"], r["endpoint"]) for r in rows if r["decision"] == "deny"}
        assert denials == {("user:bob", "POST /v1/recall"), ("user:bob", "POST /v1/forget")}
        assert {r["user_agent"] for r in rows} >= {"cortexdb-mcp/memory_ingest stdio", "cortexdb-mcp/memory_forget stdio"}
