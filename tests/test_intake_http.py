"""The intake queue over HTTP (docs/intake.md): pending results of the caller's own writes, their
questions and hints, acknowledgement, bad input as 4xx envelopes; and ``client.intake``."""

from __future__ import annotations

import pytest

from cortexdb.client import AsyncCortexClient
from cortexdb.errors import NotFound
from cortexdb.schemas import validator

from .sdk_support import live
from .server_support import body, server

SCOPE = "org:acme/user:alice"


async def test_pending_and_ack(tmp_path):
    async with server(tmp_path) as h:
        response, data = await h.call("POST", "/v1/experience?wait=consolidated", json=body("Bob met Carl. He lives in Oslo."))
        assert response.status_code == 200, data
        response, page = await h.call("GET", f"/v1/intake/pending?scope={SCOPE}")
        assert response.status_code == 200, page
        (item,) = page["items"]
        validator("intake_item").validate(item)
        assert item["status"] == "needs_clarification" and item["event_id"] == data["event_id"]
        assert item["questions"] == ['Does "He" in "He lives in Oslo." mean Bob or Carl?'] and item["surfacing_hint"]
        response, page = await h.call("GET", f"/v1/intake/pending?scope={SCOPE}&status=conflict_detected")
        assert page["items"] == []
        response, done = await h.call("POST", f"/v1/intake/{item['id']}/ack", json={"scope": SCOPE})
        assert response.status_code == 200 and done["acknowledged_by"] == "user:alice", done
        validator("intake_item").validate(done)
        response, again = await h.call("POST", f"/v1/intake/{item['id']}/ack", json={"scope": SCOPE})
        assert response.status_code == 404, again
        response, page = await h.call("GET", f"/v1/intake/pending?scope={SCOPE}")
        assert page["items"] == []


async def test_bad_requests_are_4xx_envelopes(tmp_path):
    async with server(tmp_path) as h:
        for path in (f"/v1/intake/pending?scope={SCOPE}&status=maybe", f"/v1/intake/pending?scope={SCOPE}&limit=0",
                     f"/v1/intake/pending?scope={SCOPE}&x=1", "/v1/intake/pending"):  # fmt: skip
            response, data = await h.call("GET", path)
            assert 400 <= response.status_code < 500 and data["error_code"], (path, data)
        response, data = await h.call("POST", "/v1/intake/intk_x/ack", json={"scope": SCOPE, "other": 1})
        assert response.status_code == 422 and data["details"]["field"] == "other", data
        response, data = await h.call("POST", "/v1/intake/intk_x/ack", json={})
        assert 400 <= response.status_code < 500, data


async def test_the_sdk(tmp_path):
    async with live(tmp_path) as (url, _), AsyncCortexClient(url, actor="user:alice", scope=SCOPE) as sdk:
        await sdk.experience("She works at Acme.", wait="consolidated")
        page = await sdk.intake.pending()
        (item,) = page.items
        assert item["reason"] == "unresolved_pronoun"
        assert (await sdk.intake.ack(item["id"])).acknowledged_by == "user:alice"
        with pytest.raises(NotFound):
            await sdk.intake.ack(item["id"])
