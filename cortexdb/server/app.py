"""The Quart-Trio application: ``create_app(engine, settings)`` (DESIGN §8, reference §6).

Every route is declared with ``@api(method, path, tier=..., rate=...)``, which does the common
work in one place: request id, stability headers and the experimental gate, authentication
(§4.3), per-actor rate limits (§6.5), the policy context the engine's hook reads, the audit row
of every policy-gated call (§14), and the error envelope for every failure.  The same
declarations feed ``GET /v1/openapi.json``.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio
from quart import Response, request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from ..engine import jsoncodec
from ..engine.policy.hook import ALLOWED, Verdict
from ..engine.scopes import canonical_scope
from ..errors import (
    CortexError,
    ExperimentalDisabled,
    HttpError,
    Internal,
    InvalidBody,
    PolicyDenied,
    RateLimited,
)
from .audit import AuditLog
from .auth import (
    Issuer,
    IssuerConfigError,
    Revocations,
    Verifier,
    load_issuer_dir,
    load_jwt_keys,
)
from .dispatch import DirectDispatch, Router
from .gate import Gate
from .policy import Decision, PolicyEngine, Principal, load_preset
from .ratelimit import RateLimiter
from .registry import ScopeRegistry
from .settings import ServerSettings

log = logging.getLogger("cortexdb.server")

STABILITY = ("stable", "beta", "experimental")
EXPERIMENTAL_NOTICE = "https://docs.cortexdb.ai/stability#experimental"
HTTP_CODES = {
    400: ("INVALID_BODY", "the request could not be read"),
    404: ("NOT_FOUND", "no such route"),
    405: ("METHOD_NOT_ALLOWED", "this route does not accept that method"),
    413: ("PAYLOAD_TOO_LARGE", "the request body is larger than the server accepts"),
    415: ("UNSUPPORTED_MEDIA_TYPE", "send application/json"),
}




@attrs.define
class Route:
    method: str
    path: str
    tier: str
    rate: str | None  # "read" | "write" | None (not rate limited)
    summary: str
    open: bool  # no authentication (version, openapi)
    request_schema: str | None = None
    response_schema: str | None = None
    status: int = 200
    stream: bool = False
    # what the route touches, for the gate's guard: "scope" (it must check the caller's right on
    # a scope before answering), "filtered" (it filters items one by one), "tenant" (no scope),
    # "open" (no authentication)
    access: str = "scope"
    json_body: bool = True  # a body, when sent, must be application/json


class Call:
    """One request as the handlers see it."""

    def __init__(self, state: ServerState, route: Route, principal: Principal | None,
                 request_id: str, raw: bytes) -> None:  # fmt: skip
        self.state = state
        self.route = route
        self.principal = principal
        self.request_id = request_id
        self.raw = raw
        self.decisions: list[tuple[Decision, str | None]] = []
        self.primary: str | None = None
        self.scope: str | None = None
        self.event_id: str | None = None
        self.headers: dict[str, str] = {}
        self._json: Any = None
        self._audit_id: str | None = None

    @property
    def audit_id(self) -> str:
        """The id this call's audit row will carry (responses may cite it, e.g. a cancel)."""
        if self._audit_id is None:
            self._audit_id = self.state.engine.new_id("audit")
        return self._audit_id

    def json(self) -> Any:
        if self._json is None:
            if not self.raw.strip():
                raise InvalidBody("the request body is empty; send a JSON object")
            try:
                self._json = jsoncodec.decode_request(self.raw, max_depth=self.state.settings.max_json_depth)
            except ValueError as exc:
                raise InvalidBody(f"malformed JSON: {exc}") from None
            if not isinstance(self._json, dict):
                raise InvalidBody("the request body must be a JSON object")
        return self._json

    def check(self, capability: str, scope: str | None = None, *, access: str | None = None) -> Decision:
        """Decide through the gate and remember (for the audit row and ``X-Cortex-Policy``);
        raise if denied (``POLICY_DENIED`` or ``NOT_A_MEMBER``)."""
        for decided, where in self.decisions:  # the engine's hook may ask what the handler asked
            if decided.capability == capability and where == scope and decided.allowed and access is None:
                return decided
        decision = self.state.gate.decide(self.principal, capability, scope, access=access)
        self.decisions.append((decision, scope))
        if scope is not None and self.scope is None:
            self.scope = scope
        decision.raise_if_denied(self.state.policy.preset.name, scope)
        return decision

    def deny(self, capability: str, tier: str, reason: str, scope: str | None = None) -> None:
        """Refuse for a reason the tiers' documents do not express (e.g. only a tenant admin may
        edit the tenant policy): recorded and audited like any denial."""
        decision = Decision(False, capability, tier, reason)
        self.decisions.append((decision, scope))
        decision.raise_if_denied(self.state.policy.preset.name, scope)

    def allows(self, capability: str, scope: str | None = None) -> bool:
        """The gate's answer without recording it: for filtering items, never for the answer."""
        return self.state.gate.decide(self.principal, capability, scope).allowed

    def checked_a_scope(self) -> bool:
        return any(where is not None for _, where in self.decisions)

    def governing(self) -> Decision | None:
        for decision, _ in self.decisions:
            if not decision.allowed:
                return decision
        if self.primary:
            for decision, _ in self.decisions:
                if decision.capability == self.primary:
                    return decision
        return self.decisions[0][0] if self.decisions else None


_current: contextvars.ContextVar[Call | None] = contextvars.ContextVar("cortex_call", default=None)
_request: contextvars.ContextVar[Any] = contextvars.ContextVar("cortex_request", default=None)


def current_request() -> Any:
    """The request being handled: Quart's, or the direct dispatcher's (``dispatch.DirectRequest``)."""
    req = _request.get()
    return req if req is not None else request


class RequestPolicyHook:
    """The engine's policy hook under the server: decisions go through the current call's gate,
    so the token's caps and the scope's members narrow them and they are audited.  Engine-internal
    work outside a request (derivation, consolidation) is not a caller decision and passes."""

    def check(self, caller: str, capability: str, scope: str) -> None:
        call = _current.get()
        if call is None or call.principal is None:
            return None
        call.check(capability, scope)

    def verdict(self, caller: str, capability: str, scope: str) -> Verdict:
        call = _current.get()
        if call is None or call.principal is None:
            return ALLOWED
        decision = call.state.gate.decide(call.principal, capability, scope)
        return ALLOWED if decision.allowed else Verdict(False, decision.tier, decision.reason)


@attrs.define
class ServerState:
    engine: Any
    settings: ServerSettings
    policy: PolicyEngine
    verifier: Verifier
    revocations: Revocations
    registry: ScopeRegistry
    gate: Gate
    audit: AuditLog
    limiter: RateLimiter
    routes: list[Route] = attrs.field(factory=list)
    closing: trio.Event = attrs.field(factory=trio.Event)
    started: float = attrs.field(factory=time.time)
    counters: dict[str, int] = attrs.field(factory=dict)
    latency_ms: dict[str, float] = attrs.field(factory=dict)
    open_streams: int = 0

    def now_unix(self) -> float:
        return self.engine.clock.now().timestamp()

    def count(self, name: str, by: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + by


def build_state(engine: Any, settings: ServerSettings) -> ServerState:
    preset = load_preset(settings.preset)
    policy = PolicyEngine(preset, engine.tables.policy_docs, operators=settings.operators)
    issuers: dict[str, Issuer] = {}
    for directory in settings.issuer_dirs:
        try:
            issuer = load_issuer_dir(directory)
        except (OSError, ValueError, KeyError) as exc:  # missing files, bad JSON, bad key
            raise IssuerConfigError(
                f"--issuer-keys {directory}: not a `cortexdb token keygen` directory ({exc})",
                details={"issuer_dir": str(directory)}) from None  # fmt: skip
        issuers.setdefault(issuer.iss, Issuer(issuer.iss)).paseto.extend(issuer.paseto)
    for iss, path in settings.jwt_issuers:
        try:
            keys = load_jwt_keys(path)
        except (IssuerConfigError, OSError, ValueError, KeyError, TypeError) as exc:
            extra = exc.details if isinstance(exc, IssuerConfigError) else {}  # e.g. the key's kid
            raise IssuerConfigError(f"--jwt-issuer {iss}: cannot load {path} ({exc})",
                                    details={**extra, "iss": iss, "path": str(path)}) from None  # fmt: skip
        issuers.setdefault(iss, Issuer(iss)).jwt.extend(keys)
    revocations = Revocations(engine.tables.revoked)
    registry = ScopeRegistry(engine, policy)
    state = ServerState(
        engine=engine, settings=settings, policy=policy,
        verifier=Verifier(list(issuers.values()), settings.tenant, revocations,
                          lambda: engine.clock.now().timestamp(), leeway=settings.token_leeway),
        revocations=revocations, registry=registry,
        gate=Gate(policy, registry, tenant_admins=settings.tenant_admins,
                  allowed_origins=settings.allowed_origins),
        audit=AuditLog(engine.tables, engine.new_id, engine.clock, preset.defaults),
        limiter=RateLimiter(trio.current_time if _in_trio() else time.monotonic,
                            lambda: engine.clock.now().timestamp()),
    )  # fmt: skip
    return state


def _in_trio() -> bool:
    try:
        trio.lowlevel.current_task()
        return True
    except RuntimeError:
        return False


def envelope_response(error: CortexError, request_id: str) -> Response:
    body = error.to_envelope(request_id)
    response = Response(jsoncodec.encode(body), status=error.http_status,
                        content_type="application/json; charset=utf-8")  # fmt: skip
    if isinstance(error, RateLimited):
        response.headers["Retry-After"] = str(error.details.get("retry_after", 1))
    return response


def json_response(data: Any, status: int = 200) -> Response:
    return Response(jsoncodec.encode(data), status=status, content_type="application/json; charset=utf-8")


def _request_id(state: ServerState, req: Any = None) -> str:
    headers = (req if req is not None else request).headers
    given = headers.get("X-Cortex-Request-ID") or headers.get("X-Request-ID")
    if given and len(given) <= 200 and given.isprintable():
        return given
    return state.engine.new_id("req")


def create_app(engine: Any, settings: ServerSettings | None = None) -> QuartTrio:
    settings = settings or ServerSettings()
    state = build_state(engine, settings)
    engine.use_policy(RequestPolicyHook())
    app = QuartTrio("cortexdb")
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    app.config["PROVIDE_AUTOMATIC_OPTIONS"] = False
    app.cortex = state  # type: ignore[attr-defined]
    maintenance = trio.CancelScope()
    router = Router()

    @app.before_serving
    async def _load() -> None:
        await state.policy.load()
        await state.revocations.load()
        await state.registry.load()
        app.nursery.start_soon(_maintain)

    async def _maintain() -> None:
        with maintenance:
            while True:
                await trio.sleep(settings.maintenance_interval)  # periodic timer: prune old rows
                try:
                    await state.revocations.prune(int(state.now_unix()))
                    await state.audit.prune()
                except CortexError as exc:
                    log.warning("maintenance skipped: %s", exc)

    @app.after_serving
    async def _stop() -> None:
        state.closing.set()
        maintenance.cancel()

    def api(method: str, path: str, *, tier: str = "stable", rate: str | None = "read",
            summary: str = "", open: bool = False, request_schema: str | None = None,
            response_schema: str | None = None, status: int = 200, stream: bool = False,
            access: str = "scope"):  # fmt: skip
        route = Route(method, path, tier, rate, summary, open, request_schema, response_schema,
                      status, stream, "open" if open else access)  # fmt: skip
        state.routes.append(route)

        def register(handler: Callable[..., Awaitable[Any]]):
            async def view(**params: Any) -> Response:
                return await _handle(route, handler, params, request._get_current_object())

            view.__name__ = f"{method.lower()}_{handler.__name__}"
            app.add_url_rule(_quart_path(path), view.__name__, view, methods=[method])
            router.add(route, handler)
            return handler

        return register

    async def _handle(route: Route, handler, params: dict[str, Any], req: Any) -> Response:
        started = time.perf_counter()
        request_id = _request_id(state, req)
        call: Call | None = None
        raw = b""
        token = None
        request_token = _request.set(req)
        try:
            if route.tier == "experimental" and not (
                state.policy.preset.experimental_enabled or settings.enable_experimental
            ):
                raise ExperimentalDisabled(
                    f"{route.method} {route.path} is experimental: start the server with "
                    "CORTEX_ENABLE_EXPERIMENTAL=1 to use it on this deployment",
                    details={"endpoint": f"{route.method} {route.path}"})  # fmt: skip
            raw = await req.get_data(cache=False)
            state.gate.admit(req.headers, route.method, raw, route.json_body)
            principal = None
            if not route.open:
                principal = state.verifier.principal(
                    req.headers.get("Authorization"), req.headers.get("X-Cortex-Actor"),
                    require_signed=bool(state.policy.preset.defaults.get("actor.require_signed", True)),
                    operators=state.policy.operators)  # fmt: skip
            call = Call(state, route, principal, request_id, raw)
            if principal is not None and route.rate is not None:
                limits = state.policy.rate_limits(principal.tenant)
                if route.rate in limits:
                    verdict = state.limiter.take(principal.actor, route.rate, limits[route.rate])
                    call.headers.update({"X-RateLimit-Limit": str(verdict.limit),
                                         "X-RateLimit-Remaining": str(verdict.remaining),
                                         "X-RateLimit-Reset": str(verdict.reset)})  # fmt: skip
                    if not verdict.allowed:
                        raise RateLimited(f"rate limit of {limits[route.rate]} for {route.rate}s exhausted",
                                          details={"retry_after": verdict.retry_after, "limit": limits[route.rate]})  # fmt: skip
            token = _current.set(call)
            result = await handler(call, **params)
            if route.access == "scope" and not call.checked_a_scope():
                # fail closed: a route that touches a scope answered without asking the gate
                log.error("%s %s answered without checking a scope; refused", route.method, route.path)
                raise Internal("this route did not check the caller's access; the answer is withheld")
            response = result if isinstance(result, Response) else json_response(result, route.status)
        except CortexError as exc:
            response = envelope_response(exc, request_id)
            _note_denial(call, exc)
        except HTTPException as exc:
            response = envelope_response(_http_error(exc), request_id)
        except BaseExceptionGroup as group:  # noqa: F821 - a single wrapped CortexError
            inner = _single(group)
            if inner is None:
                raise
            response = envelope_response(inner, request_id)
            _note_denial(call, inner)
        finally:
            if token is not None:
                _current.reset(token)
            _request.reset(request_token)
        if call is not None:
            for name, value in call.headers.items():
                response.headers[name] = value
            decision = call.governing()
            if decision is not None:
                response.headers["X-Cortex-Policy"] = decision.header()
                try:
                    await state.audit.record(
                        principal=call.principal, scope=call.scope, endpoint=f"{route.method} {route.path}",
                        method=route.method, path=req.path, capability=decision.capability,
                        decision="allow" if decision.allowed else "deny", tier=decision.tier,
                        body=raw, headers=req.headers, status=response.status_code,
                        request_id=request_id, elapsed_ms=(time.perf_counter() - started) * 1000,
                        client_ip=(req.remote_addr or None), user_agent=req.headers.get("User-Agent"),
                        event_id=call.event_id, audit_id=call.audit_id)  # fmt: skip
                except CortexError as exc:  # the store is closing; the call itself is answered
                    log.warning("audit row not written: %s", exc.error_code)
        response.headers["X-Cortex-Request-ID"] = request_id
        response.headers["X-Cortex-Stability"] = route.tier
        if route.tier == "experimental":
            response.headers["X-Cortex-Experimental-Notice"] = EXPERIMENTAL_NOTICE
        state.count(f"{route.method} {route.path} {response.status_code}")
        return response

    def _outside_routes(error: CortexError, request_id: str) -> Response:
        """The envelope of a failure no route answered (framework errors, crashes, 413s)."""
        response = envelope_response(error, request_id)
        response.headers["X-Cortex-Request-ID"] = request_id
        response.headers["X-Cortex-Stability"] = "stable"
        return response

    @app.errorhandler(HTTPException)
    async def _framework_error(exc: HTTPException) -> Response:
        response = _outside_routes(_http_error(exc), _request_id(state))
        allowed = getattr(exc, "valid_methods", None)
        if exc.code == 405 and allowed:  # RFC 9110 §15.5.6: a 405 names the methods that work
            response.headers["Allow"] = ", ".join(sorted(set(allowed)))
        return response

    def _unexpected_response(exc: BaseException, request_id: str) -> Response:
        inner = _single(exc) if isinstance(exc, BaseExceptionGroup) else None  # noqa: F821
        if inner is None:
            log.error("unexpected error (request %s)", request_id, exc_info=exc)
            inner = CortexError("unexpected server error; the request id identifies it in the log",
                                retriable=True)  # fmt: skip
        return _outside_routes(inner, request_id)

    @app.errorhandler(Exception)
    async def _unexpected(exc: Exception) -> Response:
        return _unexpected_response(exc, _request_id(state))

    async def _direct(route: Route, handler, params: dict[str, Any], req: Any) -> Response:
        try:
            return await _handle(route, handler, params, req)
        except Exception as exc:
            return _unexpected_response(exc, _request_id(state, req))

    async def _too_large() -> Response:
        code, message = HTTP_CODES[413]
        return _outside_routes(HttpError(413, code, message, retriable=False), state.engine.new_id("req"))

    from . import routes, streams

    routes.install(api, state)
    streams.install(app, api, state)
    app.asgi_app = DirectDispatch(app.asgi_app, router, _direct, _too_large, settings.max_body_bytes)  # type: ignore[method-assign]
    return app


def _note_denial(call: Call | None, exc: CortexError) -> None:
    """A denial raised outside ``call.check`` (registry, engine) still governs the audit row."""
    capability, tier = exc.details.get("capability"), exc.details.get("denied_by_tier")
    if call is None or not capability or not tier:
        return
    if not any(not d.allowed and d.capability == capability for d, _ in call.decisions):
        call.decisions.insert(0, (Decision(False, capability, tier, exc.message), exc.details.get("scope")))


def _single(group: BaseException) -> CortexError | None:
    while isinstance(group, BaseExceptionGroup) and len(group.exceptions) == 1:  # noqa: F821
        group = group.exceptions[0]
    return group if isinstance(group, CortexError) else None


def _http_error(exc: HTTPException) -> CortexError:
    code, message = HTTP_CODES.get(exc.code or 500, ("INTERNAL", "unexpected server error"))
    if exc.code == 405:
        message = f"{request.method} is not allowed on {request.path}"
    elif exc.code == 404:
        message = f"no route {request.method} {request.path}"
    return HttpError(exc.code or 500, code, message, retriable=False)


def _quart_path(path: str) -> str:
    """``/v1/events/{event_id}`` → ``/v1/events/<event_id>``; ``{x:path}`` keeps slashes."""
    out = []
    for part in path.split("/"):
        if part.startswith("{") and part.endswith("}"):
            name, _, kind = part[1:-1].partition(":")
            out.append(f"<{kind}:{name}>" if kind else f"<{name}>")
        else:
            out.append(part)
    return "/".join(out)


def scope_param(value: Any, field: str = "scope") -> str:
    if not isinstance(value, str) or not value:
        raise InvalidBody(f"{field} is required", details={"field": field})
    return canonical_scope(value)


__all__ = ["Call", "ServerState", "create_app", "json_response", "PolicyDenied"]
