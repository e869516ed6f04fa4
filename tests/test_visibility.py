"""The two time axes (``derive/visibility.py``), versions (``derive/versions.py``) and the why-graph
(``derive/why.py``), pure."""

import datetime as dt

import attrs

from cortexdb.engine.derive import versions, visibility, why
from cortexdb.engine.derive.visibility import Clip
from cortexdb.engine.model import (
    Belief,
    CausalLink,
    ConfidenceInterval,
    Episode,
    Event,
    Fact,
    SupportRef,
    TypedRef,
    TypedValue,
    to_wire,
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


def test_each_version_is_clipped_on_both_axes_conjunctively():
    """§18.2 item 1: as_of pins both axes; include_superseded adds the versions closed by then."""
    held = fact(recorded_to=T0 + 2 * DAY)  # Paris, open-ended, as held until the move was learnt
    known = fact(valid_to=T0 + 1.5 * DAY, recorded_from=T0 + 2 * DAY, superseded_by="fact_2", version=2)
    versions = [held, known]
    assert Clip(at=T0 + DAY, pinned=True).select("facts", versions) == [held]  # as it was known then
    assert Clip(at=T0 + 3 * DAY).select("facts", versions) == []  # now: neither holds
    assert Clip(at=T0 + 3 * DAY, include_superseded=True).select("facts", versions) == [held]
    # a valid-time window replaces the point on the valid axis: what is known now of the past
    window = (T0 + DAY, T0 + 1.2 * DAY)
    assert Clip(at=T0 + 3 * DAY, valid=window).select("facts", versions) == [known]
    assert Clip(at=T0 + 3 * DAY, valid=window, include_superseded=True).select("facts", versions) == versions
    # recorded_during alone lifts the "now" pin: every version held during it
    assert Clip(at=T0 + 3 * DAY, recorded=(T0, T0 + DAY), valid=(None, None)).select("facts", versions) == [held]
    assert Clip(at=T0 - DAY).select("facts", versions) == []  # not recorded yet
    assert not Clip(at=T0 + 0.5 * DAY).keeps("facts", fact(valid_from=T0 + DAY))  # not valid yet
    assert Clip(at=T0 + DAY).history(known) and not Clip(at=T0 + 3 * DAY).history(known)
    assert visibility.held_at(versions, T0 + DAY) is held and visibility.held_at(versions, T0 + 2 * DAY) is known
    assert visibility.held_at(versions, T0 - DAY) is None


def test_an_old_superseded_fact_reads_as_its_two_versions():
    legacy = fact(valid_to=T0 + DAY, recorded_to=T0 + 2 * DAY, superseded_by="fact_2")
    before, after = versions.split_legacy(legacy)
    assert (before.valid_to, before.superseded_by, before.recorded_to) == (None, None, T0 + 2 * DAY)
    assert (after.valid_to, after.recorded_from, after.recorded_to, after.version) == (T0 + DAY, T0 + 2 * DAY, None, 2)
    assert versions.split_legacy(fact()) == [fact()]


def test_a_closed_claim_is_history():
    closed = belief(valid_to=T0 + DAY)
    assert Clip(at=T0 + 0.5 * DAY, pinned=True).keeps("beliefs", closed)
    assert not Clip(at=T0 + 2 * DAY).keeps("beliefs", closed)
    assert not Clip(at=T0 + 2 * DAY, include_superseded=True).keeps("beliefs", closed)  # valid axis still clips
    assert Clip(at=T0 + 2 * DAY, valid=(T0, None)).keeps("beliefs", closed)
    assert versions.belief_revised(belief(), belief(confidence=0.7))
    assert not versions.belief_revised(belief(), belief(evidence={"for": 2.0}))  # weights only: in place


def test_events_and_episodes_as_of():
    wire = {"context": {"recorded_at": "2026-05-13T00:00:00Z"}}
    assert visibility.event_visible(wire, None) and visibility.event_visible(wire, T0)
    assert not visibility.event_visible(wire, T0 - DAY)
    episode = Episode(id="ep_1", scope="s:x", name="n", summary="", events=[], supports=[], started_at=T0,
                      ended_at=T0 + DAY, valid_from=T0, recorded_from=T0 + DAY, strategy="time_gap")  # fmt: skip
    assert not Clip(at=T0, pinned=True).keeps("episodes", episode)
    assert Clip(at=T0 + DAY, pinned=True).keeps("episodes", episode)
    assert Clip(at=T0 + 2 * DAY, valid=(T0 + DAY, T0 + 2 * DAY)).keeps("episodes", episode)  # its last moment
    assert not Clip(at=T0 + 2 * DAY, valid=(T0 + 1.5 * DAY, None)).keeps("episodes", episode)


def test_a_compact_episode_version_reads_its_lists_from_the_next_whole_one():
    links = [CausalLink(event=f"evt_{i}", role=role) for i, role in enumerate(["trigger", "context", "outcome"])]
    sealed = Episode(id="ep_1", scope="s:x", name="n", summary="3 events", events=["evt_0", "evt_1", "evt_2"],
                     supports=["evt_0", "evt_1", "evt_2"], started_at=T0, ended_at=T0 + DAY, valid_from=T0,
                     recorded_from=T0 + DAY, causal_chain=links, status="compressed", opening="first")  # fmt: skip
    growing = attrs.evolve(sealed, events=sealed.events[:2], supports=sealed.supports[:2], summary="2 events",
                           causal_chain=[links[0], CausalLink(event="evt_1", role="context")], status="open",
                           recorded_to=T0 + DAY)  # fmt: skip
    row = versions.compact_episode(growing)
    assert "events" not in row and row["events_count"] == 2 and not versions.is_full(row)
    again = versions.expand_episode(row, to_wire(sealed))
    assert (again.events, again.summary, again.status, again.opening) == (["evt_0", "evt_1"], "2 events", "open", "first")
    assert [link.role for link in again.causal_chain] == ["trigger", "context"]
    assert versions.expand_episode(versions.full_episode(growing), to_wire(sealed)) == growing


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
