"""Exports over HTTP (reference §8.12): 202 and status, the download, read isolation, limits."""

from __future__ import annotations

import json

import attrs
import orjson

from .server_support import body, server

ALICE = "org:acme/user:alice"
SECRET = "Zorblax"


async def wrote(h, text: str, scope: str = ALICE, actor: str = "user:alice") -> None:
    response, data = await h.call("POST", "/v1/experience?wait=consolidated", actor, json=body(text, scope=scope))
    assert response.status_code == 200, data


async def test_export_is_202_then_status_then_download(tmp_path):
    async with server(tmp_path) as h:
        await wrote(h, "I live in Paris.")
        await wrote(h, "I like tea.")
        response, started = await h.call("POST", "/v1/export", json={"scope": ALICE, "format": "jsonl"})
        assert response.status_code == 202, started
        export_id = started["export_id"]
        assert export_id.startswith("exp_") and started["estimated_size_bytes"] > 0
        assert started["lifecycle_stream"] == f"/v1/lifecycle/stream?export_id={export_id}"
        await h.engine.exports.wait(export_id)
        response, status = await h.call("GET", f"/v1/export/{export_id}")
        assert response.status_code == 200 and status["status"] == "completed", status
        assert status["records"]["events"] == 2 and status["download"] == f"/v1/export/{export_id}/download"
        assert "document" not in status  # a file export: downloaded
        response = await h.client.get(f"/v1/export/{export_id}/download", headers=h.as_("user:alice"))
        data = await response.get_data()
        assert response.status_code == 200 and response.content_type == "application/x-ndjson"
        assert response.headers["Content-Disposition"] == f'attachment; filename="{export_id}.jsonl"'
        assert int(response.headers["Content-Length"]) == len(data) == status["size_bytes"]
        rows = [orjson.loads(line) for line in data.splitlines()]
        assert rows[0]["record"] == "export" and rows[0]["scopes"] == [ALICE]
        assert [r["envelope"]["content"]["text"] for r in rows if r["record"] == "event"] == ["I live in Paris.", "I like tea."]
        # the export's own caller may cancel it (it ended: nothing to cancel)
        response, cancelled = await h.call("POST", f"/v1/export/{export_id}/cancel")
        assert response.status_code == 200 and cancelled["cancel_accepted"] is False
        # the audit row names the capability the export was allowed by
        _, rows = await h.call("GET", "/v1/audit?capability=export.format.jsonl", "user:root")
        assert rows["items"] and rows["items"][0]["endpoint"] == "POST /v1/export"
        response, missing = await h.call("GET", "/v1/export/exp_0000")
        assert response.status_code == 404 and missing["error_code"] == "NOT_FOUND"


async def test_a_caller_who_may_not_read_the_scope_gets_403_everywhere(tmp_path):
    async with server(tmp_path) as h:
        await wrote(h, f"{SECRET} lives in Reykjavik.")
        response, denied = await h.call("POST", "/v1/export", "user:bob", json={"scope": ALICE, "format": "mem0"})
        assert response.status_code == 403 and denied["error_code"] == "NOT_A_MEMBER", denied
        response, started = await h.call("POST", "/v1/export", json={"scope": ALICE, "format": "jsonl",
                                                                     "destination": {"kind": "inline"}})  # fmt: skip
        assert response.status_code == 202
        await h.engine.exports.wait(started["export_id"])
        response, status = await h.call("GET", f"/v1/export/{started['export_id']}")
        assert response.status_code == 200 and SECRET in status["document"]
        for method, suffix in (("GET", ""), ("GET", "/download"), ("POST", "/cancel")):
            response, data = await h.call(method, f"/v1/export/{started['export_id']}{suffix}", "user:bob")
            assert response.status_code == 403 and data["error_code"] == "NOT_A_MEMBER", (suffix, data)
            assert SECRET not in json.dumps(data)


async def test_descend_skips_the_scopes_the_caller_may_not_read(tmp_path):
    async with server(tmp_path) as h:
        members = [{"actor": "user:bob", "role": "owner"}, {"actor": "user:alice", "role": "reader"}]
        await h.call("POST", "/v1/scopes", "user:bob", json={"path": "ws:team", "members": members})
        await h.call("POST", "/v1/scopes", "user:bob", json={"path": "ws:team/project:x", "members": members[:1]})
        await wrote(h, "Standup at nine.", "ws:team", "user:bob")
        await wrote(h, f"{SECRET} ships Friday.", "ws:team/project:x", "user:bob")
        response, mine = await h.call("POST", "/v1/export", json={"scope": "ws:team", "format": "jsonl"})
        assert response.status_code == 202 and mine["scopes"] == ["ws:team"], mine
        status = await h.engine.exports.wait(mine["export_id"])
        assert status["scopes_skipped"] == ["ws:team/project:x"]
        response = await h.client.get(f"/v1/export/{mine['export_id']}/download", headers=h.as_("user:alice"))
        data = (await response.get_data()).decode()
        assert "Standup at nine." in data and SECRET not in data
        # bob's export holds the project: alice, who may not read it, may not read the export
        response, bobs = await h.call("POST", "/v1/export", "user:bob", json={"scope": "ws:team", "format": "jsonl"})
        assert bobs["scopes"] == ["ws:team", "ws:team/project:x"]
        await h.engine.exports.wait(bobs["export_id"])
        response, data = await h.call("GET", f"/v1/export/{bobs['export_id']}")
        assert response.status_code == 403 and SECRET not in json.dumps(data)
        response, status = await h.call("GET", f"/v1/export/{bobs['export_id']}", "user:bob")
        assert response.status_code == 200 and status["records"]["events"] == 2


async def test_limits_and_unsupported_requests_are_4xx(tmp_path, monkeypatch):
    async with server(tmp_path) as h:
        await wrote(h, "I live in Paris.")
        response, data = await h.call("POST", "/v1/export", json={"scope": ALICE, "format": "jsonl",
                                                                  "destination": {"kind": "url", "url": "s3://b/x"}})  # fmt: skip
        assert response.status_code == 400 and data["error_code"] == "INVALID_BODY"
        assert data["details"]["field"] == "destination.kind" and "file" in data["message"]
        response, data = await h.call("POST", "/v1/export", json={"scope": ALICE, "format": "csv"})
        assert response.status_code == 422 and data["error_code"] == "UNSUPPORTED_FORMAT"
        response, data = await h.call("POST", "/v1/export", json={"scope": ALICE})
        assert response.status_code == 400 and data["error_code"] == "MISSING_REQUIRED_FIELD"
        # an inline export over export_inline_max_bytes (an engine setting; lowered here)
        ctx = h.engine._ctx
        monkeypatch.setattr(ctx, "config", attrs.evolve(ctx.config, export_inline_max_bytes=100))
        response, data = await h.call("POST", "/v1/export", json={"scope": ALICE, "format": "jsonl",
                                                                  "destination": {"kind": "inline"}})  # fmt: skip
        assert response.status_code == 413 and data["error_code"] == "PAYLOAD_TOO_LARGE", data
        assert data["details"]["use"] == "file" and data["details"]["limit"] == 100
        response, started = await h.call("POST", "/v1/export", json={"scope": ALICE, "format": "mem0"})
        assert response.status_code == 202, started  # a file is not bounded by the inline limit
        # the download of an export that did not complete is a 409
        monkeypatch.setattr(ctx, "config", attrs.evolve(ctx.config, export_max_bytes=10))
        response, started = await h.call("POST", "/v1/export", json={"scope": ALICE, "format": "jsonl"})
        status = await h.engine.exports.wait(started["export_id"])
        assert status["status"] == "failed" and status["error"]["error_code"] == "PAYLOAD_TOO_LARGE"
        response, data = await h.call("GET", f"/v1/export/{started['export_id']}/download")
        assert response.status_code == 409 and data["error_code"] == "EXPORT_NOT_READY"
