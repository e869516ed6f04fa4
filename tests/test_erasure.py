"""GDPR erasure through the engine (``engine.erasures``, reference §8.6, §11.3–11.4), on both
backends: preview and manifest, drift, execute → status → cancel, the five phases' effects,
cross-workspace propagation, belief demotion, the lifecycle ticks, the audit row, resuming an
interrupted job."""

from __future__ import annotations

import attrs
import pytest
import trio

from cortexdb.errors import (
    ErasurePreviewStale,
    IdempotencyConflict,
    InvalidBody,
    InvalidScopeGrammar,
    NotFound,
    PolicyDenied,
    RateLimited,
    ResourceDeleted,
)

from .conftest import envelope

ALICE = "org:acme/user:alice"
TEAM = "ws:team"  # registered: alice and bob own it
SOLO = "ws:alice-notes"  # registered: alice alone owns it


async def finished(engine, erasure_id: str) -> dict:
    """Wait for the job's ``erasure_complete`` record (replayed if it is already out); its status."""
    async with engine.subscribe(job_id=erasure_id, events="erasure_complete", since_lifecycle_id="") as ended:
        await ended.__anext__()
    return await engine.erasures.status(erasure_id)


async def register(engine, path: str, owners: list[str]) -> str:
    """Open a workspace (an agent writes its first event) and register its owners; that event."""
    opened = await engine.experience(envelope("Opening the workspace.", scope=path), caller="agent:setup",
                                     wait="consolidated")  # fmt: skip

    def edit(record):
        return attrs.evolve(record, members=[{"actor": o, "role": "owner"} for o in owners], auto_provisioned=False)

    await engine.edit_scope(path, edit)
    return opened.event_id


async def seed(engine) -> dict:
    """Alice's scope, a note of hers consolidated into the team workspace, her own message in it,
    bob's message in it, and her solo workspace."""
    ids = {}
    ids["paris"] = (await engine.experience(envelope("I live in Paris."), wait="consolidated")).event_id
    tea = envelope("I like green tea.", directives={"consolidate_into": TEAM})
    ids["team_opening"] = await register(engine, TEAM, ["user:alice", "user:bob"])
    ids["tea"] = (await engine.experience(tea, wait="consolidated")).event_id
    ids["alice_in_team"] = (await engine.experience(envelope("I work at Acme.", scope=TEAM), wait="consolidated")).event_id
    ids["bob_in_team"] = (await engine.experience(envelope("I live in Berlin.", scope=TEAM), caller="user:bob",
                                                  wait="consolidated")).event_id  # fmt: skip
    ids["solo_opening"] = await register(engine, SOLO, ["user:alice"])
    for scope in (ALICE, TEAM, SOLO):
        await engine.flush(scope)
    return ids


# -- preview and manifest ---------------------------------------------------------------------------
async def test_preview_plans_without_changing_anything(engine):
    ids = await seed(engine)
    before = await engine.events(ALICE)
    preview = await engine.erasures.preview({"scope": ALICE, "audit_note": "DSR #1"})
    assert preview["preview_id"].startswith("ervw_") and preview["scope"] == ALICE
    assert preview["data_subjects"] == ["user:alice"]
    assert preview["refcount_breakdown"] == {"events_to_delete": 2, "events_to_redact": 2, "events_under_legal_hold": 0}
    assert preview["estimated_affected"]["events"] == 4 and preview["legal_holds"] == []
    propagation = preview["cross_scope_propagation"]
    assert propagation["requires_capability"] == "forget.gdpr.cross_workspace"
    by_scope = {w["scope"]: w for w in propagation["affected_workspaces"]}
    assert set(by_scope) == {TEAM, SOLO}
    assert by_scope[SOLO]["action"] == "erase_workspace" and by_scope[SOLO]["co_owners"] == []
    assert by_scope[TEAM]["co_owners"] == ["user:bob"] and by_scope[TEAM]["action"] == "erase_authored_events"
    assert by_scope[TEAM]["events_referenced"] == 1 and by_scope[TEAM]["authored_events"] == 1
    assert preview["manifest_url"] == f"/v1/erasures/preview/{preview['preview_id']}/manifest"
    assert await engine.events(ALICE) == before

    lines, cursor = [], None
    while True:
        page = await engine.erasures.manifest(preview["preview_id"], limit=3, cursor=cursor)
        lines += page["items"]
        cursor = page["next_cursor"]
        if not page["has_more"]:
            break
    assert len(lines) == sum(page["lines"].values()) and len(lines) > 3
    deleted = {line["event_id"] for line in lines if line["action"] == "delete_event"}
    redacted = {line["event_id"] for line in lines if line["action"] == "redact_event"}
    assert deleted == {ids["paris"], ids["solo_opening"]} and redacted == {ids["tea"], ids["alice_in_team"]}
    marks = [line for line in lines if line["action"] == "mark_record"]
    assert marks and all(line["scope"] == TEAM for line in marks)
    assert {line["cites_event"] for line in marks} == redacted
    erased_scopes = {line["scope"] for line in lines if line["action"] == "delete_record"}
    assert erased_scopes == {ALICE, SOLO}
    assert ids["bob_in_team"] not in str(lines) and ids["team_opening"] not in str(lines)


async def test_a_manifest_expires_after_24_hours(engine, clock):
    await engine.experience(envelope("I live in Paris."), wait="consolidated")
    preview = await engine.erasures.preview({"scope": ALICE})
    clock.advance(24 * 3600 - 1)
    assert (await engine.erasures.manifest(preview["preview_id"]))["items"]
    clock.advance(2)
    with pytest.raises(ResourceDeleted) as gone:
        await engine.erasures.manifest(preview["preview_id"])
    assert gone.value.details["reason"] == "expired" and gone.value.http_status == 410
    with pytest.raises(ResourceDeleted):
        await engine.erasures.execute({"scope": ALICE, "from_preview_id": preview["preview_id"]})
    clock.advance(8 * 24 * 3600)
    await engine.erasures.preview({"scope": ALICE})  # a preview sweeps what expired
    with pytest.raises(NotFound):
        await engine.erasures.manifest(preview["preview_id"])


async def test_drift_since_the_preview_beyond_the_threshold_is_a_409(engine):
    await engine.experience(envelope("I live in Paris."), wait="consolidated")
    preview = await engine.erasures.preview({"scope": ALICE})
    await engine.experience(envelope("I moved to Lyon.", scope=f"{ALICE}/app:notes"))
    await engine.experience(envelope("Unrelated.", scope="org:acme/user:bob"), caller="user:bob")
    with pytest.raises(ErasurePreviewStale) as stale:
        await engine.erasures.execute({"scope": ALICE, "from_preview_id": preview["preview_id"]})
    assert stale.value.http_status == 409
    assert stale.value.details == {"preview_id": preview["preview_id"], "new_events": 1, "threshold": 0}
    accepted = await engine.erasures.execute({"scope": ALICE, "from_preview_id": preview["preview_id"]},
                                             drift_threshold=1)  # fmt: skip
    assert accepted["status"] == "running"
    assert (await finished(engine, accepted["erasure_id"]))["preview_id"] == preview["preview_id"]


@pytest.mark.parametrize("body, error, field", [
    ({}, InvalidBody, "scope"),
    ({"scope": ALICE, "layers": ["facts"]}, InvalidBody, "layers"),
    ({"scope": ALICE, "subjects": "user:alice"}, InvalidBody, "subjects"),
    ({"scope": ALICE, "cross_workspace": "yes"}, InvalidBody, "cross_workspace"),
    ({"scope": ALICE, "audit_note": 7}, InvalidBody, "audit_note"),
    ({"scope": ALICE, "from_preview_id": "evt_x"}, InvalidBody, "from_preview_id"),
    ({"scope": "not a scope"}, InvalidScopeGrammar, None),
])  # fmt: skip
async def test_bad_requests_are_clear_errors(engine, body, error, field):
    with pytest.raises(error) as refused:
        await engine.erasures.execute(body)
    assert refused.value.http_status < 500
    if field:
        assert refused.value.details["field"] == field


async def test_a_preview_of_another_scope_and_unknown_ids_are_refused(engine):
    await engine.experience(envelope("I live in Paris."), wait="consolidated")
    preview = await engine.erasures.preview({"scope": ALICE})
    with pytest.raises(InvalidBody) as other:
        await engine.erasures.execute({"scope": "org:acme/user:bob", "from_preview_id": preview["preview_id"]})
    assert other.value.details["preview_scope"] == ALICE
    for call in (engine.erasures.status, engine.erasures.cancel, engine.erasures.manifest):
        with pytest.raises(NotFound):
            await call("erasure_01")
    with pytest.raises(NotFound):
        await engine.erasures.execute({"scope": ALICE, "from_preview_id": "ervw_gone"})


# -- execute, status, cancel ----------------------------------------------------------------------
async def test_cancel_before_the_deletions_leaves_the_scope_untouched(engine):
    ids = await seed(engine)
    in_refcount, release = trio.Event(), trio.Event()

    async def hold(job_id, phase, where):
        if (phase, where) == ("refcount", "start"):
            in_refcount.set()
            await release.wait()

    engine.erasures.jobs.hook = hold
    accepted = await engine.erasures.execute({"scope": ALICE})
    await in_refcount.wait()
    answer = await engine.erasures.cancel(accepted["erasure_id"])
    assert answer["cancellation_accepted"] and answer["deleted_events_before_cancel"] == 0
    release.set()
    status = await finished(engine, accepted["erasure_id"])
    assert status["status"] == "cancelled" and status["scope_state"] == "untouched"
    assert status["phase"] == "refcount" and status["audit_id"].startswith("audit_")
    assert (await engine.get_event(ALICE, ids["paris"]))["content"]["text"] == "I live in Paris."
    again = await engine.erasures.cancel(accepted["erasure_id"])
    assert again["cancellation_accepted"] is False and again["status"] == "cancelled"
    row = await engine.tables.audit_rows.get(status["audit_id"])
    assert row["gdpr"] is True and row["erasure_id"] == accepted["erasure_id"] and row["erasure_status"] == "cancelled"


async def test_the_idempotency_key_replays_the_same_erasure(engine):
    await engine.experience(envelope("I live in Paris."), wait="consolidated")
    body = {"scope": ALICE, "idempotency_key": "dsr-1234", "audit_note": "DSR #1234"}
    first = await engine.erasures.execute(body)
    assert await engine.erasures.execute(body) == first
    with pytest.raises(IdempotencyConflict):
        await engine.erasures.execute({**body, "audit_note": "another"})
    await finished(engine, first["erasure_id"])


async def test_more_running_erasures_than_the_limit_is_a_429(engine_factory):
    from cortexdb import EngineConfig

    async with engine_factory(config=EngineConfig(erasure_max_running=1, default_caller="user:alice")) as engine:
        await engine.experience(envelope("I live in Paris."), wait="consolidated")
        release = trio.Event()

        async def hold(job_id, phase, where):
            await release.wait()

        engine.erasures.jobs.hook = hold
        first = await engine.erasures.execute({"scope": ALICE})
        with pytest.raises(RateLimited) as busy:
            await engine.erasures.execute({"scope": "org:acme/user:bob"})
        assert busy.value.http_status == 429 and busy.value.details["limit"] == 1
        release.set()
        engine.erasures.jobs.hook = None
        await finished(engine, first["erasure_id"])


async def test_propagation_needs_forget_gdpr_cross_workspace(engine_factory):
    class NoCrossWorkspace:
        def check(self, caller, capability, scope):
            if capability == "forget.gdpr.cross_workspace":
                raise PolicyDenied("no", details={"capability": capability, "denied_by_tier": "tenant"})

    async with engine_factory(policy=NoCrossWorkspace()) as engine:
        ids = await seed(engine)
        with pytest.raises(PolicyDenied) as denied:
            await engine.erasures.execute({"scope": ALICE})
        assert denied.value.details["capability"] == "forget.gdpr.cross_workspace"
        preview = await engine.erasures.preview({"scope": ALICE, "cross_workspace": False})
        assert preview["cross_scope_propagation"]["requires_capability"] is None
        assert preview["refcount_breakdown"]["events_to_redact"] == 1  # the tea note, cited by the team
        accepted = await engine.erasures.execute({"scope": ALICE, "cross_workspace": False,
                                                  "from_preview_id": preview["preview_id"]})  # fmt: skip
        status = await finished(engine, accepted["erasure_id"])
        assert status["status"] == "completed", status
        for key in ("alice_in_team", "bob_in_team"):  # nothing of the workspaces was erased
            assert (await engine.get_event(TEAM, ids[key]))["content"]["kind"] == "message"
        assert (await engine.events(SOLO))["items"]


# -- the effects of a completed erasure ------------------------------------------------------------
async def test_an_erasure_deletes_redacts_marks_and_says_so(engine):
    ids = await seed(engine)
    accepted = await engine.erasures.execute({"scope": ALICE, "audit_note": "DSR #1"})
    records = []
    async with engine.subscribe(job_id=accepted["erasure_id"], since_lifecycle_id="") as stream:
        async for record in stream:
            records.append(record)
            if record.stage == "erasure_complete":
                break
    status = await engine.erasures.status(accepted["erasure_id"])
    assert status["status"] == "completed" and status["scope_state"] == "erased", status
    assert status["fraction_complete"] == 1.0 and status["phase"] == "demote"
    progress = status["progress"]
    assert (progress["deleted_events"], progress["redacted_events"]) == (2, 2)
    assert progress["deleted_facts"] > 0 and progress["marked_records"] > 0

    # deleted: the events no one else cites, and everything of the solo workspace
    for scope, key in ((ALICE, "paris"), (SOLO, "solo_opening")):
        with pytest.raises(NotFound):
            await engine.get_event(scope, ids[key])
    # redacted: cited by the team workspace; only what §11.3 keeps
    for scope, key in ((ALICE, "tea"), (TEAM, "alice_in_team")):
        event = await engine.get_event(scope, ids[key])
        assert event["content"] == {"kind": "redacted", "original_kind": "message"}
        assert event["actor"] == f"redacted:gdpr_{accepted['erasure_id']}"
    tea = await engine.get_event(ALICE, ids["tea"])
    assert any(d.startswith("redacted:fact_") for d in tea["derives"])
    assert [e["id"] for e in (await engine.events(ALICE))["items"]] == [ids["tea"]]  # the redacted one
    assert (await engine.events(SOLO))["items"] == []
    for scope in (ALICE, SOLO):
        for read in (engine.facts, engine.beliefs, engine.episodes):
            assert (await read(scope))["items"] == []
    # the team keeps bob's message, and its records citing alice's redacted events are marked
    assert (await engine.get_event(TEAM, ids["bob_in_team"]))["content"]["text"] == "I live in Berlin."
    team_facts = (await engine.facts(TEAM))["items"]
    cited = [f for f in team_facts if set(f["supports"]) & {ids["tea"], ids["alice_in_team"]}]
    assert cited and all(f["_partial_reason"] == "supporting_evidence_redacted" for f in cited)
    assert all(f.get("_partial_reason") is None for f in team_facts if ids["bob_in_team"] in f["supports"])

    ticks = [r.payload for r in records if r.stage == "erasure_progress"]
    assert [t["fraction_complete"] for t in ticks] == sorted(t["fraction_complete"] for t in ticks)
    assert {t["phase"] for t in ticks} == {"enumerate", "refcount", "categorize", "delete", "demote"}
    assert all(r.scope == ALICE and r.job_id == accepted["erasure_id"] for r in records)
    end = records[-1].payload
    assert end["status"] == "completed" and end["audit_id"] == status["audit_id"]
    assert end["summary"]["deleted_events"] == 2 and end["summary"]["redacted_events"] == 2
    row = await engine.tables.audit_rows.get(status["audit_id"])
    assert row["gdpr"] is True and row["erasure_id"] == accepted["erasure_id"] and row["audit_note"] == "DSR #1"
    assert row["summary"] == status["summary"] and row["capability"] == "forget.gdpr"
    manifest = await engine.erasures.manifest(accepted["erasure_id"], limit=1000)
    assert manifest["erasure_id"] == accepted["erasure_id"] and manifest["expires_at"] is not None


@pytest.mark.parametrize("factor, demoted", [(0.9, True), (0.4, False)])
async def test_beliefs_resting_on_redacted_evidence_are_demoted_or_deleted(engine, factor, demoted):
    tea = envelope("I like green tea.", directives={"consolidate_into": TEAM})
    await engine.experience(tea, wait="consolidated")
    await engine.experience(envelope("I live in Berlin.", scope=TEAM), caller="user:bob", wait="consolidated")
    await engine.flush(TEAM)
    before = {b["claim"]["predicate"]: b for b in (await engine.beliefs(TEAM))["items"]}
    accepted = await engine.erasures.execute({"scope": ALICE}, redaction_factor=factor)
    status = await finished(engine, accepted["erasure_id"])
    after = {b["claim"]["predicate"]: b for b in (await engine.beliefs(TEAM))["items"]}
    assert after["lives_in"] == before["lives_in"]  # bob's: untouched
    likes = before["likes"]
    if demoted:
        assert status["progress"]["demoted_beliefs"] == 1
        assert after["likes"]["confidence"] == pytest.approx(likes["confidence"] * factor, abs=1e-3)
        assert after["likes"]["_partial_reason"] == "supporting_evidence_redacted"
        assert after["likes"]["supporting_evidence_redacted_fraction"] == 1.0
    else:  # under the confidence floor (0.3): deleted, 410 on lookup
        assert "likes" not in after
        with pytest.raises(ResourceDeleted):
            await engine.get_belief(TEAM, likes["id"])


async def test_an_erasure_releases_the_blobs_only_its_events_referred_to(engine):
    mine = (await engine.blobs.put(b"alice's photo", scope=ALICE, content_type="image/jpeg")).metadata["blob_id"]
    shared = (await engine.blobs.put(b"team chart", scope=TEAM, content_type="image/png")).metadata["blob_id"]
    photo = envelope("My cat.")
    photo["content"]["media"] = [{"blob_id": mine}, {"blob_id": shared}]
    await engine.experience(photo, wait="consolidated")
    chart = envelope("The chart.", scope=TEAM)
    chart["content"]["media"] = [{"blob_id": shared}]
    await engine.experience(chart, caller="user:bob", wait="consolidated")
    status = await finished(engine, (await engine.erasures.execute({"scope": ALICE}))["erasure_id"])
    assert status["progress"]["released_blobs"] == 1 and status["summary"]["released_blobs"] == 1
    with pytest.raises(NotFound):
        await engine.blobs.stat(mine)
    assert (await engine.blobs.stat(shared))["blob_id"] == shared  # bob's event still refers to it
