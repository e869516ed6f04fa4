"""Recall: the stratified pack across scopes, views, budgets, filters, time; layer-read additions."""

import pytest

import cortexdb
from cortexdb import PolicyDenied

from .conftest import envelope

ALICE = "org:acme/user:alice"
ORG = "org:acme"


async def seed(engine):
    texts = [
        ("I live in Paris.", "2026-03-01T10:00:00Z"),
        ("My favorite color is blue.", "2026-03-02T10:00:00Z"),
        ("I moved to Berlin.", "2026-04-15T10:00:00Z"),
        ("We decided to launch the beta in Q3.", "2026-04-20T10:00:00Z"),
        ("Acme moved to 200 seats.", "2026-05-01T10:00:00Z"),
    ]
    ids = []
    for text, when in texts:
        ids.append(
            (
                await engine.experience(
                    envelope(text, observed_at=when), caller="user:alice", wait="consolidated"
                )
            ).event_id
        )
    await engine.experience(envelope("The company prefers annual billing.", scope=ORG, observed_at="2026-05-02T10:00:00Z"),
                            caller="user:alice", wait="consolidated")  # fmt: skip
    return ids


async def test_pack_shape_provenance_and_citations(engine):
    await seed(engine)
    pack = await engine.recall({"scope": ALICE, "query": "Where does Alice live now?"})
    assert (
        pack["pack_id"].startswith("pack_")
        and pack["view"] == "holistic"
        and pack["traversal"] == "holistic"
    )
    assert set(pack["layers"]) == {"events", "episodes", "facts", "beliefs", "understanding"}
    facts = pack["layers"]["facts"]
    assert facts[0]["object"]["name"] == "Berlin"  # the superseded Paris fact is not current
    assert all(f["object"].get("name") != "Paris" for f in facts)
    assert [f["ranked_position"] for f in facts] == list(range(1, len(facts) + 1))
    assert all(isinstance(f["score"], float) for f in facts)
    phases = [p["phase"] for p in pack["provenance"]["trail"]]
    assert phases[0] == "classify" and {"hybrid_retrieve", "score", "mmr", "knapsack"} <= set(
        phases
    )
    assert pack["provenance"]["trail"][0]["plan"] == "ENTITY_ATTRIBUTE_LOOKUP"
    weights = next(p for p in pack["provenance"]["trail"] if p["phase"] == "score")["weights"]
    assert sum(weights.values()) == pytest.approx(1.0, abs=1e-3)
    citations = pack["provenance"]["citations"]
    berlin_fact = facts[0]["id"]
    assert citations[berlin_fact][0].startswith("evt_")
    for belief in pack["layers"]["beliefs"]:
        for fact_id in citations[belief["id"]]:
            assert all(e.startswith("evt_") for e in citations[fact_id])  # a DAG down to events
    assert "[1]" in pack["context_block"] and "Berlin" in pack["context_block"]
    assert pack["provenance"]["markers"][0]["marker"] == "[1]"
    diagnostics = pack["diagnostics"]
    assert diagnostics["plan"] == "ENTITY_ATTRIBUTE_LOOKUP" and diagnostics["_partial"] is False
    assert [s["scope"] for s in diagnostics["scopes_traversed"]] == [ALICE, ORG]
    assert set(diagnostics["time_ms"]) >= {"classify", "recall", "rank", "total"}
    assert engine.get_pack(pack["pack_id"])["pack_id"] == pack["pack_id"]


async def test_traversal_local_holistic_descend_with_denied_placeholders(engine_factory):
    class DenyBob:
        def check(self, caller, capability, scope):
            if scope.endswith("user:bob") and capability.startswith("scope.read"):
                raise PolicyDenied(
                    "no", details={"capability": capability, "denied_by_tier": "scope"}
                )

    async with engine_factory(policy=DenyBob()) as engine:
        await seed(engine)
        await engine.experience(
            envelope("I live in Rome.", scope="org:acme/user:bob"),
            caller="user:carol",
            wait="consolidated",
        )
        local = await engine.recall({"scope": ALICE, "view": "local", "query": "annual billing"})
        assert [s["scope"] for s in local["diagnostics"]["scopes_traversed"]] == [ALICE]
        assert all(e["scope"] == ALICE for e in local["layers"]["events"])
        holistic = await engine.recall({"scope": ALICE, "query": "annual billing"})
        assert any(e["scope"] == ORG for e in holistic["layers"]["events"])
        down = await engine.recall({"scope": ORG, "view": "descend", "query": "live"})
        traversed = down["diagnostics"]["scopes_traversed"]
        assert {
            "scope": "org:acme/user:bob",
            "denied": True,
            "item_count": 1,
            "denied_reason": "scope",
        } in traversed
        assert any(t.get("scope") == ALICE and not t.get("denied") for t in traversed)
        assert all(e["scope"] != "org:acme/user:bob" for e in down["layers"]["events"])


async def test_inherit_from_limits_the_upward_walk(engine):
    await engine.experience(envelope("Top level note.", scope="org:acme"), wait="consolidated")
    await engine.experience(envelope("Team note.", scope="org:acme/team:x"), wait="consolidated")
    await engine.experience(
        envelope("Mine.", scope="org:acme/team:x/user:alice"), wait="consolidated"
    )
    scopes = engine.tables.scopes
    record = await scopes.get("org:acme/team:x/user:alice")
    record.policies = {"inherit_from": ["org:acme/team:x"]}
    await scopes.put(record.path, record)
    pack = await engine.recall({"scope": "org:acme/team:x/user:alice", "query": "note"})
    assert [s["scope"] for s in pack["diagnostics"]["scopes_traversed"]] == [
        "org:acme/team:x/user:alice",
        "org:acme/team:x",
    ]


async def test_views_raw_granular_structured(engine):
    await seed(engine)
    raw = await engine.recall({"scope": ALICE, "view": "raw", "query": "Berlin",
                               "temporal": {"valid_during": ["2026-01-01", "2026-12-31"]}})  # fmt: skip
    assert raw["layers"]["events"] and not any(
        raw["layers"][layer] for layer in ("facts", "beliefs", "episodes")
    )
    assert raw["warnings"] == ["valid_during_ignored_for_view_raw"] and raw["context_block"] == ""
    granular = await engine.recall({"scope": ALICE, "view": "granular", "query": "Berlin"})
    assert granular["context_block"] == "" and granular["layers"]["facts"]
    structured = await engine.recall({"scope": ALICE, "view": "structured", "query": "Berlin"})
    assert not any(structured["layers"].values())
    graph = structured["knowledge_subgraph"]["@graph"]
    assert any(
        node.get("@type") == "cortex:Fact" and node["predicate"] == "lives_in" for node in graph
    )
    narrative = await engine.recall({"scope": ALICE, "view": "narrative", "query": "Berlin"})  # tests/test_answer.py
    assert narrative["view"] == "narrative" and not any(narrative["layers"].values())
    assert "Berlin" in narrative["context_block"] and narrative["provenance"]["citations"]


async def test_budgets_limits_include_and_exclude_content(engine):
    await seed(engine)
    tight = await engine.recall(
        {"scope": ALICE, "query": "Berlin Paris blue seats launch", "budgets": {"max_tokens": 300}}
    )
    knapsack = next(p for p in tight["provenance"]["trail"] if p["phase"] == "knapsack")
    assert knapsack["knapsack_evictions"] > 0 and knapsack["tokens_used"] <= 300
    assert tight["diagnostics"]["knapsack_evictions"] == knapsack["knapsack_evictions"]
    limited = await engine.recall({"scope": ALICE, "query": "Berlin", "include": ["facts", "events"],
                                   "budgets": {"per_layer_limits": {"facts": 1, "events": 2}}})  # fmt: skip
    assert len(limited["layers"]["facts"]) == 1 and len(limited["layers"]["events"]) <= 2
    assert limited["layers"]["beliefs"] == [] and limited["layers"]["episodes"] == []
    bare = await engine.recall(
        {"scope": ALICE, "query": "Berlin", "exclude_content": True, "include": ["events"]}
    )
    assert bare["layers"]["events"] and all("content" not in e for e in bare["layers"]["events"])


async def test_filters(engine):
    await seed(engine)
    await engine.experience(envelope("I live in Madrid.", observed_actor={"id": "agent:scribe"}), caller="agent:scribe",
                            wait="consolidated")  # fmt: skip
    only_agent = await engine.recall({"scope": ALICE, "view": "local", "query": "live", "include": ["events"],
                                      "filters": {"AND": [{"observed_actor": {"in": ["agent:scribe"]}}]}})  # fmt: skip
    assert [e["actor"] for e in only_agent["layers"]["events"]] == ["agent:scribe"]
    confident = await engine.recall({"scope": ALICE, "query": "color", "include": ["facts", "beliefs"],
                                     "filters": {"OR": [{"confidence": {"gte": 0.85}}, {"predicate": {"eq": "nothing"}}]}})  # fmt: skip
    assert all(f["confidence"] >= 0.85 for f in confident["layers"]["facts"])
    assert "confidence.gte" in confident["diagnostics"]["filters_applied"]
    with pytest.raises(cortexdb.CortexError) as info:
        await engine.recall({"scope": ALICE, "query": "x", "filters": {"mood": {"eq": "happy"}}})
    assert info.value.error_code == "INVALID_FILTER"


async def test_temporal_block_as_of_natural_and_errors(engine, clock):
    await seed(engine)
    before = clock.now()
    clock.advance(3600)
    await engine.experience(
        envelope("I moved to Lisbon.", observed_at="2026-05-10T10:00:00Z"), wait="consolidated"
    )
    now_pack = await engine.recall(
        {"scope": ALICE, "view": "local", "query": "where live", "include": ["facts"]}
    )
    assert [
        f["object"]["name"] for f in now_pack["layers"]["facts"] if f["predicate"] == "lives_in"
    ] == ["Lisbon"]
    then = await engine.recall({"scope": ALICE, "view": "local", "query": "where live", "include": ["facts"],
                                "temporal": {"as_of": before.isoformat()}})  # fmt: skip
    assert [
        f["object"]["name"] for f in then["layers"]["facts"] if f["predicate"] == "lives_in"
    ] == ["Berlin"]
    march = await engine.recall({"scope": ALICE, "view": "local", "query": "live", "include": ["facts"],
                                 "temporal": {"natural": "in March 2026"}})  # fmt: skip
    assert {f["object"].get("name") for f in march["layers"]["facts"]} >= {"Paris"}
    assert "temporal.natural" in march["diagnostics"]["filters_applied"]
    with pytest.raises(cortexdb.CortexError) as info:
        await engine.recall(
            {"scope": ALICE, "query": "x", "temporal": {"natural": "the other day"}}
        )
    assert info.value.error_code == "UNPARSEABLE_TEMPORAL"
    await engine.register_temporal_phrase(
        "spring", "spring launch", {"valid_during": ["2026-04-01", "2026-05-01"]}
    )
    spring = await engine.recall({"scope": ALICE, "view": "local", "query": "live", "include": ["facts"],
                                  "temporal": {"natural": "spring launch"}})  # fmt: skip
    lived = {
        f["object"].get("name") for f in spring["layers"]["facts"] if f["predicate"] == "lives_in"
    }
    assert lived == {"Paris", "Berlin"}  # Paris until April 15, Berlin after; not Lisbon (May 10)
    assert [p["name"] for p in await engine.temporal_phrases()] == ["spring"]


async def test_idempotent_recall_and_pack_expiry(engine, clock):
    await seed(engine)
    first = await engine.recall({"scope": ALICE, "query": "Berlin", "idempotency_key": "r1"})
    again = await engine.recall({"scope": ALICE, "query": "Berlin", "idempotency_key": "r1"})
    assert again["pack_id"] == first["pack_id"]
    clock.advance(61)
    with pytest.raises(cortexdb.NotFound):
        engine.get_pack(first["pack_id"])
    fresh = await engine.recall({"scope": ALICE, "query": "Berlin", "idempotency_key": "r1"})
    assert fresh["pack_id"] != first["pack_id"]


async def test_citation_modes_and_diagnostic_levels(engine):
    await seed(engine)
    base = {"scope": ALICE, "query": "Berlin blue"}
    inline = await engine.recall({**base, "citation_mode": "inline_with_markers"})
    at_end = await engine.recall({**base, "citation_mode": "block_at_end"})
    structured = await engine.recall({**base, "citation_mode": "structured_only"})
    none = await engine.recall({**base, "citation_mode": "none", "diagnostics": "none"})
    assert "[1]" in inline["context_block"].splitlines()[0]
    assert (
        "[1]" not in at_end["context_block"].splitlines()[0]
        and "Sources: [1]" in at_end["context_block"]
    )
    assert "[1]" not in structured["context_block"] and structured["provenance"]["markers"]
    assert (
        "[1]" not in none["context_block"]
        and "markers" not in none["provenance"]
        and "diagnostics" not in none
    )
    full = await engine.recall({**base, "diagnostics": "full"})
    item = next(iter(full["diagnostics"]["items"].values()))
    blend = {"semantic", "bm25", "graph", "recency", "importance", "confidence", "freshness"}
    # the adjustments after the blend (recall/quality.py) add theirs when they apply
    assert blend <= set(item["signals"]) <= blend | {"speaker", "episode", "length"}
    assert full["diagnostics"]["policy"]["capability"] == "scope.read.holistic"


async def test_streaming_recall_emits_the_events_in_order(engine):
    await seed(engine)
    events = [
        (name, data)
        async for name, data in engine.recall_stream({"scope": ALICE, "query": "Berlin"})
    ]
    names = [name for name, _ in events]
    assert names[0] == "plan" and names[-1] == "done"
    assert names[1:6] == ["layer"] * 5
    assert names[6:11] == ["relationships", "signals", "context_block", "provenance", "diagnostics"]
    assert [data["layer"] for name, data in events if name == "layer"] == [
        "events",
        "episodes",
        "facts",
        "beliefs",
        "understanding",
    ]


async def test_a_failing_scope_degrades_the_pack(engine, monkeypatch):
    await seed(engine)
    from cortexdb.engine.actors import candidates

    original = candidates.gather

    async def broken(actor, query):
        if actor.scope == ORG:
            raise cortexdb.CortexError("index unavailable")
        return await original(actor, query)

    monkeypatch.setattr(candidates, "gather", broken)
    pack = await engine.recall({"scope": ALICE, "query": "Berlin"})
    assert pack["diagnostics"]["_partial"] is True
    assert pack["diagnostics"]["degraded"][0]["scope"] == ORG
    assert pack["diagnostics"]["degraded"][0]["error_code"] == "DERIVED_LAYER_UNAVAILABLE"
    assert pack["layers"]["facts"]  # the rest of the pack is still there


async def test_cancelled_records_never_come_back_from_the_indexes(engine):
    ids = await seed(engine)
    berlin = ids[2]
    await engine.cancel(berlin)
    pack = await engine.recall(
        {"scope": ALICE, "view": "local", "query": "Berlin", "include": ["events", "facts"]}
    )
    assert berlin not in {e["id"] for e in pack["layers"]["events"]}
    assert all(f["object"].get("name") != "Berlin" for f in pack["layers"]["facts"])


async def test_beliefs_why_cites_facts_and_events(engine):
    await seed(engine)
    beliefs = (await engine.beliefs(ALICE, valid_during=".."))["items"]
    paris = next(b for b in beliefs if b["claim"]["object"].get("name") == "Paris")
    why = await engine.beliefs_why(ALICE, paris["id"])
    assert why["belief"]["id"] == paris["id"]
    types = {n["type"] for n in why["support_graph"]["nodes"]}
    assert types == {"fact", "event"}
    relations = {e["relation"] for e in why["support_graph"]["edges"]}
    assert relations == {"contradicted_by", "extracted_from"}
    assert "contradicted" in why["narrative"] and "Evidence against it" in why["narrative"]
    for node in why["support_graph"]["nodes"]:
        assert node["id"] in why["narrative"]


async def test_understanding_of_an_empty_scope_is_empty_and_complete(engine):
    listing = await engine.understanding(ALICE)
    assert listing["items"] == [] and listing["_partial"] is False and listing["_partial_reason"] is None
    coverage = await engine.understanding_coverage(ALICE)
    assert coverage["concept_count"] == 0 and coverage["_partial"] is False and coverage["coverage_score"] == 1.0
    with pytest.raises(cortexdb.NotFound) as info:
        await engine.get_concept(ALICE, "concept_x")
    assert info.value.details["concept_id"] == "concept_x"


async def test_layer_reads_accept_the_temporal_block(engine):
    await seed(engine)
    march = await engine.facts(
        ALICE, valid_during="2026-03-01..2026-03-31", include_superseded=True
    )
    assert {f["object"].get("name") or f["object"].get("value") for f in march["items"]} == {
        "Paris",
        "blue",
    }
    april = await engine.episodes(ALICE, natural="in April 2026")
    assert {e["name"] for e in april["items"]} == {
        "I moved to Berlin.",
        "We decided to launch the beta in Q3.",
    }
    with pytest.raises(cortexdb.CortexError) as info:
        await engine.facts(ALICE, valid_during="March")
    assert info.value.error_code == "INVALID_TEMPORAL"
    events = await engine.events(ALICE, recorded_during="2026-01-01..2027-01-01")
    assert len(events["items"]) == 5


async def test_embedder_is_recorded_per_data_dir(tmp_path, clock):
    from cortexdb.engine.retrieve.embedders import HashEmbedder

    class OtherEmbedder(HashEmbedder):
        name = "other-v1"

    path = str(tmp_path / "emb")
    async with cortexdb.open_engine("leveldb", path=path, clock=clock, id_seed=1) as engine:
        await engine.experience(envelope("I live in Paris."), wait="consolidated")
    with pytest.raises(cortexdb.CortexError) as info:
        async with cortexdb.open_engine(
            "leveldb", path=path, clock=clock, embedder=OtherEmbedder()
        ):
            pass
    assert info.value.error_code == "EMBEDDER_MISMATCH"
    assert info.value.details["recorded"] == {"name": "hash-v1", "dimension": 384}
    config = cortexdb.EngineConfig(reembed=True)
    async with cortexdb.open_engine(
        "leveldb", path=path, clock=clock, embedder=OtherEmbedder(), config=config
    ) as engine:
        pack = await engine.recall(
            {"scope": ALICE, "query": "Paris", "view": "local", "include": ["events"]}
        )
        assert (
            pack["layers"]["events"]
            and pack["layers"]["events"][0]["content"]["text"] == "I live in Paris."
        )
    async with cortexdb.open_engine(
        "leveldb", path=path, clock=clock, embedder=OtherEmbedder()
    ) as engine:
        assert (await engine.recall({"scope": ALICE, "query": "Paris"}))["layers"]["events"]


async def test_indexes_are_restored_after_a_restart(tmp_path, clock):
    path = str(tmp_path / "restart")
    async with cortexdb.open_engine("leveldb", path=path, clock=clock, id_seed=1) as engine:
        await seed(engine)
        before = await engine.recall(
            {"scope": ALICE, "view": "local", "query": "Where does Alice live now?"}
        )
    async with cortexdb.open_engine("leveldb", path=path, clock=clock, id_seed=2) as engine:
        after = await engine.recall(
            {"scope": ALICE, "view": "local", "query": "Where does Alice live now?"}
        )
    for layer in ("events", "facts", "beliefs", "episodes"):
        assert [i["id"] for i in after["layers"][layer]] == [
            i["id"] for i in before["layers"][layer]
        ], layer


@pytest.mark.inline_storage
async def test_a_slow_scope_misses_the_deadline_and_degrades_the_pack(
    engine_factory, monkeypatch, autojump_clock
):
    from cortexdb.engine.actors import candidates

    original = candidates.gather

    async def slow(actor, query):
        if actor.scope == ORG:
            import trio

            await trio.sleep(60)  # virtual time: the 1 s recall deadline passes first
        return await original(actor, query)

    config = cortexdb.EngineConfig(
        recall_deadline=1.0, default_caller="user:alice", episode_idle_check=3600.0
    )
    async with engine_factory(config=config) as engine:
        await seed(engine)
        monkeypatch.setattr(candidates, "gather", slow)
        pack = await engine.recall({"scope": ALICE, "query": "Berlin"})
        assert pack["diagnostics"]["degraded"] == [
            {"scope": ORG, "error_code": "DERIVED_LAYER_UNAVAILABLE", "cause": "DEADLINE_EXCEEDED",
             "message": "no answer within 1.0s"}]  # fmt: skip
        assert pack["layers"]["facts"]


@pytest.mark.inline_storage
async def test_a_scope_still_restoring_is_named_in_the_degraded_entry(
    engine_factory, monkeypatch, autojump_clock
):
    """A scope reopened after a release restores its indexes before it answers anything; a recall
    that meets it meanwhile degrades, and the entry says the scope was restoring."""
    import trio

    from cortexdb.engine.actors.lane import Lane

    original = Lane._restore

    async def slow_restore(self):
        if self.scope == ORG:
            await trio.sleep(60)  # virtual time: the 1 s recall deadline passes first
        await original(self)

    # no scope is let go by the idle sweep (an autojump clock races through a LevelDB restore's
    # thread waits): only org:acme restores, the one released here
    config = cortexdb.EngineConfig(
        recall_deadline=1.0, default_caller="user:alice", episode_idle_check=3600.0, idle_timeout=1e9
    )
    async with engine_factory(config=config) as engine:
        await seed(engine)
        await engine.flush(ORG)
        assert await engine._supervisor.release(ORG, drain=True)
        monkeypatch.setattr(Lane, "_restore", slow_restore)
        pack = await engine.recall({"scope": ALICE, "query": "Berlin"})
        assert pack["diagnostics"]["degraded"] == [
            {"scope": ORG, "error_code": "DERIVED_LAYER_UNAVAILABLE", "cause": "SCOPE_RESTORING",
             "message": "the scope was restoring its indexes and did not answer within 1.0s"}]  # fmt: skip
        assert pack["_partial"] is True
        await engine.flush(ORG)  # answered once the restore has ended
        assert not engine._supervisor.actor(ORG).restoring


async def test_malformed_budgets_are_clear_errors(engine):
    for budgets, field in (
        ({"per_layer_limits": ["facts", 3]}, "budgets.per_layer_limits"),
        ({"per_layer_limits": {"facts": -1}}, "budgets.per_layer_limits.facts"),
        ({"per_layer_limits": {"memories": 3}}, "budgets.per_layer_limits.memories"),
        ({"max_tokens": "lots"}, "budgets.max_tokens"),
    ):
        with pytest.raises(cortexdb.CortexError) as info:
            await engine.recall({"scope": ALICE, "query": "x", "budgets": budgets})
        assert info.value.error_code == "INVALID_RECALL" and info.value.details["field"] == field
