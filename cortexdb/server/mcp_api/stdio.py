"""``cortexdb mcp``: the Model Context Protocol over stdio, for hosts that start their memory
server as a subprocess (Claude Desktop, IDE agents).

The process embeds the engine (it opens the data directory itself, so it cannot share a LevelDB
directory with a running ``cortexdb serve``: use ``/mcp`` on that server instead) and serves one
configured caller: ``--actor`` with ``--token``, checked as a request's ``X-Cortex-Actor`` and
``Authorization: Bearer`` headers are (signature, issuer, tenant, expiry, revocation).  Without
a token it runs only where the preset lets unsigned callers name themselves (``dev_local``).
Each tool call runs its REST twins through the same pipeline as HTTP requests: the preset and
the stored tenant, scope and actor policies, the token's caps and scopes, scope membership,
rate limits and the audit log all apply.
"""

from __future__ import annotations

import logging

from mcp.server.stdio import stdio_server

from ...engine.engine import open_engine
from ..app import build_state, load_stores
from ..call import RequestPolicyHook, ServerState
from ..serve import config_of
from ..settings import ServerSettings
from .server import build_server
from .twin import Identity

log = logging.getLogger("cortexdb.server.mcp_api")


def identity_of(actor: str, token: str | None) -> Identity:
    headers = {"x-cortex-actor": actor, **({"authorization": f"Bearer {token}"} if token else {})}
    return Identity(headers, user_agent="stdio")


def authenticate(state: ServerState, identity: Identity) -> str:
    """The configured caller, checked now (a bad token fails at start, not at the first call);
    every tool call checks it again, as a request would be (expiry, revocation)."""
    headers = identity.headers
    principal = state.verifier.principal(
        headers.get("authorization"), headers.get("x-cortex-actor"),
        require_signed=bool(state.policy.preset.defaults.get("actor.require_signed", True)),
        operators=state.policy.operators)  # fmt: skip
    return principal.actor


async def run_stdio(settings: ServerSettings, actor: str, token: str | None = None, *,
                    stdin=None, stdout=None) -> None:  # fmt: skip
    """Open the engine, serve MCP on stdin/stdout (or the given anyio text streams) until the
    host closes stdin, then close the engine cleanly."""
    path = settings.store_location()
    async with open_engine(settings.backend, path, config=config_of(settings),
                           policy=RequestPolicyHook()) as engine:  # fmt: skip
        state = build_state(engine, settings)
        await load_stores(state)
        identity = identity_of(actor, token)
        caller = authenticate(state, identity)
        server = build_server(state, lambda ctx: identity)
        log.info("CortexDB MCP on stdio as %s (preset %s, %s backend%s)", caller, state.policy.preset.name,
                 settings.backend, f" at {path}" if settings.backend == "leveldb" else "")  # fmt: skip
        async with stdio_server(stdin, stdout) as (read, write):
            await server.run(read, write, server.create_initialization_options())
    log.info("CortexDB MCP stopped cleanly")
