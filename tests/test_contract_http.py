"""Issue 15, "true to the contract": the reference's promises checked over HTTP (the in-process
app, memory backend, manual clock).  One test (or a few) per item of the issue."""

from __future__ import annotations

import json

import trio

from .server_support import body, server

ALICE = "org:acme/user:alice"
PLANNER = {"id": "agent:planner_v3", "type": "agent"}
EXAMPLE_FILTER = {"AND": [{"observed_actor": {"in": ["user:alice", "agent:planner_v3"]}},
                          {"confidence": {"gte": 0.6}}]}  # fmt: skip  (§8.3's own example)


async def sse(h, path: str, payload: dict) -> tuple[int, object, bytes]:
    """(status, headers, body) of a streamed response, read as it arrives (as test_answer_server)."""
    headers = {**h.as_("user:alice"), "Content-Type": "application/json"}
    raw = bytearray()
    with trio.fail_after(30):  # a hang guard only
        async with h.client.request(path, method="POST", headers=headers) as connection:
            await connection.send(json.dumps(payload).encode())
            await connection.send_complete()
            try:
                while True:
                    raw += await connection.receive()
            except trio.EndOfChannel:
                pass
    return connection.status_code, connection.headers, bytes(raw)


def names(items: list[dict], key: str = "claim") -> set[str]:
    """The object names of facts (``key="object"``) or beliefs (``claim``)."""
    return {(i["object"] if key == "object" else i["claim"]["object"]).get("name") for i in items}


# -- 1. observed_actor filters facts and beliefs by their events' observers ---------------------
async def test_observed_actor_filter_keeps_facts_and_beliefs_of_the_actors_events(tmp_path):
    async with server(tmp_path) as h:
        for text, extra in (("I live in Paris.", {}), ("Bob lives in Rome.", {"observed_actor": PLANNER})):
            response, data = await h.call("POST", "/v1/experience?wait=consolidated", json=body(text, **extra))
            assert response.status_code == 200, data

        async def recall(filters):
            response, pack = await h.call("POST", "/v1/recall", json={
                "scope": ALICE, "query": "live Paris Rome", "filters": filters})  # fmt: skip
            assert response.status_code == 200, pack
            return pack["layers"]

        example = await recall(EXAMPLE_FILTER)  # the reference's example returns what it names
        assert names(example["facts"], "object") == {"Paris", "Rome"}
        assert names(example["beliefs"]) == {"Paris", "Rome"}
        planner = await recall({"observed_actor": {"eq": "agent:planner_v3"}})
        assert names(planner["facts"], "object") == {"Rome"} and names(planner["beliefs"]) == {"Rome"}
        assert [e["actor"] for e in planner["events"]] == ["agent:planner_v3"]
        alice = await recall({"observed_actor": {"in": ["user:alice"]}})
        assert names(alice["facts"], "object") == {"Paris"} and names(alice["beliefs"]) == {"Paris"}
        nobody = await recall({"observed_actor": {"in": ["user:carol"]}})
        assert nobody["facts"] == [] and nobody["beliefs"] == [] and nobody["events"] == []


# -- 3. recall idempotency: the same key with another body is a conflict -------------------------
async def test_recall_key_replays_its_pack_and_refuses_another_body(tmp_path):
    async with server(tmp_path) as h:
        await h.call("POST", "/v1/experience?wait=consolidated", json=body("I live in Paris."))
        request = {"scope": ALICE, "query": "where do I live", "idempotency_key": "recall-1"}
        first, pack = await h.call("POST", "/v1/recall", json=request)
        assert first.status_code == 200 and "X-Cortex-Replay" not in first.headers
        again, replay = await h.call("POST", "/v1/recall", json=request)
        assert again.status_code == 200 and again.headers["X-Cortex-Replay"] == "true"
        assert replay["pack_id"] == pack["pack_id"] and replay["layers"] == pack["layers"]
        status, headers, raw = await sse(h, "/v1/recall", {**request, "stream": True})
        assert status == 200 and headers["X-Cortex-Replay"] == "true"
        assert pack["pack_id"] in raw.decode()  # streaming is the delivery, not another request
        other, data = await h.call("POST", "/v1/recall", json={**request, "query": "what do I like"})
        assert other.status_code == 409 and data["error_code"] == "IDEMPOTENCY_CONFLICT"
        assert data["details"]["idempotency_key"] == "recall-1"
        bob, theirs = await h.call("POST", "/v1/recall", "user:bob", json={**request, "scope": "org:acme/user:bob"})
        assert bob.status_code == 200 and theirs["pack_id"] != pack["pack_id"]  # keys are per caller
        h.clock.advance(seconds=61)  # the pack (and its key) lived 60 s
        later, fresh = await h.call("POST", "/v1/recall", json={**request, "query": "what do I like"})
        assert later.status_code == 200 and fresh["pack_id"] != pack["pack_id"]


# -- 4. idempotency on every write endpoint that takes a key ---------------------------------------
def item(text: str, key: str) -> dict:
    one = body(text)
    return {"modality": one["modality"], "content": one["content"], "context": one["context"], "idempotency_key": key}


async def test_a_replayed_bulk_answers_the_first_batch_id(tmp_path):
    async with server(tmp_path) as h:
        bulk = {"scope": ALICE, "items": [item("I like tea.", "b-1"), item("I like jazz.", "b-2")]}
        first, data = await h.call("POST", "/v1/experience/bulk", json=bulk)
        assert first.status_code == 202 and data["accepted"] == 2 and "X-Cortex-Replay" not in first.headers
        again, replay = await h.call("POST", "/v1/experience/bulk", json=bulk)
        assert again.status_code == 202 and again.headers["X-Cortex-Replay"] == "true"
        assert replay["batch_id"] == data["batch_id"] and replay["lifecycle_stream"] == data["lifecycle_stream"]
        assert (replay["accepted"], replay["replayed"]) == (0, 2)  # the counts say what this call did
        # half new: a new batch (its new item is in it), the known item a replay
        mixed, part = await h.call("POST", "/v1/experience/bulk", json={**bulk, "items": [
            bulk["items"][0], item("I like chess.", "b-3")]})  # fmt: skip
        assert part["batch_id"] != data["batch_id"] and (part["accepted"], part["replayed"]) == (1, 1)
        assert "X-Cortex-Replay" not in mixed.headers
        clash, error = await h.call("POST", "/v1/experience/bulk", json={**bulk, "items": [item("I hate tea.", "b-1")]})
        assert clash.status_code == 409 and error["error_code"] == "IDEMPOTENCY_CONFLICT"


async def test_scope_registration_and_erasure_replay_their_key(tmp_path):
    async with server(tmp_path) as h:
        register = {"path": "ws:launch", "members": [{"actor": "user:alice", "role": "owner"}],
                    "idempotency_key": "reg-1"}  # fmt: skip
        first, record = await h.call("POST", "/v1/scopes", json=register)
        assert first.status_code == 201 and "X-Cortex-Replay" not in first.headers
        again, replay = await h.call("POST", "/v1/scopes", json=register)
        assert again.status_code == 201 and again.headers["X-Cortex-Replay"] == "true" and replay == record
        other, error = await h.call("POST", "/v1/scopes", json={**register, "path": "ws:other"})
        assert other.status_code == 409 and error["error_code"] == "IDEMPOTENCY_CONFLICT"
        unkeyed, exists = await h.call("POST", "/v1/scopes", json={k: v for k, v in register.items() if k != "idempotency_key"})
        assert unkeyed.status_code == 409 and exists["error_code"] == "SCOPE_REGISTRATION_EXISTS"
        h.clock.advance(hours=25)  # keys live 24 h: afterwards the registration exists, no replay
        late, _ = await h.call("POST", "/v1/scopes", json=register)
        assert late.status_code == 409 and "X-Cortex-Replay" not in late.headers
        await h.call("POST", "/v1/experience?wait=consolidated", json=body("I live in Paris."))
        erase = {"scope": ALICE, "idempotency_key": "erase-1"}
        first, accepted = await h.call("POST", "/v1/erasures", json=erase)
        assert first.status_code == 202 and "X-Cortex-Replay" not in first.headers, accepted
        again, replay = await h.call("POST", "/v1/erasures", json=erase)
        assert again.status_code == 202 and again.headers["X-Cortex-Replay"] == "true"
        assert replay == accepted  # the original response, marked by the header only


# -- 5. every warning is also an X-Cortex-Warning header -------------------------------------------
async def test_warnings_travel_in_the_x_cortex_warning_header(tmp_path):
    raw = {"scope": ALICE, "view": "raw", "temporal": {"valid_during": ["2026-01-01", "2026-12-31"]}}
    async with server(tmp_path) as h:
        await h.call("POST", "/v1/experience?wait=indexed", json=body("I live in Paris."))
        response, pack = await h.call("POST", "/v1/recall", json=raw)
        assert response.status_code == 200 and pack["warnings"] == ["valid_during_ignored_for_view_raw"]
        assert response.headers["X-Cortex-Warning"] == "valid_during_ignored_for_view_raw"
        status, headers, _ = await sse(h, "/v1/recall", {**raw, "stream": True})
        assert status == 200 and headers["X-Cortex-Warning"] == "valid_during_ignored_for_view_raw"
        plain, _ = await h.call("POST", "/v1/recall", json={"scope": ALICE, "view": "raw"})
        assert "X-Cortex-Warning" not in plain.headers
    async with server(tmp_path, preset="cloud_shared_saas") as h:  # no diagnostics.read here
        response, pack = await h.call("POST", "/v1/recall", json={**raw, "diagnostics": "full"})
        assert response.status_code == 200 and "diagnostics" not in pack
        assert response.headers["X-Cortex-Warning"] == "diagnostics_stripped, valid_during_ignored_for_view_raw"


# -- 6. audit.store_body_bytes: the tenant setting takes effect when changed ----------------------
async def test_the_tenant_setting_store_body_bytes_applies_to_the_next_rows(tmp_path):
    async with server(tmp_path) as h:
        async def last_write_row() -> dict:
            _, page = await h.call("GET", "/v1/audit?capability=scope.write")
            return page["items"][-1]

        await h.call("POST", "/v1/experience", json=body("one"))
        assert (await last_write_row())["request"]["body_bytes"] > 0  # the preset's default: true
        tenant = h.app.cortex.policy.document("tenant", "acme")
        for stored in (False, True):
            doc = {"allow": tenant["allow"], "deny": tenant["deny"],
                   "defaults": {**tenant["defaults"], "audit.store_body_bytes": stored}}  # fmt: skip
            response, data = await h.call("PUT", "/v1/policy/tenant/acme", "user:root", json=doc)
            assert response.status_code == 200, data
            await h.call("POST", "/v1/experience", json=body(f"stored={stored}"))
            row = await last_write_row()
            assert ("body_bytes" in row["request"]) is stored
            assert row["request"]["body_hash"].startswith("sha256:")  # the hash stays either way


# -- 8. /v1/beliefs: include_deprecated, include_superseded, calibration -----------------------------
async def test_belief_list_filters_and_calibration(tmp_path):
    async with server(tmp_path) as h:
        for text, at in (("I moved to Lisbon.", "2026-01-01T00:00:00Z"), ("I live in Madrid.", "2026-02-01T00:00:00Z")):
            await h.call("POST", "/v1/experience?wait=consolidated", json=body(text, context={"observed_at": at}))

        async def listed(query: str = "") -> dict[str, dict]:
            response, page = await h.call("GET", f"/v1/beliefs?scope={ALICE}{query}")
            assert response.status_code == 200, page
            return {b["claim"]["object"]["name"]: b for b in page["items"]}

        assert set(await listed()) == {"Madrid"}  # the closed claim is history
        for flag in ("&include_deprecated=true", "&include_superseded=true&valid_during=.."):
            every = await listed(flag)
            assert set(every) == {"Madrid", "Lisbon"}
        lisbon, madrid = every["Lisbon"], every["Madrid"]
        assert lisbon["stance"] == "contradicted" and lisbon["valid_to"] == "2026-02-01T00:00:00Z"
        for belief in (lisbon, madrid):
            calibration = belief["calibration"]
            assert calibration["model"] == "beta_posterior" and calibration["score"] == "brier_in_sample"
            assert calibration["samples"] == len(belief["supports"]) >= 1
            assert calibration["last_calibrated_at"] == belief["last_revised_at"]
            expected = sum(s["weight"] * (belief["confidence"] - (s["polarity"] == "supports")) ** 2
                           for s in belief["supports"]) / sum(s["weight"] for s in belief["supports"])  # fmt: skip
            assert abs(calibration["brier_score"] - expected) < 1e-3 and 0 <= calibration["brier_score"] <= 1
        response, one = await h.call("GET", f"/v1/beliefs/{madrid['id']}?scope={ALICE}")
        assert one["calibration"] == madrid["calibration"]
        response, why = await h.call("GET", f"/v1/beliefs/why?scope={ALICE}&belief_id={madrid['id']}")
        assert why["belief"]["calibration"] == madrid["calibration"]
        response, pack = await h.call("POST", "/v1/recall", json={"scope": ALICE, "query": "Madrid", "include": ["beliefs"]})
        assert pack["layers"]["beliefs"][0]["calibration"] == madrid["calibration"]


# -- 9. every surface of the reference is built; what no route answers carries its family's tier --
async def test_what_no_route_answers_carries_its_familys_tier(tmp_path):
    async with server(tmp_path) as h:
        response, data = await h.call("POST", "/v1/understanding/synthesize", json={})
        assert response.status_code == 400 and response.headers["X-Cortex-Stability"] == "experimental", data
        assert response.headers["X-Cortex-Experimental-Notice"] and data["details"]["field"] == "scope"
        response, data = await h.call("GET", "/v1/vocabularies/sales")
        assert response.status_code == 404 and response.headers["X-Cortex-Stability"] == "beta", data
        for method, path, status, tier in (("DELETE", "/v1/beliefs", 405, "beta"),
                                           ("GET", "/v1/beliefs/belief_1/history", 404, "beta"),
                                           ("DELETE", "/v1/vocabularies/sales", 405, "beta"),
                                           ("GET", "/v1/erasures/erasure_1/receipt", 404, "experimental"),
                                           ("GET", "/v1/events/evt_1/history", 404, "stable"),
                                           ("GET", "/v1/no/such/route", 404, "stable")):  # fmt: skip
            response, data = await h.call(method, path)
            assert response.status_code == status, (path, data)
            assert response.headers["X-Cortex-Stability"] == tier, path
        _, document = await h.call("GET", "/v1/openapi.json")
        assert "/v1/vocabularies/{name}" in document["paths"]


async def test_a_family_that_builds_an_unbuilt_surface_replaces_its_501(tmp_path, monkeypatch):
    from cortexdb.server import app as app_module
    from cortexdb.server.call import Blueprint
    from cortexdb.server.routes import unbuilt

    later, built = Blueprint(), Blueprint()
    monkeypatch.setattr(unbuilt, "api", later)
    unbuilt.unbuilt_route("GET", "/v1/later/{name}", "beta")  # declared on ``later``
    unbuilt.unbuilt_route("POST", "/v1/later", "beta")

    @built("GET", "/v1/later/{name}", tier="beta", access="tenant")
    async def later_thing(call, name: str):
        return {"name": name, "built": True}

    monkeypatch.setattr(app_module, "BLUEPRINTS", (built, *app_module.BLUEPRINTS, later))
    async with server(tmp_path) as h:
        response, data = await h.call("GET", "/v1/later/sales")
        assert response.status_code == 200 and data == {"name": "sales", "built": True}
        assert [(r.method, r.path) for r in h.app.cortex.routes].count(("GET", "/v1/later/{name}")) == 1
        response, data = await h.call("POST", "/v1/later", json={})
        assert response.status_code == 501 and data["error_code"] == "NOT_IMPLEMENTED", data


# -- 10-12. token budgets count the rendered context; caps and the budget report what they drop -----
def phase(pack: dict, name: str) -> dict:
    return next(p for p in pack["provenance"]["trail"] if p["phase"] == name)


async def test_token_budget_counts_what_is_rendered_and_says_what_it_drops(tmp_path):
    async with server(tmp_path) as h:
        await h.call("POST", "/v1/experience?wait=consolidated", json=body("I live in Paris."))
        one = {"scope": ALICE, "query": "Paris", "include": ["facts"], "budgets": {"max_tokens": 60}}
        response, pack = await h.call("POST", "/v1/recall", json=one)
        assert response.status_code == 200 and len(pack["layers"]["facts"]) == 1, pack
        line = pack["context_block"]  # the one fact's rendered statement (and its marker)
        used = phase(pack, "knapsack")["tokens_used"]
        assert used == len(line.removesuffix(" [1]")) // 4 + 2 <= 60  # ~4 characters a token
        assert pack["diagnostics"]["_partial"] is False and pack["diagnostics"]["knapsack_evictions"] == 0
        for text in ("I work at Acme.", "My favourite colour is blue.", "I like green tea."):
            await h.call("POST", "/v1/experience?wait=consolidated", json=body(text))
        every = {"scope": ALICE, "query": "Paris Acme blue tea", "include": ["facts", "events"]}
        response, full = await h.call("POST", "/v1/recall", json=every)
        facts, events = len(full["layers"]["facts"]), len(full["layers"]["events"])
        assert facts >= 3 and events == 4 and full["diagnostics"]["_partial"] is False
        # a per-layer cap reports what it left out, and is not "partial": it is what was asked
        response, capped = await h.call("POST", "/v1/recall", json={
            **every, "budgets": {"per_layer_limits": {"facts": 1, "events": 2}}})  # fmt: skip
        assert capped["diagnostics"]["per_layer_evictions"] == {"facts": facts - 1, "events": 2}
        assert phase(capped, "mmr")["per_layer_evictions"] == {"facts": facts - 1, "events": 2}
        assert capped["diagnostics"]["_partial"] is False
        # the token budget dropping items the ranking chose makes the pack partial
        response, tight = await h.call("POST", "/v1/recall", json={**every, "budgets": {"max_tokens": 40}})
        kept = len(tight["layers"]["facts"]) + len(tight["layers"]["events"])
        assert 0 < kept < facts + events and phase(tight, "knapsack")["tokens_used"] <= 40
        assert tight["diagnostics"]["knapsack_evictions"] == facts + events - kept
        assert tight["diagnostics"]["_partial"] is True
        assert tight["diagnostics"]["_partial_reason"] == "token_budget_exhausted"


# -- 13. cancel and the memory-event view agree on `compressed` ------------------------------------
async def test_cancel_and_memory_event_agree_on_compressed(tmp_path):
    async with server(tmp_path) as h:
        for seal in (False, True):  # in an open episode window, then in a sealed episode
            _, written = await h.call("POST", "/v1/experience?wait=consolidated", json=body(f"I like tea {seal}."))
            event_id = written["event_id"]
            if seal:
                await h.engine.flush(seal=True)
            _, before = await h.call("GET", f"/v1/lifecycle/memory-event/{event_id}")
            assert ("compressed" in before["stages_completed"]) is seal
            response, cancel = await h.call("POST", f"/v1/lifecycle/memory-event/{event_id}/cancel", json={})
            assert response.status_code == 200, cancel
            _, after = await h.call("GET", f"/v1/lifecycle/memory-event/{event_id}")
            assert cancel["stages_already_completed"] == after["stages_completed"] == before["stages_completed"]
            assert cancel["stages_cancelled"] == after["stages_cancelled"] == ([] if seal else ["compressed"])
            assert after["stages_pending"] == []
            _, twice = await h.call("POST", f"/v1/lifecycle/memory-event/{event_id}/cancel", json={})
            assert (twice["stages_already_completed"], twice["stages_cancelled"]) == (
                cancel["stages_already_completed"], cancel["stages_cancelled"])  # fmt: skip


# -- 14. compaction says how much it took off the disk ---------------------------------------------
async def test_admin_compact_compacts_leveldb_and_says_how_much(tmp_path):
    async with server(tmp_path, backend="leveldb") as h:
        for n in range(40):  # every stage rewrites the event's state: old versions pile up in the log
            response, _ = await h.call("POST", "/v1/experience?wait=consolidated", json=body(f"I like sport {n}."))
            assert response.status_code == 200
        response, done = await h.call("POST", "/v1/admin/compact", "user:root", json={})
        assert response.status_code == 200 and done["compacted"] is True, done
        assert done["bytes_before"] > done["bytes_after"] > 0, done
        assert done["bytes_reclaimed"] == done["bytes_before"] - done["bytes_after"]
        assert done["files_before"] > 0 and done["files_after"] > 0
        denied, _ = await h.call("POST", "/v1/admin/compact", json={})  # not an operator
        assert denied.status_code == 403
    async with server(tmp_path / "memory") as h:
        response, done = await h.call("POST", "/v1/admin/compact", "user:root", json={})
        assert done == {"compacted": False, "reason": "this backend has nothing to compact"}


# -- 15. unknown fields are refused at every depth, naming their path -----------------------------
async def test_a_misspelt_field_is_refused_at_any_depth_with_its_path(tmp_path):
    recall = {"scope": ALICE, "query": "tea"}
    one = body("I like tea.")
    item = {k: one[k] for k in ("modality", "content", "context")}
    cases = [  # (method, path, actor, body, error_code, the field's path)
        ("POST", "/v1/recall", "user:alice", {**recall, "budgets": {"max_tokns": 60}}, "INVALID_RECALL", "budgets.max_tokns"),
        ("POST", "/v1/recall", "user:alice", {**recall, "temporal": {"as_off": "2026-01-01"}}, "INVALID_RECALL", "temporal.as_off"),
        ("POST", "/v1/recall", "user:alice", {**recall, "qurey": "tea"}, "INVALID_RECALL", "qurey"),
        ("POST", "/v1/answer", "user:alice", {"scope": ALICE, "question": "?", "budgets": {"per_layer": {}}},
         "INVALID_ANSWER", "budgets.per_layer"),
        ("POST", "/v1/experience", "user:alice", {**one, "context": {**one["context"], "observd_at": "x"}},
         "INVALID_ENVELOPE", "context.observd_at"),
        ("POST", "/v1/experience", "user:alice", {**one, "directives": {"confidence_flor": 0.5}},
         "INVALID_ENVELOPE", "directives.confidence_flor"),
        ("POST", "/v1/experience/bulk", "user:alice", {"scope": ALICE, "items": [item, {**item, "contnt": {}}]},
         "INVALID_ENVELOPE", "items[1].contnt"),
        ("POST", "/v1/experience/bulk", "user:alice", {"scope": ALICE, "items": [{**item, "scope": "org:x"}]},
         "INVALID_ENVELOPE", "items[0].scope"),  # another scope than the request's (its own is taken)
        ("POST", "/v1/forget", "user:alice", {"scope": ALICE, "selector": {"predicat": "likes"}}, "INVALID_FORGET",
         "selector.predicat"),
        ("POST", "/v1/scopes", "user:alice", {"path": "ws:x", "members": [{"actor": "user:alice", "rol": "owner"}]},
         "INVALID_BODY", "members[0]"),
        ("PUT", "/v1/scopes/members?path=ws:y", "user:root", {"members": [{"actor": "user:root", "role": "owner", "x": 1}]},
         "UNKNOWN_FIELD", "members[0].x"),
        ("POST", "/v1/scopes/prune", "user:root", {"older_than": "P90D", "dryrun": True}, "UNKNOWN_FIELD", "dryrun"),
        ("POST", "/v1/temporal/phrases", "user:root",
         {"name": "q3", "pattern": "q3", "resolves_to": {"valid_durring": ["2026-07-01", "2026-10-01"]}},
         "UNKNOWN_FIELD", "resolves_to.valid_durring"),
        ("POST", "/v1/auth/revoke", "user:alice", {"jti": "x", "reson": "lost"}, "UNKNOWN_FIELD", "reson"),
        ("POST", "/v1/audit/verify", "user:alice", {"audit_id": "audit_1", "body": "{}", "algo": "x"},
         "UNKNOWN_FIELD", "algo"),
        ("POST", "/v1/admin/flush-views", "user:root", {"seal": True, "scop": ALICE}, "UNKNOWN_FIELD", "scop"),
        ("POST", "/v1/admin/compact", "user:root", {"full": True}, "UNKNOWN_FIELD", "full"),
    ]  # fmt: skip
    async with server(tmp_path) as h:
        await h.call("POST", "/v1/scopes", "user:root", json={"path": "ws:y"})
        _, written = await h.call("POST", "/v1/experience", json=one)
        cases.append(("POST", f"/v1/lifecycle/memory-event/{written['event_id']}/cancel", "user:alice",
                      {"audit_not": "oops"}, "UNKNOWN_FIELD", "audit_not"))  # fmt: skip
        for method, path, actor, payload, code, field in cases:
            response, data = await h.call(method, path, actor, json=payload)
            assert response.status_code == 422, (path, data)
            assert data["error_code"] == code and data["details"]["field"] == field, (path, data)
        response, data = await h.call("PUT", "/v1/scopes/members?path=ws:y", "user:root",
                                      json={"members": [{"actor": "user:root", "role": "owner", "x": 1}]})  # fmt: skip
        assert data["details"]["allowed"] == ["actor", "role"]
        # the same bodies without the misspelling are taken
        ok, pack = await h.call("POST", "/v1/recall", json={**recall, "budgets": {"max_tokens": 60},
                                                            "temporal": {"as_of": "2026-06-01"}})  # fmt: skip
        assert ok.status_code == 200, pack


# -- 16. audit completeness ---------------------------------------------------------------------------
async def test_a_belief_deleted_under_the_floor_has_its_audit_row(tmp_path):
    async with server(tmp_path, engine_config={"confidence_floor": 0.6}) as h:
        _, first = await h.call("POST", "/v1/experience?wait=consolidated", json=body("I live in Paris."))
        belief_id = next(d for d in first["derives"] if d.startswith("belief_"))
        h.clock.advance(minutes=1)
        _, second = await h.call("POST", "/v1/experience?wait=consolidated", json=body("I live in Rome."))
        # two rival values, neither superseding: Paris falls to 0.5 < 0.6 and is deleted
        gone, note = await h.call("GET", f"/v1/beliefs/{belief_id}?scope={ALICE}")
        assert gone.status_code == 410 and note["error_code"] == "RESOURCE_DELETED"
        assert note["details"]["reason"] == "below_confidence_floor"
        audit_id = note["details"]["audit_id"]
        response, row = await h.call("GET", f"/v1/audit/{audit_id}")
        assert response.status_code == 200, row
        schemas_validate("audit_row", row)
        assert row["belief_id"] == belief_id and row["event_id"] == second["event_id"]
        assert row["actor"] == "user:alice" and row["tenant_id"] == "acme" and row["scope"] == ALICE
        assert row["decided_by_tier"] == "tenant" and row["summary"]["confidence_floor"] == 0.6
        assert row["summary"]["reason"] == "below_confidence_floor" and row["ts"] == note["details"]["deleted_at"]
        _, mine = await h.call("GET", "/v1/audit?limit=100")  # alice sees it among her rows
        assert audit_id in [r["id"] for r in mine["items"]]


def schemas_validate(name: str, data) -> None:
    from cortexdb import schemas

    schemas.validator(name).validate(data)


async def test_rows_hashed_under_a_retired_pepper_verify_through_the_buffer(tmp_path):
    async with server(tmp_path, preset="cloud_shared_saas") as h:  # P3M rotation, P3M buffer, P2Y retention
        audit = h.app.cortex.audit
        raw = json.dumps(body("under the first pepper")).encode()
        await h.call("POST", "/v1/experience", json=body("the first row: the first pepper is made"))
        h.clock.advance(days=80)  # late in the first pepper's quarter
        written = await h.client.post("/v1/experience", data=raw,
                                      headers={**h.as_("user:alice"), "Content-Type": "application/json"})  # fmt: skip
        assert written.status_code == 202
        _, page = await h.call("GET", "/v1/audit?capability=scope.write")
        row = page["items"][-1]
        assert row["tenant_pepper_version"] == 1
        h.clock.advance(days=20)  # the quarter is over: the next row is hashed under a new pepper
        await h.call("POST", "/v1/experience", json=body("under the second pepper"))
        _, page = await h.call("GET", "/v1/audit?capability=scope.write")
        assert page["items"][-1]["tenant_pepper_version"] == 2
        # the row's retention (2 years) nearly over: row and retired pepper are both still there
        h.clock.advance(days=730 - 21)
        await audit.prune()
        response, match = await h.call("POST", "/v1/audit/verify", json={"audit_id": row["id"], "body": raw.decode()})
        assert response.status_code == 200 and match["match"] is True and match["tenant_pepper_version"] == 1
        # past its retention the row is pruned; within the buffer its pepper is kept, so a copy
        # of the row (an export, a dispute) still verifies
        h.clock.advance(days=60)
        await audit.prune()
        gone, _ = await h.call("GET", f"/v1/audit/{row['id']}")
        assert gone.status_code == 404
        kept = await audit.verify(row, raw)
        assert kept["match"] is True and kept["pepper_available"] is True
        # the buffer over (made on day 0 + a quarter in use + 2 years + a quarter), it goes; the
        # current one stays
        h.clock.advance(days=45)  # day 914
        await audit.prune()
        late = await audit.verify(row, raw)
        assert late["match"] is False and late["pepper_available"] is False
        assert sorted(await audit.peppers("acme")) == [2, 3]  # 2 retired on day 809: still in its buffer


async def test_rate_limit_headers_on_every_answer(tmp_path):
    async with server(tmp_path, preset="cloud_shared_saas") as h:
        answers = [
            await h.call("GET", "/v1/events?scope=org:acme/user:alice"),  # 200
            await h.call("GET", "/v1/events/evt_01a200b0-0000-7000-8000-000000000000"),  # 404 of a route
            await h.call("GET", "/v1/no/such/route"),  # 404 of no route
            await h.call("DELETE", "/v1/experience"),  # 405
            await h.call("GET", "/v1/events?scope=org:acme/user:alice", hdrs={}),  # 401: no token
            await h.call("GET", "/v1/admin/version", hdrs={}),  # an open route
            await h.call("POST", "/v1/experience", json={"scope": "BAD SCOPE"}),  # 422
        ]
        statuses = [response.status_code for response, _ in answers]
        assert statuses == [200, 404, 404, 405, 401, 200, 422]
        for response, _ in answers:
            assert int(response.headers["X-RateLimit-Limit"]) > 0, response.status_code
            assert 0 <= int(response.headers["X-RateLimit-Remaining"]) < int(response.headers["X-RateLimit-Limit"])
            assert int(response.headers["X-RateLimit-Reset"]) >= int(h.clock.now().timestamp())


async def test_authentication_answers_before_the_experimental_gate(tmp_path):
    async with server(tmp_path, preset="cloud_shared_saas") as h:  # experimental surfaces are off here
        response, data = await h.call("POST", "/v1/scopes/prune", hdrs={}, json={})
        assert response.status_code == 401 and data["error_code"] == "MISSING_TOKEN"
        response, data = await h.call("POST", "/v1/scopes/prune", json={})
        assert response.status_code == 403 and data["error_code"] == "EXPERIMENTAL_DISABLED"
        assert response.headers["X-Cortex-Stability"] == "experimental"
