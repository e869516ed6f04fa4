"""Imports over HTTP (reference §8.11): the raw body streamed to the spool, or the JSON request."""

from __future__ import annotations

import json
from pathlib import Path

from .server_support import server

DATA = Path(__file__).parent / "data" / "import"


async def test_a_raw_upload_and_a_json_request_both_import(tmp_path):
    async with server(tmp_path) as h:
        raw = (DATA / "mem0" / "platform_v1.0_list.json").read_bytes()
        response, started = await h.call("POST", "/v1/import/mem0?scope_template=user:alice/app:{user_id}",
                                         hdrs={**h.as_("user:alice"), "Content-Type": "application/json"}, data=raw)  # fmt: skip
        assert response.status_code == 202, started
        assert started["format"] == "mem0_v1_list" and started["lifecycle_stream"].endswith(started["import_id"])
        status = await h.engine.imports.wait(started["import_id"])
        assert status["status"] == "completed" and status["items"]["written"] == 6, status
        response, polled = await h.call("GET", f"/v1/import/{started['import_id']}")
        assert response.status_code == 200 and polled["items"]["written"] == 6
        line = json.dumps({"scope": "user:alice", "modality": "note", "content": {"kind": "text", "text": "hi"},
                           "context": {"observed_at": "2026-01-01T00:00:00Z"}})  # fmt: skip
        response, started = await h.call("POST", "/v1/import/jsonl", json={
            "scope_template": "user:alice", "source": {"format": "cortexdb_jsonl_v1", "inline": line}})
        assert response.status_code == 202, started
        assert (await h.engine.imports.wait(started["import_id"]))["items"]["written"] == 1
        # another user's personal scope: refused before anything is spooled
        response, denied = await h.call("POST", "/v1/import/jsonl?scope_template=user:bob", data=line)
        assert response.status_code == 403, denied
        response, bad = await h.call("POST", "/v1/import/mem0?scope_template=user:alice", data=b'{"x": 1}')
        assert response.status_code == 422 and bad["error_code"] == "UNSUPPORTED_FORMAT"


async def test_the_import_size_limit_is_a_setting_and_over_it_is_413_with_nothing_kept(tmp_path):
    """``--max-import-bytes``: a source over it is refused as it streams (413), and the partial
    spool file is removed; the blob and body limits do not apply to imports."""
    line = json.dumps({"scope": "user:alice", "modality": "note", "content": {"kind": "text", "text": "x" * 100},
                       "context": {"observed_at": "2026-01-01T00:00:00Z"}}).encode() + b"\n"  # fmt: skip
    async with server(tmp_path, max_body_bytes=2000, max_blob_bytes=1000, max_import_bytes=20_000) as h:
        fits = line * (19_000 // len(line))  # over the body and blob limits, under the import limit
        response, started = await h.call("POST", "/v1/import/jsonl?scope_template=user:alice", data=fits)
        assert response.status_code == 202, started
        status = await h.engine.imports.wait(started["import_id"])
        assert status["items"]["written"] == 1 and status["items"]["replayed"] == len(fits) // len(line) - 1
        response, error = await h.call("POST", "/v1/import/jsonl?scope_template=user:alice", data=line * 200)
        assert response.status_code == 413 and error["error_code"] == "PAYLOAD_TOO_LARGE", error
        assert error["details"]["limit"] == 20_000
