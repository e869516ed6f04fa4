"""Given vectors (docs/embedding.md, "Given vectors"): an envelope's ``vector`` is the event's
vector in recall, kept through a restart, a rebuild and a re-embed, and refused with a clear
``INVALID_ENVELOPE`` when it cannot be one.  The engine tests run on every backend.

The vectors are chosen against the text: an event that *says* apples carries the vector of a
text about zebras, so a vector-only recall for zebras finds the apple event first only when the
given vector, not the text's own embedding, is what the index holds."""

from __future__ import annotations

import math

import numpy as np
import pytest

import cortexdb
from cortexdb import EngineConfig
from cortexdb.backends.memory import MemoryStore
from cortexdb.engine.forget import ops as forget_ops
from cortexdb.engine.retrieve.embedders import HashEmbedder

from .conftest import envelope

SCOPE = "org:acme/user:alice"
ZEBRAS = "zebra herds migrate across the savanna plains"
APPLES = "baking an apple pie with cinnamon and butter"
HASH = HashEmbedder()


class OtherEmbedder(HashEmbedder):
    name = "other-v1"  # the same vectors under another name: a re-embed with it keeps rankings


def given(text: str) -> list[float]:
    return HASH.embed([text])[0].tolist()


def items() -> list[dict]:
    return [
        {**_item("I had apples for lunch.", "2026-05-13T15:40:00Z"), "vector": given(ZEBRAS)},
        {**_item("We watched zebras at the zoo.", "2026-05-13T15:41:00Z"), "vector": given(APPLES)},
        _item("The weather was grey and cold.", "2026-05-13T15:41:30Z"),  # embedded as usual
    ]


def _item(text: str, when: str) -> dict:
    return {"modality": "conversation", "content": {"kind": "message", "role": "user", "text": text},
            "context": {"observed_at": when}}  # fmt: skip


def opener(backend, tmp_path, clock, pg_dsn, store=None):
    kwargs = {"store": store} if backend == "memory" else {"path": pg_dsn or str(tmp_path / "d")}
    config = EngineConfig(default_caller="user:alice", episode_idle_check=3600.0, recall_mode="vector")

    def opened(**extra):
        return cortexdb.open_engine(backend, clock=clock, id_seed=7, config=extra.pop("config", config),
                                    **kwargs, **extra)  # fmt: skip

    return opened


async def first_text(engine, query: str) -> str:
    pack = await engine.recall({"scope": SCOPE, "query": query, "include": ["events"], "view": "granular",
                                "traversal": "local", "diagnostics": "none"})  # fmt: skip
    ranked = sorted((i for layer in pack["layers"].values() for i in layer), key=lambda i: -i["score"])
    return ranked[0]["content"]["text"]


async def test_a_given_vector_is_the_events_vector_through_restart_rebuild_and_reembed(
    backend, tmp_path, clock, pg_dsn
):
    opened = opener(backend, tmp_path, clock, pg_dsn, MemoryStore())
    async with opened() as engine:
        result = await engine.experience_bulk({"scope": SCOPE, "items": items()})
        assert result.accepted == 3
        await engine.flush(SCOPE)
        assert await first_text(engine, ZEBRAS) == "I had apples for lunch."
        assert await first_text(engine, APPLES) == "We watched zebras at the zoo."
        assert await first_text(engine, "grey cold weather") == "The weather was grey and cold."
        # derived records (facts, episodes) are embedded by the configured embedder as always
        assert (await engine.events(SCOPE))["items"][0].get("vector") is None  # not echoed in reads
    async with opened() as engine:  # restart: the indexes are rebuilt from storage
        assert await first_text(engine, ZEBRAS) == "I had apples for lunch."
        await engine.rebuild(SCOPE)  # every derived table emptied and derived again
        await engine.flush(SCOPE)
        assert await first_text(engine, ZEBRAS) == "I had apples for lunch."
        assert await first_text(engine, APPLES) == "We watched zebras at the zoo."
    config = EngineConfig(default_caller="user:alice", episode_idle_check=3600.0, recall_mode="vector", reembed=True)
    async with opened(embedder=OtherEmbedder(), config=config) as engine:  # re-embed: every V row dropped
        assert await first_text(engine, ZEBRAS) == "I had apples for lunch."  # the given vector stays
        assert await first_text(engine, "grey cold weather") == "The weather was grey and cold."


async def test_events_still_pending_at_a_restart_are_indexed_with_their_given_vector(
    backend, tmp_path, clock, pg_dsn
):
    opened = opener(backend, tmp_path, clock, pg_dsn, MemoryStore())
    async with opened() as engine:
        await engine.pause_derivation(SCOPE)  # the backlog is parked until the engine reopens
        await engine.experience_bulk({"scope": SCOPE, "items": items()})
        await engine.experience(envelope("Apples again, green ones.", vector=given(ZEBRAS)))
    async with opened() as engine:
        await engine.flush(SCOPE)
        pack = await engine.recall({"scope": SCOPE, "query": ZEBRAS, "include": ["events"], "view": "granular",
                                    "traversal": "local", "diagnostics": "none"})  # fmt: skip
        ranked = sorted((i for layer in pack["layers"].values() for i in layer), key=lambda i: -i["score"])
        top = {i["content"]["text"] for i in ranked[:2]}
        assert top == {"I had apples for lunch.", "Apples again, green ones."}
        assert ranked[0]["score"] == pytest.approx(ranked[1]["score"])  # the same given vector


async def _rows(store, table: bytes) -> dict[str, bytes]:
    return {key.rsplit(b"\x00", 1)[1].decode(): value async for key, value in store.scan(prefix=table + b"\x00")}


async def test_a_given_vector_is_stored_once_and_a_data_dir_with_both_copies_still_opens(clock):
    """The writer's vector is kept in ``GV`` alone: indexing writes no ``V`` row for the event
    (decisions.md, "Fewer bytes written per event").  A data dir written before, where the event
    has both rows, opens and recalls the same; a restart reads the given vector from ``GV``."""
    store = MemoryStore()
    opened = opener("memory", None, clock, None, store)
    async with opened() as engine:
        await engine.experience_bulk({"scope": SCOPE, "items": items()})
        await engine.flush(SCOPE)
        ids = {e["content"]["text"]: e["id"] for e in (await engine.events(SCOPE))["items"]}
        apples, zebras = ids["I had apples for lunch."], ids["We watched zebras at the zoo."]
        weather = ids["The weather was grey and cold."]
        given_rows, vector_rows = await _rows(store, b"GV"), await _rows(store, b"V")
        assert set(given_rows) == {apples, zebras}
        assert not {apples, zebras} & set(vector_rows)  # one copy: GV
        assert weather in vector_rows  # embedded here: its vector is derived, in V
        # as given, float32, though the index keeps float16 (``vector_dtype``'s default): the
        # writer's own data is kept losslessly, only derived vectors (V) are stored in float16
        assert given_rows[apples] == np.asarray(given(ZEBRAS), np.float32).tobytes()
    async with opened() as engine:  # restart: the given vectors are indexed from GV
        assert await first_text(engine, ZEBRAS) == "I had apples for lunch."
        assert await first_text(engine, APPLES) == "We watched zebras at the zoo."
    old_format = [_put(table + b"\x00" + SCOPE.encode() + b"\x00" + event_id.encode(),
                       np.asarray(given(text), np.float32).tobytes())
                  for event_id, text in ((apples, ZEBRAS), (zebras, APPLES)) for table in (b"GV", b"V")]  # fmt: skip
    await store.write(old_format)  # the previous format: the given vector in float32, in GV and in V
    async with opened() as engine:
        assert await first_text(engine, ZEBRAS) == "I had apples for lunch."
        assert await first_text(engine, APPLES) == "We watched zebras at the zoo."
        assert await first_text(engine, "grey cold weather") == "The weather was grey and cold."
        await engine.rebuild(SCOPE)  # V emptied and derived again: the event's V row is gone
        await engine.flush(SCOPE)
        assert not {apples, zebras} & set(await _rows(store, b"V"))
        assert await first_text(engine, ZEBRAS) == "I had apples for lunch."


def _put(key: bytes, value: bytes):
    from cortexdb.engine.spi.kv import Put

    return Put(key, value)


async def test_the_vector_is_checked_against_the_embedder_and_refused_clearly(clock):
    async with cortexdb.open_engine("memory", clock=clock, id_seed=1,
                                    config=EngineConfig(default_caller="user:alice")) as engine:  # fmt: skip
        cases = [
            ([0.5] * 3, "has 3 numbers; this store's embedder (hash-v1) has 384 dimensions"),
            ([math.nan] + [0.1] * 383, "must hold finite numbers (no NaN or infinity)"),
            ([math.inf] + [0.1] * 383, "must hold finite numbers (no NaN or infinity)"),
            ([0.0] * 384, "must not be all zeros"),
            (["0.1"] * 384, "must be an array of numbers"),
            ([True] * 384, "must be an array of numbers"),
            ({"values": [0.1]}, "must be an array of numbers"),
            ([], "must hold 1 to 4096 numbers"),
            (np.zeros((2, 192)), "must be an array of numbers"),  # nested lists
        ]
        for vector, reason in cases:
            with pytest.raises(cortexdb.InvalidEnvelope) as single:
                await engine.experience(envelope("x", vector=vector))
            assert (single.value.details["field"], single.value.details["reason"]) == ("vector", reason)
            with pytest.raises(cortexdb.InvalidEnvelope) as bulk:
                await engine.experience_bulk({"scope": SCOPE, "items": [items()[2], {**items()[2], "vector": vector}]})
            assert bulk.value.details["field"] == "items[1].vector" and bulk.value.details["item"] == 1
        assert single.value.http_status == 422
        with pytest.raises(cortexdb.InvalidEnvelope) as wrong:
            await engine.experience(envelope("x", vector=[0.5] * 3))
        assert wrong.value.details["expected_dimension"] == 384
        long_text = "word " * 300  # longer than passage_max_chars: indexed as passages
        with pytest.raises(cortexdb.InvalidEnvelope) as long:
            await engine.experience(envelope(long_text, vector=given(ZEBRAS)))
        assert long.value.details["passage_max_chars"] == 1200
        assert (await engine.events(SCOPE))["items"] == []  # nothing was written
        # a numpy array is taken as it is (embedded API), and scaled to unit length
        result = await engine.experience(envelope("y", vector=np.full(384, 3.0)), wait="indexed")
        assert result.status == "indexed"


async def test_forgetting_an_event_deletes_its_given_vector(clock):
    store = MemoryStore()
    async with cortexdb.open_engine("memory", store=store, clock=clock, id_seed=1,
                                    config=EngineConfig(default_caller="user:alice")) as engine:  # fmt: skip
        kept = await engine.experience(envelope("I had apples.", vector=given(ZEBRAS)), wait="indexed")
        redacted = await engine.experience(envelope("A secret.", vector=given(APPLES)), wait="indexed")
        deleted = await engine.experience(envelope("Another secret.", vector=given(APPLES)), wait="indexed")

        async def given_rows() -> set[str]:
            return {key.rsplit(b"\x00", 1)[1].decode() async for key, _ in store.scan(prefix=b"GV\x00")}

        assert await given_rows() == {kept.event_id, redacted.event_id, deleted.event_id}
        await forget_ops.redact_events(engine, SCOPE, [redacted.event_id])
        await forget_ops.delete_events(engine, SCOPE, [deleted.event_id])
        assert await given_rows() == {kept.event_id}


async def test_a_given_vector_is_kept_as_given_whatever_the_index_keeps(clock):
    for dtype in ("float16", "float32", "int8"):
        store = MemoryStore()
        config = EngineConfig(default_caller="user:alice", vector_dtype=dtype)
        async with cortexdb.open_engine("memory", store=store, clock=clock, id_seed=1, config=config) as engine:
            written = await engine.experience(envelope("I had apples.", vector=given(ZEBRAS)), wait="indexed")
        rows = await _rows(store, b"GV")
        assert rows == {written.event_id: np.asarray(given(ZEBRAS), np.float32).tobytes()}
        vectors = await _rows(store, b"V")
        assert written.event_id not in vectors
        if dtype != "float16":  # derived vectors are float32 unless the index keeps float16
            assert all(len(v) % 4 == 0 for v in vectors.values())
