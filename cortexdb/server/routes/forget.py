"""Selective forget (reference §8.5, §11.1, §11.2): a translation onto ``Engine.forget``.

The engine checks the request, the caller's ``forget.cascade.<mode>`` on the scope (through the
gate: the capability, and the right to write the scope), the idempotency key (the body's, or
``X-Cortex-Idempotency-Key``) and runs the forget; the call's one audit row carries the counts
(``summary``) and the response cites it (``audit_id``)."""

from __future__ import annotations

from ...engine.policy import capabilities as cap
from ..call import Blueprint, Call, current_request

api = Blueprint()

CAPABILITY = {"derived_only": cap.FORGET_CASCADE_DERIVED_ONLY, "redact_events": cap.FORGET_CASCADE_REDACT_EVENTS}


@api("POST", "/v1/forget", rate="write", summary="Forget records of the named layers (selective forget)",
     body="forget_request")
async def forget(call: Call):
    body = call.json()
    header_key = current_request().headers.get("X-Cortex-Idempotency-Key")
    if header_key and "idempotency_key" not in body:
        body = {**body, "idempotency_key": header_key}
    if body.get("cascade") is None:  # the deployment's default (§5.3 ``forget.cascade.default``)
        body = {**body, "cascade": call.state.policy.preset.defaults.get("forget.cascade.default", "derived_only")}
    cascade = body["cascade"]  # not a string: the engine refuses it (422)
    call.primary = CAPABILITY.get(cascade, cap.FORGET_CASCADE_DERIVED_ONLY) if isinstance(cascade, str) else \
        cap.FORGET_CASCADE_DERIVED_ONLY  # fmt: skip
    result = await call.state.engine.forget(body, caller=call.principal.actor, tenant_id=call.principal.tenant,
                                            audit_id=call.audit_id)  # fmt: skip
    call.summary = {"deleted": result["deleted"], "cascade": body["cascade"],
                    "replay_of": result["audit_id"] if result["audit_id"] != call.audit_id else None}  # fmt: skip
    if isinstance(body.get("audit_note"), str):
        call.summary["audit_note"] = body["audit_note"][:500]
    if call.summary["replay_of"]:
        call.headers["X-Cortex-Replay"] = "true"
    return result
