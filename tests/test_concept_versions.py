"""Closed concept versions stored compact (``CV``, docs/decisions.md "Closed concept versions stored
compact"): a version's summary and lists as edits of the next one, one whole in every
``understanding_version_chain``.  Every as-of read answers as when each version is stored whole
(``understanding_version_chain=1``, the form before), through cancels, forgets and redactions
(which leave no text of what they removed in any row), and over rows written whole by an older
data dir; a chain whose next version is not the one it was written against fails loudly."""

from __future__ import annotations

import datetime as dt
import random

import pytest

import cortexdb
from cortexdb import EngineConfig, ManualClock
from cortexdb.engine import jsoncodec
from cortexdb.engine.derive import concept_delta as delta
from cortexdb.engine.spi.kv import Put
from cortexdb.errors import Internal, NotFound
from cortexdb.testing.factories import LevelDBFactory, MemoryFactory

SCOPE = "org:acme/user:alice"
START = dt.datetime(2026, 5, 13, 15, 0, tzinfo=dt.UTC)
SUBJECTS = ("Acme", "Globex", "Initech")
VALUES = {"seat_count": [100, 200, 300, 400], "deal_stage": ["poc", "signed", "lost", "renewal"],
          "hq": ["Paris", "Oslo", "Rome", "Lima"], "ceo": ["Ann", "Bo", "Cy"],
          "likes": ["tea", "golf", "jazz", "chess", "maps"]}  # fmt: skip
CV = b"CV\x00"


# -- the edit scripts, pure ---------------------------------------------------------------------
def _wire(rng: random.Random, before: dict | None) -> dict:
    """A concept's wire form, edited from ``before`` as a revision edits one: lines in and out
    of its summary, ids in and out of its lists, now and then a field unlike the last."""
    lines = list(before["summary"].split("; ")) if before and before["summary"] else []
    for _ in range(rng.randint(0, 3)):
        if lines and rng.random() < 0.4:
            lines.pop(rng.randrange(len(lines)))
        lines.insert(rng.randint(0, len(lines)), f"likes {rng.choice('abcdefgh')} [fact_{rng.randrange(40)}]")
    supports = sorted({f"evt_{rng.randrange(60)}" for _ in range(rng.randint(0, 12))})
    edges = [{"to": f"concept_{rng.randrange(5)}", "relation": rng.choice(("works_at", "likes")),
              "weight": rng.choice((0.5, 1.0))} for _ in range(rng.randint(0, 4))]  # fmt: skip
    wire = {"id": "concept_1", "version": before["version"] + 1 if before else 1, "name": "Acme",
            "summary": "; ".join(lines) if lines and rng.random() > 0.05 else None,
            "supports": supports, "edges": edges,
            "supported_by": {"facts": [x for x in lines if rng.random() < 0.8], "beliefs": [], "episodes": []},
            "synthesis_inputs": {"filters": {"subjects": ["ent_1"], "topics": sorted({x[:7] for x in lines})}},
            "derived_from": [] if rng.random() < 0.9 else ["concept_0"], "confidence": rng.random()}  # fmt: skip
    if rng.random() < 0.1:
        del wire["derived_from"]  # a field absent on one side
    return wire


@pytest.mark.parametrize("seed", range(20))
def test_random_revisions_read_back_whole_from_any_chain(seed):
    rng = random.Random(seed)
    versions = [_wire(rng, None)]
    for _ in range(rng.randint(5, 40)):
        versions.append(_wire(rng, versions[-1]))
    for chain in (1, 2, 3, 7, 16):
        rows = [w if delta.whole(w["version"], later["version"], chain) else delta.compact(w, later)
                for w, later in zip(versions, versions[1:], strict=False)]  # fmt: skip
        later, read = versions[-1], []
        for row in reversed(rows):
            later = delta.expand(row, later)
            read.append(later)
        assert read[::-1] == versions[:-1]
        compact = [r for r in rows if delta.is_compact(r)]
        assert (chain == 1) == (not compact)
        # a read goes through at most ``chain`` rows to a whole one (or the current version)
        runs = "".join("c" if delta.is_compact(r) else "w" for r in rows).split("w")
        assert max(len(run) for run in runs) <= chain - 1 or chain == 1


def test_a_broken_chain_fails_instead_of_answering():
    rng = random.Random(3)
    old = _wire(rng, None)
    new = _wire(rng, old)
    new["summary"] = "Acme: likes tea [fact_1]; lives in Oslo [fact_2]"
    row = delta.compact(old, new)
    assert delta.expand(row, new) == old
    rewritten = dict(new, summary="Acme: likes tea [fact_1]")
    with pytest.raises(Internal, match="cannot be read"):
        delta.expand(row, rewritten)


# -- the engine, memory and LevelDB ---------------------------------------------------------------
@pytest.fixture(params=["memory", "leveldb"])
def factory(request, tmp_path):
    return MemoryFactory() if request.param == "memory" else LevelDBFactory(str(tmp_path / request.param))


def _triple(subject, predicate, value, at: dt.datetime) -> dict:
    content = {"kind": "triple", "subject": subject, "predicate": predicate, "object": value}
    return {"scope": SCOPE, "modality": "observation", "content": content,
            "context": {"observed_at": at.strftime("%Y-%m-%dT%H:%M:%SZ")}}  # fmt: skip


async def _rows(store) -> list[dict]:
    return [jsoncodec.decode(v) async for _, v in store.scan(prefix=CV)]


async def _everything(engine, moments: list[str]) -> dict:
    """Every concept as of every moment: the list (deprecated ones too) and each by id."""
    out = {}
    ids = [c["id"] for c in (await engine.understanding(SCOPE, limit=1000, include_deprecated=True))["items"]]
    for moment in moments:
        page = await engine.understanding(SCOPE, as_of=moment, limit=1000, include_deprecated=True)
        out[f"list {moment}"] = page
        for concept_id in ids:
            try:
                out[f"{concept_id} {moment}"] = await engine.get_concept(SCOPE, concept_id, as_of=moment)
            except NotFound as e:
                out[f"{concept_id} {moment}"] = e.message
    return out


async def _scenario(factory, chain: int, seed: int) -> tuple[dict, dict]:
    """Seeded random writes to three subjects, a cancel, a forget of a predicate's facts and a
    redaction of an event between them, the engine reopened halfway with ``chain`` (the first half
    always stores every version whole: an older data dir's rows).  What every as-of read answers
    after each rewrite and at the end, and what the ``CV`` rows held then."""
    rng, clock = random.Random(seed), ManualClock(START)
    store = await factory.open()
    found: dict = {}
    checks: dict = {}
    moments: list[str] = []
    predicates = list(VALUES)
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", understanding_version_chain=1)
    engine_cm = cortexdb.open_engine("memory", config=config, clock=clock, id_seed=seed, store=store)
    engine = await engine_cm.__aenter__()
    try:
        events: list[str] = []
        for i in range(60):
            if i == 24:  # reopened: compact rows from here on, after whole ones
                await engine_cm.__aexit__(None, None, None)
                config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice",
                                      understanding_version_chain=chain)  # fmt: skip
                engine_cm = cortexdb.open_engine("memory", config=config, clock=clock, id_seed=seed + 100,
                                                 store=store)  # fmt: skip
                engine = await engine_cm.__aenter__()
            at = START + dt.timedelta(minutes=i)
            if i in (30, 38):  # a value said once, then cancelled (30) or its event redacted (38)
                value = f"Atlantis{i}"
                triple = _triple(rng.choice(SUBJECTS), "hq", value, at)
            else:
                predicate = rng.choice(predicates)
                triple = _triple(rng.choice(SUBJECTS), predicate, rng.choice(VALUES[predicate]), at)
            events.append((await engine.experience(triple, wait="consolidated")).event_id)
            clock.advance(60)
            moments.append(clock.now().strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
            if i == 29:  # rows written whole by the older engine, compact ones after them
                rows = await _rows(store)
                checks["mixed"] = (sum(delta.is_compact(r) for r in rows), sum(not delta.is_compact(r) for r in rows))
                found["mixed"] = await _everything(engine, moments)
            if i == 33:
                await engine.cancel(events[30])
                clock.advance(60)
                checks["cancel"] = [r for r in await _rows(store) if "Atlantis30" in str(r)]
                found["after cancel"] = await _everything(engine, moments)
            if i == 36:
                await engine.forget({"scope": SCOPE, "layers": ["facts"], "selector": {"predicate": "ceo"}})
                predicates.remove("ceo")
                clock.advance(60)
                checks["forget"] = [r for r in await _rows(store) if "ceo " in str(r)]
                found["after forget"] = await _everything(engine, moments)
            if i == 41:
                await engine.forget({"scope": SCOPE, "layers": ["events", "facts", "beliefs"], "cascade": "redact_events",
                                     "selector": {"memory_ids": [events[38]]}})  # fmt: skip
                clock.advance(60)
                checks["redaction"] = [r for r in await _rows(store) if "Atlantis38" in str(r)]
                checks["redaction"] += [c for c in (await engine.understanding(SCOPE))["items"] if "Atlantis38" in str(c)]
                found["after redaction"] = await _everything(engine, moments)
        found["end"] = await _everything(engine, moments)
        rows = await _rows(store)
        checks["compact"] = sum(delta.is_compact(r) for r in rows)
        checks["whole"] = len(rows) - checks["compact"]
    finally:
        await engine_cm.__aexit__(None, None, None)
        await store.close()
    return found, checks


@pytest.mark.parametrize("seed", [5, 11])
async def test_every_as_of_reads_as_whole_versions_do(factory, seed, tmp_path):
    whole, whole_checks = await _scenario(factory, 1, seed)
    if isinstance(factory, LevelDBFactory):
        factory = LevelDBFactory(str(tmp_path / "compact"))
    compact, checks = await _scenario(factory, 3, seed)
    assert whole_checks["compact"] == 0 and whole_checks["whole"] > 10
    assert whole_checks["mixed"][0] == 0 and checks["mixed"][0] > 0
    assert checks["mixed"][1] >= 12  # the older engine's whole rows, read with the compact ones
    assert checks["compact"] > 5 and checks["whole"] > 0  # and at the end, one in three whole
    for name in ("cancel", "forget", "redaction"):  # nothing removed is left in any row
        assert checks[name] == [] and whole_checks[name] == [], name
    assert compact.keys() == whole.keys()
    for point in whole:
        assert compact[point] == whole[point], point


async def test_a_rewritten_next_version_breaks_the_read_loudly(factory):
    """A compact row read against a current version that is not the one it was written against
    (as if a write had changed it in place and kept the row) is a 500, not another summary."""
    clock, store = ManualClock(START), await factory.open()
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", understanding_version_chain=8)
    async with cortexdb.open_engine("memory", config=config, clock=clock, id_seed=3, store=store) as engine:
        for i, (predicate, value) in enumerate([("seat_count", 100), ("hq", "Oslo"), ("seat_count", 200)]):
            await engine.experience(_triple("Acme", predicate, value, START + dt.timedelta(minutes=i)),
                                    wait="consolidated")  # fmt: skip
            clock.advance(60)
        concept = (await engine.understanding(SCOPE))["items"][0]
        assert [delta.is_compact(r) for r in await _rows(store)] == [True, True]
        first = await engine.get_concept(SCOPE, concept["id"], as_of=START.strftime("%Y-%m-%dT%H:%M:%SZ"))
        assert first["version"] == 1 and "Oslo" not in first["summary"]
        [(head_key, raw)] = [kv async for kv in store.scan(prefix=b"C\x00")]
        head = jsoncodec.decode(raw)
        head["summary"] = head["summary"].replace("Oslo", "Lima")
        await store.write([Put(head_key, jsoncodec.encode(head))])
        with pytest.raises(Internal, match="cannot be read"):
            await engine.get_concept(SCOPE, concept["id"], as_of=START.strftime("%Y-%m-%dT%H:%M:%SZ"))
    await store.close()


async def _still_or_back(store, chain: int, steps: list[float]) -> tuple[list, list, dict]:
    """Five writes that each revise Acme's concept, the clock moved by ``steps`` after each (0:
    standing still, negative: stepped back).  The ``CV`` rows' keys and versions in key order, the
    current version's number and recorded_from, and every read as of each write's moment."""
    clock = ManualClock(START)
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", understanding_version_chain=chain)
    moments: list[str] = []
    async with cortexdb.open_engine("memory", config=config, clock=clock, id_seed=7, store=store) as engine:
        for i, (predicate, value) in enumerate([("seat_count", 100), ("hq", "Oslo"), ("ceo", "Ann"),
                                                ("ceo", "Bo"), ("likes", "tea")]):  # fmt: skip
            await engine.experience(_triple("Acme", predicate, value, START + dt.timedelta(minutes=i)),
                                    wait="consolidated")  # fmt: skip
            moments.append(clock.now().strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
            clock.advance(steps[i])
        rows = [(key, jsoncodec.decode(value)["version"]) async for key, value in store.scan(prefix=CV)]
        [head] = (await engine.understanding(SCOPE))["items"]
        reads = await _everything(engine, moments)
    return rows, [head["version"], head["recorded_from"]], reads


@pytest.mark.parametrize("steps", [[60, 60, 0, 0, 0], [60, 60, -30, 0, 10]], ids=["standing", "stepped-back"])
async def test_versions_close_in_order_when_the_clock_stands_still_or_steps_back(factory, steps, tmp_path):
    """Two commits at one clock reading closed two versions under one ``CV`` key, and a clock
    stepped back sorted a newer row before an older one: each broke the compact chain (reads of
    the older versions answered 500, a pinned recall lost the scope).  Rows are now keyed past a
    concept's last one (``ConceptVersions.key_moment``), so every version keeps its row, in
    order, and compact rows read as whole ones do."""
    answers = {}
    for chain in (1, 16):
        opened = factory if chain == 1 or not isinstance(factory, LevelDBFactory) else LevelDBFactory(str(tmp_path / "c16"))
        store = await opened.open()
        try:
            answers[chain] = await _still_or_back(store, chain, steps)
        finally:
            await store.close()
    rows, (version, _), reads = answers[16]
    assert [v for _, v in rows] == list(range(1, version))  # every closed version, in key order
    assert len({key for key, _ in rows}) == len(rows) and version == 5  # each write a revision
    assert answers[1][0] == [] or [v for _, v in answers[1][0]] == list(range(1, version))
    assert answers[1][1:] == answers[16][1:]  # the head and every as-of read, as whole rows give


def test_a_version_stamp_reads_back_as_its_moment():
    """``ConceptVersions.key_moment`` reads the last row's stamp back (``keys.stamp_moment``)."""
    from cortexdb.engine.storage import keys

    for moment in (START, START + dt.timedelta(microseconds=1), dt.datetime(1999, 12, 31, 23, 59, 59, 999_999, tzinfo=dt.UTC)):
        assert keys.stamp_moment(keys.version_stamp(moment)) == moment
