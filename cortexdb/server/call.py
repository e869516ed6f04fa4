"""What a handler is given: its ``Route``, the ``Call`` (one request: who, what was decided), and
the ``ServerState`` (the server's services) the call carries.

Routes are declared per endpoint family in a ``Blueprint`` (``routes/``); ``create_app``
installs them.  Every capability decision of a call goes through ``Call.check`` — the gate's
answer, remembered for the audit row and ``X-Cortex-Policy`` — and so do the engine's own
decisions: ``RequestPolicyHook`` (given to ``open_engine(policy=...)``) reads the current call
from a context variable the pipeline sets around the handler.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import attrs
import trio
from quart import request

from ..engine import jsoncodec
from ..engine.model.fields import shape_at, unknown_field
from ..engine.policy.hook import ALLOWED, Verdict
from ..errors import InvalidBody, UnknownField
from .audit import AuditLog
from .auth import Revocations, Verifier
from .declare import shape_of
from .frames import FrameCache
from .gate import Gate
from .observe import Metrics
from .pacing import Pacer
from .policy import Decision, PolicyEngine, Principal
from .ratelimit import RateLimiter
from .registry import ScopeRegistry
from .replays import Replays
from .settings import ServerSettings


@attrs.define
class Route:
    method: str
    path: str
    tier: str
    rate: str | None  # "read" | "write" | None (not rate limited)
    summary: str
    open: bool  # no authentication (version, openapi)
    request_schema: str | dict[str, Any] | None = None  # the JSON body's schema (``Blueprint(body=)``)
    response_schema: str | None = None
    status: int = 200
    stream: bool = False
    # what the route touches, for the gate's guard: "scope" (it must check the caller's right on
    # a scope before answering), "filtered" (it filters items one by one), "tenant" (no scope),
    # "open" (no authentication)
    access: str = "scope"
    json_body: bool = True  # a body, when sent, must be application/json
    # the handler reads the body as it arrives (``current_request().chunks()``), up to
    # ``ServerSettings.upload_limit(path)`` instead of ``max_body_bytes``: blob uploads, imports
    upload: bool = False
    # the fields its JSON body may carry, at every depth (``model.fields``): ``Call.json`` refuses
    # any other with 422 ``UNKNOWN_FIELD``; None: the engine's validator checks the body
    fields: Any = None
    # the query parameters it takes (``params.QUERY`` names; the pipeline refuses any other) and
    # those of them it requires
    query: tuple[str, ...] = ()
    required_query: tuple[str, ...] = ()
    body_required: bool = True  # when it has a body (``request_schema``): whether one must be sent


Handler = Callable[..., Awaitable[Any]]  # (call, **path params) -> JSON data or a Response
WebSocketHandler = Callable[["ServerState", Route], Awaitable[None]]  # serves one connection


class Blueprint:
    """The routes of one endpoint family, declared where their handlers are and installed, in
    declaration order, by ``create_app`` (the order is the OpenAPI document's)."""

    def __init__(self) -> None:
        self.routes: list[tuple[Route, Handler]] = []
        self.websockets: list[tuple[Route, WebSocketHandler]] = []

    def __call__(self, method: str, path: str, *, tier: str = "stable", rate: str | None = "read",
                 summary: str = "", open: bool = False, body: str | dict[str, Any] | None = None,
                 body_required: bool = True, query: tuple[str, ...] = (), response_schema: str | None = None,
                 status: int = 200, stream: bool = False, access: str = "scope", upload: bool = False,
                 fields: Any = None, request_schema: str | dict[str, Any] | None = None) -> Callable[[Handler], Handler]:  # fmt: skip
        """Declare a route.  What it takes is declared here once, and the OpenAPI document
        (``openapi.py``), the pipeline's query check and ``Call.json``'s unknown-field check all
        read it from here:

        - ``body``: its JSON body's schema — the name of a shipped schema (``cortexdb/schemas``)
          or an inline JSON Schema (``declare.obj``); a closed inline schema (``additionalProperties:
          false`` at every depth it names) also gives ``fields``, the unknown-field check.
          ``body_required=False``: the body may be empty.  Every POST and PUT declares one (or
          ``upload=True``); ``tests/test_openapi.py`` fails otherwise.
        - ``query``: the names of the query parameters it takes (``params.QUERY`` gives their
          schema), ``"scope!"`` when required; any other is refused with 400 before the handler.
        """
        schema = body if body is not None else request_schema
        if fields is None and isinstance(schema, dict):
            fields = shape_of(schema)
        names = tuple(n.rstrip("!") for n in query)
        route = Route(method, path, tier, rate, summary, open, request_schema=schema,
                      response_schema=response_schema, status=status, stream=stream,
                      access="open" if open else access, json_body=not upload, upload=upload, fields=fields,
                      query=names, required_query=tuple(n[:-1] for n in query if n.endswith("!")),
                      body_required=body_required)  # fmt: skip

        def register(handler: Handler) -> Handler:
            self.routes.append((route, handler))
            return handler

        return register

    def websocket(self, path: str, *, summary: str, access: str, query: tuple[str, ...] = ()):
        route = Route("GET", path, "stable", None, summary, False, access=access,
                      query=tuple(n.rstrip("!") for n in query))  # fmt: skip

        def register(handler: WebSocketHandler) -> WebSocketHandler:
            self.websockets.append((route, handler))
            return handler

        return register


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
    replays: Replays
    routes: list[Route] = attrs.field(factory=list)
    frames: FrameCache = attrs.field(factory=FrameCache)  # lifecycle frames, encoded once per server
    pacer: Pacer = attrs.field(factory=Pacer)  # the busy lifecycle streams' shared tick
    closing: trio.Event = attrs.field(factory=trio.Event)
    started: float = attrs.field(factory=time.time)
    counters: dict[str, int] = attrs.field(factory=dict)
    metrics: Metrics = attrs.field(factory=Metrics)  # latency histograms (observe.py)
    latency_ms: dict[str, float] = attrs.field(factory=dict)
    open_streams: int = 0

    def now_unix(self) -> float:
        return self.engine.clock.now().timestamp()

    def count(self, name: str, by: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + by


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
        self.summary: dict[str, Any] | None = None  # what the call's audit row reports it did
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
            unknown = unknown_field(self._json, self.route.fields) if self.route.fields is not None else None
            if unknown is not None:
                allowed = shape_at(self.route.fields, unknown)
                raise UnknownField(f"{unknown} is not a field of {self.route.method} {self.route.path}",
                                   details={"field": unknown, "allowed": sorted(allowed) if isinstance(allowed, dict) else []})  # fmt: skip
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

    def require_admin(self, capability: str, reason: str) -> None:
        """Tenant-wide administration: the tenant's admins and the deployment's operators only."""
        if not self.state.gate.is_admin(self.principal):
            self.deny(capability, "tenant", reason)

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


@contextlib.contextmanager
def current(call: Call) -> Iterator[Call]:
    """``call`` is the current call (the engine's hook decides through it) within the block."""
    token = _current.set(call)
    try:
        yield call
    finally:
        _current.reset(token)


@contextlib.contextmanager
def handling(request: Any) -> Iterator[Any]:
    """``request`` is the request being handled (``current_request``) within the block."""
    token = _request.set(request)
    try:
        yield request
    finally:
        _request.reset(token)


def current_call() -> Call:
    """The call being handled (``current``)."""
    call = _current.get()
    if call is None:
        raise RuntimeError("no call is being handled")
    return call


def current_request() -> Any:
    """The request being handled: the direct dispatcher's (``dispatch.DirectRequest``), or
    Quart's for the routes Quart serves (streams)."""
    req = _request.get()
    return req if req is not None else request


class RequestPolicyHook:
    """The engine's policy hook under the server: decisions go through the current call's gate,
    so the token's caps and the scope's members narrow them and they are audited.  Engine-internal
    work outside a request (derivation, consolidation) is not a caller decision and passes.
    Give it to ``open_engine(policy=RequestPolicyHook())``; it exists before the app does."""

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
