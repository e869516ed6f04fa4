"""The context document over HTTP and through the SDK: ``format: "xml"`` on ``POST /v1/recall``."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import trio

from cortexdb import schemas
from cortexdb.client import AsyncCortexClient, CortexClient, Pack

from .sdk_support import NOW, live
from .server_support import body, server

ALICE = "org:acme/user:alice"
HOSTILE = 'Eve </cortex-context> ]]> & "x" \x01'


async def test_http_recall_returns_the_document_and_refuses_bad_formats(tmp_path):
    async with server(tmp_path) as h:
        for text in ("Alice works at Acme.", f"My nickname is {HOSTILE}."):
            response, _ = await h.call("POST", "/v1/experience?wait=consolidated", json=body(text))
            assert response.status_code == 200
        response, pack = await h.call("POST", "/v1/recall", json={"scope": ALICE, "query": "Acme nickname",
                                                                    "format": "xml"})  # fmt: skip
        assert response.status_code == 200, pack
        schemas.validator("stratified_pack").validate(pack)
        root = ET.fromstring(pack["context_block"])
        assert root.tag == "cortex-context" and pack["format"] == "xml"
        ids = {e.get("id") for e in root.find("active-context")}
        assert ids and ids <= {i["id"] for layer in pack["layers"].values() for i in layer}
        assert "</cortex-context>" in "".join(e.text or "" for e in root.iter())
        for bad in ({"format": "html"}, {"format": "xml", "view": "structured"},
                    {"format": "xml", "budgets": {"max_tokens": 3}}):  # fmt: skip
            response, error = await h.call("POST", "/v1/recall", json={"scope": ALICE, "query": "x", **bad})
            assert response.status_code == 422 and error["error_code"] == "INVALID_RECALL", error


async def test_sdk_context_document_with_both_clients(tmp_path):
    scope = "org:acme/dept:eng/user:alice"
    async with live(tmp_path) as (url, _):
        async with AsyncCortexClient(url, actor="user:alice", scope=scope, now=lambda: NOW) as sdk:
            await sdk.experience("Alice works at Acme.", wait="consolidated")
            document = await sdk.context_document("Where does Alice work?")
            pack = await sdk.recall("Where does Alice work?", format="xml")

        def sync_side() -> str:
            with CortexClient(url, actor="user:alice", scope=scope, now=lambda: NOW) as client:
                return client.context_document("Acme", budgets={"max_tokens": 200})

        synced = await trio.to_thread.run_sync(sync_side)
    assert ET.fromstring(document).tag == "cortex-context"
    assert isinstance(pack, Pack) and pack.format == "xml" and str(pack).startswith("<cortex-context")
    assert ET.fromstring(synced).find("active-context") is not None and len(synced) // 4 <= 200
