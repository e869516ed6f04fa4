"""GDPR erasure over HTTP (reference §8.6): preview → manifest → execute → status, the
``erasure_progress`` stream filtered by ``?erasure_id=`` (SSE and WebSocket) and per subscriber,
the erasure's audit row, the audit rows of the erased writes losing ``body_bytes`` while
``POST /v1/audit/verify`` still matches, and ``cortexdb erase`` against a live server."""

from __future__ import annotations

import json
from collections.abc import Callable

import trio

from cortexdb.cli import main

from .server_support import TENANT, body, server
from .test_server_e2e import live

ALICE = "org:acme/user:alice"
MALLORY = "org:acme/user:mallory"


async def sse_frames(h, actor: str, path: str, until: Callable[[list[dict]], bool]) -> list[dict]:
    seen: list[dict] = []
    with trio.fail_after(20), trio.CancelScope() as done:  # fail_after: a hang guard only
        async with h.client.request(path, method="GET", headers=h.as_(actor)) as connection:
            await connection.send_complete()
            buffer = b""
            while not until(seen):
                buffer += await connection.receive()
                while b"\n\n" in buffer:
                    frame, buffer = buffer.split(b"\n\n", 1)
                    fields = dict(line.split(": ", 1) for line in frame.decode().splitlines() if ": " in line)
                    if "event" in fields:
                        seen.append({"event": fields["event"], **json.loads(fields["data"])})
            done.cancel()
    return seen


def ended(frames: list[dict]) -> bool:
    return any(f["event"] == "erasure_complete" for f in frames)


async def test_preview_execute_status_stream_and_audit(tmp_path):
    async with server(tmp_path) as h:
        raw = json.dumps(body("I live in Paris.", scope=ALICE))
        response = await h.client.post("/v1/experience?wait=consolidated", data=raw,
                                       headers={**h.as_("user:alice"), "Content-Type": "application/json"})  # fmt: skip
        event_id = (await response.get_json())["event_id"]
        response, preview = await h.call("POST", "/v1/erasures/preview", json={"scope": ALICE, "audit_note": "DSR #9"})
        assert response.status_code == 200, preview
        assert response.headers["X-Cortex-Stability"] == "experimental"
        assert preview["refcount_breakdown"]["events_to_delete"] == 1
        response, manifest = await h.call("GET", preview["manifest_url"] + "?limit=1")
        assert response.status_code == 200 and manifest["items"][0] == {
            "action": "delete_event", "scope": ALICE, "event_id": event_id}  # fmt: skip
        assert manifest["has_more"] and manifest["preview_id"] == preview["preview_id"]

        response, accepted = await h.call("POST", "/v1/erasures", json={
            "scope": ALICE, "from_preview_id": preview["preview_id"], "audit_note": "DSR #9"})  # fmt: skip
        assert response.status_code == 202 and accepted["status"] == "running"
        erasure_id = accepted["erasure_id"]
        assert accepted["lifecycle_stream"] == f"/v1/lifecycle/stream?erasure_id={erasure_id}"
        frames = await sse_frames(h, "user:alice", accepted["lifecycle_stream"] + "&since_lifecycle_id=", ended)
        assert {f["job_id"] for f in frames} == {erasure_id} and {f["scope"] for f in frames} == {ALICE}
        phases = [f["payload"]["phase"] for f in frames if f["event"] == "erasure_progress"]
        assert sorted(set(phases), key=phases.index) == ["enumerate", "refcount", "categorize", "delete", "demote"]
        complete = frames[-1]["payload"]
        assert complete["status"] == "completed" and complete["erasure_id"] == erasure_id

        response, status = await h.call("GET", f"/v1/erasures/{erasure_id}")
        assert status["status"] == "completed" and status["fraction_complete"] == 1.0
        assert status["progress"]["deleted_events"] == 1 and status["audit_id"] == complete["audit_id"]
        response, manifest = await h.call("GET", f"/v1/erasures/{erasure_id}/manifest")
        assert {"action": "delete_event", "scope": ALICE, "event_id": event_id} in manifest["items"]

        response, row = await h.call("GET", f"/v1/audit/{status['audit_id']}", "user:root")
        assert row["gdpr"] is True and row["erasure_id"] == erasure_id and row["actor"] == "user:alice"
        assert row["summary"]["deleted_events"] == 1 and row["audit_note"] == "DSR #9"
        response, rows = await h.call("GET", "/v1/audit?capability=scope.write", "user:root")
        write = next(r for r in rows["items"] if r["event_id"] == event_id)
        assert "body_bytes" not in write["request"] and write["body_bytes_removed_by"] == erasure_id
        response, verified = await h.call("POST", "/v1/audit/verify", "user:root",
                                          json={"audit_id": write["id"], "body": raw})  # fmt: skip
        assert verified["match"] is True
        response, cancel = await h.call("POST", f"/v1/erasures/{erasure_id}/cancel")
        assert response.status_code == 200 and cancel["cancellation_accepted"] is False
        assert cancel["audit_id"] == status["audit_id"] and cancel["cancel_audit_id"].startswith("audit_")


async def test_progress_reaches_only_the_subscribers_who_may_read_the_scope(tmp_path):
    async with server(tmp_path) as h:
        await h.call("POST", "/v1/experience?wait=consolidated", json=body("I live in Paris.", scope=ALICE))
        await h.call("POST", "/v1/experience?wait=consolidated", "user:mallory", json=body("Mine.", scope=MALLORY))
        _, alices = await h.call("POST", "/v1/erasures", json={"scope": ALICE})
        _, mallorys = await h.call("POST", "/v1/erasures", "user:mallory", json={"scope": MALLORY})
        firehose = "/v1/lifecycle/stream?since_lifecycle_id=&events=erasure_progress,erasure_complete"
        seen = await sse_frames(h, "user:mallory", firehose,
                                lambda s: any(f["event"] == "erasure_complete" and f["job_id"] == mallorys["erasure_id"]
                                              for f in s))  # fmt: skip
        assert {f["job_id"] for f in seen} == {mallorys["erasure_id"]}
        response, data = await h.call("GET", f"/v1/erasures/{alices['erasure_id']}", "user:mallory")
        assert response.status_code == 403 and data["error_code"] == "NOT_A_MEMBER"
        path = f"/v1/lifecycle/ws?erasure_id={alices['erasure_id']}&since_lifecycle_id="
        with trio.fail_after(20):
            async with h.client.websocket(path, headers=h.as_("user:alice")) as ws:
                events = []
                while not events or events[-1]["event"] != "erasure_complete":
                    frame = json.loads(await ws.receive())
                    if frame["type"] == "lifecycle":
                        events.append(frame)
        assert {f["data"]["job_id"] for f in events} == {alices["erasure_id"]}


async def test_drift_is_a_409_and_an_expired_manifest_a_410(tmp_path):
    async with server(tmp_path) as h:
        await h.call("POST", "/v1/experience", json=body("I live in Paris.", scope=ALICE))
        _, preview = await h.call("POST", "/v1/erasures/preview", json={"scope": ALICE})
        await h.call("POST", "/v1/experience", json=body("I moved to Lyon.", scope=ALICE))
        response, data = await h.call("POST", "/v1/erasures", json={"scope": ALICE, "from_preview_id": preview["preview_id"]})
        assert response.status_code == 409 and data["error_code"] == "ERASURE_PREVIEW_STALE"
        assert data["details"]["new_events"] == 1
        h.clock.advance(24 * 3600 + 1)
        response, data = await h.call("GET", preview["manifest_url"])
        assert response.status_code == 410 and data["error_code"] == "RESOURCE_DELETED"
        response, data = await h.call("GET", "/v1/erasures/erasure_nope")
        assert response.status_code == 404 and data["error_code"] == "NOT_FOUND"
        response, data = await h.call("POST", "/v1/erasures/preview", json={"scope": ALICE, "confirm": True})
        assert response.status_code == 400 and data["details"]["field"] == "confirm"


async def test_the_tenant_drift_threshold_is_read_from_the_tenant_policy(tmp_path):
    async with server(tmp_path) as h:
        response, _ = await h.call("PUT", f"/v1/policy/tenant/{TENANT}", "user:root",
                                   json={"defaults": {"erasure.drift_threshold": 5}})  # fmt: skip
        assert response.status_code == 200
        await h.call("POST", "/v1/experience", json=body("I live in Paris.", scope=ALICE))
        _, preview = await h.call("POST", "/v1/erasures/preview", json={"scope": ALICE})
        await h.call("POST", "/v1/experience", json=body("I moved to Lyon.", scope=ALICE))
        response, accepted = await h.call("POST", "/v1/erasures", json={"scope": ALICE, "from_preview_id": preview["preview_id"]})
        assert response.status_code == 202, accepted


async def test_cortexdb_erase_prints_a_preview_and_a_progress_bar(tmp_path, capsys):
    async with live(tmp_path) as (url, keys):
        token = keys.paseto("user:alice")
        flags = ["--url", url, "--actor", "user:alice", "--token", token]

        def write_then_erase() -> tuple[int, int]:
            from cortexdb.client import CortexClient

            with CortexClient(url, actor="user:alice", token=token) as client:
                client.experience(text="I live in Paris.", scope=ALICE, wait="consolidated")
            previewed = main(["erase", "--scope", ALICE, "--preview", *flags])
            return previewed, main(["erase", "--scope", ALICE, "--note", "DSR #7", *flags])

        previewed, erased = await trio.to_thread.run_sync(write_then_erase)
    out = capsys.readouterr().out
    assert previewed == 0 and erased == 0, out
    assert "events to delete 1, to redact 0" in out and "manifest /v1/erasures/preview/ervw_" in out
    assert "[##############################] 100.0% demote" in out
    assert "completed (scope erased), audit audit_" in out
