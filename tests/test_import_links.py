"""A re-imported JSONL export keeps its chains: ``context.preceded_by`` names the exporting
engine's event ids, the import rewrites them to its own (``engine/transfer/links.py``), across
bulk requests and windows, in both orderings, on re-import and after a resume."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import trio

from cortexdb import EngineConfig, ManualClock, open_engine

from .test_export import ALICE, BOB, START, config, export, lines, normalised

#: (text, scope, day, the texts it follows)
CHAINS = [("Hi, I am planning a trip.", ALICE, 10, ()), ("Where to?", ALICE, 10, ("Hi, I am planning a trip.",)),
          ("Lisbon, in May.", ALICE, 11, ("Where to?",)), ("Unrelated note.", BOB, 11, ()),
          ("Book the flight then.", ALICE, 12, ("Hi, I am planning a trip.", "Lisbon, in May.")),
          ("Noted.", BOB, 12, ("Unrelated note.",)), ("Done, booked.", ALICE, 13, ("Book the flight then.",))]  # fmt: skip


async def exported(tmp_path: Path) -> bytes:
    """The JSONL export of an engine that wrote ``CHAINS`` (each linked to what it follows)."""
    clock = ManualClock(START)
    async with open_engine("memory", clock=clock, id_seed=1, config=config(tmp_path)) as engine:
        ids: dict[str, str] = {}
        for text, scope, day, follows in CHAINS:
            context = {"observed_at": f"2026-05-{day:02d}T10:00:00Z"}
            if follows:
                context["preceded_by"] = [ids[t] for t in follows]
            done = await engine.experience({"scope": scope, "modality": "conversation", "context": context,
                                            "content": {"kind": "message", "role": "user", "text": text}},
                                           wait="captured")  # fmt: skip
            ids[text] = done.event_id
            clock.advance(60)
        for scope in (ALICE, BOB):
            await engine.flush(scope, seal=True)
        return (await export(engine))[1]


async def chains(engine) -> dict[str, tuple[str, ...]]:
    """Each event's text and the texts of the events it follows, read back from ``engine``."""
    events = []
    for scope in (ALICE, BOB):
        await engine.flush(scope)
        events += (await engine.events(scope, limit=100))["items"]
    text = {e["id"]: e["content"]["text"] for e in events}
    return {e["content"]["text"]: tuple(text.get(i, i) for i in e["context"].get("preceded_by") or ())
            for e in events}  # fmt: skip


EXPECTED = {text: follows for text, _, _, follows in CHAINS}


async def run_import(engine, data: bytes, ordering: str) -> dict:
    started = await engine.imports.start("jsonl", data, {"scope_template": "org:acme",
                                                         "options": {"ordering": ordering}})  # fmt: skip
    return await engine.imports.wait(started["import_id"])


@pytest.mark.parametrize("ordering", ["strict_temporal", "batch_throughput"])
@pytest.mark.parametrize("bulk", [1000, 2])
async def test_a_reimported_export_links_its_events_to_the_importers_own(tmp_path, ordering, bulk):
    data = await exported(tmp_path)
    source_ids = {r["id"] for r in lines(data) if r["record"] == "event"}
    cfg = config(tmp_path, bulk_max_items=bulk, import_window=bulk)
    async with open_engine("memory", clock=ManualClock(START), id_seed=2, config=cfg) as engine:
        status = await run_import(engine, data, ordering)
        counts = status["items"]
        assert (counts["written"], counts["replayed"], counts["failed"]) == (len(CHAINS), 0, 0), status
        assert await chains(engine) == EXPECTED  # every link names the importer's event of that text
        for scope in (ALICE, BOB):
            for event in (await engine.events(scope, limit=100))["items"]:
                assert not set(event["context"].get("preceded_by") or ()) & source_ids
        again = await run_import(engine, data, ordering)  # the same file again: replays, nothing new
        counts = again["items"]
        assert (counts["written"], counts["replayed"], counts["failed"]) == (0, len(CHAINS), 0), again
        assert await chains(engine) == EXPECTED


async def test_the_round_trip_keeps_the_chains_byte_identical_modulo_ids(tmp_path):
    first = await exported(tmp_path)
    files = [first]
    for seed in (2, 3):
        async with open_engine("memory", clock=ManualClock(START), id_seed=seed, config=config(tmp_path)) as engine:
            await run_import(engine, files[-1], "batch_throughput")
            assert await chains(engine) == EXPECTED
            for scope in (ALICE, BOB):
                await engine.flush(scope, seal=True)
            files.append((await export(engine))[1])
    assert normalised(files[2]) == normalised(files[1])
    # each event line's links renumber like its ids: the exported file's events, as written
    keep = ("id", "wal_offset", "recorded_at", "derives")

    def events(data: bytes) -> list[bytes]:
        rows = [{k: v for k, v in r.items() if k not in keep} for r in lines(data) if r["record"] == "event"]
        return [normalised(orjson.dumps(r)) for r in rows]

    assert len(events(first)) == len(CHAINS)
    by_text = {orjson.loads(r)["envelope"]["content"]["text"]: r for r in events(files[1])}
    for text, follows in EXPECTED.items():
        assert bool(follows) == (b"preceded_by" in by_text[text])


async def test_a_predecessor_not_in_the_file_keeps_its_id_as_written(tmp_path):
    data = await exported(tmp_path)
    rows = lines(data)
    first = next(r for r in rows if r["record"] == "event" and r["envelope"]["content"]["text"] == CHAINS[0][0])
    kept = b"\n".join(orjson.dumps(r) for r in rows if r is not first)
    async with open_engine("memory", clock=ManualClock(START), id_seed=2, config=config(tmp_path)) as engine:
        status = await run_import(engine, kept, "batch_throughput")
        assert status["items"]["written"] == len(CHAINS) - 1
        found = await chains(engine)
    assert found["Where to?"] == (first["id"],)  # not this engine's: as the file wrote it
    assert found["Book the flight then."] == (first["id"], "Lisbon, in May.")


async def test_a_resumed_import_links_to_the_records_committed_before_it_stopped(tmp_path):
    data = await exported(tmp_path)
    cfg = EngineConfig(import_window=2, bulk_max_items=2, episode_idle_check=3600.0,
                       transfer_dir=str(tmp_path / "transfer"))  # fmt: skip
    path = str(tmp_path / "data")
    stopped = trio.Event()
    async with open_engine("leveldb", path=path, id_seed=1, config=cfg) as engine:

        async def stop_dead(job_id: str, phase: str, where: str) -> None:
            record = await engine.imports.jobs.get(job_id)
            if where == "tick" and record["state"].get("committed", 0) >= 4:
                stopped.set()
                await trio.sleep_forever()  # the engine closes around it: the job is cancelled here

        engine.imports.jobs.hook = stop_dead
        started = await engine.imports.start("jsonl", data, {"scope_template": "org:acme",
                                                             "options": {"ordering": "batch_throughput"}})  # fmt: skip
        await stopped.wait()
    async with open_engine("leveldb", path=path, id_seed=2, config=cfg) as engine:
        status = await engine.imports.wait(started["import_id"])
        assert status["status"] == "completed" and [i["phase"] for i in status["interruptions"]] == ["write"]
        assert await chains(engine) == EXPECTED  # "Done, booked." follows a record of the first run


def test_the_map_keeps_the_last_ids_it_learnt_and_parts_cut_before_a_follower():
    from cortexdb.engine.transfer.links import SourceIds, parts
    from cortexdb.engine.transfer.mapping import Item

    ids = SourceIds(2)
    for source, ours in (("evt_a", "evt_1"), ("evt_b", "evt_2"), ("evt_a", "evt_1"), ("evt_c", "evt_3")):
        ids.add(source, ours)
    assert len(ids) == 2 and ids.get("evt_b") is None and ids.get("evt_a") == "evt_1"  # b was the oldest

    def item(source: str, *follows: str) -> Item:
        context = {"observed_at": "2026-05-10T10:00:00Z", **({"preceded_by": list(follows)} if follows else {})}
        return Item(0, envelope={"context": context}, source_id=source)

    run = [item("evt_x"), item("evt_y", "evt_x"), item("evt_z", "evt_a"), item("evt_w", "evt_y", "evt_q")]
    assert [[i.source_id for i in part] for part in parts(run)] == [["evt_x"], ["evt_y", "evt_z"], ["evt_w"]]
    ids.translate(run)  # what it knows (evt_a), nothing else
    assert [i.envelope["context"].get("preceded_by") for i in run] == [None, ["evt_x"], ["evt_1"], ["evt_y", "evt_q"]]
    assert [i.replay_by_key for i in run] == [False, False, True, False]
