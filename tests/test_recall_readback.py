"""What recall reads per candidate (docs/decisions.md, "Recall at 100k: what a candidate costs"):
vectors read back in one pass per holder (a flat run kept beside each annoy segment of a data
dir), records judged on their stored wire form when the clip can keep only their current version,
concepts likewise."""

import datetime as dt
import os

import attrs
import numpy as np
import pytest

from cortexdb.engine import jsoncodec
from cortexdb.engine.actors import candidates, concept_queries
from cortexdb.engine.derive.visibility import Clip
from cortexdb.engine.model import Concept, to_wire
from cortexdb.engine.retrieve.layered import LayeredVectorIndex
from cortexdb.engine.retrieve.vector_index import VectorIndex
from cortexdb.engine.retrieve.vector_runs import FlatRun


def _unit(rng, count: int, dim: int) -> np.ndarray:
    vectors = rng.standard_normal((count, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


async def _filled(index: VectorIndex, vectors: np.ndarray, removed: set[int]) -> None:
    for i, vector in enumerate(vectors):
        index.add(f"evt_{i:05d}", vector)
        if index.needs_seal:
            await index.seal()
    for i in removed:
        index.remove(f"evt_{i:05d}")


@pytest.mark.parametrize("dtype", ["float16", "float32", "int8"])
async def test_annoy_segments_of_a_directory_keep_their_rows_beside_them(tmp_path, dtype):
    """Every sealed segment has its rows as stored in a flat run (an unlinked file); ``vectors``
    reads them back bit for bit what annoy holds and what ``vector`` gives, one holder at a
    time, and leaves removed ids out."""
    rng = np.random.default_rng(11)
    vectors = _unit(rng, 950, 16)
    folder = str(tmp_path / "vector-segments")
    index = VectorIndex(16, segment_size=300, trees=4, dtype=dtype, directory=folder, run_rows=100)
    await _filled(index, vectors, removed={3, 450})
    annoy = [s for s in index._segments if not isinstance(s.index, FlatRun)]
    assert annoy and len(index._delta_ids)  # merged into annoy segments, runs and a delta
    assert all(isinstance(s.rows, FlatRun) and len(s.rows) == len(s.ids) for s in index._segments)
    assert os.listdir(folder) == []  # every file unlinked once open
    ids = [f"evt_{i:05d}" for i in range(950)]
    got = index.vectors(ids[::-1])
    assert "evt_00003" not in got and "evt_00450" not in got and len(got) == 948
    for doc_id, row in got.items():
        assert row.dtype == np.float32 and np.array_equal(row, index.vector(doc_id))
    for segment in annoy:  # the flat run holds what annoy was built from
        for position in (0, len(segment.ids) // 2, len(segment.ids) - 1):
            stored = np.array(segment.index.get_item_vector(position), dtype=np.float32)
            assert np.array_equal(segment.rows.get_item_vector(position), stored)


async def test_merges_read_the_flat_runs_and_unload_them(tmp_path):
    """A merge of annoy segments reads the rows from their flat runs; the merged segment's rows
    are those of the segments it replaced, and the replaced runs are closed."""
    rng = np.random.default_rng(12)
    vectors = _unit(rng, 700, 12)
    index = VectorIndex(12, segment_size=100, trees=3, dtype="float16", directory=str(tmp_path))
    for i, vector in enumerate(vectors[:200]):
        index.add(f"evt_{i:05d}", vector)
        if index.needs_seal:
            await index.seal(merge=False)
    before = list(index._segments)
    assert len(before) == 2
    await index.merge()
    assert len(index._segments) == 1 and all(s.rows.fd == -1 for s in before)
    merged = index._segments[0]
    for position, doc_id in enumerate(merged.ids):
        row = merged.rows.get_item_vector(position)
        assert np.array_equal(row, vectors[int(doc_id[4:])].astype(np.float16).astype(np.float32))


async def test_without_a_directory_vectors_come_from_annoy_and_the_delta():
    """The memory backend's segments stay in memory without flat runs; ``vectors`` gives what
    ``vector`` gives."""
    rng = np.random.default_rng(13)
    vectors = _unit(rng, 500, 8)
    index = VectorIndex(8, segment_size=200, trees=3, dtype="int8")
    await _filled(index, vectors, removed={7})
    assert index.segment_sizes and all(s.rows is None for s in index._segments)
    got = index.vectors([f"evt_{i:05d}" for i in range(500)] + ["evt_nope"])
    assert len(got) == 499
    for doc_id, row in got.items():
        assert np.array_equal(row, index.vector(doc_id))
    layered = LayeredVectorIndex(8, segment_size=200, trees=3)
    layered.add("evt_a", vectors[0])
    layered.add("fact_b", vectors[1])
    both = layered.vectors(["fact_b", "evt_a", "ep_c"])
    assert set(both) == {"evt_a", "fact_b"} and np.allclose(both["fact_b"], vectors[1])


NOW = dt.datetime(2026, 5, 1, tzinfo=dt.UTC)


def _episode(version: int, recorded_from: str) -> dict:
    return {"id": "ep_1", "version": version, "recorded_from": recorded_from, "recorded_to": None,
            "started_at": "2026-04-01T00:00:00Z", "ended_at": "2026-04-02T00:00:00Z", "valid_to": None,
            "excluded_from_recall": False}  # fmt: skip


class _Structured(Exception):
    pass


async def test_a_revised_record_is_judged_on_its_wire_form_when_only_its_current_version_counts(monkeypatch):
    """A grown episode (version 3) read now: its current version, with no table read and nothing
    structured; as of a moment before it was recorded, its versions are structured and looked up."""

    def structured(*args):
        raise _Structured

    monkeypatch.setattr(candidates, "from_wire", structured)
    record = _episode(3, "2026-04-20T00:00:00Z")
    now = Clip.of(None, now=NOW)
    assert await candidates._version(None, "episodes", record, now) is record
    assert await candidates._version(None, "episodes", {**record, "excluded_from_recall": True}, now) is None
    assert await candidates._version(None, "episodes", {**record, "started_at": "2026-06-01T00:00:00Z"}, now) is None
    before = Clip.of(None, now=NOW, as_of=dt.datetime(2026, 4, 10, tzinfo=dt.UTC))
    with pytest.raises(_Structured):  # an older version may be the one held then
        await candidates._version(None, "episodes", record, before)
    with pytest.raises(_Structured):  # superseded versions asked for
        await candidates._version(None, "episodes", record, Clip.of(None, now=NOW, include_superseded=True))


class _Raw:
    def __init__(self, rows: dict[str, bytes]) -> None:
        self.rows = rows

    async def get(self, key: str) -> bytes | None:
        return self.rows.get(key)


class _Concepts:
    def __init__(self, concept: Concept) -> None:
        self.raw = _Raw({concept.id: jsoncodec.encode(to_wire(concept))})
        self.concept = concept

    async def get(self, key: str) -> Concept | None:
        return self.concept if key == self.concept.id else None


class _Tables:
    def __init__(self, concept: Concept) -> None:
        self.concepts = _Concepts(concept)


async def test_a_concept_candidate_is_its_stored_wire_form(monkeypatch):
    concept = Concept(id="concept_1", scope="org:a", name="Hiking", summary="Likes hiking.",
                      summary_embedding=[0.5, 0.5], supported_by={"facts": ["fact_1"], "beliefs": ["belief_1"]},
                      valid_from=NOW - dt.timedelta(days=3), recorded_from=NOW - dt.timedelta(days=2),
                      last_synthesized_at=NOW - dt.timedelta(days=1), stance="supported", confidence=0.8)  # fmt: skip
    tables = _Tables(concept)
    structure = concept_queries.from_wire

    def structured(*args):
        raise _Structured

    monkeypatch.setattr(concept_queries, "from_wire", structured)  # the current version: not structured
    got = await concept_queries.candidate(tables, "concept_1", Clip.of(None, now=NOW))
    assert got.record == to_wire(concept) and got.text == "Hiking. Likes hiking."
    assert got.links == ["fact_1", "belief_1"] and got.time == to_wire(concept)["last_synthesized_at"]
    assert (got.importance, got.confidence) == (0.8, 0.8)
    monkeypatch.setattr(concept_queries, "from_wire", structure)
    pinned = await concept_queries.candidate(tables, "concept_1", Clip.of(None, now=NOW, as_of=NOW))
    assert pinned.record == got.record and pinned.time == got.time  # the structured path agrees
    assert await concept_queries.candidate(_Tables(_deprecated(concept)), "concept_1", Clip.of(None, now=NOW)) is None
    assert await concept_queries.candidate(tables, "concept_2", Clip.of(None, now=NOW)) is None
    future = Clip.of(None, now=NOW - dt.timedelta(days=5))  # before it was recorded
    assert await concept_queries.candidate(_Tables(concept), "concept_1", future) is None


def _deprecated(concept: Concept) -> Concept:
    return attrs.evolve(concept, stance="deprecated")


async def test_recall_reads_the_vectors_back_on_every_backend(engine_factory):
    """An engine whose events are sealed into segments (and flat runs beside them on LevelDB):
    every event's vector read back in one pass is its stored vector (float16 in the index), and
    a recall of the sealed events ranks them with those vectors (MMR and cosines)."""
    import trio

    from cortexdb import EngineConfig

    from .conftest import envelope

    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", vector_segment_size=40,
                          vector_trees=5, vector_run_rows=16)  # fmt: skip
    scope = "org:acme/user:alice"
    texts = [f"Note {i}: I met {['Ana', 'Bo', 'Cy'][i % 3]} in {['Oslo', 'Rome'][i % 2]} about item {i}" for i in range(90)]  # fmt: skip
    async with engine_factory(config=config) as engine:
        items = [{k: v for k, v in envelope(t, observed_at=f"2026-05-13T15:{j // 60:02d}:{j % 60:02d}Z").items()
                  if k != "scope"} for j, t in enumerate(texts)]  # fmt: skip
        await engine.experience_bulk({"scope": scope, "items": items})
        await engine.flush()
        actor = engine._supervisor._handles[scope].actor
        with trio.fail_after(30):
            await actor.lane.index.vector_job_finished()  # the background seals and merges
        index = actor.lane.state.vector_index
        events = index._indexes["evt_"]
        assert events.segment_sizes  # sealed
        stored = {}
        async for event_id, vector in actor.tables.vectors.scan(starting_with="evt_"):
            stored[event_id] = vector
        assert len(stored) == 90
        got = index.vectors(list(stored))
        assert set(got) == set(stored)
        for event_id, vector in stored.items():
            assert np.array_equal(got[event_id], vector.astype(np.float16).astype(np.float32))
        pack = await engine.recall({"scope": scope, "query": "Cy in Rome", "include": ["events"]})
        ranked = pack["layers"]["events"]
        texts_ranked = [item["content"]["text"] for item in ranked[:3]]
        assert any("Cy in Rome" in text for text in texts_ranked), texts_ranked
