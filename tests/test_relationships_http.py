"""Relationships, the router and aspects over HTTP (``GET``/``POST /v1/relationships``, the recall
pack's ``relationships`` part, ``aspect=`` on layer reads) and through the SDK."""

from __future__ import annotations

import pytest
import trio

from cortexdb import schemas
from cortexdb.client import AsyncCortexClient

from .sdk_support import live
from .server_support import body, server

ALICE = "org:acme/user:alice"


async def post(h, payload, actor="user:alice"):
    return await h.call("POST", "/v1/relationships", actor, json=payload)


async def test_write_walk_and_recall_over_http(tmp_path):
    async with server(tmp_path) as h:
        response, written = await post(h, {"scope": ALICE, "from": "Alice", "type": "manages", "to": "Priya",
                                           "confidence": 0.9})  # fmt: skip
        assert response.status_code == 200, written
        assert written["status"] == "indexed" and written["relationship_ids"][0].startswith("fact_")
        await post(h, {"scope": ALICE, "from": "Priya", "type": "works_with", "to": "Tom", "confidence": 0.3})
        response, walk = await h.call("GET", f"/v1/relationships?scope={ALICE}&from=Alice&depth=2")
        assert response.status_code == 200, walk
        schemas.validator("relationship_page").validate(walk)
        assert [(e["from"]["name"], e["type"], e["to"]["name"]) for e in walk["items"]] == [
            ("Alice", "manages", "Priya"), ("Priya", "works_with", "Tom")]
        assert walk["items"][0]["id"] == written["relationship_ids"][0]
        response, strong = await h.call("GET", f"/v1/relationships?scope={ALICE}&from=Alice&depth=2&min_confidence=0.5")
        assert [e["type"] for e in strong["items"]] == ["manages"]
        response, typed = await h.call("GET", f"/v1/relationships?scope={ALICE}&from=Priya&type=manages&direction=in")
        assert [e["from"]["name"] for e in typed["items"]] == ["Alice"]
        response, pack = await h.call("POST", "/v1/recall", json={
            "scope": ALICE, "query": "What is the relationship between Alice and Priya?"})  # fmt: skip
        assert response.status_code == 200, pack
        schemas.validator("stratified_pack").validate(pack)
        assert pack["relationships"][0]["type"] == "manages"
        route = next(p for p in pack["provenance"]["trail"] if p["phase"] == "route")
        assert route["type"] == "relationship" and [h["name"] for h in route["entity_hints"]] == ["Alice", "Priya"]


@pytest.mark.parametrize(("query", "field"), [
    ("from=Alice&direction=up", "direction"), ("from=Alice&depth=ten", "depth"), ("from=Alice&depth=9", "depth"),
    ("from=Alice&min_confidence=high", "min_confidence"), ("from=Alice&as_of=soon", "as_of"),
    ("from=Alice&colour=red", "colour"), ("depth=1", "from"),
])  # fmt: skip
async def test_bad_walks_are_4xx(tmp_path, query, field):
    async with server(tmp_path) as h:
        await post(h, {"scope": ALICE, "from": "Alice", "type": "manages", "to": "Priya"})
        response, data = await h.call("GET", f"/v1/relationships?scope={ALICE}&{query}")
        assert 400 <= response.status_code < 500, data
        assert data["details"]["field"] == field


async def test_bad_writes_and_unknown_entities(tmp_path):
    async with server(tmp_path) as h:
        response, data = await post(h, {"scope": ALICE, "from": "Alice", "type": "knows"})
        assert response.status_code == 400 and data["details"]["field"] == "to"
        response, data = await post(h, {"scope": ALICE, "from": "A", "type": "knows", "to": "B", "confidence": "high"})
        assert response.status_code == 400 and data["details"]["field"] == "confidence"
        response, data = await h.call("GET", f"/v1/relationships?scope={ALICE}&from=Nobody")
        assert response.status_code == 404 and data["error_code"] == "NOT_FOUND"


async def test_aspect_filters_over_http(tmp_path):
    async with server(tmp_path) as h:
        for text in ("We decided to use Postgres.", "I like green tea."):
            response, _ = await h.call("POST", "/v1/experience?wait=consolidated", json=body(text, scope=ALICE))
            assert response.status_code == 200
        response, page = await h.call("GET", f"/v1/events?scope={ALICE}&aspect=decision")
        assert response.status_code == 200 and [e["content"]["text"] for e in page["items"]] == ["We decided to use Postgres."]
        response, page = await h.call("GET", f"/v1/facts?scope={ALICE}&aspect=preference")
        assert response.status_code == 200 and [f["predicate"] for f in page["items"]] == ["likes"]
        response, data = await h.call("GET", f"/v1/facts?scope={ALICE}&aspect=mood")
        assert response.status_code == 400 and data["details"]["field"] == "aspect"
        response, page = await h.call("GET", f"/v1/beliefs?scope={ALICE}&aspect=preference")
        assert response.status_code == 200 and [b["claim"]["predicate"] for b in page["items"]] == ["likes"]
        response, page = await h.call("GET", f"/v1/beliefs?scope={ALICE}&aspect=decision")
        assert response.status_code == 200 and page["items"] == []
        response, data = await h.call("GET", f"/v1/beliefs?scope={ALICE}&aspect=mood")
        assert response.status_code == 400 and data["details"]["field"] == "aspect"


async def test_sdk_relationships(tmp_path):
    async with live(tmp_path) as (url, _):
        async with AsyncCortexClient(url, actor="user:alice", scope=ALICE) as client:
            written = await client.relationships.create("Alice", "manages", "Priya", confidence=0.8)
            assert written.relationship_ids[0].startswith("fact_")
            walk = await client.relationships.walk("Alice", direction="out", type=["manages"])
            assert [e["to"]["name"] for e in walk.items] == ["Priya"] and walk.truncated is False
            facts = await client.facts(aspect="relationship")
            assert [f.predicate for f in facts] == ["manages"]
        await trio.lowlevel.checkpoint()
