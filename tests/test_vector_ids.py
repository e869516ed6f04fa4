"""Sealed vector segments keep their ids as sorted bytes in one numpy array (vector_ids.py;
docs/decisions.md, "Vector ids as sorted bytes"): the same answers as the exact delta, no Python
object per sealed vector, removals during a seal, a forget, and a restart."""

from __future__ import annotations

import gc
import threading
import tracemalloc

import numpy as np
import pytest
import trio

import cortexdb
from cortexdb import EngineConfig
from cortexdb.engine.forget import ops
from cortexdb.engine.retrieve.vector_ids import SortedIds, encode
from cortexdb.engine.retrieve.vector_index import VectorIndex

from .conftest import envelope
from .test_soak_memory import _same, _unit

SCOPE = "org:acme/user:alice"


def test_sorted_ids_find_spans_and_read_back():
    names = ["evt_b#p10", "evt_b", "fact_a", "evt_b#p2", "évt_ü", "evt_\udc80x", "a"]
    ids, order = SortedIds.sort(names)
    assert list(ids) == sorted(names) and [names[i] for i in order] == sorted(names)
    assert ids.keys.dtype.kind == "S" and ids.keys.dtype.itemsize == max(len(encode(n)) for n in names)
    for position, name in enumerate(sorted(names)):
        assert ids[position] == name and ids.find(encode(name)) == position
    for missing in ("evt_", "evt_b#p1", "evt_b#p100", "zz", ""):
        assert ids.find(encode(missing)) == -1
    start, stop = ids.span("evt_")
    assert [ids[p] for p in range(start, stop)] == sorted(n for n in names if n.startswith("evt_"))
    assert ids.span("q") == (len([n for n in names if n < "q"]),) * 2
    assert list(np.flatnonzero(~ids.mask(["fact_", "a"]))) == [0, len(names) - 2]
    empty, _ = SortedIds.sort([])
    assert len(empty) == 0 and empty.find(b"x") == -1 and empty.span("x") == (0, 0)


def test_an_id_ending_in_nul_is_refused():
    index = VectorIndex(4)
    with pytest.raises(ValueError, match="NUL"):
        index.add("evt_1\x00", np.ones(4, dtype=np.float32) / 2)
    assert len(index) == 0


def _name(i: int) -> str:
    """Ids of several lengths, not in the order they are added, some passages and non-ASCII."""
    key = (i * 7919) % 100_003
    return [f"evt_{key}", f"evt_{key}#p{i % 12}", f"evt_é{key:x}"][i % 3]


@pytest.mark.parametrize("sealed", ["ivf", "annoy"])
@pytest.mark.parametrize("dtype", ["float16", "int8"])
async def test_answers_match_the_exact_delta_with_removals_and_overwrites(tmp_path, sealed, dtype):
    rng = np.random.default_rng(31)
    vectors, fresh = _unit(rng, 2400, 24), _unit(rng, 2400, 24)
    index = VectorIndex(24, segment_size=500, dtype=dtype, directory=str(tmp_path), run_rows=96, sealed=sealed)
    exact = VectorIndex(24, segment_size=1_000_000, dtype=dtype)  # every vector in the delta
    names = [_name(i) for i in range(len(vectors))]
    for i, vector in enumerate(vectors):
        for target in (index, exact):
            target.add(names[i], vector)
            if i % 7 == 3:
                target.remove(names[int(i * 0.61)])
            if i % 11 == 5:  # a new vector for an older id, wherever it is by now
                target.add(names[int(i * 0.43)], fresh[i])
        if index.needs_seal or index.needs_merge:
            await index.seal()
            await index.merge()
    assert max(index.segment_sizes) >= 500 and len(index._delta_ids) < 96 + 40
    assert len(index) == len(exact) and all((n in index) == (n in exact) for n in names)
    for segment in index._segments:
        keys = segment.ids.keys
        assert keys.dtype.kind == "S" and (keys[:-1] < keys[1:]).all()  # sorted and distinct
    for q in range(0, 2400, 97):
        _answers(index, exact, vectors[q], dtype, sealed)
    some = names[::13] + ["evt_missing"]
    got, want = index.vectors(some), exact.vectors(some)
    assert list(got) == list(want) and all(np.array_equal(got[k], want[k]) for k in got)
    assert all(np.array_equal(index.vector(n), exact.vector(n)) for n in names[::29] if n in exact)
    await index.rewrite()
    await exact.rewrite()
    assert not any(segment.dead for segment in index._segments) and len(index) == len(exact)
    for q in range(5, 2400, 301):
        _answers(index, exact, vectors[q], dtype, sealed)


def _answers(index, exact, query, dtype, sealed):
    """IVF segments this small are probed whole: the exact answer.  annoy is approximate and
    scores with its own float32 distances: live ids only, their cosines, nearly the exact top."""
    got, want = index.search(query, 12), exact.search(query, 12)
    if sealed == "ivf":
        return _same(got, want, dtype)
    assert len({d for d, _ in got} & {d for d, _ in want}) >= 10
    for doc_id, score in got:
        assert score == pytest.approx(float(exact.vector(doc_id) @ query), abs=5e-3)


async def test_an_id_written_again_while_its_removed_row_is_sealed_is_kept(tmp_path):
    """A delta row removed before a seal, then written again while the seal builds: the new vector
    stays in the delta (it is not in the segment being built); a sealed row overwritten meanwhile
    is dead in the segment, its new vector in the delta."""
    rng = np.random.default_rng(3)
    vectors = _unit(rng, 70, 8)
    index = VectorIndex(8, segment_size=1000, dtype="float16", directory=str(tmp_path), run_rows=64, sealed="ivf")
    for i in range(64):
        index.add(f"evt_{i:03d}", vectors[i])
    index.remove("evt_005")
    index.remove("evt_006")
    entered, release, build = threading.Event(), threading.Event(), index._build

    def held_build(rows):  # the seal's build, in its thread, held until the writes below are done
        entered.set()
        release.wait()
        return build(rows)

    index._build = held_build
    async with trio.open_nursery() as nursery:
        nursery.start_soon(index.seal)
        await trio.to_thread.run_sync(entered.wait)
        index.add("evt_005", vectors[65])  # removed, now written again
        index.add("evt_007", vectors[66])  # sealed live, overwritten meanwhile: dead in the segment
        index.add("evt_100", vectors[67])  # new
        release.set()
    assert index.segment_sizes == [62] and sorted(index._delta_ids) == ["evt_005", "evt_007", "evt_100"]
    assert len(index) == 64 and "evt_006" not in index
    for name, row in (("evt_005", 65), ("evt_007", 66), ("evt_100", 67), ("evt_008", 8)):
        assert index.search(vectors[row], 1)[0][0] == name
        assert np.allclose(index.vector(name), vectors[row], atol=1e-3)


async def test_a_sealed_vector_costs_no_python_objects(tmp_path):
    """What the index allocates per sealed vector (tracemalloc counts numpy's buffers too), the
    index the only holder of its ids: the id's bytes and dead flag, its positions in an IVF
    segment, the sketch's figures.  68 bytes a vector measured here; 216 with the previous
    representation (a str, two dict entries and a list slot each), by the same measure."""
    rng = np.random.default_rng(9)
    count, dimension = 24_000, 8
    vectors = _unit(rng, count, dimension)
    keys = rng.integers(0, 2**31, (count, 2)).tolist()
    warm = VectorIndex(dimension, segment_size=64, dtype="float16", directory=str(tmp_path), run_rows=16, sealed="ivf")
    await _fill(warm, vectors[:200])  # every module the index imports, imported before tracing
    gc.collect()
    tracemalloc.start()
    try:
        index = VectorIndex(dimension, segment_size=8000, dtype="float16", directory=str(tmp_path),
                            run_rows=1024, sealed="ivf")  # fmt: skip
        await _fill(index, vectors, [f"evt_{i:08x}-0000-7000-8000-{j:012x}" for i, j in keys])
        gc.collect()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(index) == count and not index._delta_ids and sum(index.segment_sizes) == count
    delta = 1024 * (2 * dimension + 3) + 64 * 1024  # the delta's arrays (emptied) and small change
    assert held - delta < 100 * count, held / count


async def _fill(index, vectors, names=None):
    names = names if names is not None else [f"evt_{i}" for i in range(len(vectors))]
    for i, vector in enumerate(vectors):
        index.add(names[i], vector)
        names[i] = None  # the index holds the only reference to its id
        if index.needs_seal or index.needs_merge:
            await index.seal()
            await index.merge()
    await index.seal()


async def test_forget_and_restart_keep_the_sorted_ids(tmp_path, clock):
    """On a data dir: deleted events leave every segment (rewritten), and a reopened engine
    rebuilds segments holding the same live ids with the same vectors."""
    path = str(tmp_path / "data")
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", vector_run_rows=8,
                          vector_segment_size=24)  # fmt: skip
    texts = [f"Note {i}: I met {['Ana', 'Bo', 'Cy'][i % 3]} in {['Oslo', 'Rome'][i % 2]} about {i}" for i in range(70)]

    async def live(engine):
        index = engine._supervisor.actor(SCOPE).lane.state.vector_index._indexes["evt_"]
        async with index._builds:  # a background seal or merge under way has finished
            pass
        ids = {d for s in index._segments for p, d in enumerate(s.ids) if p not in s.dead}
        ids |= {d for i, d in enumerate(index._delta_ids) if index._delta_live[i]}
        held = {d for s in index._segments for d in s.ids} | set(index._delta_ids)
        return index, ids, held

    async with cortexdb.open_engine("leveldb", path=path, config=config, id_seed=3, clock=clock) as engine:
        events = []
        for i, text in enumerate(texts):
            done = await engine.experience(envelope(text, observed_at=f"2026-05-13T15:{i // 60:02d}:{i % 60:02d}Z"))
            events.append(done.event_id)
        await engine.flush(SCOPE, seal=True)
        assert await ops.delete_events(engine, SCOPE, events[10:13]) == 3
        index, before, held = await live(engine)
        assert index._segments and not set(events[10:13]) & held  # gone, not filtered at query time
        assert set(events) - set(events[10:13]) <= before
        vectors = index.vectors(sorted(before))
    async with cortexdb.open_engine("leveldb", path=path, config=config, id_seed=4, clock=clock) as engine:
        await engine.flush(SCOPE, seal=True)
        index, after, _ = await live(engine)
        assert after == before and index._segments
        again = index.vectors(sorted(after))
        assert all(np.array_equal(again[d], vectors[d]) for d in after)
