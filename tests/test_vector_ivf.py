"""Sealed vector segments as IVF lists over a flat run (vector_ivf.py; docs/decisions.md, "Sealed
vectors: IVF lists over a flat run"): the exact best of the probed lists, the same vectors back,
nothing resident between searches, and data dirs opened by an engine that sealed annoy segments."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import cortexdb
from cortexdb import EngineConfig
from cortexdb.engine.retrieve.layered import scope_folder
from cortexdb.engine.retrieve.vector_index import VectorIndex
from cortexdb.engine.retrieve.vector_ivf import IvfRun, lists_for
from cortexdb.engine.retrieve.vector_runs import scores

from .conftest import envelope
from .test_soak_memory import _load, _resident_kb_of_deleted_runs, _same


def _clustered(rng, count: int, dimension: int, centres: int = 40) -> np.ndarray:
    middle = rng.normal(size=(centres, dimension))
    rows = middle[rng.integers(0, centres, count)] + 0.6 * rng.normal(size=(count, dimension))
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


async def _fill(index: VectorIndex, vectors: np.ndarray, prefix: str = "evt_") -> None:
    for i, vector in enumerate(vectors):
        index.add(f"{prefix}{i}", vector)
        if index.needs_seal or index.needs_merge:
            await index.seal()
            await index.merge()
    await index.seal()


def _ivf_segments(index: VectorIndex) -> list[IvfRun]:
    return [s.index for s in index._segments if isinstance(s.index, IvfRun)]


def _exact(vectors: np.ndarray, query: np.ndarray, limit: int, ids=None) -> list[str]:
    """The best ``limit`` ids by the float16 kernel's cosines (ties by id), as the index ranks."""
    sims = scores(vectors.astype(np.float16), None, query, "float16")
    names = ids if ids is not None else [f"evt_{i}" for i in range(len(vectors))]
    ranked = sorted(range(len(vectors)), key=lambda i: (-float(sims[i]), names[i]))
    return [names[i] for i in ranked[:limit]]


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
async def test_probing_every_list_answers_what_the_delta_answers(tmp_path, dtype):
    """Segments small enough to be probed whole (``min_probe_rows``) answer exactly what the
    exact delta answers, removals and overwrites mixed in."""
    rng = np.random.default_rng(5)
    vectors = _clustered(rng, 1500, 32)
    ivf = VectorIndex(32, segment_size=512, dtype=dtype, directory=str(tmp_path), run_rows=128, sealed="ivf")
    delta = VectorIndex(32, segment_size=100_000, dtype=dtype)
    await _load(ivf, vectors)
    await _load(delta, vectors)
    assert _ivf_segments(ivf) and max(ivf.segment_sizes) >= 512
    assert os.listdir(str(tmp_path)) == []  # the files are unlinked once open
    for q in range(30):
        query = vectors[q * 41]
        _same(ivf.search(query, 10), delta.search(query, 10), dtype)
        _same(ivf.search(query, 4, prefixes=("evt_",)), delta.search(query, 4, prefixes=("evt_",)), dtype)


async def test_a_search_is_the_exact_best_of_its_probed_lists(tmp_path):
    rng = np.random.default_rng(8)
    vectors = _clustered(rng, 3000, 48)
    index = VectorIndex(48, segment_size=1000, dtype="float16", directory=str(tmp_path), run_rows=256, sealed="ivf")
    await _fill(index, vectors)
    for segment in index._segments:
        if isinstance(segment.index, IvfRun):
            segment.index.min_probe_rows, segment.index.probe_fraction = 64, 0.1
    ivf = [s for s in index._segments if isinstance(s.index, IvfRun)]
    assert ivf and len(ivf[0].index.centroids) == lists_for(len(ivf[0].ids))
    overlap = 0
    for q in range(40):
        query = vectors[q * 71]
        for segment in ivf:
            run: IvfRun = segment.index
            slots = np.concatenate([np.arange(a, b) for a, b in run.probed(query)])
            probed = run.order[slots]  # the segment's positions of the probed rows
            assert 0.1 * len(run) <= len(probed) < len(run)
            names = [segment.ids[p] for p in probed]
            want = _exact(vectors[[int(n[4:]) for n in names]], query, 5, names)
            got = [segment.ids[p] for p, _ in run.nearest(query, 5, None, segment.ids)]
            assert got == want
        overlap += len(set(_exact(vectors, query, 10)) & {d for d, _ in index.search(query, 10)})
    assert overlap / 400 >= 0.9  # a tenth of the rows probed finds most of the exact best


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
async def test_vectors_read_back_and_merges_keep_every_row(tmp_path, dtype):
    """Rows are stored in list order: ``vector``/``vectors`` map positions back, a merge of an
    IVF segment with runs reads its rows through that map, and removals and rewrites hold."""
    rng = np.random.default_rng(13)
    vectors = _clustered(rng, 2600, 24)
    ivf = VectorIndex(24, segment_size=600, dtype=dtype, directory=str(tmp_path), run_rows=100, sealed="ivf")
    delta = VectorIndex(24, segment_size=100_000, dtype=dtype)  # every vector in the exact delta
    await _fill(ivf, vectors)
    await _fill(delta, vectors)
    assert len(_ivf_segments(ivf)) >= 1 and max(ivf.segment_sizes) >= 1200  # merged after sealing
    for i in (0, 1, 599, 1234, 2599):
        assert np.array_equal(ivf.vector(f"evt_{i}"), delta.vector(f"evt_{i}"))
    some = [f"evt_{i}" for i in range(0, 2600, 37)]
    got, want = ivf.vectors(some), delta.vectors(some)
    assert list(got) == list(want) and all(np.array_equal(got[k], want[k]) for k in some)
    for i in range(0, 2600, 5):
        ivf.remove(f"evt_{i}")
    assert all(d != "evt_10" for d, _ in ivf.search(vectors[10], 10))
    assert await ivf.rewrite() >= 1 and not any(s.dead for s in ivf._segments)
    assert len(ivf) == 2600 - 520
    assert ivf.search(vectors[11], 1)[0][0] == "evt_11"
    assert ivf.vector("evt_10") is None and np.array_equal(ivf.vector("evt_11"), delta.vector("evt_11"))


async def test_prefixes_and_dead_rows_are_left_out(tmp_path):
    rng = np.random.default_rng(21)
    vectors = _clustered(rng, 1200, 16)
    index = VectorIndex(16, segment_size=400, dtype="float16", directory=str(tmp_path), run_rows=64, sealed="ivf")
    for i, vector in enumerate(vectors):
        index.add(f"{('evt', 'fct')[i % 2]}_{i}", vector)
        if index.needs_seal or index.needs_merge:
            await index.seal()
            await index.merge()
    assert _ivf_segments(index)
    index.remove("evt_100")
    for q in (100, 101, 500):
        assert all(d.startswith("fct_") for d, _ in index.search(vectors[q], 6, prefixes=("fct_",)))
        assert "evt_100" not in {d for d, _ in index.search(vectors[q], 6)}
    assert index.search(vectors[101], 1, prefixes=("fct_",))[0][0] == "fct_101"


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="Linux: reads /proc/self/smaps")
async def test_an_ivf_segment_is_not_resident_between_searches(tmp_path):
    rng = np.random.default_rng(2)
    vectors = _clustered(rng, 5000, 64)
    index = VectorIndex(64, segment_size=2048, dtype="float16", directory=str(tmp_path), run_rows=1024, sealed="ivf")
    await _fill(index, vectors)
    runs = _ivf_segments(index)
    assert runs
    for q in range(5):
        assert index.search(vectors[q * 999], 1)[0][0] == f"evt_{q * 999}"
    assert sum(_resident_kb_of_deleted_runs(str(tmp_path))) == 0  # the rows are page cache only
    # what stays in memory: centroids, the position maps and the sketch's figures
    assert all(run.heap_bytes() <= 20 * len(run) + (4 * 64 + 8) * (len(run.centroids) + 1) for run in runs)


def test_sealed_segments_setting():
    assert EngineConfig().vector_sealed == "ivf"
    with pytest.raises(ValueError):
        EngineConfig(vector_sealed="hnsw")
    with pytest.raises(ValueError):
        VectorIndex(8, sealed="hnsw")


async def test_a_data_dir_sealed_with_annoy_opens_with_ivf(tmp_path, clock):
    """Annoy segments are not kept across restarts (their files are unlinked once open): a data
    dir an engine sealed annoy segments in reopens under ``ivf``, which seals its own from the
    stored vectors (and keeps them: vector_files.py), and a recall finds the same events."""
    path = str(tmp_path / "data")
    texts = [f"Note {i}: I met {['Ana', 'Bo', 'Cy'][i % 3]} in {['Oslo', 'Rome'][i % 2]} about {i}" for i in range(80)]  # fmt: skip
    query = {"scope": "org:acme/user:alice", "query": "Cy in Rome", "include": ["events"]}
    kinds = []
    answers = []
    for sealed in ("annoy", "ivf"):
        config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", vector_run_rows=8,
                              vector_segment_size=32, vector_sealed=sealed)  # fmt: skip
        async with cortexdb.open_engine("leveldb", path=path, config=config, id_seed=3, clock=clock) as engine:
            if sealed == "annoy":
                for i, text in enumerate(texts):
                    await engine.experience(envelope(text, observed_at=f"2026-05-13T15:{i // 60:02d}:{i % 60:02d}Z"))
            await engine.flush()
            await engine.recall(query)  # the scope's actor is up (a reopened engine starts it here)
            lane = engine._supervisor._handles["org:acme/user:alice"].actor.lane
            events = lane.state.vector_index._indexes["evt_"]
            async with events._builds:  # a background seal or merge under way has finished
                pass
            # recalled once no build is under way: a recall racing a seal reads the exact delta
            answers.append(await engine.recall(query))
            kinds.append({type(s.index).__name__ for s in events._segments if len(s.ids) >= 32})
    assert kinds[0] == {"Annoy"} and kinds[1] == {"IvfRun"}
    assert os.listdir(os.path.join(path, "vector-segments")) == [scope_folder("org:acme/user:alice")]
    # an IVF segment this small is probed whole (min_probe_rows), and annoy's 50 trees over 80
    # vectors find every neighbour: the same events either way, with the same scores but for
    # precision (annoy keeps float32, IVF rescores in float16), so two events within 0.001 may
    # swap places (here 1.1462 against 1.1459).  The recall waits for the seals: one racing a
    # seal read the exact delta and made this test pass or fail by timing.
    scored = [{i["id"]: i["score"] for i in answer["layers"]["events"]} for answer in answers]
    assert scored[0].keys() == scored[1].keys()
    assert all(abs(scored[0][k] - scored[1][k]) < 1e-3 for k in scored[0])


def test_the_index_memory_benchmark_runs_on_a_slice():
    """bench/vector_memory.py on a tiny slice (so it never rots; no assertion on time)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run(
        [sys.executable, "bench/vector_memory.py", "--vectors", "3000", "--searches", "20", "--queries", "10",
         "--kind", "clustered", "--segment-size", "1000", "--run-rows", "256"],
        capture_output=True, text=True, timeout=600, cwd=root,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    for arm in ("ivf", "annoy"):
        line = re.search(rf"^ *{arm}: segments .*$", result.stdout, re.M)
        assert line, result.stdout
        assert re.search(r"after 20 searches [\d.-]+ MB .* KB per 1k vectors .* search wall p50 [\d.]+ .*"
                         r"overlap with exact [\d.]+, at least the exact k-th score [\d.]+", line.group(0))


@pytest.mark.parametrize("sealed", ["ivf", "annoy"])
async def test_sealing_a_delta_whose_rows_were_all_removed_builds_nothing(tmp_path, sealed):
    """A seal that finds every delta row removed (a forget before the background seal) empties
    the delta without building an empty segment (an empty IVF run cannot be trained or mapped)."""
    rng = np.random.default_rng(9)
    index = VectorIndex(16, segment_size=64, directory=str(tmp_path), run_rows=None, sealed=sealed)
    vectors = _clustered(rng, 40, 16)
    for i, vector in enumerate(vectors):
        index.add(f"evt_{i}", vector)
    for i in range(len(vectors)):
        index.remove(f"evt_{i}")
    await index.seal()
    assert index.segment_sizes == [] and len(index) == 0
    index.add("evt_new", vectors[0])
    await index.seal()
    assert [doc_id for doc_id, _ in index.search(vectors[0], 3)] == ["evt_new"]


def test_rows_are_assigned_to_lists_a_block_at_a_time_as_at_once():
    """The nearest centroid of each row, computed a block of rows at a time (bounded scratch),
    is the one the whole product gives."""
    from cortexdb.engine.retrieve import vector_ivf

    rng = np.random.default_rng(3)
    rows = _clustered(rng, vector_ivf.BLOCK * 2 + 77, 24)
    centroids = _clustered(rng, 50, 24)
    expected = np.argmax(rows @ centroids.T, axis=1)
    assert np.array_equal(vector_ivf._nearest_centroid(rows, centroids), expected)
