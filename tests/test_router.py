"""The query router (docs/router.md): its accuracy on the labelled sets, each type's handler in a
recall on both backends, and statement aspects on layer reads and in recall filters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cortexdb import EngineConfig, schemas
from cortexdb.engine.model import aspects
from cortexdb.engine.retrieve.router import TYPES, entity_hints, route
from cortexdb.errors import CortexError

from .conftest import envelope

ALICE = "org:acme/user:alice"
DATA = Path(__file__).parent / "data" / "router"


def accuracy(name: str) -> tuple[float, int, set[str]]:
    rows = [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]
    right = sum(route(row["query"]).type == row["type"] for row in rows)
    return right / len(rows), len(rows), {row["type"] for row in rows}


def test_router_accuracy_on_the_labelled_set():
    # measured by bench/router.py: 0.958 on the labelled set (115/120), 0.833 held out (30/36)
    score, count, labels = accuracy("queries.jsonl")
    assert count >= 100 and labels == set(TYPES)
    assert score >= 0.95
    held, count, labels = accuracy("heldout.jsonl")
    assert count >= 30 and labels == set(TYPES)
    assert held >= 0.80


def test_entity_hints_are_names_not_question_words():
    assert entity_hints("What is the relationship between Alice and Priya?") == ("Alice", "Priya")
    assert entity_hints("Where does Grace Hopper live?") == ("Grace Hopper",)
    assert entity_hints("Who is Tom's manager?") == ("Tom",)
    assert entity_hints("what did i say yesterday") == ()


def test_the_route_names_its_window_and_aspects():
    found = route("What are my food preferences from last week?")
    assert found.window == "last week" and "preference" in found.aspects
    assert route("").type == "exploratory"


async def seed(engine) -> None:
    texts = ["I work at Acme.", "My sister is Priya.", "I really like green tea.", "I prefer window seats.",
             "Our deploy failed again with a timeout error.", "We decided to use Postgres for the ledger.",
             "Priya lives in Lisbon."]  # fmt: skip
    for text in texts:
        await engine.experience(envelope(text), caller="user:alice", wait="indexed")


def phase(pack, name):
    return next(p for p in pack["provenance"]["trail"] if p["phase"] == name)


async def recall(engine, query: str, **extra):
    return await engine.recall({"scope": ALICE, "query": query, **extra}, caller="user:alice")


async def test_every_recall_is_routed_and_the_route_is_in_the_trail(engine):
    await seed(engine)
    pack = await recall(engine, "Where does Priya live?")
    routed = phase(pack, "route")
    assert routed["type"] == "entity_lookup" and pack["diagnostics"]["route"] == "entity_lookup"
    assert routed["entity_hints"][0]["name"] == "Priya" and routed["entity_hints"][0]["id"].startswith("ent_")
    assert set(routed) >= {"type", "entity_hints", "temporal", "aspects", "cues", "elapsed_ms"}
    assert [p["phase"] for p in pack["provenance"]["trail"]][:2] == ["classify", "route"]
    # entity_lookup's handler: the entity's relationships, its records linked
    assert any(e["to"]["name"] == "Priya" for e in pack["relationships"])
    assert phase(pack, "graph_expand")["boosted_candidates"] >= 1
    assert pack["layers"]["facts"][0]["subject"]["name"] == "Priya"


async def test_temporal_facets_aggregate_over_the_window(engine, clock):
    await engine.experience(envelope("We talked about the ledger migration and Postgres.",
                                     observed_at="2026-05-01T10:00:00Z"), caller="user:alice", wait="indexed")  # fmt: skip
    await seed(engine)  # today (2026-05-13)
    pack = await recall(engine, "Summarize what we discussed today")
    routed = phase(pack, "route")
    assert routed["type"] == "temporal_facets"
    assert routed["temporal"] == {"window": "today", "applied": True,
                                  "valid_during": ["2026-05-13T00:00:00Z", "2026-05-14T00:00:00Z"]}  # fmt: skip
    schemas.validator("stratified_pack").validate(pack)
    facets = pack["facets"]
    assert facets["records"] > 0 and facets["window"]["window"] == "today"
    topics = {t["value"] for t in facets["topics"]}
    assert "migration" not in topics  # said on May 1st: outside the window
    assert {"priya", "green"} <= topics and "user" not in topics
    counts = [t["count"] for t in facets["topics"]]
    assert counts == sorted(counts, reverse=True)
    assert {"works_at", "sister"} <= {p["value"] for p in facets["predicates"]}
    assert all(item["count"] >= 1 for facet in ("topics", "entities", "predicates", "aspects") for item in facets[facet])
    # a request's own temporal block wins over the question's window
    pack = await recall(engine, "Summarize what we discussed today",
                        temporal={"valid_during": ["2026-05-01T00:00:00Z", "2026-05-02T00:00:00Z"]})
    assert phase(pack, "route")["temporal"]["applied"] is False
    assert "migration" in {t["value"] for t in pack["facets"]["topics"]}


async def test_temporal_questions_report_their_window(engine):
    await seed(engine)
    pack = await recall(engine, "What did I say about the deploy yesterday?")
    routed = phase(pack, "route")
    assert routed["type"] == "temporal" and routed["temporal"]["window"] == "yesterday"
    assert routed["temporal"]["valid_during"] == ["2026-05-12T00:00:00Z", "2026-05-13T00:00:00Z"]
    assert routed["temporal"]["applied"] is False and "facets" not in pack


async def test_temporal_questions_rank_what_happened_in_their_window_first(engine):
    said = [("I fixed the billing bug in the invoice service.", "2026-05-06T09:00:00Z"),
            ("I fixed the login bug in the auth service.", "2026-05-13T09:00:00Z"),
            ("I fixed the search bug in the index service.", "2026-05-12T09:00:00Z"),
            ("I fixed the upload bug in the storage service.", "2026-04-20T09:00:00Z")]  # fmt: skip
    for text, when in said:
        await engine.experience(envelope(text, observed_at=when), caller="user:alice", wait="indexed")
    pack = await recall(engine, "Which bug did I fix last week?")
    routed = phase(pack, "route")
    assert routed["type"] == "temporal" and routed["temporal"]["applied"] is False
    assert routed["temporal"]["valid_during"] == ["2026-05-04T00:00:00Z", "2026-05-11T00:00:00Z"]
    assert routed["temporal"]["preferred"] is True
    assert routed["temporal"]["in_window"] >= 1 and routed["temporal"]["outside_window"] >= 3
    events = pack["layers"]["events"]
    assert events[0]["content"]["text"] == said[0][0]  # the one in the window first
    assert {e["content"]["text"] for e in events} == {text for text, _ in said}  # the others kept after
    pack = await recall(engine, "Which bug did I fix yesterday?")
    assert pack["layers"]["events"][0]["content"]["text"] == said[2][0]
    assert phase(pack, "route")["temporal"]["in_window"] >= 1
    # a window the resolver does not read: reported, nothing preferred, the recall still answers
    pack = await recall(engine, "Which bug did I fix lately?")
    routed = phase(pack, "route")
    assert routed["type"] == "temporal" and routed["temporal"]["window"] == "lately"
    assert routed["temporal"]["valid_during"] is None and routed["temporal"]["preferred"] is False
    assert "in_window" not in routed["temporal"] and len(pack["layers"]["events"]) == 4
    # a temporal question naming no window ("when ...") has nothing to prefer either
    routed = phase(await recall(engine, "When did I fix the billing bug?"), "route")
    assert routed["type"] == "temporal" and routed["temporal"]["preferred"] is False


async def test_temporal_questions_retrieve_their_window_beyond_the_candidate_cut(engine_factory):
    # two candidates per index and layer: the plain search keeps the short, many-times-matching
    # turns and cuts the long one that happened last week; the windowed retrieval finds it
    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", recall_candidates=2)
    crowd = [(f"Bug fix: the bug in service {n} was a bug.", f"2026-04-{10 + n:02d}T09:00:00Z") for n in range(6)]
    week = ("Long day of meetings about roadmaps, hiring, budgets and the offsite; "
            "somewhere in between I fixed a bug in the payments export.", "2026-05-07T09:00:00Z")  # fmt: skip
    async with engine_factory(config=config) as opened:
        for text, when in [*crowd, week]:
            await opened.experience(envelope(text, observed_at=when), caller="user:alice", wait="indexed")
        await opened.flush(ALICE)  # the episodes too (wait=indexed does not wait for them)
        plain = await recall(opened, "Which bug did I fix?")
        assert week[0] not in {e["content"]["text"] for e in plain["layers"]["events"]}  # below the cut
        pack = await recall(opened, "Which bug did I fix last week?")
        routed = phase(pack, "route")["temporal"]
        # the turn and its episode (the one that spans May 7th), both found only by the window
        assert routed["preferred"] is True and routed["retrieved_in_window"] == 2
        assert routed["in_window"] == 2 and routed["fallback"] is False
        assert pack["layers"]["episodes"][0]["started_at"] == week[1]
        events = [e["content"]["text"] for e in pack["layers"]["events"]]
        assert events[0] == week[0] and len(events) > 1  # first; the plain search's turns after it
        # a window that holds nothing: nothing retrieved in it, the plain results answer
        pack = await recall(opened, "Which bug did I fix yesterday?")
        routed = phase(pack, "route")["temporal"]
        assert routed["in_window"] == 0 and routed["retrieved_in_window"] == 0 and routed["fallback"] is True
        events = [e["content"]["text"] for e in pack["layers"]["events"]]
        assert events and week[0] not in events


async def test_aspect_questions_rank_their_aspect_first(engine):
    await seed(engine)
    pack = await recall(engine, "What are my preferences?")
    routed = phase(pack, "route")
    assert routed["type"] == "aspect_query" and routed["aspects"] == ["preference"]
    events = pack["layers"]["events"]
    assert aspects.of_record("events", events[0]) == "preference"
    assert aspects.of_record("events", events[1]) == "preference"


async def test_exploratory_questions_get_the_plain_blend(engine):
    await seed(engine)
    pack = await recall(engine, "ideas for a birthday gift")
    assert phase(pack, "route")["type"] == "exploratory" and pack["relationships"] == []
    assert phase(pack, "graph_expand")["boosted_candidates"] == 0


def test_aspects_of_facts_and_events():
    assert aspects.of_predicate("likes") == "preference"
    assert aspects.of_predicate("sister", "entity") == "relationship"
    assert aspects.of_predicate("works_at", "entity") == "knowledge"
    assert aspects.of_predicate("favorite_color") == "preference"
    assert aspects.of_predicate("lives_in", "entity") == "identity"
    assert aspects.of_text("We decided to ship on Friday.") == "decision"
    assert aspects.of_text("Always answer in French.") == "directive"
    assert aspects.of_text("The build keeps failing.") == "problem"
    assert aspects.of_text("I usually run every morning.") == "habit"
    assert aspects.of_text("My goal is to run a marathon.") == "goal"
    assert aspects.of_text("Hello there.") == "event"
    assert set(aspects.ASPECTS) == {"identity", "knowledge", "belief", "preference", "habit", "goal", "task",
                                    "directive", "decision", "event", "problem", "relationship"}  # fmt: skip


async def test_aspect_filters_on_layer_reads_and_in_recall(engine):
    await seed(engine)
    events = await engine.events(ALICE, aspect="decision")
    assert [e["content"]["text"] for e in events["items"]] == ["We decided to use Postgres for the ledger."]
    problems = await engine.events(ALICE, aspect="problem")
    assert [e["content"]["text"] for e in problems["items"]] == ["Our deploy failed again with a timeout error."]
    facts = await engine.facts(ALICE, aspect="relationship")
    assert [f["predicate"] for f in facts["items"]] == ["sister"]
    pack = await recall(engine, "tea seats Postgres", filters={"aspect": {"in": ["preference"]}})
    kept = [item for layer in ("events", "facts", "beliefs") for item in pack["layers"][layer]]
    assert kept and all(aspects.of_record(layer, item) == "preference"
                        for layer in ("events", "facts", "beliefs") for item in pack["layers"][layer])  # fmt: skip
    with pytest.raises(CortexError) as caught:
        await engine.facts(ALICE, aspect="mood")
    assert caught.value.http_status == 400 and caught.value.details["field"] == "aspect"


async def test_aspect_filter_on_belief_reads(engine):
    for text in ("I like green tea.", "I live in Lisbon.", "My sister is Priya."):
        await engine.experience(envelope(text), caller="user:alice", wait="consolidated")
    every = (await engine.beliefs(ALICE))["items"]
    assert len(every) == 3
    for aspect in ("preference", "identity", "relationship"):
        kept = (await engine.beliefs(ALICE, aspect=aspect))["items"]
        assert len(kept) == 1 and aspects.of_record("beliefs", kept[0]) == aspect
    assert (await engine.beliefs(ALICE, aspect="decision"))["items"] == []
    with pytest.raises(CortexError) as caught:
        await engine.beliefs(ALICE, aspect="mood")
    assert caught.value.http_status == 400 and caught.value.details["field"] == "aspect"



async def test_streamed_recall_carries_the_relationships_and_signals_parts(engine):
    await seed(engine)
    await engine.signals.record({"scope": ALICE, "subject": "user:alice", "type": "frustration", "intensity": 0.8})
    request = {"scope": ALICE, "query": "Where does Priya live?", "idempotency_key": "stream-1"}
    streamed = [event async for event in engine.recall_stream(request, caller="user:alice")]
    names = [name for name, _ in streamed]
    last_layer = max(i for i, name in enumerate(names) if name == "layer")
    assert names[last_layer + 1:last_layer + 4] == ["relationships", "signals", "context_block"]
    data = dict(streamed)
    pack = await recall(engine, request["query"])  # the same recall, not streamed
    assert data["relationships"]["items"] == pack["relationships"] and pack["relationships"]
    assert [s["type"] for s in data["signals"]["items"]] == [s["type"] for s in pack["signals"]] == ["frustration"]
    # a replay (the same idempotency key) streams them too, from the cached pack
    again = dict([event async for event in engine.recall_stream(request, caller="user:alice")])
    assert again["done"]["replay"] is True
    assert again["relationships"] == data["relationships"] and again["signals"] == data["signals"]
    # a temporal_facets recall streams its facets as well
    facets = dict([event async for event in engine.recall_stream(
        {"scope": ALICE, "query": "Summarize what we discussed today"}, caller="user:alice")])  # fmt: skip
    assert facets["facets"]["window"]["window"] == "today" and facets["facets"]["records"] > 0


async def test_relations_between_people_said_in_text_are_walked(engine):
    for text in ("Alice works with Priya.", "Priya reports to Dana.", "Dana is married to Sam."):
        await engine.experience(envelope(text), caller="user:alice", wait="indexed")
    walk = await engine.relationships.traverse(ALICE, from_="Alice", depth=3)
    assert [(e["from"]["name"], e["type"], e["to"]["name"]) for e in walk["items"]] == [
        ("Alice", "works_with", "Priya"), ("Priya", "reports_to", "Dana"), ("Dana", "married_to", "Sam")]
    pack = await recall(engine, "What is the relationship between Alice and Priya?")
    assert (pack["relationships"][0]["type"], pack["relationships"][0]["to"]["name"]) == ("works_with", "Priya")
