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

``/mcp`` is not a route of the table but a transport whose tools call routes of it (their
twins); ``MCP_SPECS`` runs every tool as every role against its twins' rule.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import trio

from cortexdb.server.app import create_app  # noqa: F401 - the app under test (server_support builds it)
from cortexdb.server.mcp_api.tools import TOOLS

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
    # blobs belong to the scope they were uploaded to: writers upload, readers read (the body
    # is a raw upload: the JSON test body becomes an application/json blob)
    ("POST", "/v1/blobs"): (WRITE, with_body("/v1/blobs?scope=ws:vault", lambda c: {"note": "upload"})),
    ("GET", "/v1/blobs/{blob_id}"): (READ, q("/v1/blobs/{blob_id}")),
    ("POST", "/v1/experience/bulk"): (WRITE, with_body("/v1/experience/bulk", lambda c: {
        "scope": VAULT, "items": [{"modality": "conversation", "content": {"kind": "text", "text": "bulk note"},
                                   "context": {"observed_at": "2026-05-13T15:42:00Z"}}]})),  # fmt: skip
    # idempotency keys belong to their caller: only alice's lookup finds alice's write
    ("GET", "/v1/experience/by-idempotency-key/{key}"): (frozenset({"owner"}), q("/v1/experience/by-idempotency-key/k-secret")),
    ("POST", "/v1/recall"): (READ, with_body("/v1/recall", lambda c: {"scope": VAULT, "query": SECRET, "view": "granular"})),
    # forgetting is writing the scope (and forget.cascade.<mode>)
    ("POST", "/v1/forget"): (WRITE, with_body("/v1/forget", lambda c: {
        "scope": VAULT, "layers": ["beliefs"], "selector": {"predicate": c["predicate"]}})),
    ("GET", "/v1/events"): (READ, q("/v1/events?scope=ws:vault")),
    ("GET", "/v1/events/{event_id}"): (READ, q("/v1/events/{event_id}")),
    ("GET", "/v1/episodes"): (READ, q("/v1/episodes?scope=ws:vault")),
    ("GET", "/v1/episodes/{episode_id}"): (READ, q("/v1/episodes/{episode_id}?scope=ws:vault")),
    ("GET", "/v1/facts"): (READ, q("/v1/facts?scope=ws:vault")),
    ("GET", "/v1/facts/timeline"): (READ, q("/v1/facts/timeline?scope=ws:vault&subject={subject}&predicate={predicate}")),
    ("GET", "/v1/facts/{fact_id}/supports"): (READ, q("/v1/facts/{fact_id}/supports?scope=ws:vault")),
    # relationships: a walk reads the scope; an explicit relationship is a write of it
    ("GET", "/v1/relationships"): (READ, q("/v1/relationships?scope=ws:vault&from={subject}&depth=2")),
    ("POST", "/v1/relationships"): (WRITE, with_body("/v1/relationships", lambda c: {
        "scope": VAULT, "from": f"{SECRET} Quintero", "type": "knows", "to": "Rita"})),
    ("GET", "/v1/facts/{fact_id}"): (READ, q("/v1/facts/{fact_id}?scope=ws:vault")),
    ("GET", "/v1/beliefs"): (READ, q("/v1/beliefs?scope=ws:vault")),
    # the permalink (why_url): the belief id alone, its scope found and checked like any other
    ("GET", "/v1/beliefs/why"): (READ, q("/v1/beliefs/why?belief_id={belief_id}")),
    ("GET", "/v1/beliefs/{belief_id}"): (READ, q("/v1/beliefs/{belief_id}?scope=ws:vault")),
    ("GET", "/v1/understanding"): (READ, q("/v1/understanding?scope=ws:vault")),
    ("GET", "/v1/understanding/coverage"): (READ, q("/v1/understanding/coverage?scope=ws:vault")),
    ("GET", "/v1/understanding/{concept_id}"): (READ, q("/v1/understanding/{concept_id}?scope=ws:vault")),
    ("GET", "/v1/understanding/{concept_id}/related"): (READ, q("/v1/understanding/{concept_id}/related?scope=ws:vault")),
    # re-synthesis is administering the scope (understanding.synthesize, §8.7.11)
    ("POST", "/v1/understanding/synthesize"): (OWN, with_body("/v1/understanding/synthesize", lambda c: {"scope": VAULT})),
    # signals live in their scope: writers record, readers read snapshots; type settings are tenant-wide
    ("POST", "/v1/signals"): (WRITE, with_body("/v1/signals", lambda c: {
        "scope": VAULT, "subject": "user:alice", "type": "frustration", "intensity": 0.5})),
    ("GET", "/v1/signals"): (READ, q("/v1/signals?scope=ws:vault&subject=user:alice")),
    ("GET", "/v1/signals/types"): (ANY, q("/v1/signals/types")),
    ("PUT", "/v1/signals/types/{name}"): (ADMIN, with_body("/v1/signals/types/frustration",
                                                           lambda c: {"half_life_seconds": 3600})),
    ("DELETE", "/v1/signals/types/{name}"): (ADMIN, q("/v1/signals/types/frustration")),
    # proposals are held writes of their scope: writers propose, readers read, owners review
    ("POST", "/v1/proposals"): (WRITE, with_body("/v1/proposals", lambda c: {
        "scope": VAULT, "experience": body("a proposed note", scope=VAULT)})),
    ("GET", "/v1/proposals"): (READ, q("/v1/proposals?scope=ws:vault")),
    ("GET", "/v1/proposals/{proposal_id}"): (READ, q("/v1/proposals/{proposal_id}?scope=ws:vault")),
    ("POST", "/v1/proposals/{proposal_id}/approve"): (OWN, with_body("/v1/proposals/{proposal_id}/approve",
                                                                     lambda c: {"scope": VAULT})),
    ("POST", "/v1/proposals/{proposal_id}/reject"): (OWN, with_body("/v1/proposals/{proposal_id}/reject",
                                                                    lambda c: {"scope": VAULT, "note": "no"})),
    # intake results belong to the caller who wrote the event: readers list (their own: none), writers acknowledge
    ("GET", "/v1/intake/pending"): (READ, q("/v1/intake/pending?scope=ws:vault")),
    ("POST", "/v1/intake/{item_id}/ack"): (WRITE, with_body("/v1/intake/{intake_id}/ack", lambda c: {"scope": VAULT})),
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
    ("GET", "/v1/scopes/segmentation"): (READ, q("/v1/scopes/segmentation?path=ws:vault")),
    ("PUT", "/v1/scopes/segmentation"): (OWN, with_body("/v1/scopes/segmentation?path=ws:vault",
                                                        lambda c: {"strategy": "daily"})),
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
    # GDPR erasure: forget.gdpr is the scope's owners' (and operators')
    ("POST", "/v1/erasures/preview"): (OWN, with_body("/v1/erasures/preview", lambda c: {"scope": VAULT})),
    ("GET", "/v1/erasures/preview/{preview_id}/manifest"): (OWN, q("/v1/erasures/preview/{preview_id}/manifest")),
    ("POST", "/v1/erasures"): (OWN, with_body("/v1/erasures", lambda c: {"scope": VAULT})),
    ("GET", "/v1/erasures/{erasure_id}"): (OWN, q("/v1/erasures/{erasure_id}")),
    ("GET", "/v1/erasures/{erasure_id}/manifest"): (OWN, q("/v1/erasures/{erasure_id}/manifest")),
    ("POST", "/v1/erasures/{erasure_id}/cancel"): (OWN, q("/v1/erasures/{erasure_id}/cancel")),
    # imports: import.from.<source> and scope.write on the template's scope (writers); the raw
    # body is the source file (here a line that is not an envelope: the job reports it)
    **{("POST", f"/v1/import/{source}"): (WRITE, with_body(f"/v1/import/{source}?scope_template=ws:vault",
                                                           lambda c: {"note": SECRET}))
       for source in ("mem0", "zep", "letta", "openai", "jsonl", "mcp")},
    ("GET", "/v1/import/{import_id}"): (WRITE, q("/v1/import/{import_id}")),
    ("POST", "/v1/import/{import_id}/cancel"): (WRITE, q("/v1/import/{import_id}/cancel")),
    # exports: export.format.<format> and reading the scope (and every scope the export holds);
    # cancelling someone else's export is the scope's owners'
    ("POST", "/v1/export"): (READ, with_body("/v1/export", lambda c: {"scope": VAULT, "format": "jsonl"})),
    ("GET", "/v1/export/{export_id}"): (READ, q("/v1/export/{export_id}")),
    ("GET", "/v1/export/{export_id}/download"): (READ, q("/v1/export/{export_id}/download")),
    ("POST", "/v1/export/{export_id}/cancel"): (OWN, q("/v1/export/{export_id}/cancel")),
    # an answer reads like a recall (and needs llm.invoke), streamed or not, fresh or from a pack
    ("POST", "/v1/answer"): (READ, with_body("/v1/answer", lambda c: {"scope": VAULT, "question": SECRET})),
    # tenant-wide vocabularies: everyone reads, admins write (they change every scope's extraction)
    ("POST", "/v1/vocabularies"): (ADMIN, with_body("/v1/vocabularies", lambda c: {
        "name": "sales_v2", "predicates": [{"id": "deal_stage"}]})),
    ("GET", "/v1/vocabularies/{name}"): (ANY, q("/v1/vocabularies/sales")),
    ("PUT", "/v1/vocabularies/{name}"): (ADMIN, with_body("/v1/vocabularies/sales", lambda c: {
        "predicates": [{"id": "seat_count", "aliases": ["seats"]}]})),
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
    response, blob = await h.call("POST", "/v1/blobs?scope=ws:vault&filename=vault.txt",
                                  hdrs={**h.as_("user:alice"), "Content-Type": "text/plain"}, data=f"{SECRET} plans")  # fmt: skip
    assert response.status_code == 201, blob
    ctx["blob_id"] = blob["blob_id"]
    _, facts = await h.call("GET", "/v1/facts?scope=ws:vault")
    fact = facts["items"][0]
    ctx.update(fact_id=fact["id"], subject=fact["subject"]["id"], predicate=fact["predicate"])
    _, beliefs = await h.call("GET", "/v1/beliefs?scope=ws:vault")
    ctx["belief_id"] = beliefs["items"][0]["id"]
    _, episodes = await h.call("GET", "/v1/episodes?scope=ws:vault")
    ctx["episode_id"] = episodes["items"][0]["id"]
    concepts = await h.engine.understanding(VAULT)
    ctx["concept_id"] = concepts["items"][0]["id"]
    assert SECRET in concepts["items"][0]["summary"]  # what a refused read must not quote
    await h.engine.vocabularies.create(TENANT, {"name": "sales", "predicates": [{"id": "seat_count"}]})
    _, rows = await h.call("GET", f"/v1/lifecycle?event_id={ctx['event_id']}")
    ctx["lce_id"] = rows["items"][0]["lifecycle_id"]
    _, audit = await h.call("GET", "/v1/audit?capability=scope.write", "user:root")
    ctx["audit_id"] = audit["items"][0]["id"]
    assert SECRET in json.dumps(await h.engine.events(VAULT))
    # a preview of the vault and a finished erasure of a scope below it, for the /v1/erasures routes
    old = f"{VAULT}/project:old"
    response, _ = await h.call("POST", "/v1/experience?wait=consolidated", json=body("an old note", scope=old))
    assert response.status_code == 200
    erasures = h.engine.erasures
    ctx["preview_id"] = (await erasures.preview({"scope": VAULT}, caller="user:alice"))["preview_id"]
    accepted = await erasures.execute({"scope": old}, caller="user:alice", tenant_id=TENANT)
    ctx["erasure_id"] = accepted["erasure_id"]
    async with h.engine.subscribe(job_id=accepted["erasure_id"], events="erasure_complete",
                                  since_lifecycle_id="") as ended:  # fmt: skip
        await ended.__anext__()
    line = json.dumps(body("an imported note", scope=VAULT)).encode()
    started = await h.engine.imports.start("jsonl", line, {"scope_template": VAULT}, caller="user:alice",
                                           tenant_id=TENANT)  # fmt: skip
    ctx["import_id"] = (await h.engine.imports.wait(started["import_id"]))["import_id"]
    started = await h.engine.exports.start({"scope": VAULT, "format": "jsonl"}, caller="user:alice", tenant_id=TENANT)
    ctx["export_id"] = (await h.engine.exports.wait(started["export_id"]))["export_id"]
    proposed = await h.engine.proposals.propose({"scope": VAULT, "experience": body(f"{SECRET} proposes", scope=VAULT)},
                                                caller="user:wendy", tenant=TENANT)  # fmt: skip
    ctx["proposal_id"] = proposed["id"]
    response, data = await h.call("POST", "/v1/experience?wait=consolidated",
                                  json=body(f"He lives in {SECRET}ville.", scope=VAULT))  # fmt: skip
    assert response.status_code == 200, data
    ctx["intake_id"] = (await h.engine.intake.pending(VAULT, caller="user:alice"))["items"][0]["id"]
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


# -- /mcp: every tool, every role ----------------------------------------------------------------
# ``/mcp`` is not in the route table: it is a transport, and each tool call runs API routes (the
# tool's ``twins``) through the same pipeline with the caller's credentials.  So a tool must let
# through exactly the roles all its twins let through, and refuse the others as they do.
MCP_SPECS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "memory_search": lambda c: {"scope": VAULT, "query": SECRET, "view": "local"},
    "memory_ingest": lambda c: {"scope": VAULT, "content": {"kind": "text", "text": "a note"}},
    "memory_about_user": lambda c: {"scope": VAULT, "view": "local"},
    "memory_forget": lambda c: {"scope": VAULT, "layers": ["beliefs"], "selector": {"predicate": c["predicate"]}},
    "memory_answer": lambda c: {"scope": VAULT, "question": SECRET},
}  # fmt: skip


def test_the_mcp_table_covers_every_tool():
    assert set(MCP_SPECS) == set(TOOLS), "a tool without an isolation spec (or a spec for no tool)"
    assert all(twin in SPECS for tool in TOOLS.values() for twin in tool.twins)


@pytest.mark.parametrize("name", sorted(MCP_SPECS))
async def test_every_mcp_tool_checks_every_role(tmp_path, name):
    allowed = frozenset.intersection(*(SPECS[twin][0] for twin in TOOLS[name].twins))
    async with server(tmp_path) as h:
        ctx = await _seed(h)
        order = ["other_tenant", "nonmember", "reader", "writer", "owner", "operator"]
        order.sort(key=lambda role: role != "other_tenant" and role in allowed)
        for role in order:
            call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                    "params": {"name": name, "arguments": MCP_SPECS[name](ctx)}}  # fmt: skip
            headers = {**_headers(h, role, f"jti-mcp-{role}"), "Accept": "application/json, text/event-stream",
                       "MCP-Protocol-Version": "2025-11-25"}  # fmt: skip
            response = await h.client.post("/mcp", json=call, headers=headers)
            data = json.loads(await response.get_data())
            where = f"{name} as {role}: {response.status_code} {json.dumps(data)[:300]}"
            if role == "other_tenant":  # refused at the door, as every API route refuses it
                assert response.status_code == 401 and data["error_code"] == "WRONG_TENANT", where
                continue
            assert response.status_code == 200, where
            result = data["result"]
            if role in allowed:
                assert result["isError"] is False, where
                continue
            envelope = result["structuredContent"]
            assert result["isError"] is True and SECRET not in json.dumps(result), where
            assert envelope["error_code"] in ("NOT_A_MEMBER", "POLICY_DENIED"), where
            assert envelope["details"]["denied_by_tier"], where
            _, rows = await h.call("GET", f"/v1/audit?actor={ROLES[role]}&decision=deny", "user:root")
            assert any(r["request_id"] == envelope["request_id"] for r in rows["items"]), where


# -- the rules, one by one ---------------------------------------------------------------------
ALICE = "org:acme/user:alice"


async def test_personal_scopes_belong_to_their_user(tmp_path):
    """An unregistered ``user:X`` scope (and anything below it) is X's: nobody else reads or
    writes it — except operators and tenant admins."""
    async with server(tmp_path, tenant_admins=("user:tina",)) as h:
        ok, _ = await h.call("POST", "/v1/experience?wait=consolidated", json=body(f"{SECRET} is my cat.", scope=ALICE))
        assert ok.status_code == 200
        for path in (ALICE, ALICE + "/agent:helper"):
            denied, data = await h.call("POST", "/v1/experience", "user:bob", json=body("hi", scope=path))
            assert denied.status_code == 403 and data["error_code"] == "NOT_A_MEMBER", data
            assert data["details"]["denied_by_tier"] == "scope"
        for method, path, payload in (("GET", f"/v1/events?scope={ALICE}", None),
                                      ("POST", "/v1/recall", {"scope": ALICE, "query": SECRET, "view": "local"}),
                                      ("GET", f"/v1/facts?scope={ALICE}", None)):  # fmt: skip
            denied, data = await h.call(method, path, "user:bob", json=payload)
            assert denied.status_code == 403 and SECRET not in json.dumps(data)
            for admin in ("user:root", "user:tina"):
                seen, data = await h.call(method, path, admin, json=payload)
                assert seen.status_code == 200 and SECRET in json.dumps(data), (admin, data)


async def test_holistic_and_descend_skip_what_the_caller_may_not_read(tmp_path):
    async with server(tmp_path) as h:
        # org:acme is registered by an admin for the admins only; alice's own scope sits below it
        await h.call("POST", "/v1/scopes", "user:root", json={"path": "org:acme", "members": [
            {"actor": "user:root", "role": "owner"}]})  # fmt: skip
        await h.call("POST", "/v1/experience?wait=indexed", "user:root", json=body(f"{SECRET} budget is 9M.", scope="org:acme"))
        await h.call("POST", "/v1/experience?wait=indexed", json=body("I like tea.", scope=ALICE))
        response, pack = await h.call("POST", "/v1/recall", json={"scope": ALICE, "query": f"{SECRET} budget tea"})
        assert response.status_code == 200 and SECRET not in json.dumps(pack)
        traverse = next(p for p in pack["provenance"]["trail"] if p["phase"] == "traverse")
        assert traverse["scopes"] == [ALICE]
        assert traverse["skipped"] == [{"scope": "org:acme", "denied_reason": "scope"}]
        response, page = await h.call("GET", f"/v1/events?scope={ALICE}&view=holistic")
        assert response.status_code == 200 and SECRET not in json.dumps(page["items"])
        assert {"scope": "org:acme", "denied": True, "item_count": 1, "denied_reason": "scope"} in page["scopes_traversed"]
        # descend: bob's team workspace has a secret project registered for bob alone
        members = [{"actor": "user:bob", "role": "owner"}, {"actor": "user:alice", "role": "reader"}]
        await h.call("POST", "/v1/scopes", "user:bob", json={"path": "ws:team", "members": members})
        await h.call("POST", "/v1/scopes", "user:bob", json={"path": "ws:team/project:x", "members": members[:1]})
        await h.call("POST", "/v1/experience?wait=indexed", "user:bob", json=body("Standup at nine.", scope="ws:team"))
        await h.call("POST", "/v1/experience?wait=indexed", "user:bob", json=body(f"{SECRET} ships Friday.", scope="ws:team/project:x"))
        response, pack = await h.call("POST", "/v1/recall", json={"scope": "ws:team", "query": f"{SECRET} standup",
                                                                  "view": "descend", "diagnostics": "summary"})  # fmt: skip
        assert response.status_code == 200 and SECRET not in json.dumps(pack)
        assert {"scope": "ws:team/project:x", "denied": True, "item_count": 1,
                "denied_reason": "scope"} in pack["diagnostics"]["scopes_traversed"]  # fmt: skip
        response, page = await h.call("GET", "/v1/events?scope=ws:team&view=descend")
        assert [i["content"]["text"] for i in page["items"]] == ["Standup at nine."]
        response, pack = await h.call("POST", "/v1/recall", "user:bob", json={"scope": "ws:team", "query": SECRET, "view": "descend"})
        assert SECRET in json.dumps(pack["layers"]["events"])


async def test_lifecycle_feeds_are_filtered_per_subscriber(tmp_path):
    """A firehose subscription (no scope) sees only the records of scopes its caller may read,
    and a member removed from a scope loses an open stream on it at the next record."""
    async with server(tmp_path) as h:
        await h.call("POST", "/v1/scopes", json={"path": VAULT, "members": MEMBERS})

        async def frames(actor: str, path: str, until: Callable[[list[dict]], bool]) -> list[dict]:
            seen: list[dict] = []
            with trio.fail_after(10), trio.CancelScope() as done:  # fail_after: a hang guard only
                async with h.client.request(path, method="GET", headers=h.as_(actor)) as connection:
                    await connection.send_complete()
                    buffer = b""
                    while not until(seen):
                        buffer += await connection.receive()
                        while b"\n\n" in buffer:
                            frame, buffer = buffer.split(b"\n\n", 1)
                            fields = dict(line.split(": ", 1) for line in frame.decode().splitlines() if ": " in line)
                            if "event" in fields:
                                seen.append({"event": fields["event"], **json.loads(fields["data"])})
                    done.cancel()
            return seen

        secret = (await h.call("POST", "/v1/experience", json=body(SECRET, scope=VAULT)))[1]["event_id"]
        mine = (await h.call("POST", "/v1/experience", "user:mallory", json=body("mine", scope="org:acme/user:mallory")))[1]["event_id"]
        seen = await frames("user:mallory", "/v1/lifecycle/stream?since_lifecycle_id=&events=captured",
                            lambda s: any(f.get("event_id") == mine for f in s))  # fmt: skip
        assert secret not in [f.get("event_id") for f in seen]
        assert all(f.get("scope") != VAULT for f in seen)
        refused, data = await h.call("GET", f"/v1/lifecycle/stream?scope={VAULT}", "user:mallory")
        assert refused.status_code == 403 and data["error_code"] == "NOT_A_MEMBER"
        _, rows = await h.call("GET", "/v1/lifecycle?events=captured", "user:mallory")
        assert [r["event_id"] for r in rows["items"]] == [mine]


async def test_membership_changes_reach_open_streams(tmp_path):
    async with server(tmp_path) as h:
        await h.call("POST", "/v1/scopes", json={"path": VAULT, "members": MEMBERS})
        seen: list[str] = []
        ready = trio.Event()

        async def rita() -> None:
            with trio.fail_after(10):  # a hang guard only
                async with h.client.request(f"/v1/lifecycle/stream?scope={VAULT}&events=captured",
                                            method="GET", headers=h.as_("user:rita")) as connection:  # fmt: skip
                    await connection.send_complete()
                    ready.set()
                    buffer = b""
                    while "policy_revoked" not in seen:
                        chunk = await connection.receive()
                        if not chunk:
                            break
                        buffer += chunk
                        while b"\n\n" in buffer:
                            frame, buffer = buffer.split(b"\n\n", 1)
                            seen.extend(line[7:] for line in frame.decode().splitlines() if line.startswith("event: "))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(rita)
            await ready.wait()
            await h.call("POST", "/v1/experience", json=body("one", scope=VAULT))
            without_rita = [m for m in MEMBERS if m["actor"] != "user:rita"]
            response, _ = await h.call("PUT", f"/v1/scopes/members?path={VAULT}", json={"members": without_rita})
            assert response.status_code == 200
            await h.call("POST", "/v1/experience", json=body(SECRET, scope=VAULT))
        assert seen == ["captured", "policy_revoked"]


async def test_consolidate_into_needs_membership_of_the_target(tmp_path):
    async with server(tmp_path) as h:
        await h.call("POST", "/v1/scopes", "user:bob", json={"path": "ws:bobs", "members": [
            {"actor": "user:bob", "role": "owner"}]})  # fmt: skip
        envelope = body("I like tea.", scope=ALICE, directives={"consolidate_into": "ws:bobs"})
        response, data = await h.call("POST", "/v1/experience", json=envelope)
        assert response.status_code == 422 and data["error_code"] == "INVALID_ENVELOPE"
        assert data["details"]["field"] == "directives.consolidate_into"
        assert data["details"]["denied_by_tier"] == "scope"


async def test_cancel_is_audited_and_checked_before_anything_is_read(tmp_path):
    async with server(tmp_path) as h:
        written = (await h.call("POST", "/v1/experience", json=body(SECRET, scope=ALICE)))[1]["event_id"]
        denied, data = await h.call("POST", f"/v1/lifecycle/memory-event/{written}/cancel", "user:bob", json={})
        assert denied.status_code == 403 and SECRET not in json.dumps(data)
        response, data = await h.call("POST", f"/v1/lifecycle/memory-event/{written}/cancel", json={"audit_note": "oops"})
        assert response.status_code == 200 and data["excluded_from_recall"] is True
        _, row = await h.call("GET", f"/v1/audit/{data['audit_id']}")
        assert row["endpoint"] == "POST /v1/lifecycle/memory-event/{event_id}/cancel"
        assert row["event_id"] == written and row["decision"] == "allow"


async def test_policy_tiers_have_owners_and_cannot_lock_their_editor_out(tmp_path):
    async with server(tmp_path, preset="dev_local") as h:
        def unsigned(actor: str) -> dict[str, str]:
            return {"X-Cortex-Actor": actor}

        # a partial (even empty) deployment document merges: nothing is wiped
        response, data = await h.call("PUT", "/v1/policy/deployment", json={}, hdrs=unsigned("user:dev"))
        assert response.status_code == 200 and data["allow"] == ["*"]
        ok, _ = await h.call("POST", "/v1/experience", json=body(scope="org:acme/user:dev"), hdrs=unsigned("user:dev"))
        assert ok.status_code == 202
        # a change that removes the editor's own right is refused, and nothing changes
        for doc in ({"allow": []}, {"deny": ["policy.*"]}, {"deny": ["*"]}):
            response, data = await h.call("PUT", "/v1/policy/deployment", json=doc, hdrs=unsigned("user:dev"))
            assert response.status_code == 409 and data["error_code"] == "POLICY_LOCKOUT", data
        response, data = await h.call("GET", "/v1/policy/deployment", hdrs=unsigned("user:dev"))
        assert data["allow"] == ["*"] and data["deny"] == []
        # the tenant policy is its admins'; an actor's policy is its own (or an admin's)
        response, data = await h.call("PUT", f"/v1/policy/tenant/{TENANT}", json={"allow": ["*"]}, hdrs=unsigned("user:dev"))
        assert response.status_code == 403 and data["details"]["denied_by_tier"] == "tenant"
        response, data = await h.call("PUT", "/v1/policy/actor/user:victim", json={"deny": ["*"]}, hdrs=unsigned("user:dev"))
        assert response.status_code == 403
        response, data = await h.call("PUT", f"/v1/policy/tenant/{TENANT}", json={"deny": ["policy.administer.tenant"]},
                                      hdrs=unsigned("user:root"))  # fmt: skip
        assert response.status_code == 409 and data["details"]["would_deny_by_tier"] == "tenant"
        response, data = await h.call("PUT", "/v1/policy/actor/user:dev", json={"deny": ["scope.read.descend"]},
                                      hdrs=unsigned("user:dev"))  # fmt: skip
        assert response.status_code == 200  # narrowing oneself is fine


async def test_csrf_guards_on_dev_local(tmp_path):
    async with server(tmp_path, preset="dev_local", allowed_origins=("https://app.example",)) as h:
        me = {"X-Cortex-Actor": "user:dev"}
        payload = json.dumps(body(scope="org:acme/user:dev"))
        # a form post from a web page: no JSON content type, no actor header
        response = await h.client.post("/v1/experience", data=payload, headers={"Content-Type": "text/plain"})
        assert response.status_code == 415
        response, data = await h.call("POST", "/v1/experience", json=body(scope="org:acme/user:dev"), hdrs={})
        assert response.status_code == 401 and data["error_code"] == "ACTOR_MISMATCH"
        for origin, status in (("https://evil.example", 403), ("null", 403), ("http://localhost:3000", 202),
                               ("http://127.0.0.1:8077", 202), ("https://app.example", 202)):  # fmt: skip
            response, data = await h.call("POST", "/v1/experience", json=body(scope="org:acme/user:dev"),
                                          hdrs={**me, "Origin": origin})  # fmt: skip
            assert response.status_code == status, (origin, data)
            if status == 403:
                assert data["error_code"] == "ORIGIN_NOT_ALLOWED"
        # naming oneself does not make one an operator
        _, who = await h.call("GET", "/v1/auth/whoami", hdrs=me)
        assert who["operator"] is False
        _, who = await h.call("GET", "/v1/auth/whoami", hdrs={"X-Cortex-Actor": "user:root"})
        assert who["operator"] is True


async def test_405_names_the_allowed_methods(tmp_path):
    async with server(tmp_path) as h:
        response, data = await h.call("DELETE", "/v1/recall")
        assert response.status_code == 405 and data["error_code"] == "METHOD_NOT_ALLOWED"
        assert "POST" in response.headers["Allow"]
