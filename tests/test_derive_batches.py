"""A backlog derives in batches of at most ``pipeline_batch`` events (docs/decisions.md, "Larger
derivation batches"): whatever the bound, the same current facts (with their confidences) and
beliefs on the same claims with the same stances.  What a belief's confidence is, and so what a
concept weighs, still depends on where the batches fell (an event's revision sees the facts of
the events after it in its batch): that was so before the bound changed (16 against 128 too),
and is recorded there, not pinned here."""

import cortexdb
from cortexdb import EngineConfig

from .conftest import envelope

SCOPE = "org:acme/user:alice"
TOWNS = ["Paris", "Lyon", "Nantes", "Lille", "Brest"]
THINGS = ["tea", "jazz", "chess", "hiking", "pottery", "opera", "rugby"]


def turn(i: int) -> dict:
    """The i-th turn: moves (a later one supersedes), likes that pile up, a sister's town."""
    text = [f"I live in {TOWNS[i % 5]}.", f"I like {THINGS[i % 7]}.",
            f"My sister Ana lives in {TOWNS[(i // 3) % 5]}."][i % 3]  # fmt: skip
    return envelope(text, observed_at=f"2026-05-{1 + i // 24:02d}T{i % 24:02d}:{i % 60:02d}:00Z")


def _ref(value: dict) -> str:
    """An entity by its name, a value by itself."""
    return str(value.get("name") or value.get("value"))


async def _derived(clock, batch: int) -> tuple[list, list, list]:
    config = EngineConfig(pipeline_batch=batch, episode_idle_check=3600.0, default_caller="user:alice")
    async with cortexdb.open_engine("memory", clock=clock, id_seed=7, config=config) as engine:
        items = [turn(i) for i in range(300)]
        for item in items:
            item.pop("scope")
        await engine.experience_bulk({"scope": SCOPE, "items": items, "ordering": "strict_temporal"})
        await engine.flush(SCOPE)
        facts = (await engine.facts(SCOPE, limit=1000))["items"]
        beliefs = (await engine.beliefs(SCOPE, limit=1000))["items"]
        concepts = (await engine.understanding(SCOPE, limit=1000))["items"]
    return (
        sorted((_ref(f["subject"]), f["predicate"], _ref(f["object"]), f["confidence"]) for f in facts),
        sorted((_ref(b["claim"]["subject"]), b["claim"]["predicate"], _ref(b["claim"]["object"]), b["stance"])
               for b in beliefs),  # fmt: skip
        sorted((c["name"], c["supported_by"]["facts"] != []) for c in concepts),
    )


async def test_batch_size_keeps_facts_claims_and_stances(clock):
    small = await _derived(clock.__class__("2026-05-13T15:42:09Z"), 16)
    large = await _derived(clock.__class__("2026-05-13T15:42:09Z"), 512)
    facts, beliefs, concepts = large
    assert len(facts) == 9 and len(beliefs) == 9  # a town, seven likes, the sister's town
    assert concepts == [("Ana", True), ("user:alice", True)]
    assert small == large
