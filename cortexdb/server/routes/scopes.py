"""Scopes (reference §8.8): registration, lookup and listing, members, deletion, pruning."""

from __future__ import annotations

from ...engine.model import to_wire
from ...engine.policy import capabilities as cap
from ...errors import InvalidBody, NotFound
from ..call import Blueprint, Call, current_request
from ..declare import array, engine_checked, obj, ref
from ..gate import CLAIM
from ..params import decode_cursor, encode_cursor, page_limit, query_args, scope_param, to_bool
from ..responses import json_response

api = Blueprint()
MEMBER = obj({"actor": {"type": "string", "description": "type:id"}, "role": {"enum": ["owner", "writer", "reader"]}},
             required=("actor", "role"))  # fmt: skip


@api("POST", "/v1/scopes", rate="write", status=201, summary="Register a scope", response_schema="scope",
     body=engine_checked(obj({
         "path": ref("common", "/$defs/scope_path"), "members": array(MEMBER),
         "policies": obj({"consolidation": {}, "conflict_resolution": {}, "inherit_from": array({"type": "string"}),
                          "audit": {}, "children": {}}, nullable=True),
         "idempotency_key": {"type": "string", "minLength": 1, "maxLength": 64}}, required=("path",))))
async def scope_register(call: Call):
    body = call.json()
    path = scope_param(body.get("path"), "path")
    call.primary = cap.POLICY_ADMINISTER_SCOPE
    call.check(cap.POLICY_ADMINISTER_SCOPE, path, access=CLAIM)  # a claimant may register it
    key = body.get("idempotency_key") or current_request().headers.get("X-Cortex-Idempotency-Key")
    replays, who = call.state.replays, (call.principal.tenant, call.principal.actor, "/v1/scopes")
    if isinstance(key, str) and key:
        earlier = await replays.earlier(*who, key, {**body, "idempotency_key": key})
        if earlier is not None:
            call.headers["X-Cortex-Replay"] = "true"
            return json_response(earlier, 201)
    record = await call.state.registry.register(call.principal, body, call.state.engine.clock.now(), call.check)
    if isinstance(key, str) and key:
        await replays.remember(*who, key, {**body, "idempotency_key": key}, record)
    return json_response(record, 201)


@api("GET", "/v1/scopes", summary="Look up a scope by ?path= or list by ?prefix=", access="filtered",
     query=("path", "prefix", "auto_provisioned", "limit", "cursor"))
async def scope_get(call: Call):
    registry = call.state.registry
    args = query_args()
    if "path" in args:
        path = scope_param(args["path"], "path")
        call.check(cap.SCOPE_READ_LOCAL, path)
        record = await registry.get(path)
        if record is None:
            raise NotFound(f"scope {path} has never been written to or registered", details={"path": path})
        wire = to_wire(record)
        wire["natural_level_of_caller"] = registry.natural_level(call.principal.actor)
        return wire
    prefix = args.get("prefix", "")
    limit = page_limit(args.get("limit"), 50)
    auto = to_bool(args["auto_provisioned"], "auto_provisioned") if "auto_provisioned" in args else None
    after = decode_cursor(args["cursor"]).get("after") if "cursor" in args else None
    call.check(cap.SCOPE_READ_LOCAL)  # the listing itself; each item is filtered by its own path
    items, more = await registry.list(prefix=prefix, auto_provisioned=auto, after=after, limit=limit,
                                      keep=lambda path: call.allows(cap.SCOPE_READ_LOCAL, path))  # fmt: skip
    return {"items": items, "has_more": more,
            "next_cursor": encode_cursor({"after": items[-1]["path"]}) if more and items else None}  # fmt: skip


@api("PUT", "/v1/scopes/members", rate="write", summary="Replace a scope's member list (atomic diff)",
     query=("path!",), body=obj({"members": array(MEMBER)}, required=("members",)))
async def scope_members(call: Call):
    path = scope_param(query_args().get("path"), "path")
    call.check(cap.POLICY_ADMINISTER_SCOPE, path)  # owners only (the gate's membership rule)
    return await call.state.registry.set_members(call.principal, path, call.json())


@api("DELETE", "/v1/scopes", rate="write", summary="Delete a scope registration (?records=keep)",
     query=("path!", "records"))
async def scope_delete(call: Call):
    args = query_args()
    path = scope_param(args.get("path"), "path")
    call.check(cap.POLICY_ADMINISTER_SCOPE, path)  # owners only
    return await call.state.registry.delete(path, args.get("records", "keep"), call.check)


@api("POST", "/v1/scopes/prune", tier="experimental", rate="write", access="tenant",
     body=obj({"older_than": {"type": "string", "description": "an ISO 8601 duration (default P90D)"},
               "dry_run": {"type": "boolean", "description": "default true: report, remove nothing"},
               "prefix": {"type": "string"}}),
     summary="Remove idle auto-provisioned scopes (dry_run first)")
async def scope_prune(call: Call):
    body = call.json()
    call.check(cap.POLICY_ADMINISTER_TENANT)
    call.require_admin(cap.POLICY_ADMINISTER_TENANT, "only the tenant's admins may prune its scopes")
    dry_run = body.get("dry_run", True)
    if not isinstance(dry_run, bool):
        raise InvalidBody("dry_run must be true or false", details={"field": "dry_run"})
    if not isinstance(body.get("prefix", ""), str):
        raise InvalidBody("prefix must be a string", details={"field": "prefix"})
    return await call.state.registry.prune(older_than=body.get("older_than", "P90D"), dry_run=dry_run,
                                           now=call.state.engine.clock.now(), prefix=body.get("prefix", ""))  # fmt: skip


# -- segment strategies (docs/episodes.md) ----------------------------------------------------------
@api("GET", "/v1/scopes/segmentation", summary="A scope's episode segment strategy and its latest re-segmentation",
     query=("path!",))
async def scope_segmentation(call: Call):
    path = scope_param(query_args().get("path"), "path")
    call.check(cap.SCOPE_READ_LOCAL, path)
    return await call.state.engine.segmentation.get(path, caller=call.principal.actor)


@api("PUT", "/v1/scopes/segmentation", rate="write", status=202, query=("path!",),
     body=engine_checked(obj({"strategy": {"enum": ["time_gap", "session", "thread", "turn_pair", "daily"]},
                              "gap_seconds": {"type": "number", "exclusiveMinimum": 0}}, required=("strategy",))),
     summary="Set a scope's segment strategy: its episodes are re-segmented from the WAL (a job)")  # fmt: skip
async def scope_segmentation_set(call: Call):
    path = scope_param(query_args().get("path"), "path")
    call.primary = cap.POLICY_ADMINISTER_SCOPE
    call.check(cap.POLICY_ADMINISTER_SCOPE, path)  # owners only (the gate's membership rule)
    job = await call.state.engine.segmentation.set(path, call.json(), caller=call.principal.actor)
    await call.state.registry.note_write(path)
    return json_response(job, 202)
