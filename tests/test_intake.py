"""Intake responses (docs/intake.md) on both backends: needs_clarification with questions (a bare
pronoun subject, a one-word name shared by several entities), surfacing hints on conflicts, noise
reported as rejected, and the pending-results queue (read, acknowledge, per caller, forget,
rebuild); and the pure rules (derive/clarify.py)."""

from __future__ import annotations

import pytest

from cortexdb import EngineConfig
from cortexdb.engine.derive import clarify
from cortexdb.errors import NotFound

from .conftest import envelope

SCOPE = "org:acme/user:alice"


async def intake_of(engine, text: str, **extra) -> tuple[str, list[dict]]:
    result = await engine.experience(envelope(text, **extra), wait="consolidated")
    record = (await engine.lifecycle(event_id=result.event_id, events="extracted"))[0]
    return result.event_id, record["payload"]["intake"]


# -- the pure rules ---------------------------------------------------------------------------------
def test_pronoun_questions_name_the_candidates():
    (entry,) = clarify.pronoun_questions("Bob met Carl yesterday. He lives in Paris.")
    assert entry["candidates"] == ["Bob", "Carl"] and entry["pronoun"] == "He"
    assert entry["questions"] == ['Does "He" in "He lives in Paris." mean Bob or Carl?']
    (alone,) = clarify.pronoun_questions("She works at Acme.")
    assert alone["candidates"] == [] and alone["questions"] == ['Who does "She" refer to in "She works at Acme."?']
    assert clarify.pronoun_questions("I live in Paris. The weather is nice.") == []
    many = clarify.pronoun_questions(" ".join(["He likes tea."] * 12))
    assert len(many) == clarify.MAX_QUESTIONS + 1 and many[-1]["count"] == 2  # the rest counted, not dropped
    fewer = clarify.pronoun_questions(" ".join(["He likes tea."] * 12), limit=3)  # intake_max_questions
    assert len(fewer) == 4 and fewer[-1]["count"] == 9


def test_ambiguity_needs_two_candidates_and_hints_read_well():
    assert clarify.ambiguous_entity("Alex", ["Alex Smith"], "fact_1") is None
    entry = clarify.ambiguous_entity("Alex", ["Alex Smith", "Alex Jones"], "fact_1")
    assert entry["questions"] == ["Which Alex do you mean: Alex Jones or Alex Smith?"]
    assert clarify.conflict_hint("alice lives in Berlin", ["alice lives in Paris"]) == \
        'Earlier: "alice lives in Paris". Now: "alice lives in Berlin". Which is right, or did it change?'  # fmt: skip
    assert clarify.noise([], True, False) == {"status": "rejected", "reason": "not_assertion_worthy"}
    assert clarify.noise([], False, False) is None and clarify.noise([], True, True) is None


# -- the engine, on both backends -------------------------------------------------------------------
async def test_a_pronoun_subject_needs_clarification(engine):
    event_id, intake = await intake_of(engine, "Bob met Carl yesterday. He lives in Paris.")
    (entry,) = [i for i in intake if i["status"] == "needs_clarification"]
    assert entry["reason"] == "unresolved_pronoun" and entry["candidates"] == ["Bob", "Carl"]
    assert entry["surfacing_hint"] == "You said he lives in Paris: did you mean Bob or Carl?"
    (pending,) = (await engine.intake.pending(SCOPE))["items"]
    assert pending["event_id"] == event_id and pending["caller"] == "user:alice" and pending["id"].startswith("intk_")


async def test_two_entities_of_the_same_name_need_clarification(engine):
    await intake_of(engine, "Alex Smith works at Acme.")
    await intake_of(engine, "Alex Jones works at Globex.")
    _, intake = await intake_of(engine, "Alex lives in Rome.")
    (entry,) = [i for i in intake if i["status"] == "needs_clarification"]
    assert entry["reason"] == "ambiguous_entity" and entry["candidates"] == ["Alex Jones", "Alex Smith"]
    assert entry["fact_id"] == next(i["fact_id"] for i in intake if i["status"] == "accepted")


async def test_conflicts_carry_a_surfacing_hint(engine):
    await intake_of(engine, "My favourite colour is blue.")
    _, intake = await intake_of(engine, "My favourite colour is green.")
    (entry,) = [i for i in intake if i["status"] == "conflict_detected"]
    assert entry["surfacing_hint"] == ('Earlier: "user:alice favourite colour blue". Now: '
                                       '"user:alice favourite colour green". Which is right, or did it change?')  # fmt: skip
    (pending,) = (await engine.intake.pending(SCOPE, status="conflict_detected"))["items"]
    assert pending["surfacing_hint"] == entry["surfacing_hint"]


async def test_noise_is_reported_as_rejected(engine):
    _, intake = await intake_of(engine, "hmm ok lol")
    assert intake == [{"status": "rejected", "reason": "not_assertion_worthy"}]
    _, nothing_asked = await intake_of(engine, "hmm ok", directives={"extract": ["entities"]})
    assert nothing_asked == []  # facts were not asked for: not noise
    assert (await engine.intake.pending(SCOPE))["items"] == []  # rejections are not queued by default


async def test_the_queue_is_per_caller_and_acknowledged_once(engine):
    await engine.experience(envelope("He lives in Oslo."), caller="user:alice", wait="consolidated")
    await engine.experience(envelope("She works at Acme."), caller="agent:bot", wait="consolidated")
    (mine,) = (await engine.intake.pending(SCOPE, caller="user:alice"))["items"]
    (bots,) = (await engine.intake.pending(SCOPE, caller="agent:bot"))["items"]
    with pytest.raises(NotFound):
        await engine.intake.ack(SCOPE, bots["id"], caller="user:alice")  # not alice's to acknowledge
    done = await engine.intake.ack(SCOPE, mine["id"], caller="user:alice")
    assert done["acknowledged_by"] == "user:alice" and done["acknowledged_at"]
    assert (await engine.intake.pending(SCOPE, caller="user:alice"))["items"] == []
    with pytest.raises(NotFound):
        await engine.intake.ack(SCOPE, mine["id"], caller="user:alice")


async def test_queued_statuses_are_configurable(engine_factory):
    config = EngineConfig(default_caller="user:alice", intake_queue_statuses=("rejected",))
    async with engine_factory(config=config) as engine:
        await intake_of(engine, "hmm ok lol")
        await intake_of(engine, "He lives in Oslo.")
        assert [i["reason"] for i in (await engine.intake.pending(SCOPE))["items"]] == ["not_assertion_worthy"]


async def test_forget_takes_the_results_with_it(engine):
    await intake_of(engine, "My favourite colour is blue.")
    await intake_of(engine, "My favourite colour is green.")
    await intake_of(engine, "He lives in Oslo.")
    assert len((await engine.intake.pending(SCOPE))["items"]) == 2
    await engine.forget({"scope": SCOPE, "selector": {"predicate": "favourite_colour"}})
    assert [i["reason"] for i in (await engine.intake.pending(SCOPE))["items"]] == ["unresolved_pronoun"]
    await engine.forget({"scope": SCOPE, "layers": ["events"], "cascade": "redact_events", "confirm_all": True})
    assert (await engine.intake.pending(SCOPE))["items"] == []


async def test_rebuild_derives_the_queue_again_without_what_was_acknowledged(engine):
    await intake_of(engine, "He lives in Oslo.")
    await intake_of(engine, "She works at Acme.")
    before = (await engine.intake.pending(SCOPE))["items"]
    assert [i["sentence"] for i in before] == ["He lives in Oslo.", "She works at Acme."]
    await engine.intake.ack(SCOPE, before[0]["id"])  # acknowledged: primary, kept across a rebuild
    await engine.rebuild(SCOPE)
    await engine.flush(SCOPE)
    (after,) = (await engine.intake.pending(SCOPE))["items"]
    assert after["sentence"] == "She works at Acme." and after["id"] != before[1]["id"]
    await engine.rebuild(SCOPE)  # a second rebuild: the same
    await engine.flush(SCOPE)
    assert [i["sentence"] for i in (await engine.intake.pending(SCOPE))["items"]] == ["She works at Acme."]


async def test_forgetting_an_event_forgets_its_acknowledgements(engine):
    event_id, _ = await intake_of(engine, "He lives in Oslo.")
    (item,) = (await engine.intake.pending(SCOPE))["items"]
    await engine.intake.ack(SCOPE, item["id"])
    partition = engine._ctx.tables.partition(SCOPE)
    assert [f async for f in partition.intake_acks.ids((event_id,))]
    await engine.forget({"scope": SCOPE, "layers": ["events"], "cascade": "redact_events",
                         "selector": {"memory_ids": [event_id]}})  # fmt: skip
    assert [f async for f in partition.intake_acks.ids((event_id,))] == []


def test_a_fingerprint_ignores_record_ids_and_times():
    entry = {"status": "conflict_detected", "fact_id": "fact_1", "conflicts_with": ["fact_0"],
             "surfacing_hint": "You said blue; earlier green."}  # fmt: skip
    again = {**entry, "fact_id": "fact_9", "conflicts_with": ["fact_8"], "id": "intk_2", "created_at": "x"}
    assert clarify.fingerprint(entry) == clarify.fingerprint(again)
    assert clarify.fingerprint(entry) != clarify.fingerprint({**entry, "surfacing_hint": "You said red."})


def test_pronoun_questions_offer_the_nearest_names_and_stay_linear():
    def name(i: int) -> str:  # Baa, Bab, ...: distinct capitalised words
        return "B" + "".join("abcdefghijklmnopqrstuvwxyz"[(i // 26**k) % 26] for k in (2, 1, 0))

    names = " ".join(f"I met {name(i)}." for i in range(3000))  # a long text of distinct names
    (entry,) = clarify.pronoun_questions(names + " He lives in Paris.", candidates=3)
    last = [name(i) for i in (2997, 2998, 2999)]
    assert entry["candidates"] == last
    assert entry["questions"] == [f'Does "He" in "He lives in Paris." mean {last[0]}, {last[1]} or {last[2]}?']
    default = clarify.pronoun_questions(names + " He lives in Paris.")[0]["candidates"]
    assert len(default) == clarify.MAX_CANDIDATES and default[-1] == last[-1]
