"""Sealed text segments kept under the data dir (retrieve/text_files.py, text_reopen.py): a reopen
maps them and re-tokenises only the documents no kept slot holds with the same text; BM25 scores
and recall answers are those of a rebuild; a damaged, missing or stray file, a document changed
or gone since the manifest, falls back to indexing from the stored records; an erasure leaves
none of the erased text in a kept file.  LevelDB in a tmp dir, seeded ids, the test clock; no
timing."""

from __future__ import annotations

import json
import os
import random
import shutil

import attrs
import pytest
import trio

import cortexdb
from cortexdb import EngineConfig
from cortexdb.engine.forget import ops
from cortexdb.engine.retrieve import text_files, tokens
from cortexdb.engine.retrieve.layered import LayeredTextIndex, scope_folder
from cortexdb.engine.retrieve.text_reopen import TextReopen

from . import reopen_scope
from .reopen_scope import SCOPE, files_bytes, notes, settle, state

QUERIES = [*reopen_scope.QUERIES, "zebra"]


# -- the index alone: kept segments against a fresh index of the same documents -----------------
WORDS = [f"w{i}" for i in range(60)] + ["the", "with", "about", "meeting", "oslo", "rome"]


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))


def _layered(tmp_path, persist: bool = True) -> LayeredTextIndex:
    return LayeredTextIndex(str(tmp_path / "segments"), persist=str(tmp_path / "kept") if persist else None,
                            merge_inline=False, seal_docs=8, max_segment_docs=64, compact_min=40)  # fmt: skip


async def _settle(layered: LayeredTextIndex) -> None:
    for _ in range(200):
        if not layered.needs_merge:
            break
        await layered.merge()
    await layered.persist_all()


def _ranked(layered: LayeredTextIndex, prefix: str) -> list:
    queries = ["w1 w2", "the meeting", "oslo w7 w7", "w13 with rome", "w59", "about the with"]
    return [layered.search(query, 20, prefix) for query in queries]


def _same(kept: list, fresh: list) -> None:
    """The same ids in the same order, the same scores (BM25Okapi's floor for negative idfs sums
    the vocabulary in its order, which history decides: equal to 1e-12, as between any two
    histories of the same documents)."""
    assert [[doc_id for doc_id, _ in hits] for hits in kept] == [[doc_id for doc_id, _ in hits] for hits in fresh]
    for kept_hits, fresh_hits in zip(kept, fresh, strict=True):
        assert [score for _, score in kept_hits] == pytest.approx([score for _, score in fresh_hits], rel=1e-12)


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_kept_segments_score_as_a_fresh_index_after_removals_readds_merges_compactions(tmp_path, seed):
    rng = random.Random(seed)
    layered = _layered(tmp_path)
    documents: dict[str, str] = {}
    for step in range(400):
        action = rng.random()
        if action < 0.6 or not documents:
            doc_id = f"{rng.choice(['evt', 'fact'])}_{step:05d}"
        elif action < 0.8:
            doc_id = rng.choice(sorted(documents))  # indexed again, with another text
        else:
            doc_id = rng.choice(sorted(documents))
            layered.remove(doc_id)
            del documents[doc_id]
            continue
        documents[doc_id] = _text(rng)
        layered.add(doc_id, documents[doc_id], tokens.tokenize(documents[doc_id]))
        if step % 37 == 0:
            await _settle(layered)
        if step == 250:
            layered.compact()
    await _settle(layered)
    kept_sizes = {prefix: index.segment_sizes for prefix, index in layered._indexes.items()}
    assert any(kept_sizes.values())
    # a reopen: a new index of the same folder, the stored documents offered in another order
    reopened = _layered(tmp_path)
    texts = TextReopen(reopened)
    await texts.load()
    order = sorted(documents, key=lambda _: rng.random())
    rest = await texts.confirm({doc_id: documents[doc_id] for doc_id in order})
    for doc_id, text in rest.items():
        reopened.add(doc_id, text, tokens.tokenize(text))
    await texts.finish()
    assert texts.counts["confirmed"] > 0 and texts.counts["refused"] == 0
    assert texts.counts["confirmed"] + texts.counts["tokenised"] == len(documents)
    fresh = _layered(tmp_path / "fresh", persist=False)
    for doc_id in order:
        fresh.add(doc_id, documents[doc_id])
    for prefix in ("evt_", "fact_"):
        _same(_ranked(reopened, prefix), _ranked(fresh, prefix))
        index, other = reopened._indexes[prefix], fresh._indexes[prefix]
        assert len(index) == len(other) and index.total_length == other.total_length
        for doc_id in [d for d in documents if d.startswith(prefix)]:
            assert index.score("w1 the oslo w7", doc_id) == pytest.approx(other.score("w1 the oslo w7", doc_id), rel=1e-12)


async def test_a_document_changed_or_gone_since_the_manifest_is_not_served_from_the_kept_slot(tmp_path):
    layered = _layered(tmp_path)
    documents = {f"evt_{i:03d}": f"w{i % 7} meeting w{i}" for i in range(40)}
    for doc_id, text in documents.items():
        layered.add(doc_id, text)
    await _settle(layered)
    assert layered._indexes["evt_"].named  # kept
    documents["evt_003"] = "zebra crossing"  # changed behind the kept files' back
    del documents["evt_004"]  # gone
    reopened = _layered(tmp_path)
    texts = TextReopen(reopened)
    await texts.load()
    rest = await texts.confirm(dict(documents))
    assert "evt_003" in rest and "evt_004" not in rest
    for doc_id, text in rest.items():
        reopened.add(doc_id, text)
    await texts.finish()
    assert texts.counts["gone"] == 1 and texts.counts["compacted"] == 1
    assert [doc_id for doc_id, _ in reopened.search("zebra", 5, "evt_")] == ["evt_003"]
    assert "evt_004" not in reopened
    fresh = _layered(tmp_path / "fresh", persist=False)
    for doc_id, text in documents.items():
        fresh.add(doc_id, text)
    _same(_ranked(reopened, "evt_") + [reopened.search("w4 zebra", 10, "evt_")],
          _ranked(fresh, "evt_") + [fresh.search("w4 zebra", 10, "evt_")])
    kept = b"".join(open(os.path.join(root, f), "rb").read() for root, _, files in os.walk(tmp_path / "kept") for f in files)
    assert b"evt_004" not in kept  # the compaction rewrote the files without the gone document


# -- the engine: a data dir reopened ---------------------------------------------------------------
def config(**extra) -> EngineConfig:
    # seals of 16 documents: a 150-event scope has several kept segments and merges
    return EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", text_seal_docs=16,
                        text_segment_docs=64, **extra)  # fmt: skip


@pytest.fixture
def open_at(tmp_path, clock):
    def opener(**extra):
        return reopen_scope.opener(tmp_path, clock, config(**extra))

    return opener


def folder(tmp_path) -> str:
    return str(tmp_path / "data" / "text-segments" / scope_folder(SCOPE))


async def answers(engine) -> list:
    return await reopen_scope.answers(engine, QUERIES)


async def write(engine, count: int = 150) -> list[str]:
    texts = notes(count)
    texts[7] = "Note 7: a zebra named Quixotic crossed in Lima"
    return await reopen_scope.write(engine, texts)


def manifest(tmp_path, layer: str = "evt") -> dict:
    with open(os.path.join(folder(tmp_path), layer, text_files.MANIFEST)) as handle:
        return json.load(handle)


def kept_bytes(tmp_path) -> bytes:
    return files_bytes(folder(tmp_path))


async def test_a_reopen_maps_the_kept_segments_and_answers_as_a_rebuild(open_at, tmp_path):
    async with open_at() as engine:
        await write(engine)
        before = await answers(engine)
        sizes = state(engine).text_index._indexes["evt_"].segment_sizes
    kept = sum(entry["count"] for entry in manifest(tmp_path)["segments"])
    assert kept >= 128 and kept <= sum(sizes)
    async with open_at() as engine:
        reopened = await answers(engine)
        counts = state(engine).text_index.reopened
        assert counts["confirmed"] >= kept and counts["refused"] == counts["gone"] == 0, counts
        # only the documents no kept slot holds are tokenised (the delta's, the episodes')
        assert counts["tokenised"] == len(state(engine).text_index) - counts["confirmed"]
    assert reopened == before
    async with open_at(text_segments_kept=False) as engine:  # a rebuild: every text tokenised
        assert await answers(engine) == before
    assert not os.path.exists(folder(tmp_path))  # turned off: what was kept is deleted


@pytest.mark.parametrize("damage", ["flip a byte of a segment", "delete the vocabulary", "truncate a segment",
                                    "garbage manifest", "foreign manifest"])  # fmt: skip
async def test_a_damaged_or_missing_file_is_rebuilt_not_served(open_at, tmp_path, damage):
    async with open_at() as engine:
        await write(engine)
        before = await answers(engine)
    layer = os.path.join(folder(tmp_path), "evt")
    body = manifest(tmp_path)
    segment = os.path.join(layer, body["segments"][0]["name"] + ".seg")
    vocab = os.path.join(layer, body["vocabulary"][0]["name"] + ".voc")
    if damage == "flip a byte of a segment":
        with open(segment, "r+b") as handle:
            handle.seek(70)
            byte = handle.read(1)
            handle.seek(70)
            handle.write(bytes([byte[0] ^ 0x40]))
    elif damage == "delete the vocabulary":
        os.unlink(vocab)
    elif damage == "truncate a segment":
        os.truncate(segment, os.path.getsize(segment) - 8)
    elif damage == "garbage manifest":
        with open(os.path.join(layer, text_files.MANIFEST), "w") as handle:
            handle.write("{not json")
    else:  # another tokenizer's files
        with open(os.path.join(layer, text_files.MANIFEST), "w") as handle:
            json.dump({**body, "tokens": "0" * 16}, handle)
    async with open_at() as engine:
        assert await answers(engine) == before
        counts = state(engine).text_index.reopened
        assert counts["refused"] >= 1 and counts["tokenised"] >= 16, counts
    assert body["segments"][0]["name"] not in [entry["name"] for entry in manifest(tmp_path)["segments"]]
    if damage != "delete the vocabulary":
        assert not os.path.exists(segment)


async def test_files_no_manifest_names_are_deleted_at_open(open_at, tmp_path):
    async with open_at() as engine:
        await write(engine, 60)
    stray = os.path.join(folder(tmp_path), "evt", "0123abcd.seg")  # a build a crash cut short
    temporary = os.path.join(folder(tmp_path), "evt", "manifest.json.4567.tmp")  # a manifest not renamed yet
    for path in (stray, temporary):
        with open(path, "wb") as handle:
            handle.write(b"\0" * 64)
    async with open_at() as engine:
        await answers(engine)
        assert state(engine).text_index.reopened["confirmed"] > 0  # the named files still served
    assert not os.path.exists(stray) and not os.path.exists(temporary)


async def test_an_erased_event_never_comes_back_through_a_kept_segment(open_at, tmp_path):
    async with open_at() as engine:
        ids = await write(engine)
        doomed = [event_id for event_id in ids if "zebra" in (await state(engine).tables.events.get(event_id)).content["text"]][0]
        assert doomed.encode() in kept_bytes(tmp_path) and b"quixot" in kept_bytes(tmp_path)
        # a crash right after the erasure's records were written, before the files were
        # rewritten: the manifest and files of before the erasure
        shutil.copytree(folder(tmp_path), tmp_path / "before")
        assert await ops.delete_events(engine, SCOPE, [doomed]) == 1
        assert doomed.encode() not in kept_bytes(tmp_path)  # rewritten without it, old files gone
        assert b"quixot" not in kept_bytes(tmp_path)  # nor its words in the vocabulary
        after = await answers(engine)
    shutil.rmtree(folder(tmp_path))
    shutil.copytree(tmp_path / "before", folder(tmp_path))
    assert doomed.encode() in kept_bytes(tmp_path)
    async with open_at() as engine:
        found = await answers(engine)
        assert doomed not in state(engine).text_index
        assert state(engine).text_index.reopened["gone"] >= 1
    assert found == after
    assert all(doomed not in [i for i, _ in layer] for pack in found for layer in pack.values())
    assert doomed.encode() not in kept_bytes(tmp_path) and b"quixot" not in kept_bytes(tmp_path)


async def test_a_redacted_event_never_comes_back_through_a_kept_segment(open_at, tmp_path):
    """A crash after a redaction's records, before the kept files were rewritten: the redacted
    event's id is still a stored event, so the open finds its kept slot's text changed (not
    gone) and compacts the layer; the redacted event is not indexed again at all."""
    async with open_at() as engine:
        ids = await write(engine)
        doomed = [event_id for event_id in ids if "zebra" in (await state(engine).tables.events.get(event_id)).content["text"]][0]
        assert b"quixot" in kept_bytes(tmp_path)
        shutil.copytree(folder(tmp_path), tmp_path / "before")
        assert await ops.redact_events(engine, SCOPE, [doomed]) == 1
        assert doomed not in state(engine).text_index
        assert b"quixot" not in kept_bytes(tmp_path)
        after = await answers(engine)
    shutil.rmtree(folder(tmp_path))
    shutil.copytree(tmp_path / "before", folder(tmp_path))
    assert b"quixot" in kept_bytes(tmp_path)
    async with open_at() as engine:
        found = await answers(engine)
        assert doomed not in state(engine).text_index  # as after the live redaction
        reopened = state(engine).text_index.reopened
        assert reopened["changed"] + reopened["gone"] >= 1 and reopened["compacted"] >= 1, reopened
    assert found == after
    assert b"quixot" not in kept_bytes(tmp_path) and b"zebra" not in kept_bytes(tmp_path)


async def test_a_layer_is_adopted_under_the_prefix_its_manifest_names(tmp_path):
    """A prefix that is not plain (``Note_``) has a hashed folder; its kept segments are found
    again under that prefix, not under the folder's name."""
    layered = _layered(tmp_path)
    for i in range(40):
        layered.add(f"Note_{i:04d}", f"note {i} about w{i % 7}")
    await _settle(layered)
    await layered.persist_all()
    reopened = _layered(tmp_path)
    texts = TextReopen(reopened)
    await texts.load()
    assert [index.layer for index in texts.adopted] == ["Note_"]
    rest = await texts.confirm({f"Note_{i:04d}": f"note {i} about w{i % 7}" for i in range(40)})
    for doc_id, text in rest.items():
        reopened.add(doc_id, text)
    assert texts.counts["confirmed"] > 0 and texts.counts["tokenised"] == len(rest)
    await texts.finish()
    assert texts.counts["gone"] == texts.counts["changed"] == 0 and texts.counts["compacted"] == 0


async def test_a_purge_waits_for_a_manifest_being_written(tmp_path, monkeypatch):
    """A drop's purge of the kept folder and a manifest written in a worker thread do not
    interleave: the write that checked the index was kept before the purge cannot recreate the
    folder after it."""
    import sys
    import threading

    layered = _layered(tmp_path)
    for i in range(40):
        layered.add(f"evt_{i:04d}", f"note {i} about secretword{i}")
    entered, release = threading.Event(), threading.Event()
    real_makedirs = os.makedirs

    def makedirs(path, *args, **kwargs):
        if sys._getframe(1).f_code.co_name == "work":  # the manifest's write (not a segment build)
            entered.set()
            release.wait()
        return real_makedirs(path, *args, **kwargs)

    monkeypatch.setattr(text_files.os, "makedirs", makedirs)
    purged = threading.Event()

    def purge():
        entered.wait()
        release.set()  # the write goes on, holding the lock; the purge waits for it
        layered.detach(purge=True)
        purged.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(_settle, layered)  # its first manifest waits in makedirs
        nursery.start_soon(trio.to_thread.run_sync, purge)
    assert purged.is_set()
    assert [f for _, _, files in os.walk(layered.persist) for f in files] == []  # no manifest, no chunk


async def test_a_text_changed_after_the_manifest_is_indexed_from_the_stored_record(open_at, tmp_path):
    async with open_at() as engine:
        target = (await write(engine))[20]
        tables = state(engine).tables
        stored = await tables.events.get(target)
        changed = attrs.evolve(stored, content={**stored.content, "text": "Note 20: an okapi grazed"})
        await tables.write([tables.events.put_op(target, changed)])  # behind the kept files' back
    async with open_at() as engine:
        await settle(engine)
        text_index = state(engine).text_index
        assert [doc_id for doc_id, _ in text_index.search("okapi", 5, "evt_")] == [target]
        assert text_index.score("Ana Oslo Bo Rome Cy Lima Di", target) == 0.0  # the old text's words are not its
        assert state(engine).text_index.reopened["tokenised"] >= 1
        kept_answers = await answers(engine)
    async with open_at(text_segments_kept=False) as engine:
        assert await answers(engine) == kept_answers


async def test_the_memory_backend_keeps_nothing(clock):
    async with cortexdb.open_engine("memory", clock=clock, id_seed=7, config=config()) as engine:
        await write(engine, 60)
        assert state(engine).text_index.persist is None
        assert all(index.persist is None for index in state(engine).text_index.parts())


async def test_a_released_scope_reopens_from_its_kept_segments(open_at, tmp_path):
    async with open_at() as engine:
        await write(engine)
        before = await answers(engine)
        names = [entry["name"] for entry in manifest(tmp_path)["segments"]]
        assert await engine._supervisor.release(SCOPE, drain=True)
        assert [entry["name"] for entry in manifest(tmp_path)["segments"]] == names
        assert await answers(engine) == before
        assert state(engine).text_index.reopened["confirmed"] > 0


async def test_a_rebuild_deletes_the_kept_files_and_keeps_its_own(open_at, tmp_path):
    async with open_at() as engine:
        await write(engine)
        before = await answers(engine)
        old = {entry["name"] for entry in manifest(tmp_path)["segments"]}
        await engine.rebuild(SCOPE)
        rebuilt = await answers(engine)
        assert not old & {entry["name"] for entry in manifest(tmp_path)["segments"]}
        layer = os.path.join(folder(tmp_path), "evt")
        assert not any(name.split(".")[0] in old for name in os.listdir(layer))
    assert rebuilt == before
    async with open_at() as engine:
        assert await answers(engine) == before
        assert state(engine).text_index.reopened["confirmed"] > 0


async def test_a_forget_waits_for_a_build_in_flight_before_it_rewrites_the_files():
    """A seal or merge planned before a forget's removals writes a kept file holding them; the
    forget's tidy waits for it before compacting and writing the manifest, so that file is
    replaced before the forget answers."""
    from types import SimpleNamespace

    import trio.testing

    from cortexdb.engine.actors.stages import forget

    order: list[str] = []
    built = trio.Event()

    class Indexer:
        vector_job_running = True

        async def vector_job_finished(self):
            await built.wait()
            order.append("build finished")

    class Text:
        def compact(self):
            order.append("compact")

        async def merge(self):
            order.append("merge")

        async def persist_all(self):
            order.append("manifest")

    class Vectors:
        async def rewrite(self):
            order.append("vectors rewritten")

    work = SimpleNamespace(index=Indexer(), state=SimpleNamespace(text_index=Text(), vector_index=Vectors()))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(forget.tidy, work)
        await trio.testing.wait_all_tasks_blocked()
        assert order == []  # nothing compacted or written while the build runs
        built.set()
    assert order == ["build finished", "compact", "merge", "manifest", "vectors rewritten"]
