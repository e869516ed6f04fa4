"""Policy (reference §5.5): the effective capabilities, and each tier's document — read by
whoever may, replaced by the tier's owners (deployment: operators; tenant: its admins; scope:
its owners; actor: itself, the tenant's admins, or a scope's owners within that scope)."""

from __future__ import annotations

from typing import Any

from ...engine.policy import capabilities as cap
from ...engine.scopes import canonical_scope
from ...errors import NotFound
from ..call import Blueprint, Call
from ..declare import array, engine_checked, obj
from ..params import query_args, scope_param
from ..policy import Principal

api = Blueprint()
PATTERNS = array({"type": "string", "description": "a capability, or a pattern such as scope.read.*"})
POLICY_DOC = engine_checked(obj({
    "allow": PATTERNS, "deny": PATTERNS,
    "defaults": {"type": "object", "description": "settings by name, e.g. rate_limit.write"},
    "preset": {"type": "string"}, "operator_only": PATTERNS, "tenant_defaults": {"type": "object"},
    "allowed_scope_types": array({"type": "string"}), "experimental_enabled": {"type": "boolean"},
}, description="a policy document (docs/security.md)"))  # fmt: skip


@api("GET", "/v1/policy/effective", summary="Effective capabilities after stacking the tiers",
     response_schema="capability_set", access="tenant", query=("actor", "scope"))
async def policy_effective(call: Call):
    policy = call.state.policy
    args = query_args()
    scope = scope_param(args["scope"]) if args.get("scope") else None
    principal = call.principal
    actor = args.get("actor") or principal.actor
    if actor != principal.actor:  # someone else's capabilities: those who may edit them
        authorise_actor_policy(call, actor, scope)
        principal = Principal(actor=actor, tenant=principal.tenant, operator=actor in policy.operators)
    result = policy.effective(principal, scope)
    return {"actor": actor, "scope": scope, "deployment_preset": policy.preset.name, **result,
            "natural_level": call.state.registry.natural_level(actor),
            "rate_limits": policy.rate_limits(principal.tenant)}  # fmt: skip


@api("GET", "/v1/policy/deployment", summary="The deployment policy (preset)", access="tenant")
async def policy_deployment(call: Call):
    policy = call.state.policy
    return policy.document("deployment", policy.preset.name)


@api("PUT", "/v1/policy/deployment", tier="experimental", rate="write", access="tenant",
     summary="Change the deployment policy (keys given replace the current ones)", body=POLICY_DOC)
async def policy_deployment_put(call: Call):
    call.check(cap.POLICY_ADMINISTER_DEPLOYMENT)
    policy = call.state.policy
    return await policy.put("deployment", policy.preset.name, call.json(), principal=call.principal)


def authorise_actor_policy(call: Call, actor: str, scope: str | None) -> None:
    """The actor tier's owners (§5.1): the actor itself, the tenant's admins, and — for the
    actor's policy within one scope (``?scope=``) — that scope's owners."""
    call.check(cap.POLICY_ADMINISTER_ACTOR, scope)
    if actor == call.principal.actor or call.state.gate.is_admin(call.principal):
        return
    if scope is None:
        call.deny(cap.POLICY_ADMINISTER_ACTOR, "actor",
                  f"only {actor} itself or a tenant admin may administer its policy; an owner "
                  "of a scope may administer it within that scope (?scope=)")  # fmt: skip
    call.check(cap.POLICY_ADMINISTER_SCOPE, scope)  # owners of that scope only


def tier_routes(tier: str, param: str, converter: Any) -> None:
    """``GET`` and ``PUT /v1/policy/{tier}/{target}`` for the tenant, scope and actor tiers."""
    capability = cap.policy_administer(tier)

    def target_of(call: Call, kw: dict[str, Any]) -> tuple[str, str | None]:
        target = converter(kw[param])
        args = query_args()
        scope = scope_param(args["scope"]) if args.get("scope") else None
        if tier == "tenant":
            call.check(capability)
            call.require_admin(capability, f"only the admins of tenant {target} may administer its policy")
            if target != call.principal.tenant and not call.principal.operator:
                raise NotFound(f"no tenant {target} on this deployment", details={"tenant_id": target})
        elif tier == "scope":
            call.check(capability, target)  # the gate: owners of the scope only
        else:
            authorise_actor_policy(call, target, scope)
        return target, scope

    async def get_doc(call: Call, **kw: Any):
        target, scope = target_of(call, kw)
        return call.state.policy.document(tier, target, scope=scope)

    async def put_doc(call: Call, **kw: Any):
        target, scope = target_of(call, kw)
        return await call.state.policy.put(tier, target, call.json(), principal=call.principal, scope=scope)

    get_doc.__name__ = f"policy_{tier}_get"
    put_doc.__name__ = f"policy_{tier}_put"
    path = f"/v1/policy/{tier}/{{{param}{':path' if tier == 'scope' else ''}}}"
    access = "scope" if tier == "scope" else "tenant"
    query = ("scope",) if tier == "actor" else ()
    api("GET", path, summary=f"Read the {tier} policy", access=access, query=query)(get_doc)
    api("PUT", path, tier="experimental", rate="write", summary=f"Replace the {tier} policy",
        access=access, query=query, body=POLICY_DOC)(put_doc)  # fmt: skip


tier_routes("tenant", "tenant_id", str)
tier_routes("scope", "scope_path", canonical_scope)
tier_routes("actor", "actor_id", str)
