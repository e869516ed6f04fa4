"""Segment strategies over HTTP (``/v1/scopes/segmentation``) and through the SDK."""

from __future__ import annotations

import trio

from cortexdb import schemas
from cortexdb.client import AsyncCortexClient, CortexClient

from .sdk_support import NOW, live
from .server_support import body, server
from .test_segments import EXPECTED, TURNS

ALICE = "org:acme/user:alice"


async def write_turns(h, scope=ALICE):
    ids = []
    for text, role, when, session, thread in TURNS:
        doc = body(text, scope=scope, observed_actor={"id": "user:alice", "session": session},
                   content={"kind": "message", "role": role, "text": text},
                   context={"observed_at": when, "thread": thread})  # fmt: skip
        response, data = await h.call("POST", "/v1/experience?wait=indexed", json=doc)
        assert response.status_code == 200, data
        ids.append(data["event_id"])
    return ids


async def test_http_set_and_read_the_strategy_and_its_job(tmp_path):
    async with server(tmp_path) as h:
        ids = await write_turns(h)
        response, job = await h.call("PUT", f"/v1/scopes/segmentation?path={ALICE}", json={"strategy": "thread"})
        assert response.status_code == 202 and job["strategy"] == "thread", job
        assert job["lifecycle_stream"].endswith(job["job_id"])
        done = await h.engine.segmentation.wait(job["job_id"])
        assert done["status"] == "completed"
        response, setting = await h.call("GET", f"/v1/scopes/segmentation?path={ALICE}")
        assert response.status_code == 200
        assert (setting["strategy"], setting["source"], setting["job"]["status"]) == ("thread", "scope", "completed")
        assert setting["job"]["progress"]["events_done"] == len(TURNS)
        await h.engine.flush(ALICE, seal=True)
        response, page = await h.call("GET", f"/v1/episodes?scope={ALICE}&limit=100")
        position = {event_id: n for n, event_id in enumerate(ids)}
        found = sorted(sorted(position[e] for e in episode["events"]) for episode in page["items"])
        assert found == EXPECTED["thread"]
        response, scope = await h.call("GET", f"/v1/scopes?path={ALICE}")
        assert scope["policies"]["segmentation"]["strategy"] == "thread"
        schemas.validator("scope").validate(scope)
        response, ticks = await h.call("GET", f"/v1/lifecycle?job_id={job['job_id']}&events=segmentation_progress")
        assert response.status_code == 200, ticks
        for item in ticks["items"]:
            schemas.validator("lifecycle_event").validate(item)
        assert ticks["items"][-1]["payload"]["events_done"] == len(TURNS)


async def test_http_refuses_bad_settings(tmp_path):
    async with server(tmp_path) as h:
        for bad, field in (({"strategy": "hourly"}, "segmentation.strategy"),
                           ({"strategy": "daily", "gap_seconds": "soon"}, "segmentation.gap_seconds"),
                           ([], None)):  # fmt: skip
            response, error = await h.call("PUT", f"/v1/scopes/segmentation?path={ALICE}", json=bad)
            assert response.status_code in (400, 422) and error["error_code"] == "INVALID_BODY", error
            assert error.get("details", {}).get("field") == field
        response, error = await h.call("POST", "/v1/scopes", json={
            "path": "ws:notes", "policies": {"segmentation": {"strategy": "weekly"}}})  # fmt: skip
        assert response.status_code in (400, 422)
        assert error["details"]["field"] == "policies.segmentation.strategy", error
        response, created = await h.call("POST", "/v1/scopes", json={
            "path": "ws:diary", "policies": {"segmentation": {"strategy": "daily"}}})  # fmt: skip
        assert response.status_code == 201, created
        response, setting = await h.call("GET", "/v1/scopes/segmentation?path=ws:diary")
        assert (setting["strategy"], setting["source"], setting["job"]) == ("daily", "scope", None)


async def test_sdk_segmentation_with_both_clients(tmp_path):
    scope = "org:acme/dept:eng/user:alice"
    async with live(tmp_path) as (url, _):
        async with AsyncCortexClient(url, actor="user:alice", scope=scope, now=lambda: NOW) as sdk:
            await sdk.experience("Alice works at Acme.", wait="indexed")
            job = await sdk.scopes.set_segmentation("daily")
            assert job.job_id.startswith("job_") and job.strategy == "daily"

        def sync_side():
            with CortexClient(url, actor="user:alice", scope=scope, now=lambda: NOW) as client:
                return client.scopes.segmentation(), client.scopes.set_segmentation("time_gap", gap_seconds=600)

        setting, again = await trio.to_thread.run_sync(sync_side)
    assert setting.strategy == "daily" and setting.source == "scope" and setting.job["job_id"] == job.job_id
    assert again.strategy == "time_gap"
