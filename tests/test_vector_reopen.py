"""Sealed vector segments kept under the data dir (retrieve/vector_files.py, vector_reopen.py):
a reopen maps them instead of rebuilding them, answers exactly what a rebuild answers, and
falls back to rebuilding whatever does not match the stored records (a corrupted or missing
file, a record erased or changed after the manifest).  LevelDB in a tmp dir, seeded ids, the
test clock; builds are counted, never timed."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

import cortexdb
from cortexdb import EngineConfig
from cortexdb.engine.forget import ops
from cortexdb.engine.retrieve import vector_files, vector_ivf, vector_segments
from cortexdb.engine.retrieve.layered import scope_folder

from . import reopen_scope
from .reopen_scope import SCOPE, answers, files_bytes, notes, settle, state


def config(**extra) -> EngineConfig:
    # segments of 40 rows, runs of 16: a 150-event scope has IVF segments (k-means) and runs, and
    # an IVF segment this small is probed whole (exact), so a rebuild answers the same
    return EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", vector_segment_size=40,
                        vector_run_rows=16, **extra)  # fmt: skip


@pytest.fixture
def open_at(tmp_path, clock):
    def opener(**extra):
        return reopen_scope.opener(tmp_path, clock, config(**extra))

    return opener


def folder(tmp_path) -> str:
    return str(tmp_path / "data" / "vector-segments" / scope_folder(SCOPE))


async def write(engine, count: int = 150) -> list[str]:
    return await reopen_scope.write(engine, notes(count))


def kept_names(tmp_path, layer: str = "evt") -> list[str]:
    with open(os.path.join(folder(tmp_path), layer, vector_files.MANIFEST)) as handle:
        return [entry["name"] for entry in json.load(handle)["segments"]]


@pytest.mark.parametrize("dtype", ["float16", "int8", "float32"])
async def test_a_reopen_maps_the_kept_segments_and_answers_as_a_rebuild(open_at, tmp_path, dtype):
    async with open_at(vector_dtype=dtype) as engine:
        await write(engine)
        before = await answers(engine)
        sizes = state(engine).vector_index._indexes["evt_"].segment_sizes
    assert max(sizes) >= 40 and kept_names(tmp_path)  # an IVF segment, kept
    trainings, builds = vector_ivf.TRAININGS[0], vector_segments.BUILDS[0]
    async with open_at(vector_dtype=dtype) as engine:
        reopened = await answers(engine)
        assert state(engine).vector_index._indexes["evt_"].segment_sizes == sizes  # mapped as they were
        assert vector_ivf.TRAININGS[0] == trainings  # no k-means at the reopen
        assert vector_segments.BUILDS[0] == builds  # nor any segment built
        counts = state(engine).vector_index.reopened
        assert counts["revived"] >= sum(sizes) and counts["refused"] == counts["changed"] == 0, counts
    assert reopened == before
    shutil.rmtree(tmp_path / "data" / "vector-segments")  # what a rebuild (main) starts from
    async with open_at(vector_dtype=dtype) as engine:
        rebuilt = await answers(engine)
        assert vector_ivf.TRAININGS[0] > trainings
    assert rebuilt == before


async def test_turned_off_every_open_rebuilds(open_at, tmp_path):
    async with open_at(vector_segments_kept=False) as engine:
        await write(engine, 60)
        before = await answers(engine)
    assert not os.path.exists(folder(tmp_path))
    builds = vector_segments.BUILDS[0]
    async with open_at(vector_segments_kept=False) as engine:
        assert await answers(engine) == before
    assert vector_segments.BUILDS[0] > builds


@pytest.mark.parametrize("damage", ["flip a byte of a run", "delete a sidecar", "truncate a run", "garbage manifest"])
async def test_a_corrupted_or_missing_file_is_rebuilt_not_served(open_at, tmp_path, damage):
    async with open_at() as engine:
        await write(engine)
        before = await answers(engine)
    layer = os.path.join(folder(tmp_path), "evt")
    name = kept_names(tmp_path)[0]
    run, side = os.path.join(layer, f"{name}.run"), os.path.join(layer, f"{name}.npz")
    if damage == "flip a byte of a run":
        with open(run, "r+b") as handle:
            handle.seek(100)
            byte = handle.read(1)
            handle.seek(100)
            handle.write(bytes([byte[0] ^ 0x40]))
    elif damage == "delete a sidecar":
        os.unlink(side)
    elif damage == "truncate a run":
        os.truncate(run, os.path.getsize(run) - 8)
    else:
        with open(os.path.join(layer, vector_files.MANIFEST), "w") as handle:
            handle.write("{not json")
    builds = vector_segments.BUILDS[0]
    async with open_at() as engine:
        assert await answers(engine) == before
        assert vector_segments.BUILDS[0] > builds  # the refused segment's rows sealed anew
    assert name not in kept_names(tmp_path)  # the damaged files are gone, not listed
    assert not os.path.exists(run) and not os.path.exists(side)


async def test_files_no_manifest_names_are_deleted_at_open(open_at, tmp_path):
    async with open_at() as engine:
        await write(engine, 60)
    layer = os.path.join(folder(tmp_path), "evt")
    stray = os.path.join(layer, "0123abcd.run")  # a build a crash cut short
    with open(stray, "wb") as handle:
        handle.write(b"\0" * 64)
    async with open_at() as engine:
        await answers(engine)
    assert not os.path.exists(stray)


def row_bytes(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype=np.float16).tobytes()


def kept_bytes(tmp_path) -> bytes:
    return files_bytes(folder(tmp_path), ".run")





async def test_an_erased_event_never_comes_back_through_a_kept_segment(open_at, tmp_path):
    async with open_at() as engine:
        ids = await write(engine)
        doomed = ids[3]
        vector = await state(engine).tables.vectors.get(doomed)
        assert row_bytes(vector) in kept_bytes(tmp_path)
        # a crash right after the erasure's records were written, before its segments were
        # rewritten: the manifest and files of before the erasure
        shutil.copytree(folder(tmp_path), tmp_path / "before")
        assert await ops.delete_events(engine, SCOPE, [doomed]) == 1
        assert row_bytes(vector) not in kept_bytes(tmp_path)  # rewritten without it, old files gone
    shutil.rmtree(folder(tmp_path))
    shutil.copytree(tmp_path / "before", folder(tmp_path))
    assert row_bytes(vector) in kept_bytes(tmp_path)
    async with open_at() as engine:
        found = await answers(engine)
        assert doomed not in state(engine).vector_index
        assert all(doomed not in [i for i, _ in layer] for pack in found for layer in pack.values())
    assert row_bytes(vector) not in kept_bytes(tmp_path)  # the open rewrote the segment without it


async def test_a_vector_changed_after_the_manifest_is_served_from_the_stored_record(open_at, tmp_path):
    other = np.zeros(384, dtype=np.float16)
    other[0] = 1.0
    async with open_at() as engine:
        ids = await write(engine)
        target = ids[5]
        tables = state(engine).tables
        assert not np.array_equal(await tables.vectors.get(target), other)
        await tables.write([tables.vectors.put_op(target, other)])  # behind the kept segment's back
    async with open_at() as engine:
        await settle(engine)
        assert np.array_equal(state(engine).vector_index.vector(target), other.astype(np.float32))
        assert state(engine).vector_index.reopened["changed"] == 1


async def test_the_memory_backend_keeps_nothing(clock):
    async with cortexdb.open_engine("memory", clock=clock, id_seed=7, config=config()) as engine:
        await write(engine, 60)
        assert all(index.persist is None for index in state(engine).vector_index.parts())


async def test_a_restores_backlog_of_runs_merges_like_a_binary_counter(tmp_path):
    """16 equal runs sealed without merging (a restore's) merge pairwise: each row rewritten
    log2(16) = 4 times, not absorbed one run at a time into one growing segment (15 merges of
    8, 12, ... 64 rows, and a k-means for each merge past ``segment_size``)."""
    from cortexdb.engine.retrieve.vector_index import VectorIndex

    index = VectorIndex(8, segment_size=1000, dtype="float16", directory=str(tmp_path), run_rows=4, sealed="ivf")
    built: list[int] = []
    build = index._build
    index._build = lambda rows: (built.append(len(rows)), build(rows))[1]
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((64, 8)).astype(np.float32)
    for i, vector in enumerate(vectors):
        index.add(f"evt_{i:04d}", vector / np.linalg.norm(vector))
        if index.needs_seal:
            await index.seal(merge=False)
    assert index.segment_sizes == [4] * 16
    built.clear()
    await index.merge()
    assert index.segment_sizes == [64]
    assert sorted(built) == [8] * 8 + [16] * 4 + [32] * 2 + [64]
    query = vectors[5] / np.linalg.norm(vectors[5])
    assert index.search(query, 1)[0][0] == "evt_0005"


async def test_a_released_scope_reopens_from_its_kept_segments(open_at, tmp_path):
    """A release (an idle scope let go) keeps the files; the next message maps them."""
    async with open_at() as engine:
        await write(engine)
        before = await answers(engine)
        names = kept_names(tmp_path)
        trainings = vector_ivf.TRAININGS[0]
        assert await engine._supervisor.release(SCOPE, drain=True)
        assert kept_names(tmp_path) == names
        assert await answers(engine) == before
        assert vector_ivf.TRAININGS[0] == trainings
        assert state(engine).vector_index.reopened["revived"] > 0


async def test_a_rebuild_deletes_the_kept_files_and_keeps_its_own(open_at, tmp_path):
    """A scope rebuild (its derived layers replayed) deletes the kept segments of before; the
    rebuilt index keeps its own, which the next open maps."""
    async with open_at() as engine:
        await write(engine)
        before = await answers(engine)
        old = set(kept_names(tmp_path))
        await engine.rebuild(SCOPE)
        rebuilt = await answers(engine)
        assert not old & set(kept_names(tmp_path))  # none of the old files is named any more
        layer = os.path.join(folder(tmp_path), "evt")
        assert not any(name.split(".")[0] in old for name in os.listdir(layer))  # nor left on disk
    assert rebuilt == before
    async with open_at() as engine:
        assert await answers(engine) == before
        assert state(engine).vector_index.reopened["revived"] > 0
