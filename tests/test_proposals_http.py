"""Memory write proposals over HTTP (docs/proposals.md): propose, list, approve (the committed
event, its audit rows), reject, owners-only review, require_review scopes holding non-owners'
writes, bad input as 4xx envelopes; and ``client.proposals`` against a live server."""

from __future__ import annotations

import pytest

from cortexdb.client import AsyncCortexClient
from cortexdb.engine.policy import capabilities as cap
from cortexdb.errors import InvalidRequest
from cortexdb.schemas import validator

from .sdk_support import live
from .server_support import body, server

TEAM = "ws:team"
MEMBERS = [{"actor": "user:alice", "role": "owner"}, {"actor": "user:wendy", "role": "writer"},
           {"actor": "user:rita", "role": "reader"}]  # fmt: skip


async def register(h, **policies) -> None:
    response, data = await h.call("POST", "/v1/scopes", json={"path": TEAM, "members": MEMBERS, "policies": policies})
    assert response.status_code == 201, data


async def test_propose_approve_and_reject(tmp_path):
    async with server(tmp_path) as h:
        await register(h)
        response, held = await h.call("POST", "/v1/proposals", "user:wendy",
                                      json={"scope": TEAM, "experience": body("I live in Oslo.", scope=TEAM),
                                            "rationale": "said in chat"})  # fmt: skip
        assert response.status_code == 201, held
        validator("proposal").validate(held)
        response, data = await h.call("POST", f"/v1/proposals/{held['id']}/approve", "user:wendy", json={"scope": TEAM})
        assert response.status_code == 403, data  # a writer proposes; only owners review
        response, page = await h.call("GET", f"/v1/proposals?scope={TEAM}&status=pending", "user:rita")
        assert [p["id"] for p in page["items"]] == [held["id"]]
        response, done = await h.call("POST", f"/v1/proposals/{held['id']}/approve?wait=consolidated",
                                      json={"scope": TEAM, "note": "confirmed"})  # fmt: skip
        assert response.status_code == 200, done
        assert done["status"] == "approved" and done["reviewed_by"] == "user:alice"
        response, event = await h.call("GET", f"/v1/events/{done['committed']['event_id']}")
        assert event["context"]["labels"]["proposal_id"] == held["id"]
        assert event["context"]["labels"]["proposed_by"] == "user:wendy"
        response, rows = await h.call("GET", f"/v1/audit?capability={cap.PROPOSAL_REVIEW}")
        assert sorted((r["decision"], r["actor"]) for r in rows["items"]) == [("allow", "user:alice"), ("deny", "user:wendy")]
        allowed = next(r for r in rows["items"] if r["decision"] == "allow")
        assert allowed["summary"] == {"proposal_id": held["id"], "status": "approved", "event_id": done["committed"]["event_id"]}
        response, again = await h.call("POST", f"/v1/proposals/{held['id']}/reject", json={"scope": TEAM})
        assert response.status_code == 422 and again["details"]["reason"] == "not_pending", again
        response, other = await h.call("POST", "/v1/proposals", "user:wendy",
                                       json={"scope": TEAM, "experience": body("I like jazz.", scope=TEAM)})  # fmt: skip
        response, rejected = await h.call("POST", f"/v1/proposals/{other['id']}/reject",
                                          json={"scope": TEAM, "note": "no"})  # fmt: skip
        assert rejected["status"] == "rejected" and rejected["committed"] is None


async def test_require_review_holds_non_owners_writes(tmp_path):
    async with server(tmp_path) as h:
        await register(h, require_review=True)
        response, data = await h.call("POST", "/v1/experience", "user:wendy", json=body("I live in Rome.", scope=TEAM))
        assert response.status_code == 202 and data["status"] == "pending_review", data
        response, events = await h.call("GET", f"/v1/events?scope={TEAM}")
        assert events["items"] == []  # held, not captured
        response, held = await h.call("GET", f"/v1/proposals/{data['proposal_id']}?scope={TEAM}")
        assert held["source"] == "require_review" and held["proposed_by"] == "user:wendy"
        response, bulk = await h.call("POST", "/v1/experience/bulk", "user:wendy", json={
            "scope": TEAM, "items": [{k: v for k, v in body("x", scope=TEAM).items() if k != "scope"}]})  # fmt: skip
        assert response.status_code == 422 and bulk["details"]["reason"] == "require_review", bulk
        # the owner's own writes go straight in
        response, data = await h.call("POST", "/v1/experience", json=body("I like rain.", scope=TEAM))
        assert response.status_code == 202 and data["status"] == "captured", data
        for bad in ("yes", 1, None, ["derived"]):
            response, data = await h.call("POST", "/v1/scopes", json={"path": "ws:other", "policies": {"require_review": bad}})
            assert response.status_code == 422 and data["details"]["field"] == "policies.require_review", (bad, data)


async def test_require_review_derived_captures_and_holds_the_facts(tmp_path):
    async with server(tmp_path) as h:
        await register(h, require_review="derived")
        response, data = await h.call("POST", "/v1/experience?wait=consolidated", "user:wendy",
                                      json=body("I live in Rome.", scope=TEAM))  # fmt: skip
        assert response.status_code == 200 and data["status"] != "pending_review", data  # captured
        response, facts = await h.call("GET", f"/v1/facts?scope={TEAM}")
        assert facts["items"] == []
        response, page = await h.call("GET", f"/v1/proposals?scope={TEAM}&status=pending", "user:rita")
        [held] = page["items"]
        assert held["source"] == "derivation" and held["event_ids"] == [data["event_id"]]
        response, done = await h.call("POST", f"/v1/proposals/{held['id']}/approve", "user:wendy", json={"scope": TEAM})
        assert response.status_code == 403, done  # owners review
        response, done = await h.call("POST", f"/v1/proposals/{held['id']}/approve", json={"scope": TEAM})
        assert response.status_code == 200 and done["committed"]["approved_by"] == "user:alice", done
        response, facts = await h.call("GET", f"/v1/facts?scope={TEAM}")
        assert [f["id"] for f in facts["items"]] == [done["committed"]["fact_id"]]


@pytest.mark.parametrize("payload, status, field", [
    ({"scope": TEAM}, 422, "experience"),
    ({"scope": TEAM, "experience": {"modality": "x"}}, 422, None),
    ({"scope": TEAM, "experience": body("x", scope=TEAM), "rationale": ["no"]}, 422, "rationale"),
])  # fmt: skip
async def test_bad_proposals_are_4xx_envelopes(tmp_path, payload, status, field):
    async with server(tmp_path) as h:
        await register(h)
        response, data = await h.call("POST", "/v1/proposals", json=payload)
        assert response.status_code == status, data
        validator("error_envelope").validate(data)
        if field:
            assert data["details"]["field"] == field
        response, data = await h.call("POST", "/v1/proposals/prp_unknown/approve", json={"scope": TEAM})
        assert response.status_code == 404, data
        response, data = await h.call("POST", "/v1/proposals/prp_unknown/approve", json={"scope": TEAM, "x": 1})
        assert response.status_code == 422 and data["details"]["field"] == "x", data


async def test_the_sdk(tmp_path):
    scope = "org:acme/user:alice"
    async with live(tmp_path) as (url, _), AsyncCortexClient(url, actor="user:alice", scope=scope) as sdk:
        held = await sdk.proposals.propose(body("I live in Porto.", scope=scope), rationale="from chat")
        assert held.status == "pending" and held.rationale == "from chat"
        assert [p["id"] for p in (await sdk.proposals.list(status="pending")).items] == [held.id]
        done = await sdk.proposals.approve(held.id, note="fine", wait="indexed")
        assert done.status == "approved" and done.committed["event_id"].startswith("evt_")
        assert (await sdk.proposals.get(held.id)).status == "approved"
        with pytest.raises(InvalidRequest):
            await sdk.proposals.reject(held.id)
