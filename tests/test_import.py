"""Imports (reference §8.11, §15): the job framework and the JSONL importer, on the memory backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from cortexdb import open_engine
from cortexdb.errors import InvalidBody, UnsupportedFormat

DATA = Path(__file__).parent / "data" / "import"


async def run_import(engine, source, data, **request):
    request.setdefault("scope_template", "org:acme")
    started = await engine.imports.start(source, data, request)
    return started, await engine.imports.wait(started["import_id"])


async def test_jsonl_sample_imports_every_line_and_reimport_replays():
    async with open_engine("memory", id_seed=1) as engine:
        data = (DATA / "jsonl" / "envelopes.jsonl").read_bytes()
        started, status = await run_import(engine, "jsonl", data)
        assert started["estimated_items"] >= 12
        assert status["status"] == "completed", status
        # line 6 refers to a blob this data dir does not have: reported, the rest written
        assert status["items"] == {"read": 12, "written": 11, "replayed": 0, "skipped": 0, "failed": 1}
        assert status["errors"] == [{"line": 6, "error": "invalid_envelope", "detail": status["errors"][0]["detail"]}]
        assert "names no blob" in status["errors"][0]["detail"] and "items[" not in status["errors"][0]["detail"]
        assert status["fraction_complete"] == 1.0
        page = await engine.events("org:acme/user:alice", limit=100)
        assert any(e["content"].get("text") == "Alice is vegetarian" for e in page["items"])
        _, again = await run_import(engine, "jsonl", data)
        assert again["items"]["written"] == 0 and again["items"]["replayed"] == 11


async def test_malformed_lines_are_reported_with_their_line_and_skipped():
    lines = [b'{"scope":"org:acme","modality":"note","content":{"kind":"text","text":"one"},'
             b'"context":{"observed_at":"2026-01-01T00:00:00Z"}}', b"{not json", b"[1]",
             b'{"scope":"org:acme","modality":"note","content":{"kind":"text"},"context":{"observed_at":"2026-01-01T00:00:00Z"}}',
             b'{"scope":"org:other","modality":"note","content":{"kind":"text","text":"x"},"context":{"observed_at":"2026-01-01T00:00:00Z"}}']  # fmt: skip
    async with open_engine("memory", id_seed=1) as engine:
        _, status = await run_import(engine, "jsonl", b"\n".join(lines))
        assert status["status"] == "completed"
        assert status["items"]["written"] == 1 and status["items"]["failed"] == 4
        assert [(e["line"], e["error"]) for e in status["errors"]] == [
            (2, "invalid_json"), (3, "invalid_envelope"), (5, "scope_outside_import"), (4, "invalid_envelope")]
        _, aborted = await run_import(engine, "jsonl", b"\n".join(lines), options={"on_error": "abort"})
        assert aborted["status"] == "failed"
        assert aborted["error"]["error_code"] == "INVALID_IMPORT_RECORD" and "line 2" in aborted["error"]["message"]


async def test_bad_requests_are_4xx_before_a_job_starts():
    async with open_engine("memory", id_seed=1) as engine:
        with pytest.raises(InvalidBody):
            await engine.imports.start("jsonl", b"", {})
        with pytest.raises(InvalidBody):
            await engine.imports.start("jsonl", b"", {"scope_template": "org:acme", "options": {"ordering": "x"}})
        with pytest.raises(UnsupportedFormat):
            await engine.imports.start("jsonl", b"", {"scope_template": "org:acme", "format": "jsonl_v9"})
