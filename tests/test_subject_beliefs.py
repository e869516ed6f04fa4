"""The running summary of each subject's beliefs (``actors/subject_beliefs.py``; decisions.md, "A
running summary of each subject's beliefs"): concept synthesis and belief revision read it instead
of every belief of a subject they touch, so it must say what storage says — after revisions that
create, revise, close and delete beliefs, after a forget, and after a restart (it loads again)."""

from __future__ import annotations

import pytest

import cortexdb
from cortexdb import EngineConfig
from cortexdb.backends import open_store
from cortexdb.backends.memory import MemoryStore
from cortexdb.engine.actors.subject_beliefs import SubjectBeliefs
from cortexdb.engine.clock import ManualClock
from cortexdb.engine.derive.concepts import digest, strongest
from cortexdb.engine.model import Belief, ConfidenceInterval

from .conftest import START

SCOPE = "org:acme/user:alice"


def _belief(n: int, confidence: float, *, stance: str = "supported", subject: str = "ent_a") -> Belief:
    claim = {"subject": {"type": "entity", "id": subject, "name": "A"}, "predicate": f"p{n % 3}",
             "object": {"type": "entity", "id": f"ent_o{n}", "name": f"O{n}"}}  # fmt: skip
    now = ManualClock(START).now()
    return Belief(id=f"belief_{n:03d}", scope=SCOPE, claim=claim, stance=stance, confidence=confidence,
                  confidence_interval=ConfidenceInterval(lower=0.0, upper=1.0, method="beta_posterior", level=0.9), valid_from=now, recorded_from=now,
                  last_revised_at=now, why_url="")  # fmt: skip


def _claim(n: int, subject: str = "ent_a") -> str:
    return f"{subject}\x1fp{n % 3}\x1fentity:ent_o{n}"


def test_the_summary_follows_each_belief_written_and_is_bounded() -> None:
    summary = SubjectBeliefs()
    summary.note(_claim(1), _belief(1, 0.5))  # a subject not loaded: nothing held
    assert summary.subjects == {}
    held = summary.load("ent_a", {_claim(n): _belief(n, n / 10) for n in range(1, 6)} | {_claim(6): None})
    assert set(held.ids) == {_claim(n) for n in range(1, 6)} and len(held.live) == 5 and summary.held == 5
    summary.note(_claim(2), _belief(2, 0.9))  # revised: its digest follows
    assert held.live[_claim(2)] == digest(_belief(2, 0.9))
    summary.note(_claim(3), _belief(3, 0.3, stance="deprecated"))  # no longer live: still a belief
    summary.note(_claim(4), None)  # deleted: gone
    summary.note(_claim(7), _belief(7, 0.8))  # created
    assert _claim(3) in held.ids and _claim(3) not in held.live
    assert _claim(4) not in held.ids and _claim(4) not in held.live
    assert held.ids[_claim(7)] == "belief_007" and summary.held == len(held.live) == 4
    # what synthesis consults first: by confidence, then predicate, then id
    assert [d.id for d in strongest(list(held.live.values()), 2)] == ["belief_002", "belief_007"]
    for n in range(3):  # more subjects than the bound: the least recently used go first
        summary.load(f"ent_{n}", {_claim(n, f"ent_{n}"): _belief(n, 0.5, subject=f"ent_{n}")})
    assert summary.get("ent_a") is held  # used: kept longest
    summary.trim(3)  # four subjects over three: down to three quarters of the bound
    assert list(summary.subjects) == ["ent_2", "ent_a"] and summary.held == 5
    summary.trim(1)
    assert summary.subjects == {} and summary.held == 0


def _triple(subject, predicate, obj, minute: int, single: bool = True) -> dict:
    content = {"kind": "triple", "subject": subject, "predicate": predicate, "object": obj, "single_valued": single}
    return {"scope": SCOPE, "modality": "observation", "content": content,
            "context": {"observed_at": f"2026-05-13T15:{minute:02d}:00Z"}}  # fmt: skip


async def _say(engine, turns: list[tuple]) -> None:
    for turn in turns:
        await engine.experience(_triple(*turn), wait="consolidated")


@pytest.mark.parametrize("backend", ["memory", "leveldb"])
async def test_concepts_made_from_the_summary_are_what_storage_gives(backend, tmp_path) -> None:
    """Rival and piling claims, a forget between, a restart: a synthesize job on a reopened engine
    (its summaries loaded from storage) finds no concept to change."""
    clock = ManualClock(START)
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", understanding_max_inputs=6,
                          derived_cache_records=8)  # fmt: skip
    store = MemoryStore() if backend == "memory" else await open_store("leveldb", str(tmp_path / "data"))
    first = [("Acme", "hq", town, m) for m, town in enumerate(["Paris", "Lyon", "Paris", "Nantes"])]
    first += [("Acme", "uses", tool, 10 + m, False) for m, tool in enumerate(["ent:Jira", "ent:Slack", "Git"])]
    first += [("Bob", "likes", "tea", 20), ("Bob", "likes", "ent:Acme", 21, False)]
    then = [("Acme", "hq", "Lille", 30), ("Acme", "uses", "ent:Notion", 31, False), ("Bob", "likes", "jazz", 32)]
    try:
        async with cortexdb.open_engine(store=store, clock=clock, id_seed=7, config=config) as engine:
            await _say(engine, first)
            gone = await engine.forget({"scope": SCOPE, "layers": ["beliefs"], "selector": {"predicate": "uses"}})
            assert gone["deleted"]["beliefs"] == 3, gone
            await _say(engine, then)
            before = {c["id"]: c for c in (await engine.understanding(SCOPE, include_deprecated=True))["items"]}
            beliefs = (await engine.beliefs(SCOPE, limit=100))["items"]
        acme = next(c for c in before.values() if c["name"] == "Acme")
        cited = set(acme["supported_by"]["beliefs"])
        assert cited and cited <= {b["id"] for b in beliefs}  # every cited belief exists
        assert acme["coverage_score"] == 0.6  # six of ten records: counted, not all read
        async with cortexdb.open_engine(store=store, clock=clock, id_seed=8, config=config) as engine:
            started = await engine.concepts.start({"scope": SCOPE}, caller="user:alice", tenant_id="default")
            done = await engine.concepts.wait(started["job_id"])
            assert done["status"] == "completed" and done["progress"]["concepts_versioned"] == 0, done
            after = {c["id"]: c for c in (await engine.understanding(SCOPE, include_deprecated=True))["items"]}
        strip = ("last_synthesized_at", "staleness_score", "staleness_reason")
        assert {i: {k: v for k, v in c.items() if k not in strip} for i, c in after.items()} == {
            i: {k: v for k, v in c.items() if k not in strip} for i, c in before.items()}
    finally:
        await store.close()
