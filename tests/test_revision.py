"""Belief revision as a pure function (``derive/revision.py``): no store, no actors."""

import datetime as dt
import itertools

import attrs
import pytest

from cortexdb.engine.derive import beliefs as belief_math
from cortexdb.engine.derive.facts import object_key
from cortexdb.engine.derive.revision import claim_key, claims_of, revise_pair, signature
from cortexdb.engine.model import Fact, RevisionPolicy, TypedRef, TypedValue

T0 = dt.datetime(2026, 5, 13, 15, 0, tzinfo=dt.UTC)
SUBJECT, PREDICATE = "ent_alice", "lives_in"


def fact(fid, city, *, at=T0, confidence=0.8, polarity=1, single=True, **extra) -> Fact:
    return Fact(id=fid, scope="s:x", subject=TypedRef(id=SUBJECT, name="Alice"), predicate=PREDICATE,
                object=TypedValue(type="literal", datatype="string", value=city), supports=["evt_1"],
                valid_from=at, recorded_from=at, confidence=confidence, evidence_weight=confidence,
                extractor="rules/x", source="human", polarity=polarity, single_valued=single,
                **extra)  # fmt: skip


def claim(city) -> str:
    return claim_key(SUBJECT, PREDICATE, object_key(TypedValue(type="literal", value=city)))


def revise(facts, beliefs=None, *, now=T0, floor=0.3, policy=None):
    ids = (f"belief_{n}" for n in itertools.count(1))
    beliefs = beliefs or {}
    known = {c: beliefs.get(c) for c in claims_of(SUBJECT, PREDICATE, facts)}
    return revise_pair(SUBJECT, PREDICATE, facts, known, scope="s:x", floor=floor,
                       policy=policy or RevisionPolicy(), now=now, new_id=lambda: next(ids))  # fmt: skip


def test_a_claim_with_live_evidence_gets_a_belief():
    paris = fact("fact_1", "Paris")
    out = revise([paris])
    assert out.created == ["belief_1"] and out.revised == out.deleted == out.deferred == []
    belief = out.beliefs[claim("Paris")]
    mean, lower, upper = belief_math.posterior(0.8, 0.0)
    assert belief.confidence == round(mean, 4) and belief.stance == "supported"
    assert (belief.confidence_interval.lower, belief.confidence_interval.upper) == (round(lower, 4), round(upper, 4))
    assert [(s.id, s.weight, s.polarity) for s in belief.supports] == [("fact_1", 1.0, "supports")]
    assert belief.claim["object"]["value"] == "Paris" and belief.valid_from == T0
    assert out.new_claims == {claim("Paris"): "belief_1"} and out.changed == [belief]
    assert belief.evidence == {"for": 0.8, "against": 0.0} and belief.contradicts == []


def test_more_evidence_revises_a_copy_and_leaves_the_input_alone():
    first = revise([fact("fact_1", "Paris")]).beliefs[claim("Paris")]
    kept = signature(first)
    later = T0 + dt.timedelta(minutes=5)
    out = revise([fact("fact_1", "Paris"), fact("fact_2", "Paris")], {claim("Paris"): first}, now=later)
    revised = out.beliefs[claim("Paris")]
    assert out.revised == [first.id] and out.created == [] and out.new_claims == {}
    assert revised is not first and signature(first) == kept  # the input is not modified
    assert revised.confidence == round(belief_math.posterior(1.6, 0.0)[0], 4)
    assert (revised.revision_count, revised.revisions_in_window) == (1, 1)
    assert revised.last_revised_at == later and revised.revision_window_start == later
    assert out.changed == [revised] and claim("Paris") in out.settled


def test_an_unchanged_belief_is_not_rewritten():
    first = revise([fact("fact_1", "Paris")]).beliefs[claim("Paris")]
    out = revise([fact("fact_1", "Paris")], {claim("Paris"): first})
    assert out.revised == [] and out.changed == [] and out.beliefs[claim("Paris")].confidence == first.confidence


def test_a_belief_under_the_floor_is_deleted():
    first = revise([fact("fact_1", "Paris")]).beliefs[claim("Paris")]
    out = revise([fact("fact_1", "Paris", confidence=0.1)], {claim("Paris"): first}, floor=0.6)
    assert [(d.claim, d.belief.id, d.reason) for d in out.deleted] == [(claim("Paris"), first.id, "below_confidence_floor")]
    assert out.beliefs == {} and out.changed == [] and claim("Paris") in out.settled
    assert out.deleted[0].note() == {"belief_id": first.id, "deleted_at": "2026-05-13T15:00:00Z",
                                     "reason": "below_confidence_floor", "confidence": first.confidence}  # fmt: skip


def test_a_belief_whose_evidence_was_all_withdrawn_is_deleted():
    first = revise([fact("fact_1", "Paris")]).beliefs[claim("Paris")]
    out = revise([fact("fact_1", "Paris", excluded_from_recall=True)], {claim("Paris"): first})
    assert [(d.belief.id, d.reason) for d in out.deleted] == [(first.id, "no_remaining_evidence")]


def test_a_contradicted_belief_stays_below_the_floor():
    first = revise([fact("fact_1", "Paris")]).beliefs[claim("Paris")]
    facts = [fact("fact_1", "Paris", confidence=0.1), fact("fact_2", "Paris", confidence=0.9, polarity=-1)]
    out = revise(facts, {claim("Paris"): first}, floor=0.6)
    assert out.deleted == [] and out.beliefs[claim("Paris")].stance == "contradicted"


@pytest.mark.parametrize("gate", ["cooldown", "rate"])
def test_the_revision_policy_gate_defers_a_revision(gate):
    policy = RevisionPolicy(cooldown="PT1H") if gate == "cooldown" else RevisionPolicy(max_revisions_per_hour=2)
    first = revise([fact("fact_1", "Paris")], policy=policy).beliefs[claim("Paris")]
    if gate == "rate":  # two revisions already in this hour's window
        first = attrs.evolve(first, revision_window_start=T0, revisions_in_window=2)
    later = T0 + dt.timedelta(minutes=10)
    out = revise([fact("fact_1", "Paris"), fact("fact_2", "Paris")], {claim("Paris"): first}, now=later)
    deferred = out.beliefs[claim("Paris")]
    assert out.deferred == [first.id] and out.revised == [] and out.gated == {claim("Paris")}
    assert (deferred.partial, deferred.partial_reason) == (True, "revision_in_progress")
    assert deferred.confidence == first.confidence and deferred.revision_count == 0
    assert deferred.evidence == {"for": 1.6, "against": 0.0}  # the evidence is recorded anyway
    # an hour on, the gate is open again: the revision goes through and the claim is settled
    hour = revise([fact("fact_1", "Paris"), fact("fact_2", "Paris")], {claim("Paris"): deferred},
                  now=T0 + dt.timedelta(hours=1, minutes=1))  # fmt: skip
    assert hour.revised == [first.id] and claim("Paris") in hour.settled
    assert hour.beliefs[claim("Paris")].partial is False


def test_a_claim_whose_facts_were_all_superseded_is_closed():
    moved = T0 + dt.timedelta(days=3)
    paris = fact("fact_1", "Paris")
    first = revise([paris]).beliefs[claim("Paris")]
    closed = attrs.evolve(paris, valid_to=moved, recorded_to=moved, superseded_by="fact_2")
    berlin = fact("fact_2", "Berlin", at=moved, supersedes="fact_1")
    out = revise([berlin, closed], {claim("Paris"): first}, now=moved)
    old, new = out.beliefs[claim("Paris")], out.beliefs[claim("Berlin")]
    assert old.valid_to == moved and old.stance == "contradicted" and out.deleted == []
    assert out.created == [new.id] and new.valid_to is None and new.valid_from == moved
    assert [(c["belief_id"], c["resolution"]) for c in old.contradicts] == [(new.id, "newer_wins")]
    assert [(c["belief_id"], c["resolution"]) for c in new.contradicts] == [(old.id, "newer_wins")]
    # a claim already closed, with no live evidence, is left as history
    again = revise([berlin, closed], {claim("Paris"): old, claim("Berlin"): new}, now=moved)
    assert claim("Paris") not in again.beliefs and again.deleted == []


def test_moves_under_the_delta_follow_the_evidence_without_a_revision():
    """A belief's confidence is the posterior mean of its evidence whatever steps it came in:
    moves smaller than ``min_evidence_delta`` update it in place (no revision), and they add up
    to a revision once it has moved by the delta since the last one."""
    policy = RevisionPolicy(min_evidence_delta=0.15)
    paris = [fact(f"fact_{n}", "Paris") for n in range(1, 5)]
    belief = revise(paris[:1], policy=policy).beliefs[claim("Paris")]
    first = belief.confidence
    for n in (2, 3):  # two small moves: no revision, the confidence follows, the anchor stays
        out = revise(paris[:n], {claim("Paris"): belief}, policy=policy)
        belief = out.beliefs[claim("Paris")]
        assert out.revised == [] and out.changed == [belief] and belief.revision_count == 0
        assert belief.confidence == round(belief_math.posterior(0.8 * n, 0.0)[0], 4)
        assert belief.revised_confidence == first
    at_once = revise(paris[:3], {claim("Paris"): revise(paris[:1], policy=policy).beliefs[claim("Paris")]},
                     policy=policy).beliefs[claim("Paris")]  # fmt: skip
    assert signature(at_once) == signature(belief)  # step by step or at once: the same belief
    out = revise(paris, {claim("Paris"): belief}, policy=policy)  # 0.64 -> 0.81 since the last revision: one
    assert out.revised == [belief.id] and out.beliefs[claim("Paris")].revision_count == 1
    assert out.beliefs[claim("Paris")].revised_confidence is None


def test_a_claim_superseded_before_its_revision_gets_a_closed_belief():
    """A fact superseded by an event derived in the same batch never had a live revision: its
    claim gets the closed belief that a revision between the two would have left."""
    moved = T0 + dt.timedelta(days=3)
    closed = fact("fact_1", "Paris", valid_to=moved, recorded_to=moved, superseded_by="fact_2")
    berlin = fact("fact_2", "Berlin", at=moved, supersedes="fact_1")
    at_once = revise([berlin, closed], now=moved).beliefs[claim("Paris")]
    first = revise([fact("fact_1", "Paris")]).beliefs[claim("Paris")]
    stepwise = revise([berlin, closed], {claim("Paris"): first}, now=moved).beliefs[claim("Paris")]
    assert (at_once.stance, at_once.confidence, at_once.valid_from, at_once.valid_to) == (
        stepwise.stance, stepwise.confidence, stepwise.valid_from, stepwise.valid_to) == (
        "contradicted", round(belief_math.posterior(0.0, 0.8)[0], 4), T0, moved)  # fmt: skip
    weak = fact("fact_1", "Paris", confidence=0.05, valid_to=moved, recorded_to=moved, superseded_by="fact_2")
    # under a floor it never reached alone, it was never held: nothing
    assert claim("Paris") not in revise([berlin, weak], now=moved, floor=0.6).beliefs


def test_rival_claims_are_in_tension():
    paris = fact("fact_1", "Paris", confidence=0.8, conflicts_with=["fact_2"], status="conflict_detected")
    rome = fact("fact_2", "Rome", confidence=0.4, conflicts_with=["fact_1"], status="conflict_detected")
    out = revise([paris, rome])
    p, r = out.beliefs[claim("Paris")], out.beliefs[claim("Rome")]
    tension = belief_math.tension(p.confidence, r.confidence)
    assert 0 < tension < 1
    assert p.contradicts == [{"belief_id": r.id, "tension": tension, "resolution": "unresolved"}]
    assert r.contradicts == [{"belief_id": p.id, "tension": tension, "resolution": "unresolved"}]
    # rivals neither superseded nor recorded in conflict: the better-held one wins
    plain = revise([fact("fact_1", "Paris"), fact("fact_2", "Rome", confidence=0.4)])
    assert {c["resolution"] for b in plain.beliefs.values() for c in b.contradicts} == {"higher_confidence_wins"}
    # a multi-valued predicate has no rivals
    multi = revise([fact("fact_1", "Paris", single=False), fact("fact_2", "Rome", single=False)])
    assert [b.contradicts for b in multi.beliefs.values()] == [[], []]


def test_a_belief_copy_copies_every_field():
    original = revise([fact("fact_1", "Paris")]).beliefs[claim("Paris")]
    fields = attrs.fields(type(original))
    marked = attrs.evolve(original, **{f.alias: object() for f in fields})  # a value per field
    copied = marked.copy()
    assert copied is not marked
    assert all(getattr(copied, f.name) is getattr(marked, f.name) for f in fields)
