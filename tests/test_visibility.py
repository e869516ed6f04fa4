"""The as-of rules (``derive/visibility.py``) and the why-graph (``derive/why.py``), pure."""

import datetime as dt

import attrs

from cortexdb.engine.derive import visibility, why
from cortexdb.engine.model import (
    Belief,
    ConfidenceInterval,
    Episode,
    Event,
    Fact,
    SupportRef,
    TypedRef,
    TypedValue,
)

T0 = dt.datetime(2026, 5, 13, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)


def fact(**extra) -> Fact:
    fields = dict(id="fact_1", scope="s:x", subject=TypedRef(id="ent_a", name="Alice"), predicate="lives_in",
                  object=TypedValue(type="literal", datatype="string", value="Paris"), supports=["evt_1"],
                  valid_from=T0, recorded_from=T0, confidence=0.8, extractor="rules/x", source="human")  # fmt: skip
    return Fact(**{**fields, **extra})


def belief(**extra) -> Belief:
    fields = dict(id="belief_1", scope="s:x", stance="supported", confidence=0.64,
                  claim={"subject": {"type": "entity", "id": "ent_a", "name": "Alice"}, "predicate": "lives_in",
                         "object": {"type": "literal", "datatype": "string", "value": "Paris"}},
                  confidence_interval=ConfidenceInterval(lower=0.2, upper=0.9, method="beta_posterior", level=0.9),
                  valid_from=T0, recorded_from=T0, last_revised_at=T0, why_url="/v1/beliefs/why?belief_id=belief_1")  # fmt: skip
    return Belief(**{**fields, **extra})


def test_a_fact_is_seen_as_it_was_known_at_t():
    current = fact()
    assert visibility.fact_visible(current, T0 + DAY, False)
    assert not visibility.fact_visible(current, T0 - DAY, False)  # not yet recorded
    superseded = fact(valid_to=T0 + 2 * DAY, recorded_to=T0 + 2 * DAY)
    assert visibility.fact_visible(superseded, T0 + DAY, False)  # current then: judged as recorded
    assert not visibility.fact_visible(superseded, T0 + 3 * DAY, False)
    assert visibility.fact_visible(superseded, T0 + 3 * DAY, True)  # include_superseded
    history = fact(valid_to=T0 + DAY)  # late-arriving history: its valid_to always applies
    assert not visibility.fact_visible(history, T0 + 2 * DAY, False)


def test_a_closed_claim_is_history_unless_asked_for():
    closed = belief(valid_to=T0 + DAY)
    assert visibility.belief_visible(closed, T0 + 0.5 * DAY, include_closed=False)
    assert not visibility.belief_visible(closed, T0 + 2 * DAY, include_closed=False)
    assert visibility.belief_visible(closed, T0 + 2 * DAY, include_closed=True)
    assert not visibility.belief_visible(belief(recorded_to=T0 + DAY), T0 + 2 * DAY, include_closed=True)


def test_events_and_episodes_as_of():
    wire = {"context": {"recorded_at": "2026-05-13T00:00:00Z"}}
    assert visibility.event_visible(wire, None) and visibility.event_visible(wire, T0)
    assert not visibility.event_visible(wire, T0 - DAY)
    episode = Episode(id="ep_1", scope="s:x", name="n", summary="", events=[], supports=[], started_at=T0,
                      ended_at=T0, valid_from=T0, recorded_from=T0 + DAY, strategy="time_gap")  # fmt: skip
    assert not visibility.episode_visible(episode, T0) and visibility.episode_visible(episode, T0 + DAY)


def test_the_why_graph_cites_every_id():
    paris = fact()
    rome = fact(id="fact_2", object=TypedValue(type="literal", datatype="string", value="Rome"),
                supports=["evt_2", "evt_9"], polarity=1)  # fmt: skip
    held = belief(supports=[SupportRef(type="fact", id="fact_1", weight=0.6, polarity="supports"),
                            SupportRef(type="fact", id="fact_2", weight=0.4, polarity="against")])  # fmt: skip
    event = Event(id="evt_1", scope="s:x", tenant_id="t", caller="user:alice", actor="user:alice",
                  observed_actor={"id": "user:alice"}, subject={"id": "user:alice"}, modality="conversation",
                  content={"kind": "message", "role": "user", "text": "I live in Paris. Really."},
                  context={"observed_at": "2026-05-13T00:00:00Z"}, wal_offset=1)  # fmt: skip
    facts = {"fact_1": paris, "fact_2": rome}
    assert why.event_ids(facts) == ["evt_1", "evt_2", "evt_9"]
    out = why.why(held, facts, {"evt_1": event, "evt_2": attrs.evolve(event, id="evt_2"), "evt_9": None})
    nodes = {n["id"]: n for n in out["support_graph"]["nodes"]}
    assert nodes["evt_9"]["summary"] == "(an event of another scope)"
    assert nodes["evt_1"]["summary"] == "user:alice: I live in Paris."
    relations = {(e["from"], e["to"], e["relation"]) for e in out["support_graph"]["edges"]}
    assert ("belief_1", "fact_2", "contradicted_by") in relations and ("fact_2", "evt_9", "extracted_from") in relations
    assert all(node_id in out["narrative"] for node_id in nodes)
    assert "Evidence against it" in out["narrative"] and out["narrative_model"] == "deterministic_template_v1"
    empty = why.why(belief(supports=[]), {}, {})
    assert empty["narrative"].endswith("No evidence remains for or against it.")
