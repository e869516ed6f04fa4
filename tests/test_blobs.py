"""Blobs in the engine (reference §8.13), on both backends: upload, dedupe, limits, references
from events, media metadata in recall, and the forget / erasure cascade (``release_blobs_of``)."""

import os

import pytest

from cortexdb import EngineConfig
from cortexdb.engine.blobs import release_blobs_of
from cortexdb.errors import InvalidBody, InvalidEnvelope, NotFound, PayloadTooLarge

from .conftest import envelope

ALICE = "org:acme/user:alice"
TEAM = "ws:team"


async def chunks_of(data: bytes, size: int):
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def stored_digests(engine) -> list[str]:
    return [digest async for digest in engine.blobs.store.digests()]


def with_media(text: str, *media, kind: str = "message", **content) -> dict:
    body = envelope(text)
    body["content"] = {"kind": kind, **({"role": "user", "text": text} if kind == "message" else {}),
                       "media": list(media), **content}  # fmt: skip
    return body


async def test_upload_then_read_back_with_its_metadata(engine, clock):
    stored = await engine.blobs.put(chunks_of(b"\x89PNG" + bytes(range(256)) * 40, 1000), scope=ALICE,
                                    content_type="Image/PNG", filename="C:\\Users\\al\\roadmap.png")  # fmt: skip
    meta = stored.to_wire()
    assert not stored.replay
    assert meta["blob_id"].startswith("blob_") and meta["size_bytes"] == 4 + 256 * 40
    assert (meta["content_type"], meta["filename"], meta["scope"], meta["uploader"]) == (
        "image/png", "roadmap.png", ALICE, "user:alice")
    assert meta["created_at"] == "2026-05-13T15:42:09Z"
    assert await engine.blobs.stat(meta["blob_id"]) == meta
    assert await engine.blobs.read(meta["blob_id"]) == b"\x89PNG" + bytes(range(256)) * 40
    record, chunks = await engine.blobs.open(meta["blob_id"], chunk_size=1000)
    pieces = [piece async for piece in chunks]
    assert record == meta and max(map(len, pieces)) == 1000 and len(pieces) == 11
    assert await engine.blobs.references(meta["blob_id"]) == []


async def test_content_type_and_file_name_are_checked(engine):
    plain = await engine.blobs.put(b"x", scope=ALICE)
    assert plain.metadata["content_type"] == "application/octet-stream" and plain.metadata["filename"] is None
    typed = await engine.blobs.put(b"y", scope=ALICE, content_type="text/plain; charset=utf-8")
    assert typed.metadata["content_type"] == "text/plain; charset=utf-8"
    for bad in ("png", "image/png\r\nX-Evil: 1", "a/" + "b" * 300):
        with pytest.raises(InvalidBody) as info:
            await engine.blobs.put(b"z", scope=ALICE, content_type=bad)
        assert info.value.details["field"] == "content_type"
    with pytest.raises(InvalidBody):
        await engine.blobs.put(b"z", scope=ALICE, filename="bad\x00name")
    assert len(await stored_digests(engine)) == 2  # nothing of a refused upload is kept


async def test_same_bytes_are_stored_once_and_an_identical_upload_replays(engine):
    first = await engine.blobs.put(b"same bytes", scope=ALICE, content_type="text/plain", filename="a.txt")
    again = await engine.blobs.put(chunks_of(b"same bytes", 3), scope=ALICE, content_type="text/plain",
                                   filename="a.txt")  # fmt: skip
    assert again.replay and again.metadata == first.metadata
    renamed = await engine.blobs.put(b"same bytes", scope=ALICE, content_type="text/plain", filename="b.txt")
    elsewhere = await engine.blobs.put(b"same bytes", scope=TEAM, content_type="text/plain", filename="a.txt")
    ids = {first.metadata["blob_id"], renamed.metadata["blob_id"], elsewhere.metadata["blob_id"]}
    assert len(ids) == 3 and not renamed.replay and not elsewhere.replay
    assert {renamed.metadata["sha256"], elsewhere.metadata["sha256"]} == {first.metadata["sha256"]}
    assert await stored_digests(engine) == [first.metadata["sha256"]]


async def test_a_blob_over_the_limit_is_refused_and_leaves_nothing(engine_factory, tmp_path, backend):
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", blob_max_bytes=1000)
    async with engine_factory(config=config) as engine:
        exact = await engine.blobs.put(b"a" * 1000, scope=ALICE)
        assert exact.metadata["size_bytes"] == 1000
        for data in (b"b" * 1001, chunks_of(b"c" * 5000, 300)):
            with pytest.raises(PayloadTooLarge) as info:
                await engine.blobs.put(data, scope=ALICE)
            assert info.value.http_status == 413 and info.value.error_code == "PAYLOAD_TOO_LARGE"
            assert info.value.details["limit"] == 1000 and info.value.details["size"] > 1000
        assert await stored_digests(engine) == [exact.metadata["sha256"]]
        if backend == "leveldb":
            assert os.listdir(tmp_path / "data" / "blobs" / "staging") == []


async def test_unknown_blob_references_are_refused_at_capture(engine):
    with pytest.raises(InvalidEnvelope) as info:
        await engine.experience(with_media("look", {"blob_id": "blob_nope"}))
    assert info.value.http_status == 422
    assert info.value.details["field"] == "content.media[0].blob_id"
    assert info.value.details["blob_id"] == "blob_nope"
    with pytest.raises(InvalidEnvelope) as info:
        await engine.experience(with_media("", kind="blob_ref", blob_id="blob_missing"))
    assert info.value.details["field"] == "content.blob_id"
    known = (await engine.blobs.put(b"ok", scope=ALICE)).metadata["blob_id"]
    items = [{"modality": "conversation", "context": {"observed_at": "2026-05-13T15:42:00Z"},
              "content": {"kind": "text", "text": f"item {i}", "media": media}}
             for i, media in enumerate(([{"blob_id": known}], [{"blob_id": known}, {"blob_id": "blob_gone"}]))]  # fmt: skip
    with pytest.raises(InvalidEnvelope) as info:
        await engine.experience_bulk({"scope": ALICE, "items": items})
    assert info.value.details["field"] == "items[1].content.media[1].blob_id"
    assert info.value.details["item"] == 1
    assert (await engine.events(ALICE))["items"] == []  # nothing of a refused write is captured


async def test_references_are_stored_with_the_blob_described(engine):
    blob = (await engine.blobs.put(b"img", scope=ALICE, content_type="image/jpeg", filename="cat.jpg")).metadata
    result = await engine.experience(with_media("My cat.", {"blob_id": blob["blob_id"], "caption": "Tom asleep",
                                                            "filename": "tom.jpg"}))  # fmt: skip
    event = await engine.get_event(ALICE, result.event_id)
    # what the writer gave stays; the blob's own type and size fill in what it did not give
    assert event["content"]["media"] == [{"blob_id": blob["blob_id"], "caption": "Tom asleep", "filename": "tom.jpg",
                                          "content_type": "image/jpeg", "size_bytes": 3}]  # fmt: skip
    ref = await engine.experience(with_media("", kind="blob_ref", blob_id=blob["blob_id"]))
    ref_event = await engine.get_event(ALICE, ref.event_id)
    assert ref_event["content"]["filename"] == "cat.jpg" and ref_event["content"]["content_type"] == "image/jpeg"
    assert await engine.blobs.references(blob["blob_id"]) == sorted([result.event_id, ref.event_id])


async def test_media_metadata_is_found_by_recall(engine):
    sketch = (await engine.blobs.put(b"\x89PNG...", scope=ALICE, content_type="image/png",
                                     filename="quarterly-roadmap.png")).metadata  # fmt: skip
    await engine.experience(envelope("I had pasta for lunch."), wait="indexed")
    await engine.experience(envelope("The train was late again."), wait="indexed")
    shared = await engine.experience(with_media("Here is the plan.", {"blob_id": sketch["blob_id"],
                                                                      "caption": "whiteboard sketch of Zorblax"}),
                                     wait="indexed")  # fmt: skip
    for query in ("Zorblax whiteboard", "quarterly roadmap", "png image"):
        pack = await engine.recall({"scope": ALICE, "query": query})
        found = [item["id"] for item in pack["layers"]["events"]]
        assert found and found[0] == shared.event_id, (query, found)
    # a media-only event reads as its blob
    solo = await engine.experience(with_media("", kind="blob_ref", blob_id=sketch["blob_id"], alt="sunset over Zorblax bay"),
                                   wait="indexed")  # fmt: skip
    pack = await engine.recall({"scope": ALICE, "query": "sunset bay"})
    assert pack["layers"]["events"][0]["id"] == solo.event_id


async def test_release_deletes_only_blobs_no_other_event_refers_to(engine):
    async def blob(data: bytes, scope: str = ALICE) -> str:
        return (await engine.blobs.put(data, scope=scope)).metadata["blob_id"]

    only_e1, shared, other, unreferenced = (await blob(b"A"), await blob(b"B"), await blob(b"C"), await blob(b"D"))
    twin = await blob(b"A", scope=TEAM)  # the same bytes as only_e1, another blob id
    e1 = (await engine.experience(with_media("one", {"blob_id": only_e1}, {"blob_id": shared}))).event_id
    e2 = (await engine.experience(with_media("two", {"blob_id": shared}))).event_id
    e3 = (await engine.experience(with_media("three", {"blob_id": other}))).event_id
    e4 = (await engine.experience(envelope("four", scope=TEAM) | {"content": {
        "kind": "text", "text": "four", "media": [{"blob_id": twin}]}})).event_id  # fmt: skip
    assert await release_blobs_of(engine, [e1]) == 1
    with pytest.raises(NotFound):
        await engine.blobs.stat(only_e1)
    assert await engine.blobs.read(twin) == b"A"  # its bytes were shared: kept
    assert await engine.blobs.references(shared) == [e2]
    assert await release_blobs_of(engine, [e1]) == 0  # again: nothing left to do
    assert await release_blobs_of(engine, [e2, e3]) == 2
    for gone in (shared, other):
        with pytest.raises(NotFound):
            await engine.blobs.read(gone)
    assert await engine.blobs.read(unreferenced) == b"D"  # never referenced: not the cascade's
    assert await release_blobs_of(engine, [e4]) == 1
    assert sorted(await stored_digests(engine)) == [(await engine.blobs.stat(unreferenced))["sha256"]]


async def test_a_release_interrupted_after_deleting_bytes_finishes_when_run_again(engine):
    blob = (await engine.blobs.put(b"half released", scope=ALICE)).metadata
    event = (await engine.experience(with_media("x", {"blob_id": blob["blob_id"]}))).event_id
    await engine.blobs.store.delete(blob["sha256"])  # as if a crash came after the bytes went
    with pytest.raises(NotFound):
        await engine.blobs.read(blob["blob_id"])
    assert await release_blobs_of(engine, [event]) == 1
    with pytest.raises(NotFound):
        await engine.blobs.stat(blob["blob_id"])
    assert await engine.blobs.store.has(blob["sha256"]) is False


@pytest.mark.parametrize("backend", ["leveldb"])  # a memory engine keeps nothing across opens
async def test_blobs_and_references_survive_a_restart(engine_factory, backend):
    async with engine_factory() as engine:
        blob = (await engine.blobs.put(b"kept", scope=ALICE, filename="k.bin")).metadata
        event = (await engine.experience(with_media("keep", {"blob_id": blob["blob_id"]}))).event_id
    async with engine_factory() as engine:
        assert await engine.blobs.read(blob["blob_id"]) == b"kept"
        assert await engine.blobs.references(blob["blob_id"]) == [event]


async def test_forget_with_redact_events_deletes_the_blobs_only_those_events_referred_to(engine):
    """The forget cascade, as erasure's: a blanked event's files go unless another event refers to them."""
    own = (await engine.blobs.put(b"holiday photo", scope=ALICE)).metadata
    shared = (await engine.blobs.put(b"team logo", scope=ALICE)).metadata
    gone = await engine.experience(with_media("I like tea.", {"blob_id": own["blob_id"]}, {"blob_id": shared["blob_id"]}),
                                   wait="indexed")  # fmt: skip
    kept = await engine.experience(with_media("Logo of the team.", {"blob_id": shared["blob_id"]}), wait="indexed")
    result = await engine.forget({"scope": ALICE, "layers": ["events", "facts"], "cascade": "redact_events",
                                  "selector": {"memory_ids": [gone.event_id]}})  # fmt: skip
    assert result["deleted"]["events"] == 1
    with pytest.raises(NotFound):
        await engine.blobs.stat(own["blob_id"])
    assert await engine.blobs.store.has(own["sha256"]) is False
    assert await engine.blobs.references(shared["blob_id"]) == [kept.event_id]
    assert await engine.blobs.read(shared["blob_id"]) == b"team logo"
