"""Answers (reference §8.4): recall composed with the deployment's LLM, whole or streamed token by
token (§10.2).  A translation onto ``Engine.answer`` / ``Engine.answer_stream``: the same read
checks as recall plus ``llm.invoke``; an idempotency key (the body's, or
``X-Cortex-Idempotency-Key``) replays the first answer (``X-Cortex-Replay: true``)."""

from __future__ import annotations

from ...engine.policy import capabilities as cap
from ...errors import NotFound
from ..call import Blueprint, Call, current_request
from ..declare import engine_checked, obj, properties_of
from .recall import event_stream, read_checks, strip_diagnostics

api = Blueprint()
# recall's fields (what to read) and the answer's own; use_pack_id reuses a pack instead
ANSWER = engine_checked(obj({
    **properties_of("recall_request", without=("query", "stream", "idempotency_key")),
    "question": {"type": "string", "minLength": 1, "maxLength": 8192},
    "answer_model": {"type": ["string", "null"]},
    "answer_max_tokens": {"type": ["integer", "null"], "minimum": 1},
    "use_pack_id": {"type": ["string", "null"], "description": "answer from this earlier pack"},
    "stream": {"type": "boolean", "description": "Server-Sent Events, token by token"},
    "idempotency_key": {"type": ["string", "null"], "minLength": 1, "maxLength": 64},
}, required=("question",)))  # fmt: skip


@api("POST", "/v1/answer", summary="Answer a question from memory: recall + LLM, with citations (stream=true for SSE)",
     response_schema="answer_response", body=ANSWER)  # fmt: skip
async def answer(call: Call):
    body = call.json()
    engine, caller, tenant = call.state.engine, call.principal.actor, call.principal.tenant
    header_key = current_request().headers.get("X-Cortex-Idempotency-Key")
    if header_key and "idempotency_key" not in body:
        body = {**body, "idempotency_key": header_key}
    pack_id = body.get("use_pack_id")
    if isinstance(pack_id, str):  # recall fields are ignored: the pack's scope is the one read
        call.primary = cap.LLM_INVOKE
        try:
            scope = engine.get_pack(pack_id)["scope"]  # the engine checks it is the caller's
        except NotFound:
            scope = None
        if scope is not None:
            body = strip_diagnostics(call, body, scope)
    elif pack_id is None:
        body = read_checks(call, body, llm=True)
        call.primary = cap.LLM_INVOKE
    if body.get("stream") is True:
        return await event_stream(call, engine.answer_stream(body, caller=caller, tenant_id=tenant))
    response = await engine.answer(body, caller=caller, tenant_id=tenant)
    call.summary = {"pack_id": response["pack_id"], "supported": response["supported"],
                    "citations": len(response["citations"])}  # fmt: skip
    if response.get("replayed"):
        call.headers["X-Cortex-Replay"] = "true"
    return response
