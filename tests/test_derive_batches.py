"""A backlog derives in batches of at most ``pipeline_batch`` events (docs/decisions.md, "Larger
derivation batches" and "Belief confidence whatever the batches"): whatever the bound, from one
event a batch (a write derived alone) to 512, the same current facts (with their confidences),
the same beliefs (their claims, stances, confidences and validity, the closed ones of towns left
included) and concepts citing the same beliefs (issue 17: every write path reaches the same
result).  What is not pinned: ``revision_count`` and ``last_revised_at`` (how many commits saw a
belief move), and a belief's versions (one a commit)."""

import cortexdb
from cortexdb import EngineConfig

from .conftest import START, envelope

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


async def _derived(clock, batch: int) -> tuple[list, list, list, list, list]:
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
        cited = [(c["name"], b) for c in concepts for b in c["supported_by"]["beliefs"]]
        weighed = sorted([(name, *_belief(await engine.get_belief(SCOPE, belief_id))) for name, belief_id in cited])
    return (
        sorted((_ref(f["subject"]), f["predicate"], _ref(f["object"]), f["confidence"]) for f in facts),
        sorted((_ref(b["claim"]["subject"]), b["claim"]["predicate"], _ref(b["claim"]["object"]), b["stance"])
               for b in beliefs),  # fmt: skip
        sorted((c["name"], c["supported_by"]["facts"] != []) for c in concepts),
        sorted((_ref(b["claim"]["object"]), b["confidence"], b["confidence_interval"]["lower"],
                b["confidence_interval"]["upper"], b["evidence"]["for"]) for b in beliefs),  # fmt: skip
        weighed,
    )


def _belief(wire: dict) -> tuple:
    """What a concept cites: the claim, how it is held and until when."""
    claim = wire["claim"]
    return (_ref(claim["subject"]), claim["predicate"], _ref(claim["object"]), wire["stance"],
            wire["confidence"], wire["valid_to"])  # fmt: skip


async def test_batch_size_keeps_facts_beliefs_and_concepts(clock):
    runs = {batch: await _derived(clock.__class__(START), batch) for batch in (1, 16, 128, 512)}
    facts, beliefs, concepts, confidences, cited = runs[512]
    assert len(facts) == 9 and len(beliefs) == 9  # a town, seven likes, the sister's town
    assert concepts == [("Ana", True), ("user:alice", True)]
    # "likes tea" was said 43 times: its confidence is the posterior mean of all of it, whether
    # the batches moved it by less than the policy's delta at a time (1, 16) or at once (512)
    assert ("tea", 0.9242, 0.7823, 0.9958, 11.2) in confidences
    # the towns left are closed contradicted beliefs however the moves fell into batches
    assert len(cited) == 17 and ("user:alice", "lives_in", "Paris", "contradicted", 0.3509,
                                 "2026-05-13T00:48:00Z") in [c[1:] for c in cited]  # fmt: skip
    for batch, derived in runs.items():
        assert derived == runs[512], batch
