"""``/mcp``: the Model Context Protocol over streamable HTTP, in front of the API's dispatch.

The door, before the ``mcp`` package sees a byte: ``POST`` only (405 otherwise: no server-sent
stream, no sessions to delete), the body at most ``max_body_bytes`` (413), admission (the JSON
content type, the browser origin: ``Gate.admit``) and authentication as for every API route
(401; under ``dev_local`` an unsigned ``X-Cortex-Actor`` as there).  Refusals are the API's error
envelope.  Then the ``mcp`` package's streamable-HTTP transport, stateless and answering JSON
(docs/decisions.md, "MCP"), runs the request; each tool call it makes runs its REST twins through
the pipeline with the request's own credentials (``twin.Caller``).
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from quart import Response

from ...errors import CortexError
from .. import pipeline
from ..call import ServerState
from ..dispatch import DirectRequest
from ..responses import http_error
from .twin import Identity

PATH = "/mcp"
ASGIApp = Callable[..., Awaitable[None]]


class McpMount:
    """The ASGI middleware: ``/mcp`` to the MCP transport (after the door); all else to ``inner``.

    The ``mcp`` package (about 2 s of imports) is loaded, in a worker thread, by the first request
    that passes the door; its transport then runs in the nursery the app's lifespan gave ``serve_in``
    until ``stop``."""

    def __init__(self, inner: ASGIApp, state: ServerState) -> None:
        self.inner = inner
        self.state = state
        self.limit = state.settings.max_body_bytes
        self.nursery: trio.Nursery | None = None
        self.manager: Any = None  # mcp's StreamableHTTPSessionManager, once started
        self.starting = trio.Lock()
        self.stopped = trio.CancelScope()

    def serve_in(self, nursery: trio.Nursery) -> None:
        self.nursery = nursery

    def stop(self) -> None:
        self.stopped.cancel()

    async def transport(self) -> Any:
        """The session manager, started on first use (stateless, JSON answers)."""
        async with self.starting:
            if self.manager is None:
                if self.nursery is None:
                    raise RuntimeError("McpMount.serve_in was not called: the app's lifespan did not start")
                await trio.to_thread.run_sync(importlib.import_module, f"{__package__}.server")
                from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

                from .server import build_server

                server = build_server(self.state, lambda ctx: Identity.from_headers(ctx.request.headers,
                                                                                    ctx.request.client))  # fmt: skip
                manager = StreamableHTTPSessionManager(app=server, stateless=True, json_response=True,
                                                       max_request_body_size=self.limit)  # fmt: skip
                await self.nursery.start(self.run, manager)
                self.manager = manager
        return self.manager

    async def run(self, manager: Any, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Hold the transport's task group open until ``stop``."""
        with self.stopped:
            async with manager.run():
                task_status.started()
                await trio.sleep_forever()

    async def __call__(self, scope: dict[str, Any], receive, send) -> None:
        if scope["type"] != "http" or scope["path"] != PATH:
            await self.inner(scope, receive, send)
            return
        request = DirectRequest(scope, b"")
        body = await self.door(request, receive, send)
        if body is None:
            return
        delivered = False

        async def replay() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        manager = await self.transport()
        await manager.handle_request(scope, replay, send)

    async def door(self, request: DirectRequest, receive, send) -> bytes | None:
        """The body, or None once a refusal is sent."""
        if request.method != "POST":
            refusal = pipeline.outside_routes(http_error(405, request.method, PATH), pipeline.request_id(self.state, request))
            refusal.headers["Allow"] = "POST"
            await reply(refusal, send)
            return None
        try:
            body = await read_body(receive, self.limit, declared(request))
        except ClientGone:
            return None
        if body is None:
            await reply(await pipeline.too_large(self.state), send)
            return None
        try:
            self.state.gate.admit(request.headers, "POST", body, True)
            self.state.verifier.principal(
                request.headers.get("Authorization"), request.headers.get("X-Cortex-Actor"),
                require_signed=bool(self.state.policy.preset.defaults.get("actor.require_signed", True)),
                operators=self.state.policy.operators)  # fmt: skip
        except CortexError as refused:
            await reply(pipeline.outside_routes(refused, pipeline.request_id(self.state, request)), send)
            return None
        return body


class ClientGone(Exception):
    """The client went away before its request body was complete: nothing to answer."""


def declared(request: DirectRequest) -> int:
    length = request.headers.get("Content-Length") or ""
    return int(length) if length.strip().isdigit() else 0


async def read_body(receive, limit: int, length: int) -> bytes | None:
    """The request body, or None past ``limit`` bytes (declared or sent)."""
    if length > limit:
        return None
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def reply(response: Response, send) -> None:
    """Send an envelope response (a data body) on the ASGI channel."""
    headers = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in response.headers.items()]
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": await response.get_data(), "more_body": False})
