"""An import's idempotency keys are stable across builds: a file imported by an earlier build
re-imports as replays only if each record gets the same key (and the same body) again."""

from __future__ import annotations

import pytest

from cortexdb.engine.envelope import MAX_IDEMPOTENCY_KEY
from cortexdb.engine.transfer.mapping import digest, key, scoped_key

# computed by the build before scoped_key was inlined (session 28): these must never change
PINNED = [
    (
        "mem0:7f3a9c52-1b2d-4e8f-9a10-3c5d7e9f1a2b:f4d1ded60dd55107",
        "org:acme/user:alice",
        "mem0:75cc5ad1619cc49f",
    ),
    ("jsonl-key-1", "org:acme", "jsonl-key-1~29fc82a9"),
    ("a" * 50 + ":" + "b" * 30, "org:acme", "a" * 50 + ":d339f65238e1"),
]


@pytest.mark.parametrize("value,scope,expected", PINNED)
def test_scoped_keys_are_those_of_earlier_builds(value, scope, expected):
    assert scoped_key(value, scope) == expected
    assert len(expected) <= MAX_IDEMPOTENCY_KEY


@pytest.mark.parametrize("value", ["mem0:" + "x" * 60, "q\"\\:\n" * 20, "é" * 40 + ":y" * 20, "a" * 47 + ":" + "b" * 30,
                                   "a" * 48 + ":" + "b" * 30])  # fmt: skip
def test_the_inlined_scoped_key_is_the_generic_one(value):
    scope = "org:ü/user:ß"
    assert scoped_key(value, scope) == key(value.split(":", 1)[0], digest(value, scope))


@pytest.mark.parametrize("size", [63, 64, 100])
def test_a_key_whose_source_leaves_no_room_for_a_digest_is_still_a_valid_key(size):
    """A JSONL record's own key of 63 or 64 characters without a colon, bound to its scope,
    made a key of 127 characters (the record then failed): now one of 64."""
    found = scoped_key("k" * size, "org:acme")
    assert len(found) <= MAX_IDEMPOTENCY_KEY and found.startswith("k" * 46 + ":")
    assert found != scoped_key("k" * size, "org:other")


async def test_a_jsonl_record_with_a_key_of_64_characters_imports_and_replays():
    import orjson

    from cortexdb import open_engine

    lines = b"\n".join(orjson.dumps({"scope": "org:acme", "modality": "note", "idempotency_key": "k" * size,
                                     "content": {"kind": "text", "text": f"a note keyed with {size} characters"},
                                     "context": {"observed_at": "2026-01-01T00:00:00Z"}}) for size in (62, 63, 64))  # fmt: skip
    async with open_engine("memory", id_seed=1) as engine:
        for written, replayed in ((3, 0), (0, 3)):
            started = await engine.imports.start("jsonl", lines, {"scope_template": "org:acme"})
            status = await engine.imports.wait(started["import_id"])
            assert status["status"] == "completed", status
            assert (
                status["items"]["written"],
                status["items"]["replayed"],
                status["items"]["failed"],
            ) == (written, replayed, 0), status
