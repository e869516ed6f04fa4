"""Kept vector segments (retrieve/vector_files.py) never outlive what they hold: with kept
segments turned off, a scope's old folder goes at its open (else an erasure could not reach the
vectors in it), and a build that finishes after a rebuild purged the folder leaves no file no
manifest names."""

from __future__ import annotations

import json
import os
import threading

import numpy as np
import trio

import cortexdb
from cortexdb import EngineConfig, ManualClock
from cortexdb.engine.forget import ops
from cortexdb.engine.retrieve import layered, vector_ivf
from cortexdb.engine.retrieve.layered import scope_folder

SCOPE = "org:acme/user:alice"
NAMES, PLACES = ["Ana", "Bo", "Cy", "Di"], ["Oslo", "Rome", "Lima"]


def config(kept: bool = True) -> EngineConfig:
    return EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", vector_segment_size=40,
                        vector_run_rows=16, vector_segments_kept=kept)  # fmt: skip


def items(start: int, count: int) -> list[dict]:
    return [{"modality": "conversation", "content": {"kind": "message", "role": "user",
             "text": f"Note {i}: I met {NAMES[i % 4]} in {PLACES[i % 3]} about item {i}"},
             "context": {"observed_at": f"2026-05-13T{10 + i // 60:02d}:{i % 60:02d}:00Z"}}
            for i in range(start, start + count)]  # fmt: skip


def opened(path: str, seed: int, kept: bool = True):
    return cortexdb.open_engine("leveldb", path=path, clock=ManualClock("2026-05-13T15:42:09Z"), id_seed=seed,
                                config=config(kept))  # fmt: skip


async def settle(engine) -> None:
    await engine.flush(SCOPE)
    await engine._supervisor.actor(SCOPE).lane.index.vector_job_finished()


def run_bytes(folder: str) -> bytes:
    found = b""
    for root, _, files in os.walk(folder):
        for name in files:
            if name.endswith(".run"):
                with open(os.path.join(root, name), "rb") as f:
                    found += f.read()
    return found


async def test_turning_kept_segments_off_deletes_them_so_an_erasure_reaches_every_copy(tmp_path):
    path = str(tmp_path / "data")
    folder = os.path.join(path, "vector-segments", scope_folder(SCOPE))
    async with opened(path, 7) as engine:
        await engine.experience_bulk({"scope": SCOPE, "items": items(0, 100)})
        await settle(engine)
        lane = engine._supervisor.actor(SCOPE).lane
        doomed = [event_id async for event_id, _ in lane.state.tables.events.scan()][3]
        row = np.asarray(await lane.state.tables.vectors.get(doomed), dtype=np.float16).tobytes()
    assert row in run_bytes(folder)
    async with opened(path, 8, kept=False) as engine:
        assert await ops.delete_events(engine, SCOPE, [doomed]) == 1
    assert not os.path.exists(folder) and row not in run_bytes(os.path.join(path, "vector-segments"))


async def test_a_build_finishing_after_a_rebuild_purged_the_folder_leaves_no_file_behind(tmp_path, monkeypatch):
    armed, reached, go = [False], threading.Event(), threading.Event()
    train = vector_ivf.train

    def held_train(run, lists, seed=0):  # the background job's IVF build, held at its training
        if armed[0]:
            armed[0] = False
            reached.set()
            go.wait(60)
        return train(run, lists, seed)

    purged = trio.Event()
    detach = layered.LayeredVectorIndex.detach

    def detaching(self, *, purge=False):
        detach(self, purge=purge)
        if purge:
            purged.set()

    monkeypatch.setattr(vector_ivf, "train", held_train)
    monkeypatch.setattr(layered.LayeredVectorIndex, "detach", detaching)
    path = str(tmp_path / "data")
    layer = os.path.join(path, "vector-segments", scope_folder(SCOPE), "evt")
    async with opened(path, 7) as engine:
        await engine.experience_bulk({"scope": SCOPE, "items": items(0, 100)})
        await settle(engine)
        armed[0] = True
        await engine.experience_bulk({"scope": SCOPE, "items": items(100, 60)})
        await engine.flush(SCOPE)
        await trio.to_thread.run_sync(reached.wait, 60)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(engine.rebuild, SCOPE)
            await purged.wait()  # the rebuild's reset purged the folder while the build trains
            go.set()
        await settle(engine)
        named = set()
        if os.path.exists(os.path.join(layer, "manifest.json")):
            with open(os.path.join(layer, "manifest.json")) as f:
                named = {entry["name"] for entry in json.load(f)["segments"]}
        files = sorted(os.listdir(layer)) if os.path.isdir(layer) else []
        assert [f for f in files if f != "manifest.json" and f.split(".")[0] not in named] == []
