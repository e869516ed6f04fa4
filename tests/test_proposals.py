"""Memory write proposals (docs/proposals.md) on both backends: propose, list, read, approve
(committed through the normal write path with provenance), reject, one review per proposal, a
failed commit leaving the proposal pending, persistence, erasure; and the pure provenance rule."""

from __future__ import annotations

import attrs
import pytest

from cortexdb.engine.proposals import provenance
from cortexdb.errors import InvalidEnvelope, InvalidRequest, NotFound, UnknownField
from cortexdb.schemas import validator

from .conftest import envelope

SCOPE = "org:acme/user:alice"


def proposal(text="I live in Lisbon.", **extra):
    return {"scope": SCOPE, "experience": {k: v for k, v in envelope(text).items() if k != "scope"}, **extra}


def test_provenance_labels_an_object_or_a_list():
    held = {"id": "prp_1", "proposed_by": "agent:bot"}
    as_object = provenance({"context": {"observed_at": "x", "labels": {"topic": "home"}}}, held, "user:alice")
    assert as_object["context"]["labels"] == {"topic": "home", "proposal_id": "prp_1", "proposed_by": "agent:bot",
                                               "approved_by": "user:alice"}  # fmt: skip
    assert as_object["idempotency_key"] == "proposal-prp_1"
    as_list = provenance({"context": {"labels": ["home"]}}, held, "user:alice")
    assert as_list["context"]["labels"] == ["home", "proposal_id=prp_1", "proposed_by=agent:bot",
                                            "approved_by=user:alice"]  # fmt: skip


async def test_propose_then_approve_commits_with_provenance(engine):
    held = await engine.proposals.propose(proposal(rationale="the user said so"), caller="agent:bot")
    validator("proposal").validate(held)
    assert held["status"] == "pending" and held["source"] == "agent" and held["proposed_by"] == "agent:bot"
    assert (await engine.facts(SCOPE))["items"] == []  # nothing is written while it is held
    page = await engine.proposals.list(SCOPE, status="pending")
    assert [p["id"] for p in page["items"]] == [held["id"]]
    done = await engine.proposals.approve(SCOPE, held["id"], caller="user:alice", note="ok", wait="consolidated")
    validator("proposal").validate(done)
    assert done["status"] == "approved" and done["reviewed_by"] == "user:alice" and done["review_note"] == "ok"
    event = await engine.get_event(SCOPE, done["committed"]["event_id"])
    assert event["context"]["labels"] == {"proposal_id": held["id"], "proposed_by": "agent:bot",
                                          "approved_by": "user:alice"}  # fmt: skip
    assert event["caller"] == "user:alice"
    assert [f["predicate"] for f in (await engine.facts(SCOPE))["items"]] == ["lives_in"]
    assert (await engine.proposals.get(SCOPE, held["id"]))["committed"] == done["committed"]
    assert (await engine.proposals.list(SCOPE, status="pending"))["items"] == []


async def test_reject_writes_nothing_and_a_second_review_is_refused(engine):
    held = await engine.proposals.propose(proposal())
    rejected = await engine.proposals.reject(SCOPE, held["id"], note="not true")
    assert rejected["status"] == "rejected" and rejected["committed"] is None
    with pytest.raises(InvalidRequest) as caught:
        await engine.proposals.approve(SCOPE, held["id"])
    assert caught.value.details == {"field": "proposal_id", "reason": "not_pending", "status": "rejected"}
    assert (await engine.events(SCOPE))["items"] == []


async def test_a_failed_commit_leaves_the_proposal_pending(engine):
    held = await engine.proposals.propose(proposal())
    with pytest.raises(InvalidEnvelope):
        await engine.proposals.approve(SCOPE, held["id"], wait="eventually")
    assert (await engine.proposals.get(SCOPE, held["id"]))["status"] == "pending"
    done = await engine.proposals.approve(SCOPE, held["id"])
    assert done["committed"]["status"] == "captured"


@pytest.mark.parametrize("request_, error, field", [
    ({"scope": SCOPE}, InvalidRequest, "experience"),
    ({"experience": {}}, InvalidRequest, "scope"),
    ({**proposal(), "extra": 1}, UnknownField, "extra"),
    ({**proposal(), "rationale": 5}, InvalidRequest, "rationale"),
    ({"scope": SCOPE, "experience": "text"}, InvalidRequest, "experience"),
    ({"scope": SCOPE, "experience": {"modality": "conversation"}}, InvalidEnvelope, None),
    ({"scope": SCOPE, "experience": {**envelope(), "scope": "org:acme/user:bob"}}, InvalidRequest, "experience.scope"),
])  # fmt: skip
async def test_bad_proposals_are_refused(engine, request_, error, field):
    with pytest.raises(error) as caught:
        await engine.proposals.propose(request_)
    assert 400 <= caught.value.http_status < 500
    if field:
        assert caught.value.details["field"] == field


async def test_the_text_limit_is_a_setting(engine_factory):
    from cortexdb import EngineConfig

    async with engine_factory(config=EngineConfig(default_caller="user:alice", proposal_text_max_chars=5)) as engine:
        with pytest.raises(InvalidRequest) as caught:
            await engine.proposals.propose(proposal(rationale="too long"))
        assert caught.value.details == {"field": "rationale", "limit": 5}


async def test_unknown_proposals_and_bad_listings(engine):
    with pytest.raises(NotFound):
        await engine.proposals.get(SCOPE, "prp_nope")
    with pytest.raises(NotFound):
        await engine.proposals.approve(SCOPE, "prp_nope")
    with pytest.raises(InvalidRequest):
        await engine.proposals.list(SCOPE, status="maybe")


async def test_listing_pages(engine):
    ids = [(await engine.proposals.propose(proposal(f"Note {i}.")))["id"] for i in range(5)]
    first = await engine.proposals.list(SCOPE, limit=2)
    assert [p["id"] for p in first["items"]] == ids[:2] and first["has_more"] is True
    rest = await engine.proposals.list(SCOPE, limit=10, cursor=first["next_cursor"])
    assert [p["id"] for p in rest["items"]] == ids[2:] and rest["has_more"] is False


async def test_proposals_survive_reopen(engine_factory, backend):
    async with engine_factory() as engine:
        held = await engine.proposals.propose(proposal())
    if backend == "leveldb":
        async with engine_factory() as engine:
            assert (await engine.proposals.get(SCOPE, held["id"]))["status"] == "pending"


async def test_erasure_drops_the_scopes_proposals(engine):
    await engine.experience(envelope(), wait="consolidated")
    await engine.proposals.propose(proposal())
    accepted = await engine.erasures.execute({"scope": SCOPE})
    async with engine.subscribe(job_id=accepted["erasure_id"], events="erasure_complete", since_lifecycle_id="") as ended:
        await ended.__anext__()
    assert (await engine.proposals.list(SCOPE))["items"] == []


async def test_erasure_drops_the_held_fact_index_and_intake_acknowledgements(engine):
    await review_derived(engine)
    await engine.experience(envelope("I live in Lisbon."), wait="consolidated")
    await engine.experience(envelope("He lives in Oslo."), wait="consolidated")
    (item,) = (await engine.intake.pending(SCOPE, status="needs_clarification"))["items"]
    await engine.intake.ack(SCOPE, item["id"])
    partition = engine._ctx.tables.partition(SCOPE)
    assert await partition.held_facts.count() == 1 and await partition.intake_acks.count() == 1
    await engine.proposals.drop(SCOPE)  # what an erasure of the scope runs
    assert await partition.held_facts.count() == 0 and await partition.intake_acks.count() == 0


async def review_derived(engine) -> None:
    """Open the scope (an event not about residence) and set ``require_review: "derived"``."""
    await engine.experience(envelope("Opening the notebook.", scope=SCOPE), wait="consolidated")

    def edit(record):
        return attrs.evolve(record, policies={**record.policies, "require_review": "derived"})

    await engine.edit_scope(SCOPE, edit)


async def test_derived_facts_are_held_then_committed_by_approval(engine):
    await review_derived(engine)
    written = await engine.experience(envelope("I live in Lisbon."), wait="consolidated")
    assert (await engine.events(SCOPE))["items"][-1]["id"] == written.event_id  # the event is captured
    assert (await engine.facts(SCOPE))["items"] == []  # its fact is held
    [held] = (await engine.proposals.list(SCOPE, status="pending"))["items"]
    validator("proposal").validate(held)
    assert held["source"] == "derivation" and held["event_ids"] == [written.event_id]
    assert held["experience"] is None and held["fact"]["predicate"] == "lives_in"
    assert held["fact"]["object"]["name"] == "Lisbon"
    done = await engine.proposals.approve(SCOPE, held["id"], caller="user:alice", note="checked")
    validator("proposal").validate(done)
    committed = done["committed"]
    assert committed["status"] == "accepted" and committed["proposal_id"] == held["id"]
    assert committed["approved_by"] == "user:alice" and committed["event_ids"] == [written.event_id]
    [fact] = (await engine.facts(SCOPE))["items"]
    assert fact["id"] == committed["fact_id"] and fact["supports"] == [written.event_id]
    assert fact["proposal"] == {"proposal_id": held["id"], "approved_by": "user:alice"}
    validator("fact").validate(fact)
    [belief] = (await engine.beliefs(SCOPE))["items"]  # revised through the derivation path
    assert [s["id"] for s in belief["supports"]] == [fact["id"]]
    # the event lists what it derives (a cancel or forget of it finds them)
    derives = (await engine.get_event(SCOPE, written.event_id))["derives"]
    assert fact["id"] in derives and belief["id"] in derives
    # evidence for an approved fact reinforces it without review
    again = await engine.experience(envelope("I live in Lisbon."), wait="consolidated")
    [fact] = (await engine.facts(SCOPE))["items"]
    assert again.event_id in fact["supports"]
    assert (await engine.proposals.list(SCOPE, status="pending"))["items"] == []


async def test_a_rejected_derivation_commits_nothing(engine):
    await review_derived(engine)
    await engine.experience(envelope("I live in Porto."), wait="consolidated")
    [held] = (await engine.proposals.list(SCOPE, status="pending"))["items"]
    rejected = await engine.proposals.reject(SCOPE, held["id"], caller="user:alice", note="wrong")
    assert rejected["status"] == "rejected" and rejected["committed"] is None
    assert (await engine.facts(SCOPE))["items"] == [] and (await engine.beliefs(SCOPE))["items"] == []
    with pytest.raises(InvalidRequest):
        await engine.proposals.approve(SCOPE, held["id"])


async def test_an_approved_fact_keeps_its_provenance_across_reopen(engine_factory, backend):
    async with engine_factory() as engine:
        await review_derived(engine)
        await engine.experience(envelope("I live in Faro."), wait="consolidated")
        [held] = (await engine.proposals.list(SCOPE, status="pending"))["items"]
        done = await engine.proposals.approve(SCOPE, held["id"], caller="user:alice")
        assert done["committed"]["status"] == "accepted"
    if backend == "leveldb":  # the stored fact, read back by a fresh engine
        async with engine_factory() as engine:
            [fact] = (await engine.facts(SCOPE))["items"]
            assert fact["id"] == done["committed"]["fact_id"]
            assert fact["proposal"] == {"proposal_id": held["id"], "approved_by": "user:alice"}
            assert (await engine.proposals.get(SCOPE, held["id"]))["status"] == "approved"


async def test_cancelling_the_event_takes_an_approved_fact_back_or_leaves_nothing_to_approve(engine):
    await review_derived(engine)
    kept = await engine.experience(envelope("I live in Braga."), wait="consolidated")
    gone = await engine.experience(envelope("I work at Acme."), wait="consolidated")
    held = {p["event_ids"][0]: p for p in (await engine.proposals.list(SCOPE, status="pending"))["items"]}
    done = await engine.proposals.approve(SCOPE, held[kept.event_id]["id"], caller="user:alice")
    await engine.cancel(kept.event_id)  # its approved fact is excluded, as any derived fact would be
    assert done["committed"]["fact_id"] not in [f["id"] for f in (await engine.facts(SCOPE))["items"]]
    await engine.cancel(gone.event_id)
    late = await engine.proposals.approve(SCOPE, held[gone.event_id]["id"], caller="user:alice")
    assert late["committed"]["status"] == "rejected" and late["committed"]["reason"] == "event_gone"
    assert late["committed"]["fact_id"] is None and (await engine.facts(SCOPE))["items"] == []


async def test_a_rebuild_keeps_what_review_decided(engine):
    """Derived again, an event's held assertions are not held twice: pending stays pending (the
    same proposal), approved is committed again naming its approval, rejected stays out."""
    await review_derived(engine)
    approved = await engine.experience(envelope("I live in Lisbon."), wait="consolidated")
    rejected = await engine.experience(envelope("I work at Initech."), wait="consolidated")
    pending = await engine.experience(envelope("I like tea."), wait="consolidated")
    held = {p["event_ids"][0]: p for p in (await engine.proposals.list(SCOPE, status="pending"))["items"]}
    assert len(held) == 3
    await engine.proposals.approve(SCOPE, held[approved.event_id]["id"], caller="user:alice")
    await engine.proposals.reject(SCOPE, held[rejected.event_id]["id"], caller="user:alice")
    [before] = (await engine.facts(SCOPE))["items"]
    for _ in range(2):
        await engine.rebuild(SCOPE)
        await engine.flush(SCOPE)
        proposals = (await engine.proposals.list(SCOPE))["items"]
        assert sorted(p["id"] for p in proposals) == sorted(p["id"] for p in held.values())  # none added
        assert [p["id"] for p in proposals if p["status"] == "pending"] == [held[pending.event_id]["id"]]
        [fact] = (await engine.facts(SCOPE))["items"]
        assert (fact["predicate"], fact["object"]["name"]) == (before["predicate"], "Lisbon")
        assert fact["proposal"] == {"proposal_id": held[approved.event_id]["id"], "approved_by": "user:alice"}
        assert fact["supports"] == [approved.event_id]
        intake = {r["payload"]["event_id"]: r["payload"]["intake"]
                  for r in await engine.lifecycle(scope=SCOPE, events="extracted")}  # fmt: skip
        assert intake[rejected.event_id][0]["status"] == "rejected"
        assert intake[rejected.event_id][0]["reason"] == "review_rejected"
        assert intake[pending.event_id][0] == {"status": "pending_review", "proposal_id": held[pending.event_id]["id"]}


async def test_forgetting_an_event_deletes_the_facts_held_from_it(engine):
    await review_derived(engine)
    gone = await engine.experience(envelope("I live in Lisbon."), wait="consolidated")
    kept = await engine.experience(envelope("I like tea."), wait="consolidated")
    await engine.proposals.propose(proposal("I live in Porto."))  # an agent's: not derived from the event
    await engine.forget({"scope": SCOPE, "layers": ["events"], "cascade": "redact_events",
                         "selector": {"memory_ids": [gone.event_id]}})  # fmt: skip
    left = (await engine.proposals.list(SCOPE))["items"]
    assert sorted((p["source"], (p["event_ids"] or [None])[0] if p.get("event_ids") else None) for p in left) == [
        ("agent", None), ("derivation", kept.event_id)]
    assert "Lisbon" not in str(left)
