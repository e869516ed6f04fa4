"""A flat run's int8 sketch (retrieve/vector_sketch.py): the search through it answers what the
exact scan answers, score for score, and equal scores are kept by id, not by chance."""

from __future__ import annotations

import numpy as np
import pytest
import trio

from cortexdb.engine.retrieve import vector_sketch
from cortexdb.engine.retrieve.vector_index import VectorIndex
from cortexdb.engine.retrieve.vector_runs import DeltaRows, FlatRun, scores, top

DIM = 64

pytestmark = pytest.mark.skipif(not vector_sketch.usable(), reason="SimSIMD's float16 kernel accumulates in float16 here")


def _clustered(rng: np.random.Generator, count: int) -> np.ndarray:
    """Unit float16 rows around a few centres (close scores), with exact duplicates."""
    centres = rng.standard_normal((8, DIM))
    rows = centres[rng.integers(0, 8, count)] + 0.6 * rng.standard_normal((count, DIM))
    rows[10:20] = rows[3]  # ten copies of one row: ties at every limit
    return (rows / np.linalg.norm(rows, axis=1)[:, None]).astype(np.float16)


def _runs(tmp_path, rows: np.ndarray) -> tuple[FlatRun, FlatRun]:
    source = DeltaRows(rows, np.zeros(0, np.float32), list(range(len(rows))), "float16")
    plain = FlatRun.write(str(tmp_path), DIM, "float16", source)
    sketched = FlatRun.write(str(tmp_path), DIM, "float16", source, sketch=True)
    assert plain.sketch is None and sketched.sketch is not None
    return plain, sketched


def test_every_exact_score_lies_within_its_bound_of_the_sketch_score() -> None:
    rng = np.random.default_rng(5)
    rows = _clustered(rng, 3000)
    small, scale, norms, errors = vector_sketch.encode(rows)
    for _ in range(20):
        query = rng.standard_normal(DIM).astype(np.float32)
        query /= np.linalg.norm(query)
        sketch_query = vector_sketch.Query(query.astype(np.float16))
        sketch = (small.astype(np.int64) @ sketch_query.int8[0].astype(np.int64)) * scale * sketch_query.b
        exact = np.asarray(scores(rows, None, query, "float16"), dtype=np.float64)
        bounds = sketch_query.bounds(norms, errors)
        assert np.all(np.abs(exact - sketch) <= bounds)
        assert float(np.max(bounds)) < 0.05  # tight enough to leave most rows out


@pytest.mark.parametrize("limit", [1, 5, 10, 28, 200])
def test_the_sketched_search_answers_what_the_exact_scan_answers(tmp_path, limit: int) -> None:
    rng = np.random.default_rng(limit)
    rows = _clustered(rng, 9000)  # more than two of the scan's blocks
    plain, sketched = _runs(tmp_path, rows)
    for trial in range(30):
        query = rows[3].astype(np.float32) if trial == 0 else rng.standard_normal(DIM).astype(np.float32)
        query /= np.linalg.norm(query)
        skip = rng.random(len(rows)) < 0.2 if trial % 3 == 1 else None
        expected = plain.nearest(query, limit, skip)
        assert sketched.nearest(query, limit, skip) == expected
        assert len(expected) >= limit
    plain.unload()
    sketched.unload()


def test_top_keeps_every_value_tied_with_the_last() -> None:
    values = np.array([0.5, 0.9, 0.7, 0.7, -np.inf, 0.7, 0.1])
    assert top(values, 2).tolist() == [1, 2, 3, 5]
    assert top(values, 1).tolist() == [1]
    assert top(values, 10).tolist() == [0, 1, 2, 3, 5, 6]  # never a left-out row
    names = ["g", "a", "f", "c", "x", "b", "e"]
    assert top(values, 2, names.__getitem__).tolist() == [1, 5]  # of the 0.7s, id "b" first
    assert top(values, 3, names.__getitem__).tolist() == [1, 3, 5]


def test_many_equal_rows_cost_no_more_than_the_limit(tmp_path) -> None:
    """A thousand copies of one vector: a run gives back ``limit`` of them, the smallest ids,
    with or without its sketch."""
    rng = np.random.default_rng(11)
    rows = _clustered(rng, 3000)
    rows[1000:2000] = rows[3]
    plain, sketched = _runs(tmp_path, rows)
    ids = [f"evt_{(i * 7919) % 3000:05d}" for i in range(len(rows))]
    query = rows[3].astype(np.float32)
    query /= np.linalg.norm(query)
    expected = sorted(range(len(rows)), key=lambda i: (-float(rows[i].astype(np.float32) @ query), ids[i]))
    for run in (plain, sketched):
        found = run.nearest(query, 5, None, ids)
        assert len(found) == 5
        assert {ids[p] for p, _ in found} == {ids[i] for i in expected[:5]}
        assert sorted(ids[p] for p, _ in found) == sorted(ids[i] for i in [3, *range(10, 20), *range(1000, 2000)])[:5]
    plain.unload()
    sketched.unload()


def test_equal_vectors_are_kept_by_id_wherever_they_are(tmp_path) -> None:
    """Twelve copies of one vector, some sealed into runs and some in the delta: the best three
    are the three smallest ids, whatever order they were added in."""

    async def main() -> None:
        rng = np.random.default_rng(9)
        index = VectorIndex(DIM, dtype="float16", directory=str(tmp_path), chunk_rows=16, run_rows=16, segment_size=10_000)
        same = rng.standard_normal(DIM).astype(np.float32)
        same /= np.linalg.norm(same)
        ids = [f"evt_{i:03d}" for i in range(60)]
        copies = set(rng.choice(60, 12, replace=False).tolist())
        for i in rng.permutation(60).tolist():
            other = rng.standard_normal(DIM).astype(np.float32)
            index.add(ids[i], same if i in copies else other / np.linalg.norm(other))
            if index.needs_seal:
                await index.seal()
        assert index.segment_sizes and len(index._delta_ids)  # runs and a delta both hold copies
        found = index.search(same, 3)
        assert [doc_id for doc_id, _ in found] == sorted(ids[i] for i in copies)[:3]

    trio.run(main)


@pytest.mark.parametrize("limit", [1, 10, 40])
def test_the_first_pass_shortlists_the_rows_the_plain_shortlist_does(limit: int) -> None:
    """``shortlist_of`` computes bounds only near the best sketch scores: the same rows as
    bounding every row, with dead rows (-inf), exact duplicates, and fewer live rows than asked."""
    rng = np.random.default_rng(100 + limit)
    rows = _clustered(rng, 5000)
    small, scale, norms, errors = vector_sketch.encode(rows)
    for trial in range(40):
        query = rows[3].astype(np.float32) if trial == 0 else rng.standard_normal(DIM).astype(np.float32)
        query /= np.linalg.norm(query)
        sketch_query = vector_sketch.Query(query.astype(np.float16))
        found = (small.astype(np.int64) @ sketch_query.int8[0].astype(np.int64)) * scale.astype(np.float64) * sketch_query.b
        if trial % 4 == 1:
            found[rng.random(len(found)) < 0.5] = -np.inf
        if trial % 4 == 2:  # fewer live rows than the limit (or just above it)
            found[rng.permutation(len(found))[limit + trial % 3 - 1 :]] = -np.inf
        cut = slice(0, 300) if trial % 4 == 3 else slice(None)  # a short run: no first pass
        expected = vector_sketch.shortlist(found[cut], sketch_query.bounds(norms[cut], errors[cut]), limit)
        got = vector_sketch.shortlist_of(found[cut], sketch_query, norms[cut], errors[cut], limit)
        assert got.tolist() == expected.tolist()
        assert len(got) >= min(limit, int(np.isfinite(found[cut]).sum()))
