"""Read isolation, generated from the route table: every route, every role.

``SPECS`` names, for every ``(method, path)`` the app serves, the request that exercises it and
the roles it must let through.  The table must cover the app's route table exactly, so a new
route cannot be added without saying who may call it.  Each route then runs, on a fresh server
holding a secret in the registered scope ``ws:vault``, as:

- ``owner`` (user:alice), ``writer`` (user:wendy), ``reader`` (user:rita) of ``ws:vault``;
- ``nonmember`` (user:mallory, same tenant), ``operator`` (user:root);
- ``other_tenant`` (a token bound to another tenant).

A role the spec lets through must not be refused (no 401/403, no 5xx); any other role gets a 403
(``NOT_A_MEMBER`` or ``POLICY_DENIED``, attributed, audited ``deny``) whose body never quotes the
secret, and the other tenant always gets a 401.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import trio

from cortexdb.server.app import create_app  # noqa: F401 - the app under test (server_support builds it)

from .server_support import TENANT, body, server

VAULT = "ws:vault"
SECRET = "Zorblax"
MEMBERS = [{"actor": "user:alice", "role": "owner"}, {"actor": "user:wendy", "role": "writer"},
           {"actor": "user:rita", "role": "reader"}]  # fmt: skip
ROLES = {"owner": "user:alice", "writer": "user:wendy", "reader": "user:rita",
         "nonmember": "user:mallory", "operator": "user:root"}  # fmt: skip

READ = frozenset({"owner", "writer", "reader", "operator"})
WRITE = frozenset({"owner", "writer", "operator"})
OWN = frozenset({"owner", "operator"})
ADMIN = frozenset({"operator"})
ANY = frozenset(ROLES)

Build = Callable[[dict[str, Any]], tuple[str, Any]]  # ctx -> (path, json body or None)


def q(path: str) -> Build:
    return lambda ctx: (path.format(**ctx), None)


def with_body(path: str, make: Callable[[dict[str, Any]], Any]) -> Build:
    return lambda ctx: (path.format(**ctx), make(ctx))


SPECS: dict[tuple[str, str], tuple[frozenset[str], Build]] = {
    # writes and reads of the vault's records
    ("POST", "/v1/experience"): (WRITE, with_body("/v1/experience", lambda c: body("note", scope=VAULT))),
    ("POST", "/v1/experience/bulk"): (WRITE, with_body("/v1/experience/bulk", lambda c: {
        "scope": VAULT, "items": [{"modality": "conversation", "content": {"kind": "text", "text": "bulk note"},
                                   "context": {"observed_at": "2026-05-13T15:42:00Z"}}]})),  # fmt: skip
    # idempotency keys belong to their caller: only alice's lookup finds alice's write
    ("GET", "/v1/experience/by-idempotency-key/{key}"): (frozenset({"owner"}), q("/v1/experience/by-idempotency-key/k-secret")),
    ("POST", "/v1/recall"): (READ, with_body("/v1/recall", lambda c: {"scope": VAULT, "query": SECRET, "view": "granular"})),
    ("GET", "/v1/events"): (READ, q("/v1/events?scope=ws:vault")),
    ("GET", "/v1/events/{event_id}"): (READ, q("/v1/events/{event_id}")),
    ("GET", "/v1/episodes"): (READ, q("/v1/episodes?scope=ws:vault")),
    ("GET", "/v1/episodes/{episode_id}"): (READ, q("/v1/episodes/{episode_id}?scope=ws:vault")),
    ("GET", "/v1/facts"): (READ, q("/v1/facts?scope=ws:vault")),
    ("GET", "/v1/facts/timeline"): (READ, q("/v1/facts/timeline?scope=ws:vault&subject={subject}&predicate={predicate}")),
    ("GET", "/v1/facts/{fact_id}/supports"): (READ, q("/v1/facts/{fact_id}/supports?scope=ws:vault")),
    ("GET", "/v1/facts/{fact_id}"): (READ, q("/v1/facts/{fact_id}?scope=ws:vault")),
    ("GET", "/v1/beliefs"): (READ, q("/v1/beliefs?scope=ws:vault")),
    ("GET", "/v1/beliefs/why"): (READ, q("/v1/beliefs/why?scope=ws:vault&belief_id={belief_id}")),
    ("GET", "/v1/beliefs/{belief_id}"): (READ, q("/v1/beliefs/{belief_id}?scope=ws:vault")),
    ("GET", "/v1/understanding"): (READ, q("/v1/understanding?scope=ws:vault")),
    ("GET", "/v1/understanding/coverage"): (READ, q("/v1/understanding/coverage?scope=ws:vault")),
    ("GET", "/v1/understanding/{concept_id}"): (READ, q("/v1/understanding/concept_x?scope=ws:vault")),
    ("GET", "/v1/understanding/{concept_id}/related"): (READ, q("/v1/understanding/concept_x/related?scope=ws:vault")),
    # tenant-wide phrases: everyone reads, admins write
    ("POST", "/v1/temporal/phrases"): (ADMIN, with_body("/v1/temporal/phrases", lambda c: {
        "name": "q9", "pattern": "fiscal Q9", "resolves_to": {"valid_during": ["2026-07-01", "2026-10-01"]}})),
    ("GET", "/v1/temporal/phrases"): (ANY, q("/v1/temporal/phrases")),
    ("DELETE", "/v1/temporal/phrases/{name}"): (ADMIN, q("/v1/temporal/phrases/q0")),
    # scopes: reading a registration is reading the scope; claiming and administering are the owner's
    ("POST", "/v1/scopes"): (OWN, with_body("/v1/scopes", lambda c: {"path": "ws:vault/project:x"})),
    ("GET", "/v1/scopes"): (READ, q("/v1/scopes?path=ws:vault")),
    ("PUT", "/v1/scopes/members"): (OWN, with_body("/v1/scopes/members?path=ws:vault", lambda c: {"members": MEMBERS})),
    ("DELETE", "/v1/scopes"): (OWN, q("/v1/scopes?path=ws:vault")),
    ("POST", "/v1/scopes/prune"): (ADMIN, with_body("/v1/scopes/prune", lambda c: {"older_than": "P1D"})),
    # lifecycle
    ("GET", "/v1/lifecycle/event/{lce_id}"): (READ, q("/v1/lifecycle/event/{lce_id}")),
    ("GET", "/v1/lifecycle/memory-event/{event_id}"): (READ, q("/v1/lifecycle/memory-event/{event_id}")),
    # cancelling someone else's write needs the scope's owner (§8.9.5)
    ("POST", "/v1/lifecycle/memory-event/{event_id}/cancel"): (OWN, with_body(
        "/v1/lifecycle/memory-event/{event_id}/cancel", lambda c: {"audit_note": "test"})),
    ("GET", "/v1/lifecycle"): (READ, q("/v1/lifecycle?scope=ws:vault")),
    ("GET", "/v1/lifecycle/stream"): (READ, q("/v1/lifecycle/stream?scope=ws:vault&event_id={event_id}")),
    ("GET", "/v1/lifecycle/ws"): (READ, q("/v1/lifecycle/ws?scope=ws:vault&event_id={event_id}")),
    # identity and policy: each tier has its owners
    ("POST", "/v1/auth/revoke"): (ANY, with_body("/v1/auth/revoke", lambda c: {"jti": c["jti"]})),
    ("GET", "/v1/auth/whoami"): (ANY, q("/v1/auth/whoami")),
    ("GET", "/v1/policy/effective"): (ANY, q("/v1/policy/effective?scope=ws:vault")),
    ("GET", "/v1/policy/deployment"): (ANY, q("/v1/policy/deployment")),
    ("PUT", "/v1/policy/deployment"): (ADMIN, with_body("/v1/policy/deployment", lambda c: {})),
    ("GET", "/v1/policy/tenant/{tenant_id}"): (ADMIN, q(f"/v1/policy/tenant/{TENANT}")),
    ("PUT", "/v1/policy/tenant/{tenant_id}"): (ADMIN, with_body(f"/v1/policy/tenant/{TENANT}", lambda c: {"deny": []})),
    ("GET", "/v1/policy/scope/{scope_path:path}"): (OWN, q("/v1/policy/scope/ws:vault")),
    ("PUT", "/v1/policy/scope/{scope_path:path}"): (OWN, with_body("/v1/policy/scope/ws:vault", lambda c: {"deny": []})),
    # rita's own policy within the vault: rita herself, the vault's owner, an admin
    ("GET", "/v1/policy/actor/{actor_id}"): (frozenset({"reader", "owner", "operator"}),
                                             q("/v1/policy/actor/user:rita?scope=ws:vault")),
    ("PUT", "/v1/policy/actor/{actor_id}"): (frozenset({"reader", "owner", "operator"}), with_body(
        "/v1/policy/actor/user:rita?scope=ws:vault", lambda c: {"deny": []})),
    # audit: the preset (on_prem_enterprise) allows audit.read.cross_actor to everyone
    ("GET", "/v1/audit"): (ANY, q("/v1/audit")),
    ("GET", "/v1/audit/{audit_id}"): (ANY, q("/v1/audit/{audit_id}")),
    ("POST", "/v1/audit/verify"): (ANY, with_body("/v1/audit/verify", lambda c: {"audit_id": c["audit_id"], "body": "{}"})),
    # admin
    ("GET", "/v1/admin/version"): (ANY, q("/v1/admin/version")),
    ("GET", "/v1/admin/health"): (ANY, q("/v1/admin/health")),
    ("GET", "/v1/admin/metrics"): (ANY, q("/v1/admin/metrics")),
    ("POST", "/v1/admin/flush-views"): (ADMIN, with_body("/v1/admin/flush-views", lambda c: {"scope": VAULT})),
    ("POST", "/v1/admin/compact"): (ADMIN, with_body("/v1/admin/compact", lambda c: {})),
    ("GET", "/v1/openapi.json"): (ANY, q("/v1/openapi.json")),
    # not built yet: a truthful 501 for everyone, quoting nothing
    ("POST", "/v1/answer"): (ANY, with_body("/v1/answer", lambda c: {"scope": VAULT, "question": SECRET})),
    ("POST", "/v1/forget"): (ANY, with_body("/v1/forget", lambda c: {"scope": VAULT})),
    ("POST", "/v1/blobs"): (ANY, with_body("/v1/blobs", lambda c: {})),
    ("GET", "/v1/blobs/{blob_id}"): (ANY, q("/v1/blobs/blob_x")),
    ("POST", "/v1/erasures"): (ANY, with_body("/v1/erasures", lambda c: {"scope": VAULT})),
    ("POST", "/v1/erasures/preview"): (ANY, with_body("/v1/erasures/preview", lambda c: {"scope": VAULT})),
    ("POST", "/v1/understanding/synthesize"): (ANY, with_body("/v1/understanding/synthesize", lambda c: {"scope": VAULT})),
    ("POST", "/v1/export"): (ANY, with_body("/v1/export", lambda c: {"scope": VAULT})),
    ("POST", "/v1/import/{source}"): (ANY, with_body("/v1/import/jsonl", lambda c: {})),
    ("POST", "/v1/vocabularies"): (ANY, with_body("/v1/vocabularies", lambda c: {})),
}  # fmt: skip
OPEN = {("GET", "/v1/admin/version"), ("GET", "/v1/openapi.json")}
# idempotency keys are per caller: another caller's lookup finds nothing of theirs (404), never the write
NOT_THEIRS = {("GET", "/v1/experience/by-idempotency-key/{key}")}


async def _seed(h) -> dict[str, Any]:
    """The vault (registered, three members) holding a secret, and the ids the routes need."""
    response, data = await h.call("POST", "/v1/scopes", json={"path": VAULT, "members": MEMBERS})
    assert response.status_code == 201, data
    text = f"{SECRET} Quintero lives in Reykjavik. {SECRET} Quintero likes marzipan."
    response, data = await h.call("POST", "/v1/experience?wait=consolidated",
                                  json=body(text, scope=VAULT, idempotency_key="k-secret"))  # fmt: skip
    assert response.status_code == 200, data
    await h.engine.flush(VAULT, seal=True)
    ctx: dict[str, Any] = {"event_id": data["event_id"]}
    _, facts = await h.call("GET", "/v1/facts?scope=ws:vault")
    fact = facts["items"][0]
    ctx.update(fact_id=fact["id"], subject=fact["subject"]["id"], predicate=fact["predicate"])
    _, beliefs = await h.call("GET", "/v1/beliefs?scope=ws:vault")
    ctx["belief_id"] = beliefs["items"][0]["id"]
    _, episodes = await h.call("GET", "/v1/episodes?scope=ws:vault")
    ctx["episode_id"] = episodes["items"][0]["id"]
    _, rows = await h.call("GET", f"/v1/lifecycle?event_id={ctx['event_id']}")
    ctx["lce_id"] = rows["items"][0]["lifecycle_id"]
    _, audit = await h.call("GET", "/v1/audit?capability=scope.write", "user:root")
    ctx["audit_id"] = audit["items"][0]["id"]
    assert SECRET in json.dumps(await h.engine.events(VAULT))
    return ctx


def _headers(h, role: str, jti: str | None = None) -> dict[str, str]:
    if role == "other_tenant":
        return h.as_("user:alice", tenant="other")
    return h.as_(ROLES[role], **({"jti": jti} if jti else {}))


async def _call(h, method: str, path: str, payload: Any, headers: dict[str, str]):
    """(status, parsed body or raw text, response headers); streams read their first frame."""
    if path.startswith("/v1/lifecycle/ws"):
        return await _websocket(h, path, headers)
    if path.startswith("/v1/lifecycle/stream"):
        with trio.fail_after(10), trio.CancelScope() as done:  # fail_after: a hang guard only
            async with h.client.request(path, method="GET", headers=headers) as connection:
                await connection.send_complete()
                first = await connection.receive()
                status = connection.status_code
                done.cancel()  # leave the stream (the test connection has no client to hang up)
        text = first.decode()
        return status, (json.loads(text) if status >= 400 else text), {}
    response, data = await h.call(method, path, json=payload, hdrs=headers)
    raw = (await response.get_data()).decode(errors="replace")
    return response.status_code, data if data is not None else raw, response.headers


async def _websocket(h, path: str, headers: dict[str, str]):
    with trio.fail_after(10):
        async with h.client.websocket(path, headers=headers) as ws:
            frame = json.loads(await ws.receive())
    if frame.get("type") == "error":
        status = {"INVALID_TOKEN_SIGNATURE": 401, "WRONG_TENANT": 401}.get(frame["error_code"], 403)
        return status, frame, {}
    return 200, frame, {}


def test_the_table_covers_every_route():
    """A route added without a line in SPECS fails here: say who may call it."""

    async def routes() -> set[tuple[str, str]]:
        import tempfile
        from pathlib import Path

        async with server(Path(tempfile.mkdtemp())) as h:
            return {(r.method, r.path) for r in h.app.cortex.routes}

    served = trio.run(routes)
    assert served - set(SPECS) == set(), "routes without an isolation spec"
    assert set(SPECS) - served == set(), "specs for routes that no longer exist"


@pytest.mark.parametrize("route", sorted(SPECS), ids=lambda r: f"{r[0]} {r[1]}")
async def test_every_route_checks_every_role(tmp_path, route):
    allowed, build = SPECS[route]
    method, _ = route
    async with server(tmp_path, enable_experimental=True) as h:
        ctx = await _seed(h)
        # denied roles first: their calls must change nothing the allowed calls then rely on
        order = ["other_tenant", "nonmember", "reader", "writer", "owner", "operator"]
        order.sort(key=lambda role: role != "other_tenant" and role in allowed)
        for role in order:
            ctx["jti"] = f"jti-{role}"
            path, payload = build(ctx)
            status, data, headers = await _call(h, method, path, payload, _headers(h, role, ctx["jti"]))
            text = json.dumps(data) if not isinstance(data, str) else data
            where = f"{method} {path} as {role}: {status} {text[:300]}"
            assert status < 500 or status == 501, where  # 501: a route not built yet
            if role == "other_tenant":
                if route in OPEN:
                    assert status < 400, where
                else:
                    assert status == 401 and data["error_code"] == "WRONG_TENANT", where
                continue
            if role in allowed:
                assert status not in (401, 403), where
                continue
            assert SECRET not in text, where
            if route in NOT_THEIRS:
                assert status == 404 and data["error_code"] == "NOT_FOUND", where
                continue
            assert status == 403, where
            assert data["error_code"] in ("NOT_A_MEMBER", "POLICY_DENIED"), where
            assert data["details"]["denied_by_tier"], where
            assert SECRET not in text, where
            if headers:
                assert "decision=deny" in headers["X-Cortex-Policy"], where
            _, rows = await h.call("GET", f"/v1/audit?actor={ROLES[role]}&decision=deny", "user:root")
            assert any(r["request_id"] == data["request_id"] for r in rows["items"]), where
