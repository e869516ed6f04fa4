"""Direct dispatch of the API routes, in front of Quart (an ASGI middleware on ``app.asgi_app``).

Every declared route runs through ``pipeline.handle`` (auth, rate limit, policy, audit,
envelope) whichever way it arrives; this layer only skips Quart's per-request machinery — request
and app contexts, werkzeug routing, signals — which costs about 0.45 ms a request on this machine
(a Quart-Trio hello world serves 799 requests/s where the bare server serves 1,250; decisions.md,
"The HTTP layer").  Requests it does not match (unknown paths, wrong methods, HEAD, the SSE
lifecycle stream, the WebSocket feed) go on to Quart unchanged, so Quart still answers them, its
error handlers included.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl

import trio
from quart.wrappers.response import DataBody
from werkzeug.datastructures import MultiDict

from ..errors import InvalidBody, PayloadTooLarge

log = logging.getLogger("cortexdb.server")

Handle = Callable[..., Awaitable[Any]]  # (route, handler, params, request) -> quart Response
TooLarge = Callable[..., Awaitable[Any]]  # (client address) -> the 413 envelope response


class DirectHeaders:
    """Request headers with the two lookups the handlers and the audit use: case-insensitive
    ``get`` (first value) and ``items()`` in arrival order."""

    __slots__ = ("_items", "_first")

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        self._items = tuple((name.decode("latin-1"), value.decode("latin-1")) for name, value in raw)
        self._first: dict[str, str] = {}
        for name, value in self._items:
            self._first.setdefault(name.lower(), value)

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._first.get(name.lower(), default)

    def items(self) -> tuple[tuple[str, str], ...]:
        return self._items


class DirectRequest:
    """What ``pipeline.handle`` and the handlers read of a request (the subset of Quart's request
    they use); an upload route's body is not read ahead: its handler reads ``chunks()``."""

    __slots__ = ("method", "path", "headers", "args", "remote_addr", "_body", "_receive", "_limit")

    def __init__(self, scope: dict[str, Any], body: bytes, receive: Any = None, limit: int = 0) -> None:
        self.method: str = scope["method"]
        self.path: str = scope["path"]
        self.headers = DirectHeaders(scope["headers"])
        query = scope.get("query_string") or b""
        self.args = MultiDict(parse_qsl(query.decode("latin-1"), keep_blank_values=True)) if query else MultiDict()
        client = scope.get("client")
        self.remote_addr: str | None = client[0] if client else None
        self._body = body
        self._receive = receive
        self._limit = limit

    async def get_data(self, cache: bool = False) -> bytes:
        return self._body

    async def chunks(self) -> AsyncIterator[bytes]:
        """An upload's body as it arrives; 413 beyond the upload limit, 400 if the client goes
        away before the end (so a cut-off upload is never stored)."""
        size, receive = 0, self._receive
        while receive is not None:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise InvalidBody("the request body ended before it was complete (the client went away)")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self._limit:
                raise PayloadTooLarge("request body", self._limit, size,
                                      message=f"the request body is larger than {self._limit} bytes, the most an upload may send")  # fmt: skip
            if chunk:
                yield chunk
            if not message.get("more_body", False):
                return


class Router:
    """``(method, path)`` → ``(route, handler, params)`` for the routes registered with ``@api``."""

    def __init__(self) -> None:
        self.exact: dict[tuple[str, str], tuple[Any, Any]] = {}
        self.patterns: list[tuple[str, re.Pattern[str], Any, Any]] = []

    def add(self, route: Any, handler: Any) -> None:
        if route.stream:  # long-lived streams stay with Quart (disconnects, request context)
            return
        if "{" not in route.path:
            self.exact[(route.method, route.path)] = (route, handler)
            return
        parts = []
        for part in route.path.split("/"):
            if part.startswith("{") and part.endswith("}"):
                name, _, kind = part[1:-1].partition(":")
                parts.append(f"(?P<{name}>.+)" if kind == "path" else f"(?P<{name}>[^/]+)")
            else:
                parts.append(re.escape(part))
        self.patterns.append((route.method, re.compile("/".join(parts) + r"\Z"), route, handler))

    def match(self, method: str, path: str) -> tuple[Any, Any, dict[str, str]] | None:
        found = self.exact.get((method, path))
        if found is not None:
            return found[0], found[1], {}
        for route_method, pattern, route, handler in self.patterns:
            if route_method == method:
                matched = pattern.match(path)
                if matched:
                    return route, handler, matched.groupdict()
        return None


class DirectDispatch:
    """The ASGI middleware: matched API requests go to ``handle``; everything else to ``inner``."""

    def __init__(self, inner: Callable[..., Awaitable[None]], router: Router, handle: Handle,
                 too_large: TooLarge, max_body: int, max_upload: int | Callable[[str], int] = 0) -> None:  # fmt: skip
        self.inner = inner
        self.router = router
        self.handle = handle
        self.too_large = too_large
        self.max_body = max_body
        # upload routes (their handler reads the body): a limit, or the limit of a path
        self.upload_limit = max_upload if callable(max_upload) else (lambda path, n=max_upload or max_body: n)

    async def __call__(self, scope: dict[str, Any], receive, send) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        matched = self.router.match(scope["method"], scope["path"])
        if matched is None:
            await self.inner(scope, receive, send)
            return
        route, handler, params = matched
        if route.upload:
            limit = self.upload_limit(scope["path"])
            if _declared_length(scope) > limit:
                await _send(await self.too_large(scope.get("client")), receive, send)
                return
            request = DirectRequest(scope, b"", receive, limit)
            await _send(await self.handle(route, handler, params, request), receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                await _send(await self.too_large(scope.get("client")), receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        request = DirectRequest(scope, chunks[0] if len(chunks) == 1 else b"".join(chunks))
        response = await self.handle(route, handler, params, request)
        await _send(response, receive, send)


def _declared_length(scope: dict[str, Any]) -> int:
    for name, value in scope["headers"]:
        if name.lower() == b"content-length" and value.strip().isdigit():
            return int(value)
    return 0


async def _send(response: Any, receive, send) -> None:
    """Write a Quart ``Response``: a data body in one message; a streamed body chunk by chunk
    while a watcher ends it if the client goes away."""
    headers = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in response.headers.items()]
    body = response.response
    if isinstance(body, DataBody):
        data = body.data  # Quart set Content-Length already
        await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
        await send({"type": "http.response.body", "body": data, "more_body": False})
        return
    async with trio.open_nursery() as nursery:

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            nursery.cancel_scope.cancel()

        nursery.start_soon(watch)
        await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
        async with body as chunks:
            async for chunk in chunks:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        nursery.cancel_scope.cancel()
