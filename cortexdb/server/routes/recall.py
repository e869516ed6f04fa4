"""Recall (reference §8.3): a stratified pack, or its frames as Server-Sent Events (§10.1)."""

from __future__ import annotations

from ...engine.policy import capabilities as cap
from ...engine.scopes import canonical_scope
from ..call import Blueprint, Call
from ..streams import sse_response

api = Blueprint()


@api("POST", "/v1/recall", summary="Recall a stratified pack (stream=true for SSE)",
     request_schema="recall_request", response_schema="stratified_pack")
async def recall(call: Call):
    body = call.json()
    diagnostics = body.get("diagnostics")
    scope = body.get("scope")
    if isinstance(scope, str):
        scope = canonical_scope(scope)
        call.primary = cap.SCOPE_READ_LOCAL
        view = body.get("view") or "holistic"
        traversal_mode = body.get("traversal") or (view if view in ("local", "holistic", "descend") else "holistic")
        call.check(cap.SCOPE_READ_LOCAL, scope)
        if traversal_mode in ("holistic", "descend"):
            call.check(cap.scope_read(traversal_mode), scope)
        if diagnostics in (None, "summary", "full") and not call.allows(cap.DIAGNOSTICS_READ, scope):
            # diagnostics are stripped, not refused, for callers without diagnostics.read
            # (§5.2); an explicit request is told so
            if diagnostics is not None:
                call.headers["X-Cortex-Warning"] = "diagnostics_stripped"
            body = {**body, "diagnostics": "none"}
    engine, caller, tenant = call.state.engine, call.principal.actor, call.principal.tenant
    if body.get("stream") is True:
        stream = engine.recall_stream(body, caller=caller, tenant_id=tenant)
        first = await stream.__anext__()  # validation errors surface as an envelope, not mid-stream

        async def frames():
            yield first
            async for item in stream:
                yield item

        return sse_response(call.state, ((None, name, data) async for name, data in frames()))
    return await engine.recall(body, caller=caller, tenant_id=tenant)
