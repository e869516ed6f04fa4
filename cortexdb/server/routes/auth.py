"""Tokens (reference §8.16): revoking one, and who the caller is."""

from __future__ import annotations

from quart import Response

from ...engine.policy import capabilities as cap
from ...errors import InvalidBody, MissingRequiredField, PolicyDenied
from ..auth import MAX_SERVICE_TTL, is_numeric_date
from ..call import Blueprint, Call
from ..declare import STRING, obj

api = Blueprint()


@api("POST", "/v1/auth/revoke", rate="write", status=204, access="tenant", summary="Revoke a token by jti",
     body=obj({"jti": STRING, "exp": {"type": ["number", "null"], "description": "the token's expiry (Unix time)"},
               "reason": {"type": ["string", "null"]}}, required=("jti",)))
async def revoke(call: Call):
    state, body = call.state, call.json()
    jti = body.get("jti")
    if not isinstance(jti, str) or not jti:
        raise MissingRequiredField("jti is required", details={"field": "jti"})
    call.check(cap.AUTH_REVOKE)
    own = call.principal.jti == jti
    if not own and not call.principal.operator:
        raise PolicyDenied("only an operator may revoke another caller's token",
                           details={"capability": cap.AUTH_REVOKE, "denied_by_tier": "deployment"})  # fmt: skip
    latest = state.now_unix() + MAX_SERVICE_TTL + state.settings.token_leeway  # no token outlives it
    exp = body.get("exp")
    if exp is not None and not (is_numeric_date(exp) and exp <= latest):
        raise InvalidBody("exp must be a finite Unix time no later than the longest token lifetime from now",
                          details={"field": "exp", "max": int(latest)})  # fmt: skip
    if own:
        exp = call.principal.claims["exp"]
    if exp is None:
        exp = latest  # unknown expiry: keep it as long as a token can live
    await state.revocations.revoke(jti, int(exp), body.get("reason"))
    return Response(b"", status=204)


@api("GET", "/v1/auth/whoami", access="tenant", summary="The caller's identity and effective capabilities")
async def whoami(call: Call):
    state, p = call.state, call.principal
    effective = state.policy.effective(p, None)
    return {"caller": p.actor, "tenant_id": p.tenant, "deployment_preset": state.policy.preset.name,
            "signed": p.signed, "operator": p.operator,
            "token": ({k: p.claims[k] for k in ("jti", "iss", "exp")} if p.signed else None),
            "effective_capabilities": effective["allowed"],
            "natural_level": state.registry.natural_level(p.actor)}  # fmt: skip
