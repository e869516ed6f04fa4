"""HTTP conventions (§6), scopes (§8.8), audit (§14), lifecycle reads (§8.9), OpenAPI, and the
schema of every Stable response, over the in-process app (memory backend, manual clock)."""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator

from cortexdb import schemas

from .server_support import TENANT, body, server


def validate(name: str, data) -> None:
    schemas.validator(name).validate(data)


def validate_page(item_schema: str, data) -> None:
    validate("page", data)
    for item in data["items"]:
        validate(item_schema, item)


async def test_stable_write_and_read_responses_match_their_schemas(tmp_path):
    async with server(tmp_path) as h:
        response, data = await h.call("POST", "/v1/experience?wait=consolidated",
                                      json=body("Alice works at Acme. Alice likes green tea."))  # fmt: skip
        assert response.status_code == 200, data
        validate("experience_result", data)
        assert data["stages_completed"] == ["captured", "extracted", "indexed", "consolidated"]
        assert response.headers["X-Cortex-Policy"].startswith("tier=")
        response, data = await h.call("POST", "/v1/experience", json=body("Bob joined."))
        assert response.status_code == 202 and data["status"] == "captured"
        validate("experience_result", data)
        await h.engine.flush()
        for path, schema in (("/v1/events?scope=org:acme/user:alice", "event"),
                             ("/v1/facts?scope=org:acme/user:alice", "fact"),
                             ("/v1/episodes?scope=org:acme/user:alice", "episode"),
                             ("/v1/beliefs?scope=org:acme/user:alice", "belief")):  # fmt: skip
            response, data = await h.call("GET", path)
            assert response.status_code == 200, data
            validate_page(schema, data)
        response, facts = await h.call("GET", "/v1/facts?scope=org:acme/user:alice")
        assert facts["items"], "the rule extractor derives a fact from 'Alice works at Acme'"
        fact_id = facts["items"][0]["id"]
        response, data = await h.call("GET", f"/v1/facts/{fact_id}?scope=org:acme/user:alice")
        validate("fact", data)
        response, pack = await h.call("POST", "/v1/recall", json={"scope": "org:acme/user:alice", "query": "tea"})
        assert response.status_code == 200
        validate("stratified_pack", pack)
        assert pack["layers"]["events"] and pack["provenance"]["citations"] is not None
        response, data = await h.call("GET", "/v1/scopes?path=org:acme/user:alice")
        validate("scope", data)
        response, data = await h.call("GET", f"/v1/events/{pack['layers']['events'][0]['id']}")
        validate("event", data)


async def test_error_envelope_everywhere(tmp_path):
    async with server(tmp_path, max_body_bytes=2048) as h:
        cases = [
            ("GET", "/v1/no/such/route", None, 404, "NOT_FOUND"),
            ("DELETE", "/v1/experience", None, 405, "METHOD_NOT_ALLOWED"),
            ("POST", "/v1/experience", {"scope": "org:acme", "pad": "x" * 4096}, 413, "PAYLOAD_TOO_LARGE"),
            ("POST", "/v1/experience", {"scope": "BAD SCOPE"}, 422, "INVALID_SCOPE_GRAMMAR"),
            ("POST", "/v1/experience", body(context={}), 422, "INVALID_ENVELOPE"),
            ("GET", "/v1/events", None, 400, "INVALID_BODY"),
            ("GET", "/v1/events?scope=org:acme&bogus=1", None, 400, "INVALID_QUERY"),
            ("GET", "/v1/events?scope=org:acme&limit=5000", None, 400, "INVALID_QUERY"),
            ("GET", "/v1/facts/timeline?scope=org:acme", None, 400, "MISSING_REQUIRED_FIELD"),
            ("GET", "/v1/events/evt_01a200b0-0000-7000-8000-000000000000", None, 404, "NOT_FOUND"),
            ("POST", "/v1/answer", {"query": "x"}, 422, "INVALID_ANSWER"),
            ("POST", "/v1/export", {"scope": "org:acme"}, 400, "MISSING_REQUIRED_FIELD"),
            ("POST", "/v1/vocabularies", {}, 403, "POLICY_DENIED"),  # a tenant admin's write
        ]
        for method, path, payload, status, code in cases:
            response, data = await h.call(method, path, json=payload)
            assert response.status_code == status, (path, data)
            assert data["error_code"] == code, (path, data)
            validate("error_envelope", data)
            assert response.headers["X-Cortex-Request-ID"] == data["request_id"]
            assert "X-Cortex-Stability" in response.headers
        for raw in (b"{not json", b"[1, 2]", b""):
            response = await h.client.post("/v1/experience", data=raw, headers={
                **h.as_("user:alice"), "Content-Type": "application/json"})  # fmt: skip
            data = json.loads(await response.get_data())
            assert response.status_code == 400 and data["error_code"] == "INVALID_BODY"
        for content_type in (None, "text/plain", "application/x-www-form-urlencoded"):
            hdrs = h.as_("user:alice") | ({"Content-Type": content_type} if content_type else {})
            response = await h.client.post("/v1/experience", data=json.dumps(body()), headers=hdrs)
            data = json.loads(await response.get_data())
            assert response.status_code == 415 and data["error_code"] == "UNSUPPORTED_MEDIA_TYPE"
            validate("error_envelope", data)


async def test_request_ids_stability_headers_and_replay(tmp_path):
    async with server(tmp_path) as h:
        response, _ = await h.call("GET", "/v1/auth/whoami", hdrs={**h.as_("user:alice"), "X-Cortex-Request-ID": "req_mine"})
        assert response.headers["X-Cortex-Request-ID"] == "req_mine"
        response, _ = await h.call("GET", "/v1/auth/whoami", hdrs={**h.as_("user:alice"), "X-Request-ID": "legacy-1"})
        assert response.headers["X-Cortex-Request-ID"] == "legacy-1" and "X-Request-ID" not in response.headers
        response, _ = await h.call("GET", "/v1/auth/whoami")
        assert response.headers["X-Cortex-Request-ID"].startswith("req_")
        response, _ = await h.call("GET", "/v1/beliefs?scope=org:acme")
        assert response.headers["X-Cortex-Stability"] == "beta"
        response, _ = await h.call("POST", "/v1/scopes/prune", json={"older_than": "P1D"})
        assert response.headers["X-Cortex-Stability"] == "experimental"
        assert "X-Cortex-Experimental-Notice" in response.headers
        first, a = await h.call("POST", "/v1/experience", json=body(idempotency_key="k-1"))
        again, b = await h.call("POST", "/v1/experience", json=body(idempotency_key="k-1"))
        assert a["event_id"] == b["event_id"] and again.headers["X-Cortex-Replay"] == "true"
        assert "X-Cortex-Replay" not in first.headers
        conflict, data = await h.call("POST", "/v1/experience", json=body("other text", idempotency_key="k-1"))
        assert conflict.status_code == 409 and data["error_code"] == "IDEMPOTENCY_CONFLICT"
        via_header, c = await h.call("POST", "/v1/experience", json=body(),
                                     hdrs={**h.as_("user:alice"), "X-Cortex-Idempotency-Key": "k-1"})  # fmt: skip
        assert c["event_id"] == a["event_id"]
        found, data = await h.call("GET", "/v1/experience/by-idempotency-key/k-1")
        assert found.status_code == 200 and data["event_id"] == a["event_id"]


async def test_rate_limits_answer_429_with_retry_after(tmp_path):
    preset = tmp_path / "tight.yaml"
    preset.write_text("preset: tight\nallow: ['*']\ndefaults:\n  actor.require_signed: true\n"
                      "  rate_limit.write: '2/h'\n  rate_limit.read: '1000/s'\n")  # fmt: skip
    async with server(tmp_path, preset=str(preset)) as h:
        statuses = []
        for _ in range(3):
            response, data = await h.call("POST", "/v1/experience", json=body())
            statuses.append(response.status_code)
            assert response.headers["X-RateLimit-Limit"] == "1"
        assert statuses[0] == 202 and statuses[-1] == 429
        assert data["error_code"] == "RATE_LIMITED" and data["retriable"] is True
        assert int(response.headers["Retry-After"]) >= 1
        assert int(response.headers["X-RateLimit-Remaining"]) == 0
        # per actor: bob has his own bucket; reads have theirs
        other, _ = await h.call("POST", "/v1/experience", "user:bob", json=body(scope="org:acme/user:bob"))
        read, _ = await h.call("GET", "/v1/events?scope=org:acme/user:alice")
        assert other.status_code == 202 and read.status_code == 200


async def test_cursor_pagination_and_holistic_layer_reads(tmp_path):
    async with server(tmp_path) as h:
        await h.call("POST", "/v1/scopes", json={"path": "org:acme"})
        for i in range(5):
            await h.call("POST", "/v1/experience", json=body(f"note {i}", scope="org:acme"))
        for i in range(3):
            await h.call("POST", "/v1/experience", json=body(f"mine {i}"))
        seen, cursor = [], None
        while True:
            path = "/v1/events?scope=org:acme/user:alice&view=holistic&limit=3" + (f"&cursor={cursor}" if cursor else "")
            response, data = await h.call("GET", path)
            assert response.status_code == 200, data
            seen += [e["content"]["text"] for e in data["items"]]
            if not data["has_more"]:
                break
            cursor = data["next_cursor"]
        assert seen == ["mine 0", "mine 1", "mine 2", "note 0", "note 1", "note 2", "note 3", "note 4"]
        response, data = await h.call("GET", "/v1/events?scope=org:acme/user:alice&limit=2")
        assert len(data["items"]) == 2 and data["has_more"]
        response, data = await h.call("GET", "/v1/events?scope=org:acme/user:alice&cursor=%%%")
        assert response.status_code == 400


async def test_scope_registration_members_natural_level_and_prune(tmp_path):
    async with server(tmp_path, preset="cloud_shared_saas", enable_experimental=True) as h:
        members = [{"actor": "user:alice", "role": "owner"}, {"actor": "agent:planner", "role": "writer"},
                   {"actor": "agent:reader", "role": "reader"}]  # fmt: skip
        response, data = await h.call("POST", "/v1/scopes", json={"path": "ws:launch", "members": members,
                                                                  "policies": {"inherit_from": ["org:acme"]}})  # fmt: skip
        assert response.status_code == 201, data
        validate("scope", data)
        assert data["auto_provisioned"] is False
        dup, data = await h.call("POST", "/v1/scopes", json={"path": "ws:launch"})
        assert dup.status_code == 409 and data["error_code"] == "SCOPE_REGISTRATION_EXISTS"
        ok, _ = await h.call("POST", "/v1/experience", "agent:planner", json=body(scope="ws:launch"))
        assert ok.status_code == 202
        for actor in ("agent:reader", "user:mallory"):
            denied, data = await h.call("POST", "/v1/experience", actor, json=body(scope="ws:launch"))
            assert denied.status_code == 403 and data["error_code"] == "NOT_A_MEMBER"
        diff, data = await h.call("PUT", "/v1/scopes/members?path=ws:launch",
                                  json={"members": [members[0], {"actor": "agent:reader", "role": "writer"},
                                                    {"actor": "user:carol", "role": "reader"}]})  # fmt: skip
        assert diff.status_code == 200, data
        assert data["added"] == [{"actor": "user:carol", "role": "reader"}]
        assert data["removed"] == [{"actor": "agent:planner", "role": "writer"}]
        assert data["changed"] == [{"actor": "agent:reader", "from": "reader", "to": "writer"}]
        not_owner, data = await h.call("PUT", "/v1/scopes/members?path=ws:launch", "agent:reader",
                                       json={"members": members})  # fmt: skip
        assert not_owner.status_code == 403
        # natural level: bob owns org:acme/dept:eng/user:bob; writing to dept:eng is elevated,
        # which cloud_shared_saas leaves to the tenant ("~") and the default tenant policy denies
        await h.call("POST", "/v1/experience", "user:bob", json=body(scope="org:acme/dept:eng/user:bob"))
        response, data = await h.call("GET", "/v1/policy/effective", "user:bob")
        assert data["natural_level"] == "org:acme/dept:eng/user:bob"
        up, data = await h.call("POST", "/v1/experience", "user:bob", json=body(scope="org:acme/dept:eng"))
        assert up.status_code == 403 and data["details"]["capability"] == "scope.write.elevated"
        assert data["details"]["denied_by_tier"] == "tenant"
        below, _ = await h.call("POST", "/v1/experience", "user:bob", json=body(scope="org:acme/dept:eng/user:bob/agent:x"))
        assert below.status_code == 202
        listing, data = await h.call("GET", "/v1/scopes?prefix=org:acme/&auto_provisioned=true", "user:bob")
        assert {i["path"] for i in data["items"]} >= {"org:acme/dept:eng/user:bob"}
        listing, data = await h.call("GET", "/v1/scopes?prefix=org:acme/&auto_provisioned=true")
        assert "org:acme/dept:eng/user:bob" not in {i["path"] for i in data["items"]}  # bob's own
        forget, data = await h.call("DELETE", "/v1/scopes?path=ws:launch&records=forget")
        assert forget.status_code == 501 and data["error_code"] == "NOT_YET_AVAILABLE"
        keep, data = await h.call("DELETE", "/v1/scopes?path=ws:launch")
        assert keep.status_code == 200 and data["deleted"] is True
        gone, _ = await h.call("GET", "/v1/scopes?path=ws:launch")
        assert gone.status_code == 404
        events, data = await h.call("GET", "/v1/events?scope=ws:launch")
        assert len(data["items"]) == 1  # records stay
        h.clock.advance(days=100)
        denied, data = await h.call("POST", "/v1/scopes/prune", json={"older_than": "P90D", "dry_run": True})
        assert denied.status_code == 403  # tenant admins only
        dry, data = await h.call("POST", "/v1/scopes/prune", "user:root", json={"older_than": "P90D", "dry_run": True})
        assert dry.status_code == 200 and data["total"] >= 2
        bob = next(c for c in data["candidates"] if c["path"] == "org:acme/dept:eng/user:bob")
        assert bob["records"]["events"] == 1
        still, _ = await h.call("GET", "/v1/scopes?path=org:acme/dept:eng/user:bob", "user:bob")
        assert still.status_code == 200
        real, data = await h.call("POST", "/v1/scopes/prune", "user:root", json={"older_than": "P90D", "dry_run": False})
        gone, _ = await h.call("GET", "/v1/scopes?path=org:acme/dept:eng/user:bob", "user:bob")
        assert gone.status_code == 404


async def test_audit_rows_hashes_verification_and_pepper_rotation(tmp_path):
    async with server(tmp_path, preset="cloud_shared_saas") as h:
        payload = body("audited text")
        raw = json.dumps(payload).encode()
        response = await h.client.post("/v1/experience", data=raw,
                                       headers={**h.as_("user:alice"), "Content-Type": "application/json"})  # fmt: skip
        assert response.status_code == 202
        await h.call("POST", "/v1/scopes", json={"path": "global:x"})  # a denial
        response, data = await h.call("GET", "/v1/audit")
        assert response.status_code == 200
        validate("page", data)
        rows = data["items"]
        for row in rows:
            validate("audit_row", row)
        write = next(r for r in rows if r["endpoint"] == "POST /v1/experience")
        deny = next(r for r in rows if r["decision"] == "deny")
        assert write["decision"] == "allow" and write["request"]["body_bytes"] == len(raw)
        assert deny["capability"] == "scope.create.global" and deny["decided_by_tier"] == "deployment"
        assert deny["response_status"] == 403
        response, match = await h.call("POST", "/v1/audit/verify", json={"audit_id": write["id"], "body": raw.decode()})
        assert match["match"] is True and match["tenant_pepper_version"] == 1
        response, nomatch = await h.call("POST", "/v1/audit/verify", json={"audit_id": write["id"], "body": raw.decode() + " "})
        assert nomatch["match"] is False
        # rows are per actor unless audit.read.cross_actor (denied on cloud_shared_saas)
        response, data = await h.call("GET", "/v1/audit", "user:bob")
        assert all(r["actor"] == "user:bob" for r in data["items"])
        cross, data = await h.call("GET", "/v1/audit?actor=user:alice", "user:bob")
        assert cross.status_code == 403 and data["details"]["capability"] == "audit.read.cross_actor"
        other, data = await h.call("GET", f"/v1/audit/{write['id']}", "user:bob")
        assert other.status_code == 403
        # a quarter later the pepper rotates; old rows still verify under their version
        h.clock.advance(days=100)
        await h.call("POST", "/v1/experience", json=body("after rotation"))
        response, data = await h.call("GET", "/v1/audit?capability=scope.write")
        versions = {r["tenant_pepper_version"] for r in data["items"]}
        assert versions == {1, 2}
        response, match = await h.call("POST", "/v1/audit/verify", json={"audit_id": write["id"], "body": raw.decode()})
        assert match["match"] is True
        # retention: two years and a bit later, the non-GDPR rows are pruned
        h.clock.advance(days=800)
        removed = await h.app.cortex.audit.prune()
        assert removed >= len(rows)


async def test_audit_can_omit_body_bytes(tmp_path):
    preset = tmp_path / "nobytes.yaml"
    preset.write_text("preset: nobytes\nallow: ['*']\ndefaults:\n  actor.require_signed: true\n"
                      "  audit.store_body_bytes: false\n")  # fmt: skip
    async with server(tmp_path, preset=str(preset)) as h:
        await h.call("POST", "/v1/experience", json=body())
        response, data = await h.call("GET", "/v1/audit")
        assert data["items"] and all("body_bytes" not in r["request"] for r in data["items"])
        assert all(r["request"]["body_hash"].startswith("sha256:") for r in data["items"])


async def test_lifecycle_reads_and_cancel(tmp_path):
    async with server(tmp_path) as h:
        response, data = await h.call("POST", "/v1/experience?wait=consolidated", json=body("Alice likes tea."))
        event_id = data["event_id"]
        response, view = await h.call("GET", f"/v1/lifecycle/memory-event/{event_id}")
        assert view["stages_completed"][:4] == ["captured", "extracted", "indexed", "consolidated"]
        response, page = await h.call("GET", f"/v1/lifecycle?event_id={event_id}&limit=2")
        assert [r["stage"] for r in page["items"]] == ["captured", "extracted"] and page["has_more"]
        response, rest = await h.call("GET", f"/v1/lifecycle?event_id={event_id}&cursor={page['next_cursor']}")
        assert rest["items"][0]["stage"] == "indexed"
        for row in page["items"] + rest["items"]:
            validate("lifecycle_event", row)
        lce = page["items"][0]["lifecycle_id"]
        response, one = await h.call("GET", f"/v1/lifecycle/event/{lce}")
        assert one["lifecycle_id"] == lce and one["stage"] == "captured"
        response, data = await h.call("POST", "/v1/experience", json=body("cancel me"))
        response, cancelled = await h.call("POST", f"/v1/lifecycle/memory-event/{data['event_id']}/cancel",
                                           json={"audit_note": "typo"})  # fmt: skip
        assert response.status_code == 200, cancelled
        assert cancelled["excluded_from_recall"] is True


async def test_openapi_document_covers_every_route_and_references_the_schemas(tmp_path):
    async with server(tmp_path) as h:
        response = await h.client.get("/v1/openapi.json")
        doc = json.loads(await response.get_data())
        assert doc["openapi"] == "3.1.0"
        routes = {(r.method.lower(), r.path.replace(":path", "")) for r in h.app.cortex.routes}
        documented = {(m, p) for p, ops in doc["paths"].items() for m in ops}
        assert routes == documented
        for schema in doc["components"]["schemas"].values():
            Draft202012Validator.check_schema(schema)

        def refs(node):
            if isinstance(node, dict):
                if "$ref" in node:
                    yield node["$ref"]
                for value in node.values():
                    yield from refs(value)
            elif isinstance(node, list):
                for value in node:
                    yield from refs(value)

        used = {ref.split("/")[3] for ref in refs(doc["paths"])}  # #/components/schemas/<name>...
        assert used and used <= set(doc["components"]["schemas"])
        post = doc["paths"]["/v1/experience"]["post"]
        assert post["requestBody"]["content"]["application/json"]["schema"]["$ref"] == "#/components/schemas/experience_envelope"
        assert post["x-cortex-stability"] == "stable"
        assert doc["paths"]["/v1/beliefs"]["get"]["x-cortex-stability"] == "beta"
        ops = {op["operationId"] for ops in doc["paths"].values() for op in ops.values()}
        assert len(ops) == len(documented)


@pytest.mark.parametrize("path", ["/v1/admin/health", "/v1/admin/metrics", "/v1/admin/version"])
async def test_admin_endpoints(tmp_path, path):
    async with server(tmp_path) as h:
        await h.call("POST", "/v1/experience", json=body())
        response = await h.client.get(path, headers=h.as_("user:alice"))
        text = (await response.get_data()).decode()
        assert response.status_code == 200, text
        if path.endswith("metrics"):
            assert 'cortexdb_requests_total{method="POST",route="/v1/experience",status="202"} 1' in text
        elif path.endswith("health"):
            assert json.loads(text)["status"] == "ok"
        flush, data = await h.call("POST", "/v1/admin/flush-views", json={})
        assert flush.status_code == 403 and data["details"]["denied_by_tier"] == "deployment"  # operator-only
        flush, data = await h.call("POST", "/v1/admin/flush-views", "user:root", json={"seal": True})
        assert flush.status_code == 200 and data["flushed"] is True


async def test_temporal_phrases_over_http(tmp_path):
    async with server(tmp_path) as h:
        phrase = {"name": "fiscal_q3", "pattern": "fiscal Q3", "resolves_to": {"valid_during": ["2026-07-01", "2026-10-01"]}}
        response, data = await h.call("POST", "/v1/temporal/phrases", json=phrase)
        assert response.status_code == 403  # tenant-wide: admins only (§8.17.1)
        response, data = await h.call("POST", "/v1/temporal/phrases", "user:root", json=phrase)
        assert response.status_code == 201, data
        response, data = await h.call("GET", "/v1/temporal/phrases")
        assert data["items"] == [phrase]
        response, data = await h.call("DELETE", "/v1/temporal/phrases/fiscal_q3")
        assert response.status_code == 403
        response, data = await h.call("DELETE", "/v1/temporal/phrases/fiscal_q3", "user:root")
        assert response.status_code == 200
        response, data = await h.call("DELETE", "/v1/temporal/phrases/fiscal_q3", "user:root")
        assert response.status_code == 404 and data["error_code"] == "NOT_FOUND"
        assert TENANT == "acme"


async def test_jwt_issuer_from_a_pem_file(tmp_path):
    from cortexdb import ManualClock

    from .server_support import JWT_ISS, Keys

    clock = ManualClock("2026-05-13T15:42:09Z")
    keys = Keys(tmp_path, clock)
    async with server(tmp_path, keys=keys, clock=clock, jwt_issuers=[(JWT_ISS, str(keys.rsa_pem))]) as h:
        response, data = await h.call("GET", "/v1/auth/whoami", hdrs={"Authorization": f"Bearer {keys.jwt(kid=None)}",
                                                                      "X-Cortex-Actor": "user:alice"})  # fmt: skip
        assert response.status_code == 200, data
        response, data = await h.call("GET", "/v1/auth/whoami", hdrs={"Authorization": f"Bearer {keys.jwt(alg='ES256', kid=None)}",
                                                                      "X-Cortex-Actor": "user:alice"})  # fmt: skip
        assert response.status_code == 401 and data["error_code"] == "INVALID_TOKEN_SIGNATURE"


async def test_no_route_answers_500_to_malformed_input(tmp_path):
    """Every declared route, fed wrong types, answers an envelope below 500 (501 = not built)."""
    garbage_bodies = [{"scope": 5, "path": ["x"], "members": "all", "items": {}, "query": 7, "jti": 1,
                       "older_than": 3, "prefix": 9, "audit_id": 1, "body": 2, "allow": "x", "name": None},
                      {"scope": "org:acme", "budgets": "big", "filters": [1], "temporal": 3, "view": 1}]  # fmt: skip
    async with server(tmp_path, enable_experimental=True) as h:
        for route in h.app.cortex.routes:
            if route.path in ("/v1/lifecycle/ws", "/v1/lifecycle/stream"):
                continue
            path = route.path.replace("{scope_path:path}", "org:acme").replace("{tenant_id}", TENANT)
            path = path.replace("{actor_id}", "user:bob")
            for name in ("event_id", "episode_id", "fact_id", "belief_id", "concept_id", "lce_id", "audit_id",
                         "key", "name", "source", "blob_id"):  # fmt: skip
                path = path.replace("{" + name + "}", "zzz")
            for payload in garbage_bodies if route.method in ("POST", "PUT") else [None]:
                for query in ("?scope=org:acme&limit=abc&view=sideways&since=yesterday", "?scope=org:acme", ""):
                    response, data = await h.call(route.method, path + query, "user:root", json=payload)
                    assert response.status_code < 500 or response.status_code == 501, (route.path, query, data)
                    if response.status_code >= 400:
                        validate("error_envelope", data)


async def test_the_app_needs_an_engine_opened_with_the_request_policy_hook():
    """The hook is given at open (``open_engine(policy=...)``), never swapped later: an engine
    whose own checks would skip the gate is refused loudly."""
    import cortexdb
    from cortexdb.server.app import create_app
    from cortexdb.server.call import RequestPolicyHook
    from cortexdb.server.settings import ServerSettings

    async with cortexdb.open_engine("memory") as engine:
        assert not hasattr(engine, "use_policy")
        with pytest.raises(ValueError, match="RequestPolicyHook"):
            create_app(engine, ServerSettings(backend="memory"))
    async with cortexdb.open_engine("memory", policy=RequestPolicyHook()) as engine:
        assert create_app(engine, ServerSettings(backend="memory")).cortex.engine is engine
