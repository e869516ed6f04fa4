"""The SDK's typed records (unknown fields kept), its settings and defaults (arguments, then
``CORTEX_*``, then the documented defaults) and reading the actor from a token."""

from __future__ import annotations

import httpx
import pytest

from cortexdb import ManualClock
from cortexdb.client import DEFAULT_URL, CortexClient, Fact, Pack, Record, StreamChunk, Why
from cortexdb.client._settings import token_subject

from .server_support import START, Keys


def test_records_read_declared_fields_and_keep_unknown_ones():
    wire = {"id": "fact_1", "predicate": "works_at", "confidence": 0.7, "brand_new": {"x": 1}, "_partial": False}
    fact = Fact.from_wire(wire)
    assert (fact.id, fact.predicate, fact.confidence, fact.partial) == ("fact_1", "works_at", 0.7, False)
    assert fact.brand_new == {"x": 1} and fact["brand_new"] == {"x": 1} and "brand_new" in fact
    assert fact.valid_to is None and fact.to_dict() == wire and fact.get("absent", 3) == 3
    with pytest.raises(AttributeError, match="no field 'nowhere'"):
        _ = fact.nowhere
    assert Fact.from_wire(fact) is fact and fact == Fact.from_wire(dict(wire))


def test_nested_records_are_typed():
    pack = Pack.from_wire({"pack_id": "pack_1", "scope": "org:acme", "view": "holistic", "context_block": "Alice [1]",
                           "layers": {"beliefs": [{"id": "belief_1", "claim": {"predicate": "likes"}, "confidence": 0.6}],
                                      "facts": [], "future_layer": [{"id": "x"}]},
                           "provenance": {"citations": {}}, "diagnostics": None})  # fmt: skip
    belief = pack.layers.beliefs[0]
    assert (belief.claim, belief.confidence, str(pack)) == ({"predicate": "likes"}, 0.6, "Alice [1]")
    assert pack.layers.future_layer == [{"id": "x"}] and pack.layers.events == []
    why = Why.from_wire({"belief": {"id": "belief_1"}, "narrative": "because",
                         "support_graph": {"nodes": [{"id": "fact_1", "type": "fact", "weight": 0.5}],
                                           "edges": [{"from": "belief_1", "to": "fact_1", "relation": "supported_by"}]}})  # fmt: skip
    edge = why.support_graph.edges[0]
    assert (edge.source, edge.target, edge["from"], why.belief.id) == ("belief_1", "fact_1", "belief_1", "belief_1")
    assert isinstance(why.support_graph.nodes[0], Record) and why.support_graph.nodes[0].weight == 0.5


def test_stream_chunks_carry_text_and_typed_layer_items():
    token = StreamChunk.from_sse("token", '{"text": " upgraded"}')
    layer = StreamChunk.from_sse("layer", '{"layer": "facts", "items": [{"id": "fact_1", "predicate": "p"}]}')
    citations = StreamChunk.from_sse("citations", '[{"marker": "[1]"}]')
    assert (token.text, layer.text, citations.text) == (" upgraded", "", "")
    assert isinstance(layer.items[0], Fact) and layer.items[0].predicate == "p" and token.items == []
    assert citations.data == [{"marker": "[1]"}] and citations.event == "citations"


def test_settings_come_from_arguments_then_the_environment_then_defaults(tmp_path):
    bare = CortexClient(env={})
    assert (bare.base_url, bare.actor, bare.scope) == (DEFAULT_URL, "user:local", "user:local")
    assert (bare.settings.retry.max_retries, bare.settings.timeout.read, bare.settings.timeout.connect) == (3, 30.0, 5.0)
    token = Keys(tmp_path, ManualClock(START)).paseto("user:alice")
    env = {"CORTEX_URL": "http://db.internal:9000/", "CORTEX_TOKEN": token, "CORTEX_SCOPE": "org:acme/user:alice"}
    configured = CortexClient(env=env)
    assert (configured.base_url, configured.actor, configured.scope) == \
        ("http://db.internal:9000", "user:alice", "org:acme/user:alice")  # fmt: skip
    explicit = CortexClient("http://other:1", actor="agent:planner", scope="ws:q3", env=env, timeout=2.0)
    assert (explicit.base_url, explicit.actor, explicit.scope, explicit.settings.timeout.read) == \
        ("http://other:1", "agent:planner", "ws:q3", 2.0)  # fmt: skip
    with pytest.raises(TypeError, match="unexpected keyword argument 'tokn'"):
        CortexClient(tokn="x")


def test_the_actor_is_read_from_paseto_and_jwt_tokens(tmp_path):
    keys = Keys(tmp_path, ManualClock(START))
    assert token_subject(keys.paseto("agent:planner_v3")) == "agent:planner_v3"
    assert token_subject(keys.jwt("user:bob")) == "user:bob"
    assert [token_subject(t) for t in (None, "", "opaque-token", "v4.local.abc", "a.b.c")] == [None] * 5


def test_a_token_provider_is_asked_before_every_request():
    tokens = iter(["t1", "t2"])
    seen: list[tuple[str, str | None]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append((request.headers["Authorization"], request.headers.get("X-Cortex-Actor")))
        return httpx.Response(200, json={"caller": "user:alice"})

    sdk = CortexClient("http://x", token_provider=lambda: next(tokens), actor="user:alice",
                       transport=httpx.MockTransport(answer))  # fmt: skip
    assert sdk.whoami().caller == "user:alice" and sdk.auth.whoami().caller == "user:alice"
    assert seen == [("Bearer t1", "user:alice"), ("Bearer t2", "user:alice")]


def test_any_request_runs_through_the_clients_plumbing():
    """``client.run(Call(...))``: an endpoint the SDK has no method for, with its headers and errors."""
    from cortexdb.client import Call
    from cortexdb.errors import CortexError

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/answer":
            return httpx.Response(501, json={"error_code": "NOT_IMPLEMENTED", "message": "later", "request_id": "r1",
                                             "retriable": False})  # fmt: skip
        return httpx.Response(200, json={"actor": request.headers["X-Cortex-Actor"], "q": request.url.params["q"]})

    sdk = CortexClient("http://x", actor="user:alice", transport=httpx.MockTransport(answer))
    assert sdk.run(Call("GET", "/v1/whatever", params={"q": "1", "unset": None})) == {"actor": "user:alice", "q": "1"}
    with pytest.raises(CortexError) as failed:
        sdk.run(Call("POST", "/v1/answer", json={"question": "?"}))
    assert (failed.value.error_code, failed.value.http_status, failed.value.request_id) == ("NOT_IMPLEMENTED", 501, "r1")
