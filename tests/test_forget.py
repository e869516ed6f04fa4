"""Selective forget (reference §8.5, §11.1, §11.2) through ``Engine.forget``, on both backends:
each cascade mode and selector field, the confirm_all guard, idempotency, and what stays
forgotten across restarts and rebuilds (suppressions), belief revision and supersession chains."""

from __future__ import annotations

import datetime as dt

import pytest

import cortexdb
from cortexdb import EngineConfig
from cortexdb.backends.memory import MemoryStore
from cortexdb.errors import (
    EmptySelectorWithoutConfirmation,
    IdempotencyConflict,
    InvalidForget,
    InvalidTemporal,
    MissingRequiredField,
    ResourceDeleted,
)

from .conftest import envelope

SCOPE = "org:acme/user:alice"
OTHER = "org:acme/user:bob"
CONFIG = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice")
TEXTS = [  # (text, observed_at minute)
    ("I live in Paris.", 0),
    ("I like tea.", 1),
    ("I like coffee.", 2),
    ("My favourite colour is blue.", 3),
    ("Bob works at Acme.", 4),
    ("Acme is a company.", 5),
]


@pytest.fixture
def opener(backend, tmp_path, clock):
    """Open (and reopen) an engine over the same data: a kept memory store, or a data dir."""
    store = MemoryStore()

    def open_(**kwargs):
        kwargs.setdefault("clock", clock)
        kwargs.setdefault("id_seed", 7)
        kwargs.setdefault("config", CONFIG)
        if backend == "memory":
            return cortexdb.open_engine(store=store, **kwargs)
        return cortexdb.open_engine("leveldb", path=str(tmp_path / "data"), **kwargs)

    return open_


def at(minute: int) -> str:
    """14:00 plus ``minute`` on the test day (the clock reads 15:42:09)."""
    return (dt.datetime(2026, 5, 13, 14, tzinfo=dt.UTC) + dt.timedelta(minutes=minute)).strftime("%Y-%m-%dT%H:%M:%SZ")


async def write(engine, texts=TEXTS, scope=SCOPE) -> dict[str, str]:
    ids = {}
    for text, minute in texts:
        done = await engine.experience(envelope(text, scope=scope, observed_at=at(minute)), wait="consolidated")
        ids[text] = done.event_id
    await engine.flush(scope, seal=True)
    return ids


async def facts(engine, scope=SCOPE, **kwargs) -> list[dict]:
    return (await engine.facts(scope, valid_during="..", limit=1000, **kwargs))["items"]  # every fact


async def beliefs(engine, scope=SCOPE) -> list[dict]:
    return (await engine.beliefs(scope, valid_during="..", limit=1000))["items"]  # every belief


def claim(record: dict) -> tuple:
    """(subject name, predicate, object) of a fact or a belief."""
    c = record.get("claim", record)
    obj = c["object"]
    return c["subject"]["name"], c["predicate"], obj.get("name") or obj.get("value")


async def claims(engine, scope=SCOPE) -> tuple[set, set]:
    return {claim(f) for f in await facts(engine, scope)}, {claim(b) for b in await beliefs(engine, scope)}


async def forget(engine, scope=SCOPE, **request):
    return await engine.forget({"scope": scope, **request})


# -- cascade modes -------------------------------------------------------------------------------
async def test_derived_only_deletes_the_named_layers_and_leaves_events_untouched(engine):
    ids = await write(engine)
    before = {e["id"]: e["content"] for e in (await engine.events(SCOPE))["items"]}
    tea = next(f for f in await facts(engine) if claim(f)[2] == "tea")
    result = await forget(engine, layers=["facts"], selector={"predicate": "likes"})
    assert result == {"deleted": {"events": 0, "episodes": 0, "facts": 2, "beliefs": 2, "understanding": 0},
                      "audit_id": None}  # fmt: skip
    fact_claims, belief_claims = await claims(engine)
    assert not any(c[1] == "likes" for c in fact_claims | belief_claims)  # their beliefs went too
    assert ("user:alice", "favourite_colour", "blue") in fact_claims
    assert {e["id"]: e["content"] for e in (await engine.events(SCOPE))["items"]} == before
    event = await engine.get_event(SCOPE, ids["I like tea."])
    assert f"redacted:{tea['id']}" in event["derives"] and tea["id"] not in event["derives"]
    with pytest.raises(ResourceDeleted) as gone:
        await engine.get_fact(SCOPE, tea["id"])
    assert gone.value.details["reason"] == "forgotten"
    assert len((await engine.episodes(SCOPE))["items"]) == 1  # episodes not named: kept


async def test_redact_events_blanks_the_evidence_and_keeps_its_identity(engine):
    ids = await write(engine)
    tea_event = await engine.get_event(SCOPE, ids["I like tea."])
    result = await forget(engine, layers=["facts", "beliefs"], selector={"predicate": "likes"},
                          cascade="redact_events")  # fmt: skip
    assert result["deleted"]["events"] == 2 and result["deleted"]["facts"] == 2
    event = await engine.get_event(SCOPE, ids["I like tea."])
    assert event["content"] == {"kind": "redacted", "original_kind": "message"}
    assert event["context"] == {"observed_at": tea_event["context"]["observed_at"],
                                "recorded_at": tea_event["context"]["recorded_at"]}  # fmt: skip
    kept = ("id", "wal_offset", "scope", "actor")
    assert {k: event[k] for k in kept} == {k: tea_event[k] for k in kept}
    assert all(d.startswith("redacted:") for d in event["derives"] if not d.startswith("ep_"))
    untouched = await engine.get_event(SCOPE, ids["I live in Paris."])
    assert untouched["content"]["text"] == "I live in Paris."
    episode = (await engine.episodes(SCOPE))["items"][0]  # described again without their text
    assert "tea" not in str(episode) and "coffee" not in str(episode)
    assert ids["I like tea."] in episode["events"]


async def test_redact_events_with_events_named_deletes_what_rests_on_them_alone(engine):
    ids = await write(engine)
    result = await forget(engine, layers=["events", "facts"], cascade="redact_events",
                          selector={"memory_ids": [ids["My favourite colour is blue."]]})  # fmt: skip
    assert result["deleted"]["events"] == 1 and result["deleted"]["facts"] == 1
    fact_claims, _ = await claims(engine)
    assert not any(c[1] == "favourite_colour" for c in fact_claims)
    assert ("user:alice", "likes", "tea") in fact_claims


async def test_records_citing_redacted_events_say_so(engine):
    ids = await write(engine, [("I like tea. My favourite colour is blue.", 0)])
    await forget(engine, layers=["facts"], selector={"predicate": "likes"}, cascade="redact_events")
    colour = next(f for f in await facts(engine) if f["predicate"] == "favourite_colour")
    assert colour["_partial"] is True and colour["_partial_reason"] == "supporting_evidence_redacted"
    belief = next(b for b in await beliefs(engine) if b["claim"]["predicate"] == "favourite_colour")
    assert belief["supporting_evidence_redacted"] is True
    assert belief["supporting_evidence_redacted_fraction"] == 1.0
    assert (await engine.get_event(SCOPE, ids["I like tea. My favourite colour is blue."]))["content"]["kind"] == "redacted"


# -- the selector ------------------------------------------------------------------------------
SELECTIONS = {
    "about_subject": ({"about_subject": "Bob"}, {("Bob", "works_at", "Acme")}),
    "about_entity": ({"about_entity": "Acme"}, {("Bob", "works_at", "Acme"), ("Acme", "is", "a company")}),
    "predicate": ({"predicate": "likes"}, {("user:alice", "likes", "tea"), ("user:alice", "likes", "coffee")}),
    "valid_during": ({"valid_during": ["2026-05-13T14:01:00Z", "2026-05-13T14:04:00Z"]},  # overlapping it
                     {("user:alice", "likes", "tea"), ("user:alice", "likes", "coffee"),
                      ("user:alice", "lives_in", "Paris"), ("user:alice", "favourite_colour", "blue")}),
    "conjunction": ({"about_subject": "user:alice", "predicate": "likes",
                     "valid_during": ["2026-05-13T14:02:00Z", None]},
                    {("user:alice", "likes", "tea"), ("user:alice", "likes", "coffee")}),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(SELECTIONS))
async def test_each_selector_field_selects_what_it_says(engine, name):
    await write(engine)
    selector, expected = SELECTIONS[name]
    all_facts, _ = await claims(engine)
    result = await forget(engine, layers=["facts"], selector=selector)
    remaining, _ = await claims(engine)
    assert all_facts - remaining == expected
    assert result["deleted"]["facts"] == len(expected)


async def test_valid_during_excludes_what_ended_before_it(engine):
    await write(engine, [("I live in Paris.", 0), ("I live in Berlin.", 10)])
    await forget(engine, layers=["facts"], selector={"valid_during": ["2026-05-13T14:20:00Z", None]})
    assert {c[2] for c in (await claims(engine))[0]} == {"Paris"}  # Paris ended at 14:10


async def test_recorded_during_and_memory_ids_or(engine, clock):
    await write(engine, TEXTS[:2])
    clock.advance(3600)
    await write(engine, [("I like coffee.", 2)])
    tea = next(f for f in await facts(engine) if claim(f)[2] == "tea")
    window = ["2026-05-13T16:00:00Z", None]  # recorded after the clock moved: coffee only
    result = await forget(engine, layers=["facts"], selector={"recorded_during": window, "memory_ids": [tea["id"]]})
    assert result["deleted"]["facts"] == 2
    assert {c[2] for c in (await claims(engine))[0]} == {"Paris"}


async def test_memory_ids_alone_select_only_them(engine):
    await write(engine)
    tea = next(f for f in await facts(engine) if claim(f)[2] == "tea")
    result = await forget(engine, layers=["facts"], selector={"memory_ids": [tea["id"], "fact_missing"]})
    assert result["deleted"]["facts"] == 1
    assert len(await facts(engine)) == len(TEXTS) - 1


async def test_an_empty_selector_needs_confirm_all(engine):
    await write(engine)
    for selector in (None, {}, {"about_subject": None, "predicate": "", "memory_ids": [], "valid_during": None}):
        request = {"layers": ["facts"]} | ({"selector": selector} if selector is not None else {})
        with pytest.raises(EmptySelectorWithoutConfirmation):
            await forget(engine, **request)
    assert len(await facts(engine)) == len(TEXTS)
    result = await forget(engine, confirm_all=True)
    assert result["deleted"] | {"beliefs": 0} == {"events": 0, "episodes": 1, "facts": len(TEXTS), "beliefs": 0,
                                                  "understanding": 0}  # fmt: skip
    assert await engine.layer_counts(SCOPE) == {"events": len(TEXTS), "episodes": 0, "facts": 0, "beliefs": 0}


BAD = [
    ({"layers": ["facts", "dreams"]}, InvalidForget, "layers[1]"),
    ({"layers": []}, InvalidForget, "layers"),
    ({"layers": ["events"]}, InvalidForget, "layers"),  # derived_only leaves events alone
    ({"cascade": "events_too"}, InvalidForget, "cascade"),
    ({"selector": {"predicate": 3}}, InvalidForget, "selector.predicate"),
    ({"selector": {"mood": "sad"}}, InvalidForget, "selector.mood"),
    ({"selector": {"memory_ids": ["fact_1", "pack_2"]}}, InvalidForget, "selector.memory_ids[1]"),
    ({"layers": ["facts"], "selector": {"memory_ids": ["belief_1"]}}, InvalidForget, "selector.memory_ids[0]"),
    ({"selector": {"valid_during": ["tomorrow"]}}, InvalidTemporal, "selector.valid_during"),
    ({"confirm_all": "yes"}, InvalidForget, "confirm_all"),
    ({"idempotency_key": 7}, InvalidForget, "idempotency_key"),
    ({"colour": "red"}, InvalidForget, "colour"),
    ({"scope": None}, MissingRequiredField, "scope"),
]  # fmt: skip


@pytest.mark.parametrize("request_, error, field", BAD)
async def test_bad_requests_name_their_field(engine, request_, error, field):
    with pytest.raises(error) as raised:
        await engine.forget({"scope": SCOPE, "selector": {"predicate": "likes"}, **request_})
    assert raised.value.details["field"] == field
    assert 400 <= raised.value.http_status < 500


async def test_an_idempotency_key_replays_the_first_answer(engine):
    await write(engine)
    request = {"scope": SCOPE, "layers": ["facts"], "selector": {"predicate": "likes"}, "idempotency_key": "f-1"}
    first = await engine.forget(request, audit_id="audit_first")
    await write(engine, [("I like tea.", 30)])  # new evidence: a new fact the replay must not touch
    assert await engine.forget(request, audit_id="audit_second") == first
    assert ("user:alice", "likes", "tea") in (await claims(engine))[0]
    with pytest.raises(IdempotencyConflict):
        await engine.forget({**request, "selector": {"predicate": "lives_in"}})


async def test_forget_is_scoped(engine):
    await write(engine)
    await write(engine, [("I like tea.", 1)], scope=OTHER)
    await forget(engine, confirm_all=True)
    assert ("user:alice", "likes", "tea") in (await claims(engine, OTHER))[0]


# -- staying forgotten -----------------------------------------------------------------------
async def test_derived_only_stays_forgotten_across_restart_and_rebuild(opener):
    async with opener() as engine:
        await write(engine)
        result = await forget(engine, layers=["facts", "beliefs", "episodes"], selector={"predicate": "likes"})
        assert (result["deleted"]["facts"], result["deleted"]["episodes"]) == (2, 1)
        expected = await claims(engine)
    async with opener() as engine:  # a restart: nothing is derived again
        assert await claims(engine) == expected
        assert (await engine.episodes(SCOPE))["items"] == []
        await engine.rebuild(SCOPE)  # the WAL replayed through the pipeline
        assert await claims(engine) == expected
        assert (await engine.episodes(SCOPE))["items"] == []
        recall = await engine.recall({"scope": SCOPE, "query": "tea coffee", "view": "granular"})
        found = recall["layers"]["facts"] + recall["layers"]["beliefs"]
        assert found and not any(claim(record)[1] == "likes" for record in found)
        await write(engine, [("I like tea.", 40)])  # new evidence is not suppressed
        assert ("user:alice", "likes", "tea") in (await claims(engine))[0]
        assert (await engine.episodes(SCOPE))["items"]  # a new event joins a new episode


async def test_a_forgotten_belief_stays_forgotten_until_new_evidence(opener):
    async with opener() as engine:
        await write(engine)
        await forget(engine, layers=["beliefs"], selector={"predicate": "favourite_colour"})
        fact_claims, belief_claims = await claims(engine)
        assert ("user:alice", "favourite_colour", "blue") in fact_claims
        assert ("user:alice", "favourite_colour", "blue") not in belief_claims
        await engine.rebuild(SCOPE)
        assert await claims(engine) == (fact_claims, belief_claims)
        await write(engine, [("I like green tea.", 41)])  # the pair untouched: still no belief
        assert ("user:alice", "favourite_colour", "blue") not in (await claims(engine))[1]
        await write(engine, [("My favourite colour is blue.", 42)])  # new evidence for the claim
        assert ("user:alice", "favourite_colour", "blue") in (await claims(engine))[1]


# -- consistency -----------------------------------------------------------------------------
async def test_beliefs_citing_forgotten_facts_are_revised(engine):
    await write(engine, [("I live in Paris.", 0)])
    await write(engine, [("I live in Oslo.", 0)])  # the same valid time: in conflict with Paris
    paris = next(b for b in await beliefs(engine) if claim(b)[2] == "Paris")
    oslo_fact = next(f for f in await facts(engine) if claim(f)[2] == "Oslo")
    assert oslo_fact["id"] in {s["id"] for s in paris["supports"]}  # evidence against Paris
    await forget(engine, layers=["facts"], selector={"memory_ids": [oslo_fact["id"]]})
    revised = await engine.get_belief(SCOPE, paris["id"])
    assert oslo_fact["id"] not in {s["id"] for s in revised["supports"]}
    assert revised["confidence"] > paris["confidence"] and revised["contradicts"] == []
    known = {f["id"] for f in await facts(engine)}
    for belief in await beliefs(engine):  # no belief cites a record that is not there
        assert {s["id"] for s in belief["supports"]} <= known


def chain(timeline: list[dict]) -> list[tuple]:
    names = {entry["fact_id"]: entry["value"]["name"] for entry in timeline}
    return [(entry["value"]["name"], entry["valid_from"], entry["valid_to"], names.get(entry["superseded_by"]),
             names.get(entry["supersedes"])) for entry in timeline]  # fmt: skip


async def test_supersession_chains_stay_consistent(engine):
    await write(engine, [("I live in Paris.", 0), ("I live in Berlin.", 10), ("I live in Rome.", 20)])
    berlin = next(f for f in await facts(engine) if claim(f)[2] == "Berlin")
    await forget(engine, layers=["facts"], selector={"memory_ids": [berlin["id"]]})
    timeline = (await engine.facts_timeline(SCOPE, subject="user:alice", predicate="lives_in"))["timeline"]
    assert chain(timeline) == [("Paris", at(0), at(20), "Rome", None), ("Rome", at(20), None, None, "Paris")]
    await engine.rebuild(SCOPE)  # what a rebuild derives without Berlin is the same chain
    rebuilt = (await engine.facts_timeline(SCOPE, subject="user:alice", predicate="lives_in"))["timeline"]
    assert chain(rebuilt) == chain(timeline)
    rome = next(f for f in await facts(engine) if claim(f)[2] == "Rome")
    await forget(engine, layers=["facts"], selector={"memory_ids": [rome["id"]]})
    current = [f for f in (await engine.facts(SCOPE))["items"] if f["predicate"] == "lives_in"]
    assert [claim(f)[2] for f in current] == ["Paris"] and current[0]["valid_to"] is None
    live = [b for b in (await engine.beliefs(SCOPE))["items"] if b["claim"]["predicate"] == "lives_in"]
    assert [claim(b)[2] for b in live] == ["Paris"]  # the claim reopened with its fact


async def test_forgotten_episodes_leave_the_chain_of_episodes(engine):
    await write(engine, [("I like tea.", 0)])
    await write(engine, [("I like coffee.", 50)])
    await write(engine, [("I like cocoa.", 100)])
    first, second, third = sorted((await engine.episodes(SCOPE))["items"], key=lambda e: e["started_at"])
    assert third["causal_predecessor"] == second["id"]
    await forget(engine, layers=["episodes"], selector={"memory_ids": [second["id"]]})
    assert (await engine.get_episode(SCOPE, third["id"]))["causal_predecessor"] == first["id"]
    with pytest.raises(ResourceDeleted):
        await engine.get_episode(SCOPE, second["id"])
