"""GDPR erasure (reference §8.6, experimental §2.4.3): preview, manifests, execute, status and
cancel, translated onto ``engine.erasures``.  Every route checks ``forget.gdpr`` on the erasure's
scope (the gate: the scope's owners); the engine checks ``forget.gdpr.cross_workspace`` on each
workspace an execute propagates into, through the policy hook.  Progress streams on
``/v1/lifecycle/stream?erasure_id=`` (``feeds.py``)."""

from __future__ import annotations

from typing import Any

from ...engine.policy import capabilities as cap
from ...errors import InvalidPolicy
from ..call import Blueprint, Call, current_request
from ..declare import NOTE, array, engine_checked, obj, ref
from ..params import page_limit, query_args, scope_param
from ..responses import json_response

api = Blueprint()
ERASURE = {
    "scope": ref("common", "/$defs/scope_path"),
    "audit_note": NOTE,
    "subjects": array({"type": "string", "description": "type:id"}, description="the data subjects (default: the scope's)"),
    "cross_workspace": {"type": "boolean", "description": "propagate into the workspaces they wrote (default true)"},
}  # fmt: skip
PREVIEW = engine_checked(obj(ERASURE, required=("scope",)))
EXECUTE = engine_checked(obj({**ERASURE, "from_preview_id": {"type": "string"},
                              "idempotency_key": {"type": "string", "minLength": 1, "maxLength": 64}},
                             required=("scope",)))  # fmt: skip

DRIFT_SETTING = "erasure.drift_threshold"  # tenant default: events tolerated since the preview
FACTOR_SETTING = "confidence_after_full_redaction_factor"  # tenant default (§11.3 phase 5)


def tenant_setting(call: Call, name: str) -> Any:
    """A tenant default (the tenant's policy document over the preset's), or None."""
    policy = call.state.policy
    return {**policy.preset.defaults, **policy.tenant_doc(call.principal.tenant).defaults}.get(name)


def overrides(call: Call) -> dict[str, Any]:
    threshold, factor = tenant_setting(call, DRIFT_SETTING), tenant_setting(call, FACTOR_SETTING)
    if threshold is not None and (type(threshold) is not int or threshold < 0):
        raise InvalidPolicy(f"the tenant default {DRIFT_SETTING} must be a whole number >= 0",
                            details={"field": DRIFT_SETTING})  # fmt: skip
    if factor is not None and (isinstance(factor, bool) or not isinstance(factor, int | float) or not 0 <= factor <= 1):
        raise InvalidPolicy(f"the tenant default {FACTOR_SETTING} must be a number in [0, 1]",
                            details={"field": FACTOR_SETTING})  # fmt: skip
    return {"drift_threshold": threshold, "redaction_factor": factor}


@api("POST", "/v1/erasures/preview", tier="experimental", rate="write", body=PREVIEW,
     summary="Dry-run a GDPR erasure: refcounts, cross-scope propagation, manifest")
async def erasure_preview(call: Call):
    body = call.json()
    call.primary = cap.FORGET_GDPR
    call.check(cap.FORGET_GDPR, scope_param(body.get("scope")))
    return await call.state.engine.erasures.preview(body, caller=call.principal.actor,
                                                    tenant_id=call.principal.tenant)  # fmt: skip


async def manifest_page(call: Call, manifest_id: str) -> dict[str, Any]:
    args = query_args()
    page = await call.state.engine.erasures.manifest(manifest_id, limit=page_limit(args.get("limit"), 1000),
                                                     cursor=args.get("cursor"))  # fmt: skip
    call.check(cap.FORGET_GDPR, page["scope"])
    return page


@api("GET", "/v1/erasures/preview/{preview_id}/manifest", tier="experimental",
     summary="The full plan of a preview, line by line (expires after 24 h)", query=("limit", "cursor"))
async def erasure_preview_manifest(call: Call, preview_id: str):
    return await manifest_page(call, preview_id)


@api("POST", "/v1/erasures", tier="experimental", rate="write", status=202, body=EXECUTE,
     summary="Execute a GDPR erasure (an asynchronous job)")
async def erasure_execute(call: Call):
    body = call.json()
    scope = scope_param(body.get("scope"))
    call.primary = cap.FORGET_GDPR
    decision = call.check(cap.FORGET_GDPR, scope)
    principal, req = call.principal, current_request()
    version, request = await call.state.audit.request_fields(principal.tenant, method="POST", path=req.path,
                                                             body=call.raw, headers=req.headers)  # fmt: skip
    audit = {"actor": principal.actor, "token_jti": principal.jti, "tenant_id": principal.tenant,
             "decided_by_tier": decision.tier, "request": request, "tenant_pepper_version": version,
             "client_ip": req.remote_addr or None, "user_agent": req.headers.get("User-Agent"),
             "request_id": call.request_id}  # fmt: skip
    key = body.get("idempotency_key")  # a live key: the engine answers the first execute's response
    replay = isinstance(key, str) and await call.state.replays.seen(principal.tenant, principal.actor, "/v1/erasures", key)
    accepted = await call.state.engine.erasures.execute(body, caller=principal.actor, tenant_id=principal.tenant,
                                                        audit=audit, **overrides(call))  # fmt: skip
    if replay:
        call.headers["X-Cortex-Replay"] = "true"
    return json_response(accepted, 202)


async def erasure_status_checked(call: Call, erasure_id: str) -> dict[str, Any]:
    status = await call.state.engine.erasures.status(erasure_id)
    call.check(cap.FORGET_GDPR, status["scope"])
    return status


@api("GET", "/v1/erasures/{erasure_id}", tier="experimental", summary="Status of a GDPR erasure")
async def erasure_status(call: Call, erasure_id: str):
    return await erasure_status_checked(call, erasure_id)


@api("GET", "/v1/erasures/{erasure_id}/manifest", tier="experimental",
     summary="What an erasure deletes and redacts, line by line", query=("limit", "cursor"))
async def erasure_manifest(call: Call, erasure_id: str):
    await erasure_status_checked(call, erasure_id)
    return await manifest_page(call, erasure_id)


@api("POST", "/v1/erasures/{erasure_id}/cancel", tier="experimental", rate="write", body=obj({"audit_note": NOTE}), body_required=False,
     summary="Cancel an erasure at its next phase boundary (best effort)")
async def erasure_cancel(call: Call, erasure_id: str):
    if call.raw.strip():
        call.json()  # only an audit_note may come along
    await erasure_status_checked(call, erasure_id)
    call.primary = cap.FORGET_GDPR
    result = await call.state.engine.erasures.cancel(erasure_id)
    result["cancel_audit_id"] = call.audit_id  # this call's row; ``audit_id`` is the erasure's, once it ends
    return result
