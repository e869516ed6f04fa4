"""Blobs no event refers to (issue 12), on both backends: collected once past their grace period
(``Engine.blobs.collect_garbage``, the engine's maintenance timer), never while referenced or
while a write that names them is in progress; a scope erasure takes the scope's unreferenced
uploads and keeps a blob a surviving scope refers to."""

from __future__ import annotations

import pytest
import trio

from cortexdb import EngineConfig
from cortexdb.engine.blobs import release_blobs_of
from cortexdb.errors import InvalidEnvelope, NotFound

from .conftest import envelope
from .test_blobs import ALICE, TEAM, stored_digests, with_media
from .test_erasure import finished

DAY = 86_400.0


async def blob(engine, data: bytes, scope: str = ALICE) -> str:
    return (await engine.blobs.put(data, scope=scope)).metadata["blob_id"]


async def test_an_orphan_is_collected_after_its_grace_and_not_before(engine, clock):
    assert engine.config.blob_orphan_grace_seconds == DAY  # the documented default
    orphan = await blob(engine, b"never referenced")
    assert await engine.blobs.collect_garbage() == {"examined": 1, "collected": 0}
    clock.advance(DAY - 1)
    assert (await engine.blobs.collect_garbage())["collected"] == 0
    assert await engine.blobs.read(orphan) == b"never referenced"
    clock.advance(2)
    assert await engine.blobs.collect_garbage() == {"examined": 1, "collected": 1}
    with pytest.raises(NotFound):
        await engine.blobs.stat(orphan)
    assert await stored_digests(engine) == []
    assert await engine.blobs.collect_garbage() == {"examined": 0, "collected": 0}


async def test_a_referenced_blob_is_never_collected(engine, clock):
    kept = await blob(engine, b"a photo")
    twin = await blob(engine, b"a photo", scope=TEAM)  # the same bytes under an orphan id
    event = (await engine.experience(with_media("Look.", {"blob_id": kept}))).event_id
    clock.advance(30 * DAY)
    assert await engine.blobs.collect_garbage() == {"examined": 2, "collected": 1}
    with pytest.raises(NotFound):
        await engine.blobs.stat(twin)
    assert await engine.blobs.read(kept) == b"a photo"  # its bytes were shared: kept
    assert await engine.blobs.references(kept) == [event]
    # once its one event is forgotten the cascade takes it; an orphan left by a cascade that
    # skipped it is the collector's
    assert await release_blobs_of(engine, [event]) == 1
    assert await stored_digests(engine) == []


async def test_the_collector_runs_on_the_maintenance_timer(engine_factory, clock, monkeypatch):
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", maintenance_interval=0.01)
    async with engine_factory(config=config) as engine:
        orphan = await blob(engine, b"left behind")
        collected = trio.Event()
        collect = engine.blobs.collect_garbage

        async def watched(**kwargs):
            counts = await collect(**kwargs)
            if counts["collected"]:
                collected.set()
            return counts

        monkeypatch.setattr(engine.blobs, "collect_garbage", watched)
        clock.advance(DAY + 1)
        with trio.fail_after(60):  # a hang guard only: the wait is on the timer's collection
            await collected.wait()
        with pytest.raises(NotFound):
            await engine.blobs.stat(orphan)
        assert await stored_digests(engine) == []


class PausedCaptures:
    """Holds each capture between its blob check and the scope's write (``supervisor.request``)."""

    def __init__(self, engine, monkeypatch) -> None:
        self.checked = trio.Event()
        self.go = trio.Event()
        supervisor = engine._ctx.supervisor
        request = supervisor.request

        async def paused(scope, build):
            self.checked.set()
            await self.go.wait()
            return await request(scope, build)

        monkeypatch.setattr(supervisor, "request", paused)


async def test_a_capture_in_progress_keeps_its_blob_from_the_collector_and_a_release(engine, clock, monkeypatch):
    photo = await blob(engine, b"checked, not yet referenced")
    other = (await engine.experience(with_media("before", {"blob_id": photo}))).event_id
    clock.advance(2 * DAY)
    paused = PausedCaptures(engine, monkeypatch)
    captured = []
    async with trio.open_nursery() as nursery:
        async def capture() -> None:
            captured.append((await engine.experience(with_media("now", {"blob_id": photo}))).event_id)

        nursery.start_soon(capture)
        await paused.checked.wait()  # its reference is checked; its write has not happened
        assert await release_blobs_of(engine, [other]) == 0  # the capture holds it
        assert await engine.blobs.collect_garbage() == {"examined": 1, "collected": 0}
        paused.go.set()
    assert await engine.blobs.references(photo) == captured
    assert await engine.blobs.read(photo) == b"checked, not yet referenced"
    assert (await engine.blobs.collect_garbage())["collected"] == 0  # referenced now


async def test_a_capture_after_the_collection_is_refused(engine, clock):
    orphan = await blob(engine, b"gone")
    clock.advance(2 * DAY)
    assert (await engine.blobs.collect_garbage())["collected"] == 1
    with pytest.raises(InvalidEnvelope) as refused:
        await engine.experience(with_media("late", {"blob_id": orphan}))
    assert refused.value.details["field"] == "content.media[0].blob_id"


async def test_a_scope_erasure_takes_its_unreferenced_uploads_and_keeps_what_others_refer_to(engine):
    lonely = await blob(engine, b"uploaded, never attached")
    own = await blob(engine, b"attached by alice")
    shared = await blob(engine, b"attached by bob too")
    theirs = await blob(engine, b"the team's own", scope=TEAM)
    await engine.experience(with_media("mine", {"blob_id": own}, {"blob_id": shared}), wait="consolidated")
    bob = envelope("our chart", scope=TEAM)
    bob["content"]["media"] = [{"blob_id": shared}]
    await engine.experience(bob, caller="user:bob", wait="consolidated")

    preview = await engine.erasures.preview({"scope": ALICE, "cross_workspace": False})
    assert preview["estimated_affected"]["blobs"] == 2
    manifest = await engine.erasures.manifest(preview["preview_id"])
    lines = [line for line in manifest["items"] if line["action"] == "delete_blob"]
    assert sorted(line["blob_id"] for line in lines) == sorted([lonely, own])
    assert {line["scope"] for line in lines} == {ALICE}

    erasure = await engine.erasures.execute({"scope": ALICE, "cross_workspace": False,
                                             "from_preview_id": preview["preview_id"]})  # fmt: skip
    status = await finished(engine, erasure["erasure_id"])
    assert status["status"] == "completed" and status["progress"]["released_blobs"] == 2
    for gone in (lonely, own):
        with pytest.raises(NotFound):
            await engine.blobs.stat(gone)
    assert await engine.blobs.read(shared) == b"attached by bob too"  # a surviving scope refers to it
    assert await engine.blobs.read(theirs) == b"the team's own"  # not the erased scope's
    assert len(await engine.blobs.references(shared)) == 1


async def test_a_hold_whose_caller_gave_up_lasts_until_the_capture_is_answered(engine, clock):
    from cortexdb.engine.actors.messages import ReplySlot

    photo = await blob(engine, b"queued")
    clock.advance(2 * DAY)
    reply = ReplySlot()
    with engine.blobs.hold() as hold:  # a write whose capture is queued when its caller is cancelled
        await engine.blobs.resolve(await _valid(with_media("queued", {"blob_id": photo})), caller="user:alice",
                                   tenant="default", hold=hold)  # fmt: skip
        hold.reply = reply
    assert (await engine.blobs.collect_garbage())["collected"] == 0  # still held: it may commit
    reply.fail(RuntimeError("the capture failed"))  # answered: the hold ends
    assert (await engine.blobs.collect_garbage())["collected"] == 1


async def _valid(body: dict):
    from cortexdb.engine.envelope import validate_envelope

    return validate_envelope(body)
