"""Importers whose envelopes' field names are their own constants (``SHAPED``): the bulk write
does not walk them for unknown fields (docs/decisions.md, "Mem0 import CPU, session 29").  That
holds only if every envelope such an importer maps names envelope fields alone: checked here on
every sample of each, and on records that take every branch of the mapping.  A JSONL file's
envelopes are the file's own: still walked."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest

from cortexdb import open_engine
from cortexdb.engine.envelope import ENVELOPE_SHAPE
from cortexdb.engine.model.fields import unknown_field
from cortexdb.engine.transfer.imports import SOURCES
from cortexdb.errors import CortexError

DATA = Path(__file__).parent / "data" / "import"
OPTIONS = {"ordering": "batch_throughput", "template": "org:acme/user:{user_id}", "imported_at": "2026-01-01T00:00:00Z",
           "user_id": "alice"}  # fmt: skip
# a memory that takes every optional branch: agent, run and app ids, a session, categories, nested
# metadata, both times, immutability, an assistant's role
EVERY_FIELD = {"id": "m-1", "memory": "Alice likes tea", "hash": "h", "metadata": {"a": [1, {"b": 2}]},
               "categories": ["food", "drinks"], "created_at": "2026-01-02T03:04:05-07:00",
               "updated_at": "2026-01-03T00:00:00Z", "user_id": "alice", "agent_id": "helper", "run_id": "r1",
               "app_id": "app", "role": "assistant", "actor_id": "x", "immutable": True, "expiration_date": None}  # fmt: skip


def mapped(module, raw: bytes, fmt: str) -> list[dict]:
    options = {**OPTIONS, "template": "org:acme/user:alice"} if fmt == "mem0_history" else OPTIONS  # no {user_id}
    items = list(module.read(io.BytesIO(raw), fmt, options))
    assert items and all(item.error is None for item in items), [item.detail for item in items if item.error]
    return [item.envelope for item in items]


def samples() -> list[tuple[str, Path]]:
    return [(name, path) for name, module in SOURCES.items() if getattr(module, "SHAPED", False)
            for path in sorted((DATA / name).glob("*")) if path.suffix in (".json", ".jsonl", ".af")]  # fmt: skip


def test_only_mappings_declare_their_envelopes_shaped():
    assert getattr(SOURCES["mem0"], "SHAPED", False)
    assert not getattr(SOURCES["jsonl"], "SHAPED", False)  # the file's envelopes, as written


@pytest.mark.parametrize(("source", "path"), samples(), ids=lambda value: getattr(value, "name", value))
def test_every_envelope_a_shaped_importer_maps_names_envelope_fields_only(source, path):
    module = SOURCES[source]
    envelopes = mapped(module, path.read_bytes(), module.sniff(str(path)))
    assert all(unknown_field(envelope, ENVELOPE_SHAPE) is None for envelope in envelopes)


def test_a_mem0_memory_with_every_field_and_its_relations_name_envelope_fields_only(tmp_path):
    module = SOURCES["mem0"]
    document = {"results": [EVERY_FIELD, {"id": "m-2", "memory": "Bob", "user_id": "bob", "session_id": "s"}],
                "relations": [{"source": "alice", "relationship": "likes", "target": "tea"}]}  # fmt: skip
    path = tmp_path / "every.json"
    path.write_bytes(orjson.dumps(document))
    lines = b"\n".join(orjson.dumps(memory) for memory in document["results"])
    for envelopes in (mapped(module, path.read_bytes(), module.sniff(str(path))),
                      mapped(module, lines, "mem0_export_v3")):  # fmt: skip
        assert any("session" in e["observed_actor"] for e in envelopes)
        assert any(e["content"]["kind"] == "triple" for e in envelopes) or len(envelopes) == 2
        assert all(unknown_field(e, ENVELOPE_SHAPE) is None for e in envelopes)


async def test_a_jsonl_envelope_with_a_misspelt_field_is_still_refused():
    line = {"scope": "org:acme", "modality": "note", "content": {"kind": "text", "text": "x"},
            "context": {"observed_at": "2026-01-01T00:00:00Z", "lables": ["a"]}}  # fmt: skip
    async with open_engine("memory", id_seed=1) as engine:
        started = await engine.imports.start("jsonl", orjson.dumps(line), {"scope_template": "org:acme"})
        status = await engine.imports.wait(started["import_id"])
        assert status["items"]["failed"] == 1 and status["items"]["written"] == 0
        assert "context.lables" in status["errors"][0]["detail"]
        assert "is not a field" in status["errors"][0]["detail"]


async def test_shaped_is_the_import_paths_own_not_the_public_bulk_writes():
    """A caller of ``Engine.experience_bulk`` cannot skip the unknown-field check: ``shaped`` is an
    option of the engine's internal write path, which the import job calls."""
    item = {"modality": "note", "content": {"kind": "text", "text": "x"},
            "context": {"observed_at": "2026-01-01T00:00:00Z", "lables": ["a"]}}  # fmt: skip
    async with open_engine("memory", id_seed=1) as engine:
        with pytest.raises(TypeError):
            await engine.experience_bulk({"scope": "org:acme", "items": [item]}, shaped=True)
        with pytest.raises(CortexError) as refused:
            await engine.experience_bulk({"scope": "org:acme", "items": [item]})
        assert "lables" in refused.value.message
