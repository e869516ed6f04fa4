"""Memory that stays flat under a long write load (issue 10, part 8; docs/decisions.md, "Soak
memory"): bounded caches of derived records, vector runs sealed out of the heap into files."""

import os

import numpy as np
import pytest

import cortexdb
from cortexdb import EngineConfig
from cortexdb.engine.retrieve.layered import LayeredVectorIndex, scope_folder
from cortexdb.engine.retrieve.vector_index import VectorIndex
from cortexdb.engine.retrieve.vector_runs import FlatRun

from .conftest import envelope

TEXTS = [
    "I live in Paris.", "My sister lives in Lisbon.", "I work at Acme.", "I live in Berlin.",
    "My favorite color is blue.", "My brother works at Globex.", "I live in Rome.",
    "My favorite color is green.", "My sister lives in Madrid.", "I work at Initech.",
    "My dog is called Rex.", "I live in Paris.", "My brother works at Acme.",
    "My favorite food is ramen.", "My dog is called Max.", "I work at Acme.",
]  # fmt: skip


def _open(backend, path, clock, **settings):
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", **settings)
    if backend == "memory":
        return cortexdb.open_engine("memory", clock=clock, id_seed=7, config=config)
    return cortexdb.open_engine("leveldb", path=str(path), clock=clock, id_seed=7, config=config)


async def _history(backend, path, clock, **settings):
    """Write TEXTS one by one, then read every fact and belief (superseded ones too)."""
    async with _open(backend, path, clock, **settings) as engine:
        for text in TEXTS:
            clock.advance(60)
            await engine.experience(envelope(text), wait="consolidated")
        scope = "org:acme/user:alice"
        facts = await engine.facts(scope, include_superseded=True, limit=1000)
        beliefs = await engine.beliefs(scope, limit=1000)
        pack = await engine.recall({"scope": scope, "query": "where does my sister live"})
        states = [lane.work.state for lane in _lanes(engine)]
        return facts, beliefs, pack, states


def _lanes(engine):
    handles = engine._ctx.supervisor._handles.values()
    return [handle.actor.lane for handle in handles if handle.actor is not None]


async def test_a_tiny_derived_cache_derives_the_same_records(backend, tmp_path, clock):
    base = await _history(backend, tmp_path / "a", clock.__class__("2026-05-13T15:42:09Z"))
    tiny = await _history(backend, tmp_path / "b", clock.__class__("2026-05-13T15:42:09Z"),
                          derived_cache_records=2)  # fmt: skip
    assert base[0] == tiny[0]  # facts, supersession included
    assert base[1] == tiny[1]  # beliefs
    assert len(base[0]["items"]) >= 8 and base[1]["items"]
    assert base[2]["context_block"] == tiny[2]["context_block"] and base[2]["layers"] == tiny[2]["layers"]
    for state in tiny[3]:  # the bound held at the end of every batch
        assert len(state.facts) <= 2 and len(state.beliefs) <= 2 and len(state.belief_by_id) <= 2
    assert any(len(state.facts) > 2 for state in base[3])  # the default keeps them all here


MOVES = ["I live in Paris.", "My favorite color is blue.", "I live in Berlin.", "I really love chess.",
         "My favorite color is green.", "I live in Rome.", "I really love sailing.", "I live in Paris.",
         "My favorite color is red.", "I live in Oslo."]  # fmt: skip


async def test_the_lane_keeps_only_current_facts_and_open_beliefs_decoded(backend, tmp_path, clock):
    """At the end of every batch the facts no longer current and the beliefs whose claim closed
    leave the lane's decoded cache whatever its bound (``cache_bounds._drop_closed``), and the
    full pair lists go (only a forget or a cancel reads them): what derivation consults stays."""
    scope = "org:acme/user:alice"
    async with _open(backend, tmp_path, clock) as engine:
        for day, text in enumerate(MOVES):
            clock.advance(60)
            await engine.experience(envelope(text, observed_at=f"2026-05-{day + 1:02d}T10:00:00Z"),
                                    wait="consolidated")  # fmt: skip
        facts = (await engine.facts(scope, include_superseded=True, limit=1000))["items"]
        beliefs = (await engine.beliefs(scope, limit=1000))["items"]
        (state,) = [lane.work.state for lane in _lanes(engine)]
        closed = {f["id"] for f in facts if f.get("recorded_to")}  # heads of superseded facts
        current = {f["id"] for f in facts} - closed
        assert len(closed) >= 5 and len(current) == 4  # a city, a color, two loves
        assert state.facts.keys() == current
        assert {b.id for b in state.beliefs.values()} == {b["id"] for b in beliefs} == state.belief_by_id.keys()
        assert all(b.valid_to is None for b in state.beliefs.values())
        assert not state.fact_ids and set().union(*state.current.values()) == current


CITIES = ["Paris", "Berlin", "Rome", "Oslo", "Madrid", "Lisbon", "Vienna", "Prague"]


async def _cities(backend, path, clock, **settings):
    """Live in each city in turn, twice over; the facts (every version) and the resolver."""
    async with _open(backend, path, clock, **settings) as engine:
        for day, city in enumerate(CITIES * 2):
            clock.advance(60)
            await engine.experience(envelope(f"I live in {city}.", observed_at=f"2026-05-{day + 1:02d}T10:00:00Z"),
                                    wait="consolidated")  # fmt: skip
        facts = await engine.facts("org:acme/user:alice", include_superseded=True, limit=1000)
        return facts["items"], engine._ctx.entities


async def test_the_entity_cache_is_bounded_and_resolves_the_same_entities(backend, tmp_path, clock):
    """``entity_cache_max``: the resolver keeps at most that many entities and aliases decoded
    (the oldest stored ones go); one dropped is read again, so a city named again is the same
    entity as before, and the facts are those of an unbounded cache."""
    start = "2026-05-13T15:42:09Z"
    wide, _ = await _cities(backend, tmp_path / "a", clock.__class__(start))
    narrow, resolver = await _cities(backend, tmp_path / "b", clock.__class__(start), entity_cache_max=2)
    assert narrow == wide
    objects = {f["object"]["name"]: f["object"]["id"] for f in narrow}
    assert len(objects) == len(CITIES) and len(set(objects.values())) == len(CITIES)
    assert len(resolver._entities) <= 2 and len(resolver._by_alias) <= 2


# -- vector runs: the delta sealed into flat files, scored exactly -----------------------------


def _unit(rng, n, d):
    m = rng.normal(size=(n, d)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


async def _load(index, vectors, rng_seed=5):
    """Adds with removals and overwrites mixed in; seals (and merges) whenever due."""
    rng = np.random.default_rng(rng_seed)
    fresh = _unit(rng, len(vectors), vectors.shape[1])  # no two ids share a vector: no exact ties
    for i, vector in enumerate(vectors):
        index.add(f"evt_{i}", vector)
        if i % 7 == 3:
            index.remove(f"evt_{int(rng.integers(0, i))}")
        if i % 11 == 5:  # a new vector for an older id (in a run by now, or in the delta)
            index.add(f"evt_{int(rng.integers(0, i))}", fresh[i])
        if index.needs_seal or index.needs_merge:
            await index.seal()
            await index.merge()


def _same(got, want, dtype):
    """The same ids in the same order; the same scores (float32's BLAS may round the last bit
    differently for matrices of another shape; SimSIMD's float16 and int8 kernels do not)."""
    assert [d for d, _ in got] == [d for d, _ in want]
    if dtype == "float32":
        assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-6)
    else:
        assert got == want


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
async def test_runs_answer_exactly_what_the_delta_answers(tmp_path, dtype):
    rng = np.random.default_rng(11)
    vectors = _unit(rng, 900, 32)
    folder = str(tmp_path / "vector-segments")
    runs = VectorIndex(32, segment_size=100_000, dtype=dtype, directory=folder, run_rows=64, chunk_rows=64)
    delta = VectorIndex(32, segment_size=100_000, dtype=dtype)  # everything in the exact delta
    await _load(runs, vectors)
    await _load(delta, vectors)
    assert len(runs.segment_sizes) >= 2 and sum(runs.segment_sizes) >= 700  # sealed and merged
    assert all(isinstance(s.index, FlatRun) for s in runs._segments)
    assert len(runs._delta_ids) < 64 + 11 and len(runs._delta) <= 128  # the delta stays small
    assert os.listdir(folder) == []  # the files are unlinked once open
    assert len(runs) == len(delta)
    for q in range(25):
        query = vectors[q * 13]
        _same(runs.search(query, 10), delta.search(query, 10), dtype)
        _same(runs.search(query, 5, prefixes=("evt_",)), delta.search(query, 5, prefixes=("evt_",)), dtype)
    for doc_id in ("evt_1", "evt_400", "evt_899"):
        got, want = runs.vector(doc_id), delta.vector(doc_id)
        assert (got is None and want is None) or np.array_equal(got, want)
    rebuilt = await runs.rewrite()  # a forget: every run holding a dead row is rewritten
    assert rebuilt >= 1 and not any(s.dead for s in runs._segments)
    for q in range(10):
        _same(runs.search(vectors[q * 17], 10), delta.search(vectors[q * 17], 10), dtype)


async def test_runs_merge_into_an_annoy_segment_at_segment_size(tmp_path):
    rng = np.random.default_rng(3)
    vectors = _unit(rng, 700, 24)
    index = VectorIndex(24, segment_size=256, trees=10, dtype="float16", directory=str(tmp_path), run_rows=64)
    for i, vector in enumerate(vectors):
        index.add(f"evt_{i}", vector)
        if index.needs_seal or index.needs_merge:
            await index.seal()
            await index.merge()
    kinds = [isinstance(s.index, FlatRun) for s in index._segments]
    assert False in kinds and max(index.segment_sizes) >= 256  # an annoy segment
    assert all(size < 256 for size, flat in zip(index.segment_sizes, kinds, strict=True) if flat)
    assert len(index) == 700
    for i in (0, 333, 699):
        assert index.search(vectors[i], 1)[0][0] == f"evt_{i}"
        assert np.allclose(index.vector(f"evt_{i}"), vectors[i], atol=1e-3)


def test_the_engine_uses_runs_only_with_a_data_dir(tmp_path):
    layered = LayeredVectorIndex(8, segment_size=1000, trees=2, directory=None, run_rows=64)
    layered.add("evt_1", np.ones(8, dtype=np.float32) / np.sqrt(8))
    assert layered._indexes["evt_"].run_rows is None  # the memory backend keeps it all in memory
    on_disk = LayeredVectorIndex(8, segment_size=1000, trees=2, directory=str(tmp_path), run_rows=64)
    on_disk.add("evt_1", np.ones(8, dtype=np.float32) / np.sqrt(8))
    assert on_disk._indexes["evt_"].run_rows == 64


async def test_a_leveldb_engine_seals_runs_and_rebuilds_them_after_a_restart(tmp_path, clock):
    path = str(tmp_path / "data")
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", vector_run_rows=16)
    texts = [f"Note {i}: I met {['Ana', 'Bo', 'Cy'][i % 3]} in {['Oslo', 'Rome'][i % 2]} about {i}" for i in range(90)]  # fmt: skip
    query = {"scope": "org:acme/user:alice", "query": "Cy in Rome", "include": ["events"]}
    async with cortexdb.open_engine("leveldb", path=path, config=config, id_seed=3, clock=clock) as engine:
        for i, text in enumerate(texts):
            await engine.experience(envelope(text, observed_at=f"2026-05-13T15:{i // 60:02d}:{i % 60:02d}Z"))
        await engine.flush()
        lane = engine._supervisor._handles["org:acme/user:alice"].actor.lane
        events = lane.state.vector_index._indexes["evt_"]
        async with events._builds:  # a background seal or merge under way has finished
            pass
        await lane.state.vector_index.seal()  # whatever is still due
        assert events._segments and all(isinstance(s.index, FlatRun) for s in events._segments)
        before = await engine.recall(query)
    # nothing of a build left behind: only the scope's kept runs (tests/test_vector_reopen.py)
    assert os.listdir(os.path.join(path, "vector-segments")) == [scope_folder("org:acme/user:alice")]
    async with cortexdb.open_engine("leveldb", path=path, config=config, id_seed=3, clock=clock) as engine:
        await engine.flush()
        after = await engine.recall(query)
    # mapped again, or rebuilt: exact in the delta and in runs alike, so the same ranking
    assert [i["id"] for i in before["layers"]["events"]] == [i["id"] for i in after["layers"]["events"]]


async def test_runs_filter_by_prefix_like_the_delta(tmp_path):
    """A run holding ids of two kinds answers a prefixed search as the delta does (its id-prefix
    codes, made on the first prefixed search, leave the other kind out)."""
    rng = np.random.default_rng(17)
    vectors = _unit(rng, 400, 16)
    runs = VectorIndex(16, segment_size=100_000, dtype="float16", directory=str(tmp_path), run_rows=32)
    delta = VectorIndex(16, segment_size=100_000, dtype="float16")
    for index in (runs, delta):
        for i, vector in enumerate(vectors):
            index.add(f"{('evt', 'fct', 'epi')[i % 3]}_{i}", vector)
            if i % 9 == 4:
                index.remove(f"evt_{i - 1}" if (i - 1) % 3 == 0 else f"fct_{i - 1}")
            if index.needs_seal or index.needs_merge:
                await index.seal()
                await index.merge()
    assert len(runs.segment_sizes) >= 2 and all(isinstance(s.index, FlatRun) for s in runs._segments)
    for q in range(20):
        for prefixes in (("evt_",), ("fct_", "epi_"), ("nope_",), None):
            got = runs.search(vectors[q * 7], 8, prefixes=prefixes)
            _same(got, delta.search(vectors[q * 7], 8, prefixes=prefixes), "float16")
            assert prefixes is None or all(d.startswith(prefixes) for d, _ in got)


def _resident_kb_of_deleted_runs(folder: str) -> list[int]:
    """Rss of this process's mappings of unlinked ``.run`` files in ``folder`` (/proc/self/smaps)."""
    sizes, inside = [], False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5:  # a mapping's first line
                inside = folder in line and line.rstrip().endswith(".run (deleted)")
            elif inside and line.startswith("Rss:"):
                sizes.append(int(head[1]))
    return sizes


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="Linux: reads /proc/self/smaps")
async def test_a_run_is_not_resident_between_searches(tmp_path):
    """A search reads a run through a mapping and lets its pages go before it returns: the rows
    are in the page cache, not in the process's resident set (decisions.md, "Runs by default")."""
    rng = np.random.default_rng(23)
    vectors = _unit(rng, 3000, 64)
    index = VectorIndex(64, segment_size=100_000, dtype="float16", directory=str(tmp_path), run_rows=1024)
    for i, vector in enumerate(vectors):
        index.add(f"evt_{i}", vector)
        if index.needs_seal:
            await index.seal(merge=False)
    assert sum(index.segment_sizes) >= 2048
    for q in range(5):
        assert index.search(vectors[q], 1)[0][0] == f"evt_{q}"  # every run was scored
    mapped = _resident_kb_of_deleted_runs(str(tmp_path))
    assert len(mapped) == len(index.segment_sizes)  # the mappings stay, for the next search
    assert sum(mapped) == 0  # and none of their pages is resident


def test_runs_are_on_by_default():
    assert EngineConfig().vector_run_rows == 2048


def test_decoded_episodes_are_bounded_by_count_and_by_bytes():
    from cortexdb.engine.actors.episode_cache import DecodedEpisodes

    cache = DecodedEpisodes(most=3, most_bytes=100)
    for i in range(3):
        cache.put(f"ep_{i}", b"x" * 30, {"id": i})
    assert len(cache) == 3 and cache.bytes == 90
    cache.put("ep_3", b"y" * 30, {"id": 3})  # the count: the least recently used goes
    assert cache.get("ep_0", b"x" * 30) is None and len(cache) == 3
    assert cache.get("ep_1", b"x" * 30) == {"id": 1}  # now the most recently used
    cache.put("ep_4", b"z" * 60, {"id": 4})  # the bytes: ep_2 and ep_3 go, ep_1 (just used) stays
    assert (cache.get("ep_2", b"x" * 30), cache.get("ep_3", b"y" * 30)) == (None, None)
    assert cache.get("ep_1", b"x" * 30) == {"id": 1} and cache.bytes == 90
    assert cache.get("ep_4", b"changed" * 9) is None  # other stored bytes: a miss
    cache.put("ep_5", b"w" * 101, {"id": 5})  # larger than the budget: not kept
    assert cache.get("ep_5", b"w" * 101) is None and cache.bytes == 90
    cache.clear()
    assert len(cache) == 0 and cache.bytes == 0
