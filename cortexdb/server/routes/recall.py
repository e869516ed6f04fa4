"""Recall (reference §8.3): a stratified pack, or its frames as Server-Sent Events (§10.1); a
narrative pack (``view=narrative``, §9.1) needs ``llm.invoke`` and streams as §10.2."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from ...engine.policy import capabilities as cap
from ...engine.scopes import canonical_scope
from ...errors import CortexError
from ..call import Blueprint, Call
from ..streams import sse_response

api = Blueprint()


def read_checks(call: Call, body: dict[str, Any], *, llm: bool) -> dict[str, Any]:
    """The read capabilities a recall-shaped body asks for, checked up front (the engine checks
    them again, through the same gate): ``scope.read.local`` and the traversal's, ``llm.invoke``
    when an LLM is called; diagnostics are stripped, not refused, for callers without
    ``diagnostics.read`` (§5.2; an explicit request is told so).  The body to send on."""
    scope = body.get("scope")
    if not isinstance(scope, str):
        return body  # the engine refuses it (or reuses a pack: use_pack_id)
    scope = canonical_scope(scope)
    call.primary = cap.SCOPE_READ_LOCAL
    view = body.get("view") or "holistic"
    traversal_mode = body.get("traversal") or (view if view in ("local", "holistic", "descend") else "holistic")
    call.check(cap.SCOPE_READ_LOCAL, scope)
    if traversal_mode in ("holistic", "descend"):
        call.check(cap.scope_read(traversal_mode), scope)
    if llm:
        call.check(cap.LLM_INVOKE, scope)
    return strip_diagnostics(call, body, scope)


def strip_diagnostics(call: Call, body: dict[str, Any], scope: str) -> dict[str, Any]:
    diagnostics = body.get("diagnostics")
    if diagnostics in (None, "summary", "full") and not call.allows(cap.DIAGNOSTICS_READ, scope):
        if diagnostics is not None:
            warn(call, ["diagnostics_stripped"])
        body = {**body, "diagnostics": "none"}
    return body


def warn(call: Call, warnings: Any) -> None:
    """Each warning of the answer (the pack's ``warnings``, a stripped request field) is also an
    ``X-Cortex-Warning`` (§18.2 item 17): one header, the codes comma-separated."""
    if not isinstance(warnings, list) or not warnings:
        return
    given = [w for w in call.headers.get("X-Cortex-Warning", "").split(", ") if w]
    call.headers["X-Cortex-Warning"] = ", ".join(dict.fromkeys(given + [str(w) for w in warnings]))


async def event_stream(call: Call, stream: AsyncIterator[tuple[str, Any]]):
    """The SSE response of an engine stream.  Its first event is awaited before answering, so a
    refused or malformed request is an error envelope, never a broken stream; a failure after it
    (the LLM went away mid-answer) is an ``error`` event carrying the envelope, then the end."""
    first = await stream.__anext__()
    if isinstance(first[1], dict):  # the plan: a recall repeated with its key, warnings
        if first[1].get("replay"):
            call.headers["X-Cortex-Replay"] = "true"
        warn(call, first[1].get("warnings"))

    async def frames():
        yield None, *first
        try:
            async for name, data in stream:
                yield None, name, data
        except CortexError as exc:
            yield None, "error", exc.to_envelope(call.request_id)

    return sse_response(call.state, frames())


@api("POST", "/v1/recall", summary="Recall a stratified pack (stream=true for SSE)",
     body="recall_request", response_schema="stratified_pack")
async def recall(call: Call):
    body = read_checks(call, call.json(), llm=call.json().get("view") == "narrative")
    engine, caller, tenant = call.state.engine, call.principal.actor, call.principal.tenant
    if body.get("stream") is True:
        return await event_stream(call, engine.recall_stream(body, caller=caller, tenant_id=tenant))
    pack = await engine.recall(body, caller=caller, tenant_id=tenant)
    if pack.get("replayed"):
        call.headers["X-Cortex-Replay"] = "true"
    warn(call, pack.get("warnings"))
    return pack
