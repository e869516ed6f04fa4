"""Relationships (docs/relationships.md) on both backends: derived from facts whose object is an
entity and from explicit writes; the walk applies as_of, types and min_confidence while walking
(an edge that fails them is not followed, so nothing is reached through it); recall's
``graph_expand`` uses the walk and the pack carries a ``relationships`` part."""

from __future__ import annotations

import pytest

from cortexdb import schemas
from cortexdb.errors import CortexError, InvalidQuery, NotFound

from .conftest import envelope

ALICE = "org:acme/user:alice"


async def relate(engine, source: str, kind: str, target: str, **extra) -> str:
    """An explicit relationship, captured and derived; the id of the relationship (fact)."""
    body = {"scope": ALICE, "from": source, "type": kind, "to": target, **extra}
    result = await engine.experience(engine.relationships.envelope(body, engine.clock.now()),
                                     caller="user:alice", wait="indexed")  # fmt: skip
    facts = [d for d in result.derives if d.startswith("fact_")]
    assert len(facts) == 1, result
    return facts[0]


async def chain(engine, clock) -> dict[str, str]:
    """Alice -manages-> Priya -works_with-> Tom -married_to-> Ines (0.4), Bob -mentors-> Alice."""
    ids = {"manages": await relate(engine, "Alice", "manages", "Priya", confidence=0.9)}
    ids["works_with"] = await relate(engine, "Priya", "works_with", "Tom", confidence=0.8)
    ids["married_to"] = await relate(engine, "Tom", "married_to", "Ines", confidence=0.4)
    ids["mentors"] = await relate(engine, "Bob", "mentors", "Alice", confidence=0.95)
    return ids


async def test_a_walk_follows_both_directions_to_its_depth(engine, clock):
    ids = await chain(engine, clock)
    one = await engine.relationships.traverse(ALICE, from_="Alice")
    assert {e["id"] for e in one["items"]} == {ids["manages"], ids["mentors"]}
    assert one["from"]["name"] == "Alice" and one["truncated"] is False
    out = await engine.relationships.traverse(ALICE, from_="Alice", direction="out")
    assert [e["id"] for e in out["items"]] == [ids["manages"]]
    incoming = await engine.relationships.traverse(ALICE, from_="Alice", direction="in")
    edge = incoming["items"][0]
    assert edge["id"] == ids["mentors"] and edge["from"]["name"] == "Bob" and edge["to"]["name"] == "Alice"
    deep = await engine.relationships.traverse(ALICE, from_="Alice", depth=3)
    assert {e["id"] for e in deep["items"]} == set(ids.values())
    assert {e["id"]: e["hop"] for e in deep["items"]}[ids["married_to"]] == 3
    assert {n["name"]: n["hop"] for n in deep["nodes"]} == {"Alice": 0, "Priya": 1, "Bob": 1, "Tom": 2, "Ines": 3}
    for edge in deep["items"]:
        schemas.validator("relationship").validate(edge)
        assert edge["citations"] and all(c.startswith("evt_") for c in edge["citations"])
    schemas.validator("relationship_page").validate(deep)


async def test_confidence_and_type_filters_apply_during_the_walk(engine, clock):
    ids = await chain(engine, clock)
    # Tom -married_to-> Ines (0.4) fails the floor: Ines is not reached, and nothing beyond her
    strong = await engine.relationships.traverse(ALICE, from_="Alice", depth=4, min_confidence=0.5)
    assert ids["married_to"] not in {e["id"] for e in strong["items"]}
    assert "Ines" not in {n["name"] for n in strong["nodes"]}
    # a type filter is a walk over that type only: from Alice, works_with is two hops away
    # through manages, which the walk may not take
    typed = await engine.relationships.traverse(ALICE, from_="Alice", depth=3, type="works_with")
    assert typed["items"] == [] and [n["name"] for n in typed["nodes"]] == ["Alice"]
    typed = await engine.relationships.traverse(ALICE, from_="Priya", depth=3, type="works_with,married_to")
    assert {e["type"] for e in typed["items"]} == {"works_with", "married_to"}
    assert typed["types"] == ["works_with", "married_to"]


async def test_as_of_walks_the_graph_as_it_was(engine, clock):
    before = clock.now()
    clock.advance(3600)
    first = await relate(engine, "Alice", "manages", "Priya")
    clock.advance(3600)
    second = await relate(engine, "Priya", "works_with", "Tom")
    middle = clock.now()
    clock.advance(3600)
    now = await engine.relationships.traverse(ALICE, from_="Alice", depth=2)
    assert {e["id"] for e in now["items"]} == {first, second}
    then = await engine.relationships.traverse(ALICE, from_="Alice", depth=2, as_of=middle.isoformat())
    assert {e["id"] for e in then["items"]} == {first, second}
    earlier = await engine.relationships.traverse(ALICE, from_="Priya", depth=2,
                                                  as_of=(middle.replace(microsecond=0) - (middle - before) / 2).isoformat())  # fmt: skip
    assert {e["id"] for e in earlier["items"]} == {first}  # works_with was not recorded yet
    nothing = await engine.relationships.traverse(ALICE, from_="Priya", depth=2, as_of=before.isoformat())
    assert nothing["items"] == []


async def test_a_relationship_with_a_valid_time_window(engine, clock):
    ended = await relate(engine, "Alice", "dated", "Marc", valid_from="2020-01-01T00:00:00Z",
                         valid_to="2022-01-01T00:00:00Z")  # fmt: skip
    current = await engine.relationships.traverse(ALICE, from_="Alice")
    assert current["items"] == []  # it no longer holds
    during = await engine.relationships.traverse(ALICE, from_="Alice", as_of="2021-06-01T00:00:00Z")
    # as_of pins both axes: recorded later than 2021, the edge was not known then
    assert during["items"] == []
    assert ended.startswith("fact_")


async def test_relationships_derived_from_conversation(engine):
    await engine.experience(envelope("I work at Acme."), caller="user:alice", wait="indexed")
    walk = await engine.relationships.traverse(ALICE, from_="user:alice")
    assert [(e["type"], e["to"]["name"]) for e in walk["items"]] == [("works_at", "Acme")]
    back = await engine.relationships.traverse(ALICE, from_="Acme", direction="in")
    assert [e["from"]["id"] for e in back["items"]] == [walk["from"]["id"]]


async def test_a_forgotten_relationship_is_gone_from_both_ends(engine, clock):
    ids = await chain(engine, clock)
    await engine.forget({"scope": ALICE, "layers": ["facts"], "selector": {"predicate": "mentors"}},
                        caller="user:alice")  # fmt: skip
    walk = await engine.relationships.traverse(ALICE, from_="Alice", direction="in")
    assert walk["items"] == []
    assert ids["mentors"] not in {e["id"] for e in (await engine.relationships.traverse(ALICE, from_="Alice"))["items"]}
    with pytest.raises(NotFound):  # Bob's only relationship is gone: no index row names him any more
        await engine.relationships.traverse(ALICE, from_="Bob")


@pytest.mark.parametrize(("params", "field"), [
    ({"from_": ""}, "from"), ({"from_": "Alice", "direction": "sideways"}, "direction"),
    ({"from_": "Alice", "depth": 0}, "depth"), ({"from_": "Alice", "depth": 99}, "depth"),
    ({"from_": "Alice", "min_confidence": 2}, "min_confidence"), ({"from_": "Alice", "as_of": "yesterday"}, "as_of"),
    ({"from_": "Alice", "type": [""]}, "type"), ({"from_": "Alice", "type": ",".join("abcdefghijklmnopqrstuvwxyz0123456789")}, "type"),
])  # fmt: skip
async def test_bad_walks_are_refused(engine, clock, params, field):
    await relate(engine, "Alice", "manages", "Priya")
    with pytest.raises(CortexError) as caught:
        await engine.relationships.traverse(ALICE, **params)
    assert caught.value.http_status in (400, 422) and caught.value.details["field"] == field


async def test_an_unknown_entity_is_not_found_and_other_scopes_do_not_show(engine):
    with pytest.raises(NotFound) as unknown:
        await engine.relationships.traverse(ALICE, from_="Nobody")
    body = {"scope": "org:acme/user:bob", "from": "Zed", "type": "knows", "to": "Yan"}
    await engine.experience(engine.relationships.envelope(body, engine.clock.now()), caller="user:bob",
                            wait="indexed")  # fmt: skip
    with pytest.raises(NotFound) as elsewhere:  # Zed exists, in a scope this read does not cover
        await engine.relationships.traverse(ALICE, from_="Zed")
    assert set(unknown.value.details) == set(elsewhere.value.details) == {"from", "scope"}
    assert (await engine.relationships.traverse("org:acme/user:bob", from_="Zed"))["items"][0]["to"]["name"] == "Yan"


async def test_max_edges_truncates_and_says_so(engine_factory, clock):
    from cortexdb import EngineConfig

    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", relationship_max_edges=2)
    async with engine_factory(config=config) as engine:
        for friend in ("Bea", "Cy", "Dot"):
            await relate(engine, "Alice", "knows", friend)
        walk = await engine.relationships.traverse(ALICE, from_="Alice")
        assert len(walk["items"]) == 2 and walk["truncated"] is True


async def test_recall_expands_the_graph_for_a_relationship_question(engine, clock):
    ids = await chain(engine, clock)
    await engine.experience(envelope("Alice and Priya had lunch and talked about the roadmap."),
                            caller="user:alice", wait="indexed")  # fmt: skip
    pack = await engine.recall({"scope": ALICE, "query": "What is the relationship between Alice and Priya?"},
                               caller="user:alice")  # fmt: skip
    trail = {p["phase"]: p for p in pack["provenance"]["trail"]}
    assert trail["route"]["type"] == "relationship"
    assert [h["name"] for h in trail["route"]["entity_hints"]] == ["Alice", "Priya"]
    assert all(h["id"].startswith("ent_") for h in trail["route"]["entity_hints"])
    expand = trail["graph_expand"]
    assert expand["added_nodes"] > 0 and expand["edges"] >= 3
    first = pack["relationships"][0]
    assert first["id"] == ids["manages"]  # the edge joining the two named entities comes first
    assert {first["from"]["name"], first["to"]["name"]} == {"Alice", "Priya"}
    assert pack["diagnostics"]["relationships_truncated"] is False
    for edge in pack["relationships"]:
        schemas.validator("relationship").validate(edge)
    facts = {f["id"]: f for f in pack["layers"]["facts"]}
    assert ids["manages"] in facts


async def test_recall_relationships_respect_the_confidence_floor(engine, clock):
    ids = await chain(engine, clock)
    pack = await engine.recall({"scope": ALICE, "query": "How is Tom related to Ines?",
                                "filters": {"confidence": {"gte": 0.5}}}, caller="user:alice")  # fmt: skip
    assert ids["married_to"] not in {e["id"] for e in pack["relationships"]}
    pack = await engine.recall({"scope": ALICE, "query": "How is Tom related to Ines?"}, caller="user:alice")
    assert ids["married_to"] in {e["id"] for e in pack["relationships"]}


async def test_recall_relationships_limit_is_reported(engine_factory, clock):
    from cortexdb import EngineConfig

    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", recall_relationships_limit=1)
    async with engine_factory(config=config) as engine:
        await chain(engine, clock)
        pack = await engine.recall({"scope": ALICE, "query": "Who are Alice's colleagues and friends?"},
                                   caller="user:alice")  # fmt: skip
        assert len(pack["relationships"]) == 1
        assert pack["diagnostics"]["relationships_truncated"] is True
        assert next(p for p in pack["provenance"]["trail"] if p["phase"] == "graph_expand")["truncated"] is True


async def test_router_off_leaves_no_route_and_no_expansion(engine_factory, clock):
    from cortexdb import EngineConfig

    config = EngineConfig(episode_idle_check=3600.0, default_caller="user:alice", recall_router=False)
    async with engine_factory(config=config) as engine:
        await chain(engine, clock)
        pack = await engine.recall({"scope": ALICE, "query": "What is the relationship between Alice and Priya?"},
                                   caller="user:alice")  # fmt: skip
        phases = [p["phase"] for p in pack["provenance"]["trail"]]
        assert "route" not in phases and "relationships" not in pack
        expand = next(p for p in pack["provenance"]["trail"] if p["phase"] == "graph_expand")
        assert expand["added_nodes"] == 0 and expand["edges"] == 0


async def test_explicit_writes_are_checked(engine):
    for body, field in [({"scope": ALICE, "from": "A", "type": "knows"}, "to"),
                        ({"scope": ALICE, "from": "A", "type": "knows", "to": "B", "weight": 1}, "weight"),
                        ({"scope": ALICE, "from": "A", "type": "knows", "to": "B", "confidence": 3}, "confidence"),
                        ([], "$")]:  # fmt: skip
        with pytest.raises(InvalidQuery) as caught:
            engine.relationships.envelope(body, engine.clock.now())
        assert caught.value.details["field"] == field


async def test_a_cancelled_relationship_is_not_walked(engine):
    body = {"scope": ALICE, "from": "Alice", "type": "knows", "to": "Bob"}
    result = await engine.experience(engine.relationships.envelope(body, engine.clock.now()), caller="user:alice",
                                     wait="consolidated")  # fmt: skip
    assert [e["type"] for e in (await engine.relationships.traverse(ALICE, from_="Bob"))["items"]] == ["knows"]
    await engine.cancel(result.event_id, caller="user:alice")
    walk = await engine.relationships.traverse(ALICE, from_="Bob")
    assert walk["items"] == [] and [n["name"] for n in walk["nodes"]] == ["Bob"]
    pack = await engine.recall({"scope": ALICE, "query": "How does Alice know Bob?"}, caller="user:alice")
    assert pack["relationships"] == []
