"""The temporal truth suite's harness: a world whose clock the script sets (the *recorded* axis:
when CortexDB learns), writes that say when things happened (the *valid* axis: ``observed_at``
or a triple's own time), and reads reduced to what a scenario asserts.

Every scenario is a script: it moves the clock, writes, and asks the same question as of several
instants, comparing each answer with the one expected.  ``world`` runs it on the parametrised
backend (memory and LevelDB, ``tests/conftest.py``).  docs/time.md walks through the scenarios.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from typing import Any

import attrs
import pytest

import cortexdb
from cortexdb import EngineConfig, ManualClock
from cortexdb.engine.temporal import parse_rfc3339

SCOPE = "org:acme/user:alice"
ALICE = "user:alice"
CONFIG = EngineConfig(episode_idle_check=3600.0, default_caller=ALICE)


def stamp(when: str) -> str:
    """``2026-05-01`` or ``2026-05-01T09:00`` as a full RFC 3339 timestamp."""
    if len(when) == 10:
        return when + "T00:00:00Z"
    if len(when) == 16:
        return when + ":00Z"
    return when


def value(record: dict[str, Any]) -> Any:
    """What a fact's object, or a belief claim's, names: an entity's name or a literal."""
    obj = record["object"] if "object" in record else record["claim"]["object"]
    return obj.get("name", obj.get("value"))


def day(text: str | None) -> str | None:
    return text[:10] if text else None


class World:
    def __init__(self, engine: Any, clock: ManualClock) -> None:
        self.engine = engine
        self.clock = clock

    # -- the recorded axis: when CortexDB learns --------------------------------------------------
    def at(self, when: str) -> None:
        self.clock.set(parse_rfc3339(stamp(when)))

    # -- writes (each waits until its beliefs are revised and its episode joined: the stages
    # after ``consolidated`` run at the clock of the write, whatever the backend's speed) ------
    async def _write(self, body: dict) -> str:
        event_id = (await self.engine.experience(body, caller=ALICE, wait="consolidated")).event_id
        await self.engine.flush(body["scope"])
        return event_id

    async def say(self, text: str, observed: str, *, scope: str = SCOPE, **extra: Any) -> str:
        body = {"scope": scope, "modality": "conversation", "context": {"observed_at": stamp(observed)},
                "content": {"kind": "message", "role": "user", "text": text}, **extra}  # fmt: skip
        return await self._write(body)

    async def triple(self, subject: str, predicate: str, obj: Any, observed: str, *, scope: str = SCOPE,
                     **options: Any) -> str:  # fmt: skip
        body = {"scope": scope, "modality": "conversation", "context": {"observed_at": stamp(observed)},
                "content": {"kind": "triple", "subject": subject, "predicate": predicate, "object": obj,
                            **options}}  # fmt: skip
        return await self._write(body)

    async def seal(self) -> None:
        await self.engine.flush(SCOPE, seal=True)

    # -- reads, reduced -------------------------------------------------------------------------
    async def facts(self, predicate: str | None = None, *, subject: str = ALICE, **read: Any) -> list[dict]:
        read = {k: stamp(v) if k == "as_of" else v for k, v in read.items()}
        return (await self.engine.facts(SCOPE, subject=subject, predicate=predicate, limit=1000, **read))["items"]

    async def values(self, predicate: str | None = None, **read: Any) -> list[Any]:
        """The objects of the facts a read returns, in its order."""
        return [value(f) for f in await self.facts(predicate, **read)]

    async def spans(self, predicate: str | None = None, **read: Any) -> set[tuple]:
        """(object, valid from day, valid to day, current version?) of each fact version a read returns."""
        return {(value(f), day(f["valid_from"]), day(f["valid_to"]), f["recorded_to"] is None)
                for f in await self.facts(predicate, **read)}  # fmt: skip

    async def beliefs(self, **read: Any) -> list[dict]:
        read = {k: stamp(v) if k == "as_of" else v for k, v in read.items()}
        return (await self.engine.beliefs(SCOPE, limit=1000, **read))["items"]

    async def stances(self, predicate: str | None = None, **read: Any) -> dict[Any, tuple[str, float]]:
        """object -> (stance, confidence) of each belief a read returns (of one predicate)."""
        return {value(b): (b["stance"], b["confidence"]) for b in await self.beliefs(**read)
                if predicate is None or b["claim"]["predicate"] == predicate}  # fmt: skip

    async def belief(self, belief_id: str, as_of: str | None = None) -> dict:
        return await self.engine.get_belief(SCOPE, belief_id, as_of=stamp(as_of) if as_of else None)

    async def episodes(self, **read: Any) -> list[dict]:
        read = {k: stamp(v) if k == "as_of" else v for k, v in read.items()}
        return (await self.engine.episodes(SCOPE, limit=1000, **read))["items"]

    async def recall(self, query: str, layers: list[str], **temporal: Any) -> dict[str, list]:
        temporal = {k: stamp(v) if k == "as_of" else v for k, v in temporal.items()}
        request = {"scope": SCOPE, "query": query, "include": layers, "temporal": temporal or None}
        pack = await self.engine.recall({k: v for k, v in request.items() if v is not None})
        return {layer: pack["layers"].get(layer, []) for layer in layers}

    async def belief_id(self, obj: Any, predicate: str) -> str:
        everything = await self.beliefs(valid_during="..")
        return next(b["id"] for b in everything if value(b) == obj and b["claim"]["predicate"] == predicate)


@pytest.fixture
def world_factory(backend, tmp_path, pg_dsn):
    """Worlds on the parametrised backend with settings of their own (``EngineConfig`` fields)."""

    @contextlib.asynccontextmanager
    async def factory(**settings: Any):
        clock = ManualClock("2026-05-01T00:00:00Z")
        where = {"path": pg_dsn or str(tmp_path / "data")} if backend != "memory" else {}
        config = attrs.evolve(CONFIG, **settings)
        async with cortexdb.open_engine(backend, clock=clock, id_seed=15, config=config, **where) as engine:
            yield World(engine, clock)

    return factory


@pytest.fixture
async def world(world_factory):
    async with world_factory() as opened:
        yield opened


def after(when: str, **delta: float) -> str:
    """An instant ``delta`` after ``when`` (RFC 3339)."""
    moment = parse_rfc3339(stamp(when)) + dt.timedelta(**delta)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
