"""The min-confidence rule (``revision_policy.confidence_rule: min_input``, docs/extraction.md): a
belief is never more confident than its weakest supporting fact; the Beta posterior stays the
default.  The pure rule (derive/revision.py), then the engine on both backends."""

from __future__ import annotations

import datetime as dt
import itertools

import pytest

from cortexdb import EngineConfig
from cortexdb.engine.derive import beliefs as belief_math
from cortexdb.engine.derive.revision import claims_of, revise_pair
from cortexdb.engine.model import Fact, RevisionPolicy, TypedRef, TypedValue
from cortexdb.schemas import validator

from .conftest import envelope

T0 = dt.datetime(2026, 5, 13, 15, 0, tzinfo=dt.UTC)
SUBJECT, PREDICATE = "ent_alice", "lives_in"
SCOPE = "org:acme/user:alice"


def fact(fid: str, city: str, confidence: float) -> Fact:
    return Fact(id=fid, scope="s:x", subject=TypedRef(id=SUBJECT, name="Alice"), predicate=PREDICATE,
                object=TypedValue(type="literal", datatype="string", value=city), supports=["evt_1"],
                valid_from=T0, recorded_from=T0, confidence=confidence, evidence_weight=confidence,
                extractor="rules/x", source="human", polarity=1, single_valued=True)  # fmt: skip


def revise(facts: list[Fact], rule: str, floor: float = 0.3):
    ids = (f"belief_{n}" for n in itertools.count(1))
    known = {c: None for c in claims_of(SUBJECT, PREDICATE, facts)}
    return revise_pair(SUBJECT, PREDICATE, facts, known, scope="s:x", floor=floor,
                       policy=RevisionPolicy(confidence_rule=rule), now=T0, new_id=lambda: next(ids))  # fmt: skip


def test_the_default_is_the_beta_posterior():
    (belief,) = revise([fact("fact_1", "Paris", 0.5)], "beta_posterior").beliefs.values()
    mean, lower, upper = belief_math.posterior(0.5, 0.0)
    assert belief.confidence == round(mean, 4) > 0.5
    assert (belief.confidence_interval.lower, belief.confidence_interval.upper) == (round(lower, 4), round(upper, 4))


def test_min_input_caps_at_the_weakest_supporting_fact():
    weak, strong = fact("fact_1", "Paris", 0.5), fact("fact_2", "Paris", 0.95)
    (belief,) = revise([weak, strong], "min_input").beliefs.values()
    assert belief.confidence == 0.5 and belief.confidence_interval.upper == 0.5
    assert belief.stance == belief_math.stance(0.5, 0.0)
    assert belief.revision_policy.confidence_rule == "min_input"
    (uncapped,) = revise([weak, strong], "beta_posterior").beliefs.values()
    assert uncapped.confidence > 0.5  # the same evidence without the rule


def test_min_input_never_raises_a_confidence():
    (belief,) = revise([fact("fact_1", "Paris", 0.99)], "min_input").beliefs.values()
    assert belief.confidence == round(belief_math.posterior(0.99, 0.0)[0], 4) < 0.99


def test_min_input_judges_the_floor_on_the_capped_confidence():
    assert revise([fact("fact_1", "Paris", 0.25)], "min_input", floor=0.3).beliefs == {}
    assert len(revise([fact("fact_1", "Paris", 0.25)], "beta_posterior", floor=0.3).beliefs) == 1


def test_the_config_refuses_an_unknown_rule():
    with pytest.raises(ValueError):
        EngineConfig(belief_confidence_rule="max_input")


@pytest.mark.parametrize("rule", ["beta_posterior", "min_input"])
async def test_the_engine_applies_the_tenant_rule(engine_factory, rule):
    config = EngineConfig(default_caller="user:alice", belief_confidence_rule=rule)
    async with engine_factory(config=config) as engine:
        await engine.experience(envelope("Maybe my cat is Tom."), wait="consolidated")
        (fact_,) = (await engine.facts(SCOPE))["items"]
        (belief,) = (await engine.beliefs(SCOPE))["items"]
        validator("belief").validate(belief)
        # the default rule is not written out (old beliefs read the same): an absent rule is beta_posterior
        assert belief["revision_policy"].get("confidence_rule", "beta_posterior") == rule
        assert ("confidence_rule" in belief["revision_policy"]) is (rule == "min_input")
        posterior = round(belief_math.posterior(fact_["confidence"], 0.0)[0], 4)
        assert fact_["confidence"] < posterior  # a hedged statement: the rule binds
        expected = fact_["confidence"] if rule == "min_input" else posterior
        assert belief["confidence"] == expected
        assert belief["confidence_interval"]["upper"] <= (fact_["confidence"] if rule == "min_input" else 1.0)
