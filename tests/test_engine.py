"""The engine suite: every test runs on the memory and the LevelDB backend."""

import pytest
import trio

import cortexdb
from cortexdb import EngineConfig, IdempotencyConflict, InvalidEnvelope, NotFound, PolicyDenied
from cortexdb.engine.temporal import format_ts

from .conftest import envelope

SCOPE = "org:acme/user:alice"


async def test_capture_returns_event_id_and_monotonic_wal_offsets(engine):
    first = await engine.experience(envelope("hello"), caller="user:alice")
    second = await engine.experience(envelope("again"), caller="user:alice")
    assert first.status == "captured" and first.event_id.startswith("evt_")
    assert second.wal_offset == first.wal_offset + 1
    wire = first.to_wire()
    assert wire["lifecycle_stream"] == f"/v1/lifecycle/stream?event_id={first.event_id}"
    assert "stages_completed" not in wire


async def test_stored_event_keeps_content_verbatim_and_server_fields(engine, clock):
    body = envelope("I live in Paris.", key="k1")
    body["context"]["source_recorded_at"] = "2026-01-01T00:00:00Z"
    body["context"]["recorded_at"] = "1999-01-01T00:00:00Z"  # clients cannot set it
    body["content"]["media"] = []
    result = await engine.experience(body, caller="agent:ingester", wait="captured")
    event = await engine.get_event(SCOPE, result.event_id)
    assert event["content"] == body["content"]
    assert event["caller"] == "agent:ingester"
    assert event["actor"] == "agent:ingester"
    assert event["tenant_id"] == "default"
    assert event["wal_offset"] == result.wal_offset
    assert event["context"]["recorded_at"] == "2026-05-13T15:42:09Z"
    assert event["context"]["source_recorded_at"] == "2026-01-01T00:00:00Z"
    assert event["context"]["observed_at"] == body["context"]["observed_at"]


async def test_wait_indexed_and_consolidated_report_stages_derives_and_timings(engine):
    indexed = await engine.experience(envelope("My favorite color is blue."), wait="indexed")
    assert indexed.status == "indexed"
    assert indexed.stages_completed == ("captured", "extracted", "indexed")
    assert any(d.startswith("fact_") for d in indexed.derives)
    assert set(indexed.elapsed_ms) >= {"capture", "extract", "index"}
    done = await engine.experience(envelope("I live in Paris."), wait="consolidated")
    assert done.stages_completed == ("captured", "extracted", "indexed", "consolidated")
    kinds = {d.split("_", 1)[0] for d in done.derives}
    assert kinds == {"fact", "belief"}  # the episode comes at the later compress step
    assert set(done.to_wire()["elapsed_ms"]) >= {"capture", "extract", "index", "consolidate"}


async def test_invalid_wait_mode_is_refused(engine):
    with pytest.raises(InvalidEnvelope) as info:
        await engine.experience(envelope(), wait="eventually")
    assert info.value.details["field"] == "wait"


async def test_idempotent_replay_conflict_and_expiry(engine, clock):
    first = await engine.experience(envelope("I live in Paris.", key="same"), caller="user:alice")
    again = await engine.experience(envelope("I live in Paris.", key="same"), caller="user:alice")
    assert (
        again.replay and again.event_id == first.event_id and again.wal_offset == first.wal_offset
    )
    # keys are scoped per caller: another caller gets a new event
    other = await engine.experience(envelope("I live in Paris.", key="same"), caller="user:bob")
    assert not other.replay and other.event_id != first.event_id
    with pytest.raises(IdempotencyConflict) as info:
        await engine.experience(envelope("I live in Rome.", key="same"), caller="user:alice")
    assert info.value.http_status == 409
    clock.advance(hours=24, seconds=1)
    fresh = await engine.experience(envelope("I live in Rome.", key="same"), caller="user:alice")
    assert not fresh.replay and fresh.event_id != first.event_id


async def test_concurrent_duplicates_capture_once(engine):
    results = []

    async def write():
        results.append(await engine.experience(envelope("dup", key="race"), caller="user:alice"))

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(write)
    assert len({r.event_id for r in results}) == 1
    assert sum(not r.replay for r in results) == 1
    page = await engine.events(SCOPE)
    assert len(page["items"]) == 1


async def test_replay_with_wait_reports_the_original_derivations(engine):
    first = await engine.experience(envelope("I live in Paris.", key="w"), wait="consolidated")
    again = await engine.experience(envelope("I live in Paris.", key="w"), wait="consolidated")
    assert again.replay and again.derives == first.derives


async def test_bulk_ordering_limits_and_lookup_by_idempotency_key(engine):
    items = [
        {"modality": "conversation", "content": {"kind": "text", "text": f"note {i}"},
         "context": {"observed_at": f"2026-05-13T1{9 - i}:00:00Z"}, "idempotency_key": f"b{i}"}
        for i in range(5)
    ]  # fmt: skip
    result = await engine.experience_bulk(
        {"scope": SCOPE, "actor": {"id": "user:alice"}, "items": items}
    )
    assert (
        result.batch_id.startswith("batch_")
        and result.accepted == 5
        and result.ordering == "strict_temporal"
    )
    await engine.flush(SCOPE)
    page = await engine.events(SCOPE)
    observed = [e["context"]["observed_at"] for e in page["items"]]
    assert observed == sorted(observed)  # strict_temporal: WAL order is observed order
    assert all(e["batch_id"] == result.batch_id for e in page["items"])
    found = await engine.experience_by_idempotency_key("b3")
    assert found["event"]["content"]["text"] == "note 3" and found["batch_id"] == result.batch_id
    # a replayed bulk captures nothing new
    again = await engine.experience_bulk(
        {"scope": SCOPE, "actor": {"id": "user:alice"}, "items": items}
    )
    assert again.accepted == 0 and again.replayed == 5
    throughput = await engine.experience_bulk({"scope": SCOPE, "ordering": "batch_throughput", "items": [
        {**items[0], "idempotency_key": "t1"}, {**items[4], "idempotency_key": "t2"}]})  # fmt: skip
    assert throughput.accepted == 2
    with pytest.raises(NotFound):
        await engine.experience_by_idempotency_key("never-used")


async def test_bulk_validation_points_at_the_item(engine):
    good = {
        "modality": "conversation",
        "content": {"kind": "text", "text": "x"},
        "context": {"observed_at": "2026-05-13T00:00:00Z"},
    }
    bad = {
        "modality": "conversation",
        "content": {"kind": "message", "text": "x"},
        "context": {"observed_at": "2026-05-13T00:00:00Z"},
    }
    with pytest.raises(InvalidEnvelope) as info:
        await engine.experience_bulk({"scope": SCOPE, "items": [good, bad]})
    assert info.value.details["field"] == "items[1].content.role"
    with pytest.raises(InvalidEnvelope) as info:
        await engine.experience_bulk({"scope": SCOPE, "items": [good] * 1001})
    assert info.value.details["field"] == "items" and "1001" in info.value.details["reason"]
    with pytest.raises(InvalidEnvelope):
        await engine.experience_bulk({"scope": SCOPE, "items": [good], "ordering": "random"})
    with pytest.raises(IdempotencyConflict):
        await engine.experience_bulk({"scope": SCOPE, "items": [{**good, "idempotency_key": "x"},
                                                                {**good, "idempotency_key": "x", "content": {"kind": "text", "text": "y"}}]})  # fmt: skip
    assert (await engine.events(SCOPE))["items"] == []  # nothing half-written


async def test_lifecycle_stages_are_strictly_ordered_per_event(engine):
    async with engine.subscribe(scope=SCOPE) as feed:
        result = await engine.experience(envelope("I live in Paris."), wait="consolidated")
        seen = []
        while len(seen) < 4:
            record = await feed.__anext__()
            if record.event_id == result.event_id:
                seen.append(record)
    assert [r.stage for r in seen] == ["captured", "extracted", "indexed", "consolidated"]
    assert [r.seq for r in seen] == [0, 1, 2, 3]
    assert [r.lifecycle_id for r in seen] == sorted(r.lifecycle_id for r in seen)
    assert seen[0].payload == {"event_id": result.event_id, "actor": "user:alice", "modality": "conversation",
                               "wal_offset": result.wal_offset}  # fmt: skip
    assert seen[1].payload["derived"]["facts"] == 1
    assert seen[1].payload["intake"][0]["status"] == "accepted"
    assert seen[2].payload["layers_indexed"] == ["events", "facts"]
    assert seen[3].payload["beliefs_updated"] == 1


async def test_lifecycle_filters_and_resume_without_gaps_or_duplicates(engine):
    first = await engine.experience(envelope("one"), wait="consolidated")
    mark = (await engine.lifecycle(event_id=first.event_id))[-1]["lifecycle_id"]
    second = await engine.experience(envelope("two"), wait="consolidated")
    third = await engine.experience(
        envelope("three", scope="org:acme/user:bob"), wait="consolidated"
    )
    only_captured = await engine.lifecycle(events="captured")
    assert [r["event_id"] for r in only_captured] == [
        first.event_id,
        second.event_id,
        third.event_id,
    ]
    resumed = await engine.lifecycle(since_lifecycle_id=mark, scope=SCOPE)
    assert {r["event_id"] for r in resumed} == {second.event_id}
    async with engine.subscribe(since_lifecycle_id=mark) as feed:
        replayed = [feed.receive_nowait() for _ in range(8)]
        assert [r.event_id for r in replayed] == [second.event_id] * 4 + [third.event_id] * 4
        assert feed.receive_nowait() is None
        fourth = await engine.experience(envelope("four"), wait="captured")
        live = await feed.__anext__()
        assert live.event_id == fourth.event_id and live.stage == "captured"
    one = await engine.lifecycle_event(mark)
    assert one["lifecycle_id"] == mark and one["event_id"] == first.event_id
    with pytest.raises(NotFound):
        await engine.lifecycle_event("lce_00000000-0000-7000-8000-000000000000")


async def test_a_slow_subscriber_gets_lagging_and_never_stalls_the_pipeline(engine):
    async with engine.subscribe(capacity=5) as slow:
        for i in range(5):
            await engine.experience(envelope(f"event {i}"))
        await engine.flush(SCOPE)
        records = [r async for r in slow]
    assert records[-1].stage == "lagging"
    assert records[-1].payload["behind_by"] == 5
    assert slow.lagged
    page = await engine.events(SCOPE)
    assert len(page["items"]) == 5  # the pipeline carried on


async def test_memory_event_aggregate_view(engine):
    result = await engine.experience(envelope("I live in Paris."), wait="consolidated")
    view = await engine.memory_event(result.event_id)
    assert view["stages_completed"] == ["captured", "extracted", "indexed", "consolidated"]
    assert view["stages_pending"] == ["compressed"]  # its episode is still open
    assert len(view["lifecycle_event_ids"]) == 4 and view["errors"] == []
    await engine.flush(SCOPE, seal=True)
    view = await engine.memory_event(result.event_id)
    assert view["stages_completed"][-1] == "compressed" and view["stages_pending"] == []


async def test_cancel_excludes_the_event_and_what_it_derived(engine):
    done = await engine.experience(envelope("I live in Paris."), wait="consolidated")
    cancelled = await engine.cancel(done.event_id)
    assert cancelled["excluded_from_recall"] is True
    assert cancelled["stages_already_completed"][:4] == [
        "captured",
        "extracted",
        "indexed",
        "consolidated",
    ]
    # the episode step may or may not have run yet; either way every stage is accounted for
    assert cancelled["stages_already_completed"] + cancelled["stages_cancelled"] == [
        "captured",
        "extracted",
        "indexed",
        "consolidated",
        "compressed",
    ]
    assert (await engine.events(SCOPE))["items"] == []
    direct = await engine.get_event(SCOPE, done.event_id)  # still directly addressable
    assert direct["excluded_from_recall"] is True
    assert (await engine.events(SCOPE, include_excluded=True))["items"][0]["id"] == done.event_id
    assert (await engine.facts(SCOPE))["items"] == []
    assert engine.statistics().restarts == 0


async def test_cancel_of_queued_stages(engine):
    """A capture whose derivation has not run yet: every later stage is cancelled."""
    config_engine = engine
    result = await config_engine.experience(envelope("I live in Paris."))
    cancelled = await config_engine.cancel(result.event_id)
    assert "captured" in cancelled["stages_already_completed"]
    await config_engine.flush(SCOPE)
    view = await config_engine.memory_event(result.event_id)
    assert view["excluded_from_recall"] is True and view["stages_pending"] == []
    assert set(view["stages_cancelled"]) | set(view["stages_completed"]) >= {
        "extracted",
        "indexed",
        "consolidated",
    }


async def test_supersession_timeline_and_as_of(engine, clock):
    await engine.experience(
        envelope("I live in Paris.", observed_at="2026-01-10T00:00:00Z"), wait="consolidated"
    )
    before_move = clock.now()
    clock.advance(3600)
    await engine.experience(
        envelope("I moved to Berlin.", observed_at="2026-03-01T00:00:00Z"), wait="consolidated"
    )
    current = await engine.facts(SCOPE, subject="user:alice", predicate="lives_in")
    assert [f["object"]["name"] for f in current["items"]] == ["Berlin"]
    assert current["items"][0]["supersedes"] is not None
    everything = await engine.facts(
        SCOPE, subject="user:alice", predicate="lives_in", include_superseded=True
    )
    # §18.2 item 1: the superseded version of Paris, as it was held (open-ended), closed when the
    # move was learnt; its current version (valid until the move) is not valid now
    paris = next(f for f in everything["items"] if f["object"]["name"] == "Paris")
    assert paris["valid_to"] is None and paris["recorded_to"] == format_ts(clock.now())
    assert paris["superseded_by"] is None
    # what we know now of the past: the current version of Paris, with the end learnt
    window = await engine.facts(SCOPE, subject="user:alice", predicate="lives_in",
                                valid_during="2026-01-01..2026-02-01")  # fmt: skip
    [known] = window["items"]
    assert known["valid_to"] == "2026-03-01T00:00:00Z" and known["recorded_to"] is None
    assert known["superseded_by"] == current["items"][0]["id"] and known["version"] == 2
    # what did we believe, as recorded before the move was learnt?
    past = await engine.facts(
        SCOPE, subject="user:alice", predicate="lives_in", as_of=before_move.isoformat()
    )
    assert [f["object"]["name"] for f in past["items"]] == ["Paris"]
    # as_of after the move, with include_superseded, returns both versions
    both = await engine.facts(
        SCOPE, subject="user:alice", as_of=clock.now(), include_superseded=True
    )
    assert {f["object"]["name"] for f in both["items"]} == {"Paris", "Berlin"}
    timeline = await engine.facts_timeline(SCOPE, subject="user:alice", predicate="lives_in")
    assert [t["value"]["name"] for t in timeline["timeline"]] == ["Paris", "Berlin"]
    assert timeline["timeline"][0]["valid_to"] == timeline["timeline"][1]["valid_from"]


async def test_reinforcement_does_not_duplicate(engine):
    one = await engine.experience(envelope("My favorite color is blue."), wait="consolidated")
    two = await engine.experience(envelope("my favorite color is BLUE!", observed_at="2026-05-13T15:41:00Z"),
                                  wait="consolidated")  # fmt: skip
    del two
    facts = (await engine.facts(SCOPE))["items"]
    color = [f for f in facts if f["predicate"] == "favorite_color"]
    assert len(color) == 1 and len(color[0]["supports"]) == 2 and color[0]["reinforcements"] == 1
    assert color[0]["confidence"] > 0.9
    beliefs = (await engine.beliefs(SCOPE))["items"]
    belief = next(b for b in beliefs if b["claim"]["predicate"] == "favorite_color")
    assert belief["revision_count"] == 1 and belief["confidence"] > 0.7
    assert one.event_id in color[0]["supports"]


async def test_conflicts_are_kept_and_surfaced(engine):
    a = await engine.experience(envelope("I live in Paris."), wait="consolidated")
    b = await engine.experience(
        envelope("I live in Rome."), wait="consolidated"
    )  # same observed_at
    facts = (await engine.facts(SCOPE, subject="user:alice", predicate="lives_in"))["items"]
    assert len(facts) == 2
    assert {f["status"] for f in facts} == {"accepted", "conflict_detected"}
    assert all(f["conflicts_with"] for f in facts)
    lifecycle = await engine.lifecycle(event_id=b.event_id, events="consolidated")
    assert lifecycle[0]["payload"]["conflicts_detected"] == 1
    beliefs = (await engine.beliefs(SCOPE))["items"]
    assert {b["stance"] for b in beliefs} == {"uncertain"}
    assert all(b["contradicts"][0]["resolution"] == "unresolved" for b in beliefs)
    del a


async def test_beliefs_carry_weighted_supports_and_why_url(engine):
    await engine.experience(
        envelope("I moved to Lisbon.", observed_at="2026-01-01T00:00:00Z"), wait="consolidated"
    )
    await engine.experience(
        envelope("I live in Madrid.", observed_at="2026-02-01T00:00:00Z"), wait="consolidated"
    )
    current = (await engine.beliefs(SCOPE))["items"]
    assert [b["claim"]["object"]["name"] for b in current] == ["Madrid"]
    beliefs = {
        b["claim"]["object"]["name"]: b
        for b in (await engine.beliefs(SCOPE, valid_during=".."))["items"]  # every claim, closed too
    }
    lisbon, madrid = beliefs["Lisbon"], beliefs["Madrid"]
    assert madrid["stance"] == "supported" and lisbon["stance"] == "contradicted"
    # the overturned claim is kept as history: it held until the move
    assert lisbon["valid_to"] == "2026-02-01T00:00:00Z" and madrid["valid_to"] is None
    assert lisbon["confidence"] < 0.5 < madrid["confidence"]
    assert lisbon["supports"][0]["polarity"] == "against"
    assert lisbon["confidence_interval"]["method"] == "beta_posterior"
    assert (
        lisbon["confidence_interval"]["lower"]
        < lisbon["confidence"]
        < lisbon["confidence_interval"]["upper"]
    )
    assert madrid["contradicts"][0]["belief_id"] == lisbon["id"]
    assert madrid["contradicts"][0]["resolution"] == "newer_wins"
    assert lisbon["contradicts"][0]["belief_id"] == madrid["id"]
    assert madrid["why_url"] == f"/v1/beliefs/why?belief_id={madrid['id']}"
    assert (await engine.get_belief(SCOPE, madrid["id"]))["id"] == madrid["id"]
    about = await engine.beliefs(SCOPE, about="Madrid")
    assert [b["id"] for b in about["items"]] == [madrid["id"]]
    confident = await engine.beliefs(SCOPE, min_confidence=0.6)
    assert [b["id"] for b in confident["items"]] == [madrid["id"]]


async def test_directives_extract_and_confidence_floor(engine):
    nothing = await engine.experience(
        envelope("I live in Paris.", directives={"extract": ["entities"]}), wait="consolidated"
    )
    assert not any(d.startswith(("fact_", "belief_")) for d in nothing.derives)
    no_beliefs = await engine.experience(
        envelope("My dog is Rex.", directives={"extract": ["facts"]}), wait="consolidated"
    )
    assert any(d.startswith("fact_") for d in no_beliefs.derives)
    assert not any(d.startswith("belief_") for d in no_beliefs.derives)
    floored = await engine.experience(
        envelope("I think my cat is Tom.", directives={"confidence_floor": 0.8}),
        wait="consolidated",
    )
    record = (await engine.lifecycle(event_id=floored.event_id, events="extracted"))[0]
    assert record["payload"]["intake"][0]["status"] == "rejected"
    assert not any(d.startswith("fact_") for d in floored.derives)


async def test_provenance_source_is_recorded(engine):
    await engine.experience(envelope("My plan is pro."), caller="user:alice", wait="indexed")
    await engine.experience(
        envelope("Acme has 12 seats.", scope="org:acme/agent:bot"),
        caller="agent:bot",
        wait="indexed",
    )
    await engine.experience({**envelope("My tier is gold."), "modality": "imported"}, caller="service:importer",
                            wait="indexed")  # fmt: skip
    sources = {f["predicate"]: f["source"] for f in (await engine.facts(SCOPE))["items"]}
    assert sources == {"plan": "human", "tier": "import"}
    bot = (await engine.facts("org:acme/agent:bot"))["items"]
    assert bot[0]["source"] == "agent"


async def test_entities_resolve_to_one_tenant_scoped_id(engine):
    await engine.experience(envelope("I work at Acme Corp."), wait="indexed")
    await engine.experience(
        envelope("Bob works at the acme corp.", scope="org:acme/user:bob"), wait="indexed"
    )
    alice = (await engine.facts(SCOPE))["items"][0]
    bob = (await engine.facts("org:acme/user:bob"))["items"][0]
    assert alice["object"]["id"] == bob["object"]["id"] and alice["object"]["id"].startswith("ent_")


async def test_episodes_time_gap_and_session_strategies(engine_factory):
    async with engine_factory() as engine:
        for minute in (0, 5, 10):
            await engine.experience(
                envelope(f"step {minute}", observed_at=f"2026-05-13T10:{minute:02d}:00Z")
            )
        await engine.experience(
            envelope("We decided to ship it.", observed_at="2026-05-13T10:20:00Z")
        )
        await engine.experience(envelope("Much later.", observed_at="2026-05-13T14:00:00Z"))
        await engine.flush(SCOPE)
        episodes = (await engine.episodes(SCOPE))["items"]
        assert [len(e["events"]) for e in episodes] == [4, 1]
        sealed, open_ = episodes
        assert sealed["status"] == "compressed" and sealed["_partial"] is False
        assert [link["role"] for link in sealed["causal_chain"]] == [
            "trigger",
            "context",
            "context",
            "outcome",
        ]
        assert (
            sealed["started_at"] == "2026-05-13T10:00:00Z"
            and sealed["ended_at"] == "2026-05-13T10:20:00Z"
        )
        assert (
            sealed["actors_involved"] == ["user:alice"] and sealed["supports"] == sealed["events"]
        )
        assert (
            open_["status"] == "open"
            and open_["_partial"] is True
            and open_["_partial_reason"] == "episode_open"
        )
        assert open_["causal_predecessor"] == sealed["id"]
        compressed = await engine.lifecycle(events="compressed")
        assert compressed[0]["payload"]["episode_id"] == sealed["id"]
        assert compressed[0]["event_id"] == sealed["events"][-1] and compressed[0]["seq"] == 4
        overlapping = await engine.episodes(
            SCOPE, overlapping_from="2026-05-13T13:00:00Z", overlapping_to="2026-05-13T15:00:00Z"
        )
        assert [e["id"] for e in overlapping["items"]] == [open_["id"]]
        by_date = await engine.episodes(SCOPE, overlapping_from="2026-05-13", overlapping_to="2026-05-14")
        assert [e["id"] for e in by_date["items"]] == [sealed["id"], open_["id"]]  # bare dates (§8.7.2)


async def test_session_strategy(backend, tmp_path, clock):
    config = EngineConfig(episode_strategy="session", episode_idle_check=3600.0)
    async with cortexdb.open_engine("memory", clock=clock, id_seed=1, config=config) as engine:
        for session, minute in (("s1", 0), ("s1", 1), ("s2", 2), ("s2", 3), ("s2", 4)):
            body = envelope(f"turn {minute}", observed_at=f"2026-05-13T10:0{minute}:00Z",
                            observed_actor={"id": "user:alice", "session": session})  # fmt: skip
            await engine.experience(body, caller="user:alice")
        await engine.flush(SCOPE, seal=True)
        episodes = (await engine.episodes(SCOPE))["items"]
        assert [(e["session"], len(e["events"]), e["strategy"]) for e in episodes] == [
            ("s1", 2, "session"),
            ("s2", 3, "session"),
        ]
        assert all(e["status"] == "compressed" for e in episodes)


async def test_consolidate_into_another_scope(engine):
    body = envelope("I live in Paris.", directives={"consolidate_into": "ws:acme-q3-launch"})
    result = await engine.experience(body, caller="user:alice", wait="consolidated")
    workspace = (await engine.facts("ws:acme-q3-launch"))["items"]
    assert len(workspace) == 1 and workspace[0]["supports"] == [result.event_id]
    assert workspace[0]["scope"] == "ws:acme-q3-launch"
    ws_beliefs = (await engine.beliefs("ws:acme-q3-launch"))["items"]
    assert len(ws_beliefs) == 1
    await engine.flush("ws:acme-q3-launch")
    await engine.flush(SCOPE)
    view = await engine.memory_event(result.event_id)
    assert workspace[0]["id"] in view["derives"] and ws_beliefs[0]["id"] in view["derives"]
    assert view["consolidated_into"] == ["ws:acme-q3-launch"]
    records = await engine.lifecycle(event_id=result.event_id, events="consolidated")
    assert [(r["scope"], r["payload"].get("foreign", False)) for r in records] == [
        (SCOPE, False),
        ("ws:acme-q3-launch", True),
    ]


async def test_consolidate_into_requires_write_on_the_target(engine_factory):
    class DenyWorkspace:
        def check(self, caller, capability, scope):
            if scope.startswith("ws:"):
                raise PolicyDenied(
                    "no", details={"capability": capability, "denied_by_tier": "scope"}
                )

    async with engine_factory(policy=DenyWorkspace()) as engine:
        with pytest.raises(InvalidEnvelope) as info:
            await engine.experience(envelope("x", directives={"consolidate_into": "ws:secret"}))
        assert info.value.details["field"] == "directives.consolidate_into"
        assert info.value.details["denied_by_tier"] == "scope"
        with pytest.raises(PolicyDenied):
            await engine.experience(envelope("x", scope="ws:secret"))
        assert (await engine.events(SCOPE))["items"] == []


async def test_on_behalf_of_and_about_other_are_policy_checked(engine_factory):
    asked = []

    class Recorder:
        def check(self, caller, capability, scope):
            asked.append(capability)

    async with engine_factory(policy=Recorder()) as engine:
        await engine.experience(envelope("x", observed_actor={"id": "user:alice"}, subject={"id": "user:bob"}),
                                caller="agent:ingester")  # fmt: skip
    assert asked == ["scope.write", "scope.write.on_behalf_of", "scope.write.about_other"]


async def test_event_reads_filter_and_paginate_with_stable_cursors(engine):
    for i in range(7):
        await engine.experience(envelope(f"e{i}", observed_at=f"2026-05-13T10:0{i}:00Z",
                                         observed_actor={"id": "user:alice" if i % 2 else "user:bob"}),
                                caller="user:alice")  # fmt: skip
    page1 = await engine.events(SCOPE, limit=3)
    assert len(page1["items"]) == 3 and page1["has_more"] and page1["next_cursor"]
    page2 = await engine.events(SCOPE, limit=3, cursor=page1["next_cursor"])
    page3 = await engine.events(SCOPE, limit=3, cursor=page2["next_cursor"])
    texts = [e["content"]["text"] for p in (page1, page2, page3) for e in p["items"]]
    assert (
        texts == [f"e{i}" for i in range(7)]
        and not page3["has_more"]
        and page3["next_cursor"] is None
    )
    alice = await engine.events(SCOPE, observed_actor="user:alice")
    assert [e["content"]["text"] for e in alice["items"]] == ["e1", "e3", "e5"]
    since = await engine.events(SCOPE, since="2026-05-13T10:05:00Z")
    assert [e["content"]["text"] for e in since["items"]] == ["e5", "e6"]
    with pytest.raises(cortexdb.CortexError) as info:
        await engine.events(SCOPE, cursor="garbage!")
    assert info.value.error_code == "INVALID_CURSOR"
    with pytest.raises(cortexdb.CortexError) as info:
        await engine.events(SCOPE, limit=1001)
    assert info.value.details["field"] == "limit"


async def test_reads_of_unknown_ids_are_not_found(engine):
    with pytest.raises(NotFound):
        await engine.get_event(SCOPE, "evt_00000000-0000-7000-8000-000000000000")
    with pytest.raises(NotFound):
        await engine.memory_event("evt_00000000-0000-7000-8000-000000000000")
    with pytest.raises(NotFound):
        await engine.get_belief(SCOPE, "belief_00000000-0000-7000-8000-000000000000")
    with pytest.raises(cortexdb.InvalidScopeGrammar):
        await engine.events("Not A Scope")


async def test_scope_auto_registers_on_first_write(engine, clock):
    with pytest.raises(NotFound):
        await engine.scope(SCOPE)
    await engine.experience(envelope("x"), caller="user:alice")
    record = await engine.scope(SCOPE)
    assert record["members"] == [{"actor": "user:alice", "role": "owner"}]
    assert record["auto_provisioned"] is True and record["last_write_at"] == "2026-05-13T15:42:09Z"


async def test_rebuild_reproduces_the_derived_layers(engine, clock):
    texts = [
        "I live in Paris.",
        "My favorite color is blue.",
        "I moved to Berlin.",
        "My favorite color is green.",
        "I really love hiking.",
        "Acme moved to 200 seats.",
        "I don't like hiking anymore.",
        "I work at Acme.",
    ]
    for i, text in enumerate(texts):
        clock.advance(1)
        await engine.experience(envelope(text, observed_at=f"2026-04-{10 + i:02d}T10:00:00Z"))
    await engine.flush(SCOPE, seal=True)
    before = await snapshot_layers(engine)
    await engine.rebuild(SCOPE)
    after = await snapshot_layers(engine)
    assert before == after
    assert len(before["facts"]) >= 8 and before["beliefs"] and before["episodes"]


async def snapshot_layers(engine):
    """The derived layers with ids and recorded times replaced by content, for comparison."""
    facts = (await engine.facts(SCOPE, valid_during="..", limit=1000))["items"]  # every fact
    names = {
        f["id"]: (f["predicate"], repr(f["object"].get("value", f["object"].get("name"))))
        for f in facts
    }

    def fact_view(f):
        return (f["subject"]["name"], f["predicate"], repr(f["object"].get("value", f["object"].get("name"))),
                f["polarity"], tuple(f["supports"]), f["confidence"], f["valid_from"], f["valid_to"],
                f["recorded_to"] is None, names.get(f["superseded_by"]), names.get(f["supersedes"]), f["status"])  # fmt: skip

    beliefs = (await engine.beliefs(SCOPE, limit=1000))["items"]

    def belief_view(b):
        return (b["claim"]["predicate"], repr(b["claim"]["object"].get("value", b["claim"]["object"].get("name"))),
                b["stance"], b["confidence"], tuple(sorted((names[s["id"]], s["polarity"], s["weight"]) for s in b["supports"])))  # fmt: skip

    episodes = (await engine.episodes(SCOPE, limit=1000))["items"]

    def episode_view(e):
        return (tuple(e["events"]), e["status"], e["summary"], e["name"],
                tuple((c["event"], c["role"]) for c in e["causal_chain"]))  # fmt: skip

    return {
        "facts": sorted(map(fact_view, facts)),
        "beliefs": sorted(map(belief_view, beliefs)),
        "episodes": sorted(map(episode_view, episodes)),
    }


async def test_restart_resumes_unfinished_derivations(tmp_path, clock):
    """LevelDB only: the memory backend does not outlive its engine by design."""

    def engine_factory():
        return cortexdb.open_engine(
            "leveldb", path=str(tmp_path / "restart"), clock=clock, id_seed=3
        )

    async with engine_factory() as engine:
        result = await engine.experience(envelope("I live in Paris."), wait="captured")
        actor = engine._supervisor.actor(SCOPE)
        # simulate a crash between capture and derivation: forget the queue, keep the WAL
        actor.lane.queue.clear()
        actor.lane.state.events.clear()
    async with engine_factory() as engine:
        await engine.flush(SCOPE)
        view = await engine.memory_event(result.event_id)
        assert view["stages_completed"][:4] == ["captured", "extracted", "indexed", "consolidated"]
        assert (await engine.facts(SCOPE))["items"][0]["object"]["name"] == "Paris"
        again = await engine.experience(envelope("again"), wait="captured")
        assert again.wal_offset == result.wal_offset + 1  # offsets survive restarts


async def test_extractor_failures_are_recorded_not_fatal(engine_factory):
    class Broken:
        name = "broken"

        def extract(self, context):
            raise RuntimeError("model exploded")

    async with engine_factory(extractor=Broken()) as engine:
        result = await engine.experience(envelope("I live in Paris."), wait="consolidated")
        view = await engine.memory_event(result.event_id)
        assert view["errors"][0]["error"] == "EXTRACTOR_FAILED"
        assert view["stages_completed"][:4] == ["captured", "extracted", "indexed", "consolidated"]
        assert engine.statistics().restarts == 0


async def test_cancelling_the_only_evidence_deletes_the_belief(engine):
    done = await engine.experience(envelope("My favorite color is blue."), wait="consolidated")
    belief_id = next(d for d in done.derives if d.startswith("belief_"))
    await engine.cancel(done.event_id)
    with pytest.raises(cortexdb.ResourceDeleted) as info:
        await engine.get_belief(SCOPE, belief_id)
    assert info.value.http_status == 410
    assert info.value.details["reason"] == "no_remaining_evidence"
    assert (await engine.beliefs(SCOPE, include_superseded=True))["items"] == []


async def test_revision_policy_cooldown_defers_then_applies(engine_factory, clock):
    config = EngineConfig(
        belief_cooldown="PT5M", default_caller="user:alice", episode_idle_check=3600.0
    )
    async with engine_factory(config=config) as engine:
        await engine.experience(envelope("My favorite color is blue."), wait="consolidated")
        clock.advance(60)  # within the cooldown: the new evidence is recorded, the revision waits
        await engine.experience(envelope("My favorite color is blue!", observed_at="2026-05-13T15:41:00Z"),
                                wait="consolidated")  # fmt: skip
        (belief,) = (await engine.beliefs(SCOPE))["items"]
        assert belief["_partial"] is True and belief["_partial_reason"] == "revision_in_progress"
        assert belief["revision_count"] == 0 and belief["evidence"]["for"] == 1.8
        assert belief["revision_policy"]["cooldown"] == "PT5M"
        clock.advance(300)  # the gate opens; the next consolidation in the scope applies it
        await engine.experience(envelope("Unrelated chatter."), wait="consolidated")
        (belief,) = (await engine.beliefs(SCOPE))["items"]
        assert belief["_partial"] is False and belief["revision_count"] == 1
        assert belief["confidence"] == pytest.approx(2.8 / 3.8, abs=1e-4)


async def test_lifecycle_replay_window_is_one_hour_by_arrival(engine, clock):
    old = await engine.experience(envelope("old news"), wait="consolidated")
    clock.advance(hours=1, seconds=1)
    new = await engine.experience(envelope("fresh news"), wait="consolidated")
    window = await engine.lifecycle()
    assert {r["event_id"] for r in window} == {new.event_id}
    assert await engine._ctx.bus.prune() == 4  # the old event's four records
    with pytest.raises(NotFound):
        await engine.lifecycle_event(
            (await engine.memory_event(old.event_id))["lifecycle_event_ids"][0]
        )


async def test_read_parameters_of_the_wrong_type_are_clear_errors(engine):
    for kwargs, field in (
        ({"min_confidence": "high"}, "min_confidence"),
        ({"min_confidence": 1.5}, "min_confidence"),
        ({"include_superseded": "yes"}, "include_superseded"),
        ({"cursor": 42}, "cursor"),
        ({"limit": 0}, "limit"),
    ):
        with pytest.raises(cortexdb.CortexError) as info:
            await engine.facts(SCOPE, **kwargs)
        assert info.value.error_code == "INVALID_QUERY" and info.value.details["field"] == field
    with pytest.raises(cortexdb.CortexError) as info:
        await engine.facts(SCOPE, as_of="last tuesday")
    assert info.value.error_code == "INVALID_TIMESTAMP" and info.value.details["field"] == "as_of"


async def test_bulk_errors_name_the_request_or_the_item(engine):
    good = {
        "modality": "conversation",
        "content": {"kind": "text", "text": "x"},
        "context": {"observed_at": "2026-05-13T00:00:00Z"},
    }
    cases = [
        ({"scope": "Bad Scope", "items": [good]}, "scope"),
        ({"scope": SCOPE, "directives": {"embed": "now"}, "items": [good]}, "directives.embed"),
        (
            {"scope": SCOPE, "items": [good, {**good, "directives": {"embed": "now"}}]},
            "items[1].directives.embed",
        ),
        ({"scope": SCOPE, "actor": {"id": "nobody"}, "items": [good]}, "observed_actor.id"),
    ]
    for request, field in cases:
        with pytest.raises(cortexdb.CortexError) as info:
            await engine.experience_bulk(request)
        assert info.value.details["field"] == field, request


async def test_max_revisions_per_hour_defers_then_applies_in_the_next_window(engine_factory, clock):
    config = EngineConfig(
        belief_max_revisions_per_hour=1, default_caller="user:alice", episode_idle_check=3600.0
    )
    async with engine_factory(config=config) as engine:
        await engine.experience(envelope("My favorite color is blue."), wait="consolidated")
        clock.advance(60)
        await engine.experience(envelope("My favorite color is blue!", observed_at="2026-05-13T15:40:00Z"),
                                wait="consolidated")  # fmt: skip
        (belief,) = (await engine.beliefs(SCOPE))["items"]
        assert belief["revision_count"] == 1 and belief["revisions_in_window"] == 1
        clock.advance(60)
        await engine.experience(envelope("My favorite color is blue.", observed_at="2026-05-13T15:39:00Z"),
                                wait="consolidated")  # fmt: skip
        (belief,) = (await engine.beliefs(SCOPE))["items"]
        assert belief["_partial_reason"] == "revision_in_progress" and belief["revision_count"] == 1
        clock.advance(3600)  # a new hour window: the deferred revision goes through
        await engine.experience(envelope("Unrelated."), wait="consolidated")
        (belief,) = (await engine.beliefs(SCOPE))["items"]
        assert belief["_partial"] is False and belief["revision_count"] == 2
