"""``POST /v1/forget`` over HTTP (reference §8.5): the response, the one audit row with the
counts, the capability per cascade, idempotent replays, bad input as a 4xx envelope; and the
cancel route keeping a cancelled event out of episodes (§8.9.5)."""

from __future__ import annotations

import pytest

from cortexdb.engine.policy import capabilities as cap

from .server_support import body, server

SCOPE = "org:acme/user:alice"


async def seed(h) -> dict[str, str]:
    ids = {}
    for i, text in enumerate(["I like tea.", "I like coffee.", "I live in Paris."]):
        response, data = await h.call("POST", "/v1/experience?wait=consolidated",
                                      json=body(text, context={"observed_at": f"2026-05-13T15:0{i}:00Z"}))  # fmt: skip
        assert response.status_code == 200, data
        ids[text] = data["event_id"]
    await h.engine.flush(SCOPE, seal=True)
    return ids


async def test_forget_end_to_end_with_its_audit_row(tmp_path):
    async with server(tmp_path) as h:
        await seed(h)
        request = {"scope": SCOPE, "layers": ["facts", "beliefs"], "selector": {"predicate": "likes"},
                   "cascade": "derived_only", "audit_note": "User retracted it"}  # fmt: skip
        response, data = await h.call("POST", "/v1/forget", json=request)
        assert response.status_code == 200, data
        assert data["deleted"] == {"events": 0, "episodes": 0, "facts": 2, "beliefs": 2, "understanding": 0}
        assert data["audit_id"].startswith("audit_")
        assert "decision=allow; capability=forget.cascade.derived_only" in response.headers["X-Cortex-Policy"]
        response, row = await h.call("GET", f"/v1/audit/{data['audit_id']}")
        assert row["endpoint"] == "POST /v1/forget" and row["capability"] == cap.FORGET_CASCADE_DERIVED_ONLY
        assert row["scope"] == SCOPE and row["decision"] == "allow" and row["response_status"] == 200
        assert row["summary"] == {"deleted": data["deleted"], "cascade": "derived_only", "replay_of": None,
                                  "audit_note": "User retracted it"}  # fmt: skip
        response, rows = await h.call("GET", "/v1/audit?capability=forget.cascade.derived_only")
        assert [r["id"] for r in rows["items"]] == [data["audit_id"]]  # one row per call
        response, facts = await h.call("GET", f"/v1/facts?scope={SCOPE}")
        assert [f["predicate"] for f in facts["items"]] == ["lives_in"]


async def test_the_cascade_needs_its_capability(tmp_path):
    async with server(tmp_path) as h:
        ids = await seed(h)
        request = {"scope": SCOPE, "layers": ["facts", "beliefs"], "selector": {"predicate": "likes"},
                   "cascade": "redact_events"}  # fmt: skip
        response, data = await h.call("POST", "/v1/forget", json=request, caps=[cap.SCOPE_WRITE, cap.SCOPE_READ_LOCAL,
                                                                                  cap.FORGET_CASCADE_DERIVED_ONLY])  # fmt: skip
        assert response.status_code == 403 and data["error_code"] == "POLICY_DENIED"
        assert data["details"]["capability"] == cap.FORGET_CASCADE_REDACT_EVENTS
        response, event = await h.call("GET", f"/v1/events/{ids['I like tea.']}")
        assert event["content"]["text"] == "I like tea."  # nothing happened
        response, data = await h.call("POST", "/v1/forget", "user:mallory", json=request)  # not a member
        assert response.status_code == 403 and data["error_code"] == "NOT_A_MEMBER"
        response, data = await h.call("POST", "/v1/forget", json=request)
        assert response.status_code == 200 and data["deleted"]["events"] == 2
        response, event = await h.call("GET", f"/v1/events/{ids['I like tea.']}")
        assert event["content"] == {"kind": "redacted", "original_kind": "message"}
        response, row = await h.call("GET", f"/v1/audit/{data['audit_id']}")
        assert row["capability"] == cap.FORGET_CASCADE_REDACT_EVENTS


async def test_an_idempotency_key_replays_the_same_answer(tmp_path):
    async with server(tmp_path) as h:
        await seed(h)
        request = {"scope": SCOPE, "layers": ["facts"], "selector": {"predicate": "likes"}}
        key = {"X-Cortex-Idempotency-Key": "forget-alice-001"}
        response, first = await h.call("POST", "/v1/forget", json=request, hdrs={**h.as_("user:alice"), **key})
        response, again = await h.call("POST", "/v1/forget", json=request, hdrs={**h.as_("user:alice"), **key})
        assert again == first and response.headers["X-Cortex-Replay"] == "true"
        response, rows = await h.call("GET", "/v1/audit?capability=forget.cascade.derived_only")
        replay = next(r for r in rows["items"] if r["id"] != first["audit_id"])
        assert replay["summary"]["replay_of"] == first["audit_id"]
        response, data = await h.call("POST", "/v1/forget", json={**request, "layers": ["beliefs"]},
                                      hdrs={**h.as_("user:alice"), **key})  # fmt: skip
        assert response.status_code == 409 and data["error_code"] == "IDEMPOTENCY_CONFLICT"


@pytest.mark.parametrize("request_, status, code, field", [
    ({"scope": SCOPE}, 422, "EMPTY_SELECTOR_WITHOUT_CONFIRMATION", "selector"),
    ({"scope": SCOPE, "selector": {}, "layers": ["facts"]}, 422, "EMPTY_SELECTOR_WITHOUT_CONFIRMATION", "selector"),
    ({"scope": SCOPE, "cascade": "events_too", "confirm_all": True}, 422, "INVALID_FORGET", "cascade"),
    ({"scope": SCOPE, "layers": "facts", "confirm_all": True}, 422, "INVALID_FORGET", "layers"),
    ({"scope": SCOPE, "selector": {"valid_during": "soon"}}, 422, "INVALID_TEMPORAL", "selector.valid_during"),
    ({"selector": {"predicate": "likes"}}, 400, "MISSING_REQUIRED_FIELD", "scope"),
    ({"scope": "not a scope", "confirm_all": True}, 422, "INVALID_SCOPE_GRAMMAR", None),
])  # fmt: skip
async def test_bad_input_is_a_clear_4xx(tmp_path, request_, status, code, field):
    async with server(tmp_path) as h:
        await seed(h)
        response, data = await h.call("POST", "/v1/forget", json=request_)
        assert (response.status_code, data["error_code"]) == (status, code), data
        if field:
            assert data["details"]["field"] == field
        response, facts = await h.call("GET", f"/v1/facts?scope={SCOPE}")
        assert len(facts["items"]) == 3  # nothing was forgotten


async def test_a_cancelled_event_stays_out_of_episodes(tmp_path):
    """§8.9.5 over HTTP: a cancel — of a derived event, or of one just captured — takes the event
    out of its episode (and its text out of the episode's description), and neither sealing nor
    a rebuild brings it back.  (A cancel reaching an event still queued behind a busy lane is
    test_bounded's.)"""
    async with server(tmp_path) as h:
        ids = await seed(h)
        cancelled = []
        for minute, wait in ((5, "?wait=consolidated"), (6, "")):
            response, data = await h.call("POST", f"/v1/experience{wait}", json=body(
                "Zorblax is my password.", context={"observed_at": f"2026-05-13T15:0{minute}:00Z"}))  # fmt: skip
            cancelled.append(data["event_id"])
            response, data = await h.call("POST", f"/v1/lifecycle/memory-event/{data['event_id']}/cancel", json={})
            assert response.status_code == 200 and data["excluded_from_recall"] is True, data
        for rebuilt in (False, True):
            await h.engine.flush(SCOPE, seal=True)
            response, page = await h.call("GET", f"/v1/episodes?scope={SCOPE}")
            members = [e for episode in page["items"] for e in episode["events"]]
            assert sorted(members) == sorted(ids.values()), rebuilt
            assert "Zorblax" not in str(page)
            for event_id in cancelled:
                response, view = await h.call("GET", f"/v1/lifecycle/memory-event/{event_id}")
                assert view["excluded_from_recall"] and view["stages_pending"] == []
            recall = await h.engine.recall({"scope": SCOPE, "query": "Zorblax password", "view": "granular"},
                                           caller="user:alice")  # fmt: skip
            assert "Zorblax" not in str(recall["layers"]) and "Zorblax" not in recall["context_block"]
            await h.engine.rebuild(SCOPE)


@pytest.mark.parametrize("cascade", [[None, None], {"mode": "derived_only"}, 1])
async def test_a_cascade_that_is_not_a_word_is_a_4xx_not_a_crash(tmp_path, cascade):
    """Found by schemathesis (tests/test_schemathesis.py): an unhashable cascade was looked up in
    a dict, by the route and by the engine's selector, and answered 500."""
    async with server(tmp_path) as h:
        response, error = await h.call("POST", "/v1/forget", json={"scope": "org:acme/user:alice", "layers": ["facts"],
                                                                     "selector": {}, "cascade": cascade})  # fmt: skip
        assert response.status_code == 422 and error["details"]["field"] == "cascade", error
