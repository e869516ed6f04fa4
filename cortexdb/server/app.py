"""The Quart-Trio application: ``create_app(engine, settings)``, the composition root (DESIGN §8,
reference §6).

It builds the server's services (``ServerState``), installs every family's routes
(``routes.BLUEPRINTS``) — each through the one per-request pipeline (``pipeline.handle``) — and
answers what no route does with the same envelope.  The same declarations feed
``GET /v1/openapi.json``.  The engine must have been opened with
``open_engine(..., policy=RequestPolicyHook())`` so that its own decisions go through the gate.
"""

from __future__ import annotations

import functools
import gc
import logging
import time
from typing import Any

import trio
from quart import Response, request
from quart.globals import request_ctx
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from ..errors import CortexError
from . import pipeline
from .audit import AuditLog
from .auth import Issuer, IssuerConfigError, Revocations, Verifier, load_issuer_dir, load_jwt_keys
from .call import Blueprint, Handler, RequestPolicyHook, Route, ServerState
from .dispatch import DirectDispatch, Router
from .gate import Gate
from .mcp_api.asgi import McpMount
from .observe import RequestLog
from .policy import PolicyEngine, load_preset
from .ratelimit import RateLimiter
from .registry import ScopeRegistry
from .replays import Replays
from .routes import BLUEPRINTS, transfer
from .settings import ServerSettings
from .shared import follow, follows

log = logging.getLogger("cortexdb.server")


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
    return ServerState(
        engine=engine, settings=settings, policy=policy,
        verifier=Verifier(list(issuers.values()), settings.tenant, revocations,
                          lambda: engine.clock.now().timestamp(), leeway=settings.token_leeway),
        revocations=revocations, registry=registry,
        gate=Gate(policy, registry, tenant_admins=settings.tenant_admins,
                  allowed_origins=settings.allowed_origins),
        audit=AuditLog(engine.tables, engine.new_id, engine.clock, preset.defaults, policy.settings),
        limiter=RateLimiter(trio.current_time if _in_trio() else time.monotonic,
                            lambda: engine.clock.now().timestamp()),
        replays=Replays(engine),
    )  # fmt: skip


def _in_trio() -> bool:
    try:
        trio.lowlevel.current_task()
        return True
    except RuntimeError:
        return False


def create_app(engine: Any, settings: ServerSettings | None = None) -> QuartTrio:
    if not isinstance(engine.policy, RequestPolicyHook):
        raise ValueError("create_app needs an engine opened with open_engine(..., policy=RequestPolicyHook()) "
                         f"so that its decisions go through the gate (it has {type(engine.policy).__name__})")  # fmt: skip
    settings = settings or ServerSettings()
    state = build_state(engine, settings)
    transfer.install_guard(state)  # import jobs write each scope as the caller who started them
    app = QuartTrio("cortexdb")
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    app.config["PROVIDE_AUTOMATIC_OPTIONS"] = False
    app.cortex = state  # type: ignore[attr-defined]
    router = Router()
    for blueprint in BLUEPRINTS:
        _install(app, router, state, blueprint)

    @app.errorhandler(HTTPException)
    async def _framework_error(exc: HTTPException) -> Response:
        return pipeline.framework_error(state, exc, request)

    @app.errorhandler(Exception)
    async def _unexpected(exc: Exception) -> Response:
        return pipeline.unexpected(exc, pipeline.request_id(state, request))

    direct = DirectDispatch(app.asgi_app, router, functools.partial(pipeline.direct, state),
                            functools.partial(pipeline.too_large, state), settings.max_body_bytes,
                            settings.upload_limit)  # fmt: skip
    mcp = McpMount(direct, state)  # /mcp: the Model Context Protocol (docs/mcp.md)
    app.asgi_app = RequestLog(mcp) if settings.access_log else mcp  # type: ignore[method-assign]
    engine.observe_stages(state.metrics.observe_stage)
    _lifespan(app, state, mcp)
    return app


def _lifespan(app: QuartTrio, state: ServerState, mcp: McpMount) -> None:
    """Load the server's stores before serving; prune old rows periodically while serving."""
    maintenance = trio.CancelScope()

    @app.before_serving
    async def _load() -> None:
        await load_stores(state)
        # the startup heap (modules, routes, schemas) lives as long as the process: out of the
        # collector's generations, so its passes stop walking it (docs/decisions.md, "Soak memory")
        gc.collect()
        gc.freeze()
        mcp.serve_in(app.nursery)
        app.nursery.start_soon(_maintain)
        if follows(state.engine, state.settings.node_id):  # several nodes: the others' policy and members
            await app.nursery.start(follow, state)

    async def _maintain() -> None:
        with maintenance:
            while True:
                await trio.sleep(state.settings.maintenance_interval)  # periodic timer: prune old rows
                try:
                    await state.revocations.prune(int(state.now_unix()))
                    await state.audit.prune()
                except CortexError as exc:
                    log.warning("maintenance skipped: %s", exc)

    @app.after_serving
    async def _stop() -> None:
        state.closing.set()
        maintenance.cancel()
        mcp.stop()


async def load_stores(state: ServerState) -> None:
    """The server's stores (policy documents, revocations, scope registrations) into memory."""
    await state.policy.load()
    await state.revocations.load()
    await state.registry.load()


def _install(app: QuartTrio, router: Router, state: ServerState, blueprint: Blueprint) -> None:
    """A family's routes: each a Quart view and a direct-dispatch entry, both through the pipeline."""
    for route, handler in blueprint.routes:
        if getattr(handler, "fallback", False) and any((r.method, r.path) == (route.method, route.path)
                                                       for r in state.routes):  # fmt: skip
            continue  # an unbuilt surface some family has built meanwhile
        state.routes.append(route)
        view = _view(state, route, handler)
        app.add_url_rule(_quart_path(route.path), view.__name__, view, methods=[route.method])
        router.add(route, handler)
    for route, serve in blueprint.websockets:
        state.routes.append(route)

        async def ws_view(_serve=serve, _route=route) -> None:
            await _serve(state, _route)

        app.add_websocket(route.path, serve.__name__, ws_view)


def _view(state: ServerState, route: Route, handler: Handler):
    async def view(**params: Any) -> Response:
        return await pipeline.handle(state, route, handler, params, request_ctx.request)

    view.__name__ = f"{route.method.lower()}_{handler.__name__}"
    return view


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


__all__ = ["RequestPolicyHook", "ServerState", "build_state", "create_app", "load_stores"]
