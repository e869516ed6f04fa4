"""Mem0 ``get_all`` documents are read in one ijson pass over ``results`` and a second one over
``relations`` only when the file may hold that key (``mem0.may_name_relations``: a byte scan;
docs/decisions.md, "Mem0 import, session 30")."""

from __future__ import annotations

import io

import orjson

from cortexdb.engine.transfer.sources import mem0, mem0_scan

OPTIONS = {"ordering": "batch_throughput", "template": "org:acme/user:{user_id}",
           "imported_at": "2026-01-01T00:00:00Z"}  # fmt: skip
MEMORY = {"id": "m-1", "memory": "Alice likes tea", "user_id": "alice", "created_at": "2026-01-02T03:04:05Z"}
RELATION = {"source": "alice", "relationship": "likes", "target": "tea"}


def kinds(raw: bytes) -> list[str]:
    items = list(mem0.read(io.BytesIO(raw), "mem0_results", OPTIONS))
    assert all(item.error is None for item in items), [item.detail for item in items]
    return [item.envelope["content"]["kind"] for item in items]


def test_a_file_without_the_key_is_not_read_twice():
    raw = orjson.dumps({"results": [{**MEMORY, "memory": 'we named it "relations"'}]})  # inside a text: \"
    assert not mem0.may_name_relations(io.BytesIO(raw))
    assert kinds(raw) == ["text"]


def test_relations_written_plainly_or_with_an_escaped_letter_are_found():
    plain = orjson.dumps({"results": [MEMORY], "relations": [RELATION]})
    escaped = plain.replace(b'"relations"', b'"relation\\u0073"')  # the same key to a JSON reader
    for raw in (plain, escaped):
        assert mem0.may_name_relations(io.BytesIO(raw))
        assert kinds(raw) == ["text", "triple"]


def test_the_key_split_across_two_chunks_is_found(monkeypatch):
    raw = orjson.dumps({"results": [MEMORY], "relations": [RELATION]})
    at = raw.index(b'"relations"') + 5
    monkeypatch.setattr(mem0_scan, "SCAN_CHUNK", at)  # the first chunk ends inside the key
    assert mem0.may_name_relations(io.BytesIO(raw))
    assert kinds(raw) == ["text", "triple"]


def test_the_word_as_a_value_only_costs_the_second_pass():
    raw = orjson.dumps({"results": [{**MEMORY, "metadata": {"topic": "relations"}}]})
    assert mem0.may_name_relations(io.BytesIO(raw))  # a false alarm: the pass finds nothing
    assert kinds(raw) == ["text"]
