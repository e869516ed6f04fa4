"""What the kept-segment tests (test_vector_reopen.py, test_text_reopen.py) share: one scope
written in bulk, settled (derivation and the background index job done), and its recall answers
(ids and scores of events and facts) to compare across a reopen."""

from __future__ import annotations

import os

import trio

import cortexdb
from cortexdb import EngineConfig

from .conftest import envelope

SCOPE = "org:acme/user:alice"
QUERIES = ["Ana in Oslo", "item 17 with Bo", "Cy met in Rome about item 88", "what about item 120"]
NAMES, PLACES = ["Ana", "Bo", "Cy", "Di"], ["Oslo", "Rome", "Lima"]


def opener(tmp_path, clock, config: EngineConfig):
    """A LevelDB engine on ``tmp_path/data``, seeded ids, the test clock."""
    return cortexdb.open_engine("leveldb", path=str(tmp_path / "data"), clock=clock, id_seed=7, config=config)


def notes(count: int) -> list[str]:
    return [f"Note {i}: I met {NAMES[i % 4]} in {PLACES[i % 3]} about item {i}" for i in range(count)]


def state(engine):
    return engine._supervisor.actor(SCOPE).lane.state


async def settle(engine) -> None:
    await engine.flush(SCOPE)
    lane = engine._supervisor.actor(SCOPE).lane
    with trio.fail_after(60):
        await lane.index.vector_job_finished()


async def answers(engine, queries: list[str] = QUERIES) -> list:
    await settle(engine)
    out = []
    for query in queries:
        pack = await engine.recall({"scope": SCOPE, "query": query, "include": ["events", "facts"], "diagnostics": "none",
                                    "budgets": {"per_layer_limits": {"events": 10, "facts": 10}}})  # fmt: skip
        out.append({layer: [(item["id"], item["score"]) for item in items] for layer, items in pack["layers"].items()})
    return out


async def write(engine, texts: list[str]) -> list[str]:
    """``texts`` as one bulk write, a minute apart; the scope's event ids once settled."""
    items = [{k: v for k, v in envelope(t, observed_at=f"2026-05-13T{10 + j // 60:02d}:{j % 60:02d}:00Z").items()
              if k != "scope"} for j, t in enumerate(texts)]  # fmt: skip
    await engine.experience_bulk({"scope": SCOPE, "items": items})
    await settle(engine)
    return [event_id async for event_id, _ in state(engine).tables.events.scan()]


def files_bytes(folder: str, suffix: str = "") -> bytes:
    """Every file's bytes under ``folder`` (those ending in ``suffix``), concatenated."""
    out = b""
    for root, _, files in os.walk(folder):
        for file in files:
            if file.endswith(suffix):
                with open(os.path.join(root, file), "rb") as handle:
                    out += handle.read()
    return out
