"""The per-request pipeline: every declared route runs through ``handle``, whichever way it
arrives (``dispatch.DirectDispatch`` or a Quart view), in this order:

request id → admission (``Gate.admit``: content type, origin) → authentication (§4.3) → rate
limit (§6.5) → stability (the experimental gate: a caller who is not authenticated hears 401,
not that the surface is off) → the query parameters (only those the route declares) → the handler, with the call current for the engine's policy hook
→ the guard (a route that touches a scope must have asked the gate about one) → the audit row of
every policy-gated call (§14) → the envelope and headers.

Every answer carries the rate-limit headers (§6.5): the caller's bucket, or — for an answer to
no authenticated caller (a 401, an open route, a path no route serves) — the bucket of the
client's address, at the tenant's read rate; an empty one turns the answer into a 429.
Answers no route gives (framework 404/405/413, crashes) get the same envelope here.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from quart import Response
from werkzeug.exceptions import HTTPException

from ..errors import CortexError, ExperimentalDisabled, HttpError, Internal, RateLimited
from .call import Call, Handler, Route, ServerState, current, handling
from .forward import FORWARDED_TO, relay
from .params import check_query
from .policy import Decision, Principal
from .responses import HTTP_CODES, envelope_response, http_error, json_response

log = logging.getLogger("cortexdb.server")

EXPERIMENTAL_NOTICE = "https://docs.cortexdb.ai/stability#experimental"


def request_id(state: ServerState, req: Any) -> str:
    headers = req.headers
    given = headers.get("X-Cortex-Request-ID") or headers.get("X-Request-ID")
    if given and len(given) <= 200 and given.isprintable():
        return given
    return state.engine.new_id("req")


async def handle(state: ServerState, route: Route, handler: Handler, params: dict[str, Any], req: Any) -> Response:
    started = time.perf_counter()
    rid = request_id(state, req)
    call: Call | None = None
    raw = b""
    with handling(req):
        try:
            raw = b"" if route.upload else await req.get_data(cache=False)  # an upload: the handler's
            state.gate.admit(req.headers, route.method, raw, route.json_body)
            call = Call(state, route, authenticate(state, route, req.headers), rid, raw)
            rate_limit(state, call)
            check_stability(state, route)
            check_query(route.query, req.args)  # only the parameters the route declares
            with current(call):
                result = await handler(call, **params)
            guard(call)
            response = result if isinstance(result, Response) else json_response(result, route.status)
        except CortexError as exc:  # a scope another node owns: its answer (forward.py)
            response = await relay(state, route, req, raw, exc) or envelope_response(exc, rid)
            note_denial(call, exc)
        except HTTPException as exc:
            response = envelope_response(http_error(exc.code, req.method, req.path), rid)
        except BaseExceptionGroup as group:  # noqa: F821 - a single wrapped CortexError
            inner = single(group)
            if inner is None:
                raise
            response = envelope_response(inner, rid)
            note_denial(call, inner)
    if call is None or call.principal is None:  # no caller's bucket: the client address's
        response = client_limit(state, response, req.remote_addr, route.rate or "read", rid)
    if call is not None:
        for name, value in call.headers.items():
            response.headers[name] = value
        decision = call.governing()
        if decision is not None and FORWARDED_TO not in response.headers:  # the owner audited it
            response.headers["X-Cortex-Policy"] = decision.header()
            await audit(call, decision, req, body=raw, status=response.status_code, request_id=rid,
                        elapsed_ms=(time.perf_counter() - started) * 1000, event_id=call.event_id,
                        audit_id=call.audit_id, summary=call.summary)  # fmt: skip
    response.headers["X-Cortex-Request-ID"] = rid
    response.headers["X-Cortex-Stability"] = route.tier
    if route.tier == "experimental":
        response.headers["X-Cortex-Experimental-Notice"] = EXPERIMENTAL_NOTICE
    state.count(f"{route.method} {route.path} {response.status_code}")
    state.metrics.observe_request(route.method, route.path, time.perf_counter() - started)
    return response


def check_stability(state: ServerState, route: Route) -> None:
    """Experimental routes answer only where the preset or the operator enabled them."""
    if route.tier == "experimental" and not (
        state.policy.preset.experimental_enabled or state.settings.enable_experimental
    ):
        raise ExperimentalDisabled(
            f"{route.method} {route.path} is experimental: start the server with "
            "CORTEX_ENABLE_EXPERIMENTAL=1 to use it on this deployment",
            details={"endpoint": f"{route.method} {route.path}"})  # fmt: skip


def authenticate(state: ServerState, route: Route, headers: Any) -> Principal | None:
    if route.open:
        return None
    return state.verifier.principal(
        headers.get("Authorization"), headers.get("X-Cortex-Actor"),
        require_signed=bool(state.policy.preset.defaults.get("actor.require_signed", True)),
        operators=state.policy.operators)  # fmt: skip


def rate_limit(state: ServerState, call: Call) -> None:
    """Take one from the caller's bucket for the route's kind (read | write); 429 when empty."""
    route, principal = call.route, call.principal
    if principal is None or route.rate is None:
        return
    limits = state.policy.rate_limits(principal.tenant)
    if route.rate not in limits:
        return
    verdict = state.limiter.take(principal.actor, route.rate, limits[route.rate])
    call.headers.update({"X-RateLimit-Limit": str(verdict.limit), "X-RateLimit-Remaining": str(verdict.remaining),
                         "X-RateLimit-Reset": str(verdict.reset)})  # fmt: skip
    if not verdict.allowed:
        raise RateLimited(f"rate limit of {limits[route.rate]} for {route.rate}s exhausted",
                          details={"retry_after": verdict.retry_after, "limit": limits[route.rate]})  # fmt: skip


def client_limit(state: ServerState, response: Response, address: str | None, kind: str, rid: str) -> Response:
    """The rate-limit headers of an answer to no authenticated caller: one token from the bucket
    of the client's address at the tenant's rate for ``kind`` (read when it has none); an empty
    bucket makes the answer a 429."""
    limits = state.policy.rate_limits(state.settings.tenant)
    rate = limits.get(kind) or limits.get("read")
    if rate is None:
        return response  # this deployment sets no rate limits
    verdict = state.limiter.take(f"client:{address or 'unknown'}", kind, rate)
    if not verdict.allowed:
        response = envelope_response(RateLimited(f"rate limit of {rate} for unauthenticated {kind}s exhausted",
                                                 details={"retry_after": verdict.retry_after, "limit": rate}), rid)  # fmt: skip
    response.headers.update({"X-RateLimit-Limit": str(verdict.limit), "X-RateLimit-Remaining": str(verdict.remaining),
                             "X-RateLimit-Reset": str(verdict.reset)})  # fmt: skip
    return response


def guard(call: Call) -> None:
    """Fail closed: a route that touches a scope answered without asking the gate."""
    route = call.route
    if route.access == "scope" and not call.checked_a_scope():
        log.error("%s %s answered without checking a scope; refused", route.method, route.path)
        raise Internal("this route did not check the caller's access; the answer is withheld")


async def audit(call: Call, decision: Decision, req: Any, *, body: bytes, status: int, request_id: str,
                elapsed_ms: float, event_id: str | None = None, audit_id: str | None = None,
                summary: dict[str, Any] | None = None) -> None:  # fmt: skip
    """The call's audit row (``req`` is the request or WebSocket: path, headers, remote address)."""
    route = call.route
    try:
        await call.state.audit.record(
            principal=call.principal, scope=call.scope, endpoint=f"{route.method} {route.path}",
            method=route.method, path=req.path, capability=decision.capability,
            decision="allow" if decision.allowed else "deny", tier=decision.tier, body=body,
            headers=req.headers, status=status, request_id=request_id, elapsed_ms=elapsed_ms,
            client_ip=(req.remote_addr or None), user_agent=req.headers.get("User-Agent"),
            event_id=event_id, audit_id=audit_id, summary=summary)  # fmt: skip
    except CortexError as exc:  # the store is closing; the call itself is answered
        log.warning("audit row not written: %s", exc.error_code)


def note_denial(call: Call | None, exc: CortexError) -> None:
    """A denial raised outside ``call.check`` (registry, engine) still governs the audit row."""
    capability, tier = exc.details.get("capability"), exc.details.get("denied_by_tier")
    if call is None or not capability or not tier:
        return
    if not any(not d.allowed and d.capability == capability for d, _ in call.decisions):
        call.decisions.insert(0, (Decision(False, capability, tier, exc.message), exc.details.get("scope")))


def single(group: BaseException) -> CortexError | None:
    while isinstance(group, BaseExceptionGroup) and len(group.exceptions) == 1:  # noqa: F821
        group = group.exceptions[0]
    return group if isinstance(group, CortexError) else None


# -- answers no route gives -----------------------------------------------------------------------
def outside_routes(error: CortexError, rid: str, tier: str = "stable") -> Response:
    """The envelope of a failure no route answered (framework errors, crashes, 413s)."""
    response = envelope_response(error, rid)
    response.headers["X-Cortex-Request-ID"] = rid
    response.headers["X-Cortex-Stability"] = tier
    if tier == "experimental":
        response.headers["X-Cortex-Experimental-Notice"] = EXPERIMENTAL_NOTICE
    return response


def family_tier(state: ServerState, path: str) -> str:
    """The tier of the endpoint family a path no route answers falls in (§2.4.4: every response
    carries one): the declared route sharing the most leading segments with it, at least
    ``/v1/<family>``; stable outside every family."""
    parts = path.rstrip("/").split("/")
    best, tier = 2, "stable"
    for route in state.routes:
        shared = 0
        for given, declared in zip(parts, route.path.split("/"), strict=False):
            if given != declared and not (declared.startswith("{") and given):
                break
            shared += 1
        if shared > best:
            best, tier = shared, route.tier
    return tier


def framework_error(state: ServerState, exc: HTTPException, req: Any) -> Response:
    rid = request_id(state, req)
    response = outside_routes(http_error(exc.code, req.method, req.path), rid, family_tier(state, req.path))
    response = client_limit(state, response, req.remote_addr, "read", rid)
    allowed = getattr(exc, "valid_methods", None)
    if exc.code == 405 and allowed:  # RFC 9110 §15.5.6: a 405 names the methods that work
        response.headers["Allow"] = ", ".join(sorted(set(allowed)))
    return response


def unexpected(exc: BaseException, rid: str) -> Response:
    inner = single(exc) if isinstance(exc, BaseExceptionGroup) else None  # noqa: F821
    if inner is None:
        log.error("unexpected error (request %s)", rid, exc_info=exc)
        inner = CortexError("unexpected server error; the request id identifies it in the log",
                            retriable=True)  # fmt: skip
    return outside_routes(inner, rid)


async def direct(state: ServerState, route: Route, handler: Handler, params: dict[str, Any], req: Any) -> Response:
    """``handle`` for ``dispatch.DirectDispatch``, which has no Quart error handlers behind it."""
    try:
        return await handle(state, route, handler, params, req)
    except Exception as exc:
        return unexpected(exc, request_id(state, req))


async def too_large(state: ServerState, client: Any = None) -> Response:
    """The 413 of a body over ``max_body_bytes``, before any route reads it (``client``: the
    ASGI ``(host, port)`` of the caller, whose bucket it is counted in)."""
    code, message = HTTP_CODES[413]
    rid = state.engine.new_id("req")
    response = outside_routes(HttpError(413, code, message, retriable=False), rid)
    return client_limit(state, response, client[0] if client else None, "write", rid)
