"""The MCP face in process: tool schemas derived from the wire contract, the ``/mcp`` door
(admission, authentication, dev_local), argument errors and unknown tools, the audit trail of a
tool call, and ``cortexdb mcp``'s refusals before it serves.  (Both transports end to end:
test_mcp_http.py and test_mcp_stdio.py; every tool against every role: test_isolation.py.)"""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator

from cortexdb import schemas
from cortexdb.cli import main
from cortexdb.engine.forget import selector
from cortexdb.engine.recall import request as recall_request
from cortexdb.server.mcp_api.schema import inline, part
from cortexdb.server.mcp_api.tools import TOOLS
from cortexdb.server.mcp_api.twin import TWINS

from .server_support import TENANT, body, server

MCP_HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}


def rpc(method: str, params: dict | None = None, ident: int = 1) -> dict:
    return {"jsonrpc": "2.0", "id": ident, "method": method, "params": params or {}}


async def post(h, payload, headers: dict[str, str]):
    response = await h.client.post("/mcp", json=payload, headers={**MCP_HEADERS, **headers})
    return response, json.loads(await response.get_data())


# -- schemas: derived, not written twice ------------------------------------------------------------
def test_the_request_schemas_name_what_the_engine_accepts():
    recall = schemas.load("recall_request")
    assert set(recall["properties"]) == recall_request.REQUEST_FIELDS
    forget = schemas.load("forget_request")
    assert set(forget["properties"]) == selector.FIELDS
    assert set(forget["properties"]["selector"]["properties"]) == selector.SELECTOR_FIELDS


REFERENCE_RECALL = {  # reference §8.3
    "scope": "org:acme/dept:eng/user:alice", "view": "holistic", "query": "What did we decide about the Q3 launch?",
    "include": ["beliefs", "facts", "episodes"], "exclude_content": False,
    "temporal": {"as_of": None, "valid_during": None, "natural": "last 30 days", "reference_date": None},
    "filters": {"AND": [{"observed_actor": {"in": ["user:alice", "agent:planner_v3"]}}, {"confidence": {"gte": 0.6}}]},
    "budgets": {"max_tokens": 4000, "per_layer_limits": {"events": 0, "episodes": 5, "facts": 20, "beliefs": 10,
                                                         "understanding": 3}},
    "citation_mode": "inline_with_markers", "diagnostics": "summary", "stream": False,
    "idempotency_key": "recall-alice-q3-001",
}  # fmt: skip
REFERENCE_FORGET = {  # reference §8.5
    "scope": "org:acme/dept:eng/user:alice", "layers": ["beliefs", "facts"],
    "selector": {"about_subject": "user:alice", "about_entity": "ent_acme_corp", "predicate": "is_likely_to_renew",
                 "memory_ids": [], "valid_during": None, "recorded_during": None},
    "cascade": "derived_only", "confirm_all": False, "audit_note": "User retracted speculation",
    "idempotency_key": "forget-alice-001",
}  # fmt: skip


@pytest.mark.parametrize(("name", "example"), [("recall_request", REFERENCE_RECALL), ("forget_request", REFERENCE_FORGET)])
def test_the_reference_examples_validate(name, example):
    assert sorted(str(e.message) for e in schemas.validator(name).iter_errors(example)) == []
    mistaken = {**example, "scope": "Not A Scope", "surprise": 1}
    assert len(list(schemas.validator(name).iter_errors(mistaken))) == 2
    recall_request.validate(REFERENCE_RECALL)  # the engine takes them too
    selector.parse(REFERENCE_FORGET, max_memory_ids=1000)


def test_tool_schemas_are_derived_and_self_contained():
    for tool in TOOLS.values():
        for schema in filter(None, (tool.input_schema, tool.output_schema)):
            Draft202012Validator.check_schema(schema)
            assert "$ref" not in json.dumps(schema), tool.name
        assert all(twin in TWINS for twin in tool.twins), tool.name
    search, ingest, forget = TOOLS["memory_search"], TOOLS["memory_ingest"], TOOLS["memory_forget"]
    recall = schemas.load("recall_request")["properties"]
    for name, prop in search.input_schema["properties"].items():  # picked, not rewritten
        assert prop == inline(recall[name], "recall_request"), name
    envelope = schemas.load("experience_envelope")["properties"]
    assert ingest.input_schema["properties"]["content"] == inline(envelope["content"], "experience_envelope")
    assert ingest.input_schema["properties"]["scope"] == part("common", "/$defs/scope_path")
    assert ingest.input_schema["properties"]["wait"]["enum"] == ["captured", "indexed", "consolidated"]
    assert forget.input_schema["properties"] == inline(schemas.load("forget_request")["properties"], "forget_request")
    assert ingest.output_schema == part("experience_result")


# -- the door ---------------------------------------------------------------------------------------
async def test_the_door_admits_and_authenticates_as_the_api_does(tmp_path):
    async with server(tmp_path) as h:
        alice = h.as_("user:alice")
        response, data = await post(h, rpc("tools/list"), alice)
        assert response.status_code == 200 and [t["name"] for t in data["result"]["tools"]] == list(TOOLS)
        for headers, status, code in (
            ({}, 401, "MISSING_TOKEN"),
            (h.as_("user:alice", tenant="other"), 401, "WRONG_TENANT"),
            ({**alice, "X-Cortex-Actor": "user:mallory"}, 401, "ACTOR_MISMATCH"),
            ({**alice, "Origin": "https://evil.example"}, 403, "ORIGIN_NOT_ALLOWED"),
        ):  # fmt: skip
            response, data = await post(h, rpc("tools/list"), headers)
            assert (response.status_code, data["error_code"]) == (status, code)
        form = await h.client.post("/mcp", data=json.dumps(rpc("tools/list")),
                                   headers={**MCP_HEADERS, **alice, "Content-Type": "text/plain"})  # fmt: skip
        assert form.status_code == 415
        for method in ("GET", "DELETE", "PUT"):
            response = await h.client.open("/mcp", method=method, headers={**MCP_HEADERS, **alice})
            assert response.status_code == 405 and response.headers["Allow"] == "POST"


async def test_over_the_limit_is_a_413_not_a_stall(tmp_path):
    async with server(tmp_path, max_body_bytes=2048) as h:
        padded = rpc("tools/list", {"_meta": {"pad": "x" * 4096}})
        response, data = await post(h, padded, h.as_("user:alice"))
        assert response.status_code == 413 and data["error_code"] == "PAYLOAD_TOO_LARGE"


async def test_dev_local_follows_the_api_unsigned_callers_name_themselves(tmp_path):
    async with server(tmp_path, preset="dev_local") as h:
        scope = "org:acme/user:dev"
        args = {"scope": scope, "content": {"kind": "text", "text": "hello"}, "wait": "indexed"}
        response, data = await post(h, rpc("tools/call", {"name": "memory_ingest", "arguments": args}),
                                    {"X-Cortex-Actor": "user:dev"})  # fmt: skip
        assert response.status_code == 200 and data["result"]["isError"] is False, data
        response, data = await post(h, rpc("tools/list"), {})
        assert response.status_code == 401 and data["error_code"] == "ACTOR_MISMATCH"


# -- tool calls ---------------------------------------------------------------------------------------
async def test_bad_arguments_are_tool_errors_and_unknown_tools_protocol_errors(tmp_path):
    async with server(tmp_path) as h:
        alice = h.as_("user:alice")
        cases = [({"scope": "org:acme/user:alice"}, "$"),  # query missing
                 ({"scope": "org:acme/user:alice", "query": "x", "stream": True}, "$"),
                 ({"scope": "Not A Scope", "query": "x"}, "scope"),
                 ({"scope": "org:acme/user:alice", "query": "x", "view": "narrative"}, "view")]  # fmt: skip
        for args, field in cases:
            response, data = await post(h, rpc("tools/call", {"name": "memory_search", "arguments": args}), alice)
            result = data["result"]
            assert response.status_code == 200 and result["isError"] is True, data
            assert result["structuredContent"]["error_code"] == "INVALID_BODY"
            assert result["structuredContent"]["details"] == {"field": field, "tool": "memory_search"}
        # what the schema cannot say, the twin refuses with its own envelope
        args = {"scope": "org:acme/user:alice", "content": {"kind": "text", "text": "x"}, "directives": {
            "consolidate_into": "org:acme/user:bob"}}  # fmt: skip
        response, data = await post(h, rpc("tools/call", {"name": "memory_ingest", "arguments": args}), alice)
        assert data["result"]["structuredContent"]["error_code"] == "INVALID_ENVELOPE"
        response, data = await post(h, rpc("tools/call", {"name": "memory_unknown", "arguments": {}}), alice)
        assert response.status_code == 200 and data["error"]["code"] == -32602
        assert "unknown tool" in data["error"]["message"]


async def test_a_tool_call_is_its_twins_requests_audited_as_the_caller(tmp_path):
    async with server(tmp_path) as h:
        await h.call("POST", "/v1/experience?wait=consolidated", json=body("I live in Paris.", observed_actor={"id": "user:alice"}))
        arguments = {"scope": "org:acme/user:alice", "view": "local"}
        response, data = await post(h, rpc("tools/call", {"name": "memory_about_user", "arguments": arguments}),
                                    {**h.as_("user:alice"), "User-Agent": "agent-host/1.0"})  # fmt: skip
        assert data["result"]["isError"] is False
        assert "user:alice lives_in Paris" in data["result"]["content"][0]["text"]
        _, rows = await h.call("GET", "/v1/audit?actor=user:alice&capability=scope.read.local", "user:root")
        twins = [r for r in rows["items"] if r["user_agent"] == "cortexdb-mcp/memory_about_user agent-host/1.0"]
        assert sorted(r["endpoint"] for r in twins) == ["GET /v1/beliefs", "GET /v1/facts"]
        assert all(r["decision"] == "allow" and r["scope"] == "org:acme/user:alice" for r in twins)
        assert all(r["tenant_id"] == TENANT and r["token_jti"] for r in twins)


# -- cortexdb mcp: refusals before serving ------------------------------------------------------------
def test_cortexdb_mcp_refuses_a_bad_token_and_a_missing_actor(tmp_path, capsys, monkeypatch):
    from cortexdb.server import auth

    monkeypatch.delenv("CORTEX_ACTOR", raising=False)
    monkeypatch.delenv("CORTEX_TOKEN", raising=False)
    issuer = tmp_path / "issuer"
    auth.keygen(issuer)
    common = ["mcp", "--preset", "on_prem_enterprise", "--backend", "memory", "--embedder", "hash",
              "--issuer-keys", str(issuer), "--tenant", TENANT]  # fmt: skip
    assert main([*common, "--actor", "user:alice", "--token", "v4.public.forged"]) == 2
    assert "INVALID_TOKEN_SIGNATURE" in capsys.readouterr().err
    assert main([*common, "--actor", "user:alice"]) == 2  # no token: only dev_local lets callers name themselves
    assert "MISSING_TOKEN" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="needs --actor"):
        main(common)


async def test_a_configured_caller_is_checked_on_every_call(tmp_path):
    """stdio's identity (one actor and token, fixed at start) is verified per call, as a request
    is: once the token expires, calls are tool errors (the in-process client drives the server)."""
    from mcp import Client

    from cortexdb.server.mcp_api.server import build_server
    from cortexdb.server.mcp_api.stdio import authenticate, identity_of

    async with server(tmp_path) as h:
        state = h.app.cortex
        identity = identity_of("user:alice", h.keys.paseto("user:alice", ttl=600))
        assert authenticate(state, identity) == "user:alice"
        async with Client(build_server(state, lambda ctx: identity)) as client:
            ok = await client.call_tool("memory_search", {"scope": "org:acme/user:alice", "query": "x"})
            assert ok.is_error is False
            h.clock.advance(seconds=3600)
            late = await client.call_tool("memory_search", {"scope": "org:acme/user:alice", "query": "x"})
            assert late.is_error and late.structured_content["error_code"] == "EXPIRED_TOKEN"
