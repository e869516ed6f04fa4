"""A lean HTTP/1.1 and WebSocket server for ASGI apps on Trio: httptools parses, wsproto frames.

Why not Hypercorn by default (docs/decisions.md, "The HTTP layer"): on this 2-core machine
Hypercorn's trio worker tops out at about 1,100-1,250 requests/s for an *empty* ASGI response,
because each request crosses several tasks, memory channels and h11 state machines (about 16
task reschedules and 14 protocol sends per request).  The issue's target is 1,000 writes/s with
the whole capture behind each request.  This server keeps one task per connection, parses with
httptools (llhttp, C), buffers the request body (bounded by ``max_body``), and writes each
response head and body with one ``send_all``.  Hypercorn stays available
(``cortexdb serve --http-server hypercorn``).

What it implements: HTTP/1.1 keep-alive and pipelining, ``Connection: close``, HTTP/1.0,
``Expect: 100-continue``, chunked request bodies, chunked streaming responses (SSE), HEAD, the
ASGI lifespan protocol, client-disconnect detection (``http.disconnect`` while a handler waits,
e.g. an SSE stream), WebSocket upgrades (RFC 6455 through wsproto's frame layer), and a graceful
drain on shutdown.  Errors the server itself answers (a malformed request or target, a missing or
repeated ``Host``, an oversize body or head, a head that took too long, too many connections)
are ``Refusal``s; how their body reads is the embedding application's (``error_body``, with
request ids from ``new_request_id``): ``cortexdb serve`` gives the API's error envelope (§6.6).
This package imports nothing from ``cortexdb``.

Limits (``Server`` arguments; docs/decisions.md, "HTTP limits"): ``max_body`` (413),
``max_head`` over every byte of the request line and headers (431), ``head_timeout`` a total
deadline from a request's first byte until its head is complete (408, then close: slowloris),
``keep_alive_timeout`` a total deadline for an idle connection's next request, ``body_timeout``
between two reads of a body, ``max_connections`` (503 to the ones above it), ``max_ws_message``
(WebSocket close 1009).  Bytes are parsed in bounded slices, and while a request is in flight at
most ``pipeline_buffer`` further bytes are read: then the socket is left unread (TCP
backpressure) until the response is done.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

import httptools
import trio

from .exchange import Exchange
from .lifespan import ASGI, Lifespan
from .parsing import Parsing, Request
from .websocket import Closed, WebSocket
from .wire import (
    FAILED_TO_ANSWER,
    MAX_RECV,
    ErrorBody,
    Refusal,
    error_response,
    linger,
    plain_error_body,
    random_request_id,
    socket_address,
    too_many_connections,
)

log = logging.getLogger("cortexdb.server.http")

MAX_HEAD = 64 * 1024  # default: request line + headers; more is refused with 431
MAX_WS_MESSAGE = 1024 * 1024  # default: a larger WebSocket message closes the socket with 1009
_ERROR_SEND_TIMEOUT = 5.0  # a refusal the client does not read is abandoned after this long


class Server:
    def __init__(self, app: Callable[..., Awaitable[None]], *, max_body: int = 16 * 1024 * 1024,
                 max_head: int = MAX_HEAD, head_timeout: float = 10.0, keep_alive_timeout: float = 5.0,
                 body_timeout: float = 30.0, max_connections: int = 1000,
                 max_ws_message: int = MAX_WS_MESSAGE, pipeline_buffer: int = MAX_RECV,
                 graceful_timeout: float = 5.0, new_request_id: Callable[[], str] = random_request_id,
                 error_body: ErrorBody = plain_error_body) -> None:  # fmt: skip
        self.app = app
        self.max_body = max_body
        self.max_head = max_head
        self.head_timeout = head_timeout  # total, from a request's first byte to the end of its head
        self.keep_alive_timeout = keep_alive_timeout  # total, for an idle connection's next request
        self.body_timeout = body_timeout  # between two reads while a body arrives
        self.max_connections = max_connections
        self.max_ws_message = max_ws_message
        self.pipeline_buffer = pipeline_buffer  # bytes read ahead while a request is in flight
        self.graceful_timeout = graceful_timeout
        self.new_request_id = new_request_id  # for the answers to requests refused here
        self.error_body = error_body  # how those answers read
        self.closing = False
        self.connections = 0  # open connections (the ones refused over the cap not counted)
        self.active: set[trio.CancelScope] = set()  # connections serving a request
        self.idle: set[trio.CancelScope] = set()  # connections between requests
        self.lifespan_state: dict[str, Any] = {}
        self.drained = trio.Event()  # set when closing and no request is in flight

    def _finished(self, scope: trio.CancelScope) -> None:
        self.active.discard(scope)
        if self.closing and not self.active:
            self.drained.set()

    # ---------------------------------------------------------------- serving
    async def serve(self, host: str, port: int, *, shutdown_trigger: Callable[[], Awaitable[None]],
                    task_status=trio.TASK_STATUS_IGNORED) -> None:  # fmt: skip
        async with trio.open_nursery() as outer:
            lifespan = await outer.start(self._lifespan)
            listeners = await trio.open_tcp_listeners(port, host=host)
            binds = []
            for listener in listeners:
                address = listener.socket.getsockname()
                shown = f"[{address[0]}]" if ":" in address[0] else address[0]
                binds.append(f"http://{shown}:{address[1]}")
            async with trio.open_nursery() as connections:
                accept = trio.CancelScope()

                async def accept_loop() -> None:
                    with accept:
                        await trio.serve_listeners(self._connection, listeners, handler_nursery=connections)

                connections.start_soon(accept_loop)
                task_status.started(binds)
                await shutdown_trigger()
                self.closing = True
                accept.cancel()
                for listener in listeners:
                    await listener.aclose()
                for scope in list(self.idle):
                    scope.cancel()
                with trio.move_on_after(self.graceful_timeout):
                    if self.active:
                        await self.drained.wait()
                connections.cancel_scope.cancel()
            await lifespan.shutdown()
            outer.cancel_scope.cancel()

    async def _lifespan(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        lifespan = Lifespan(self.app, self.lifespan_state)
        async with trio.open_nursery() as nursery:
            await lifespan.start(nursery)
            task_status.started(lifespan)
            await trio.sleep_forever()

    # ----------------------------------------------------------- connections
    async def _connection(self, stream: trio.SocketStream) -> None:
        try:  # (trio's SocketStream sets TCP_NODELAY itself)
            client = socket_address(stream.socket.getpeername())
            server = socket_address(stream.socket.getsockname())
        except OSError:
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await stream.aclose()
            return
        if self.connections >= self.max_connections:
            await self._refuse(stream)
            return
        self.connections += 1
        parsing = Parsing(self.max_body, self.max_head, self.head_timeout)
        try:
            while not self.closing:
                request, leftover = await self._next_request(stream, parsing)
                if request is None:
                    return
                if request.refused is not None:
                    await self._error(stream, request.refused)
                    return
                try:
                    request.target = httptools.parse_url(request.url or b"/")
                except httptools.HttpParserInvalidURLError:
                    await self._error(stream, Refusal(400, "INVALID_BODY", "the request target is not a URL path"))
                    return
                upgraded = request.upgrade and leftover is not None
                if upgraded and dict(request.headers).get(b"upgrade", b"").lower() == b"websocket":
                    await self._websocket(stream, request, leftover, client, server)
                    return
                scope = trio.CancelScope()
                self.active.add(scope)
                try:
                    with scope:
                        keep = await self._http(stream, parsing, request, client, server)
                finally:
                    self._finished(scope)
                if not keep or scope.cancelled_caught or upgraded:  # other upgrades: served, then closed
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError, Closed, OSError):
            return
        except httptools.HttpParserError as exc:
            try:
                await self._error(stream, Refusal(400, "INVALID_BODY", f"malformed HTTP request: {exc}"))
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
        except Exception:  # one broken connection never takes the server down
            log.exception("HTTP connection from %s failed", client)
        finally:
            self.connections -= 1  # before the close: a client that sees EOF finds the slot free
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await stream.aclose()

    async def _refuse(self, stream: trio.SocketStream) -> None:
        """Over ``max_connections``: a 503, then close (what the client sent is not parsed)."""
        try:
            await self._error(stream, too_many_connections(self.max_connections))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await stream.aclose()

    async def _next_request(self, stream: trio.SocketStream,
                            parsing: Parsing) -> tuple[Request | None, bytes | None]:  # fmt: skip
        """Parse until a whole request (or one refused early) is there; (None, None) when the peer
        closes, idles out, or does not finish a head within ``head_timeout``."""
        idle_deadline = trio.current_time() + self.keep_alive_timeout
        while True:
            if parsing.ready:
                return parsing.ready.popleft(), None
            current = parsing.current
            if current is not None and current.refused is not None:
                return current, None  # refused now, not after reading a body we won't keep
            if parsing.pending:
                leftover = parsing.feed()
                if leftover is not None:
                    if parsing.current is not None:  # headers done, body of the upgrade request pending
                        parsing.on_message_complete()
                    return parsing.ready.popleft(), leftover
                continue
            if parsing.continue_wanted:
                parsing.continue_wanted = False
                await stream.send_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            if current is None:  # between requests: bytes that begin none do not extend the wait
                deadline = idle_deadline
            elif not current.headers_done:
                deadline = current.head_deadline
            else:
                deadline = trio.current_time() + self.body_timeout
            wait = trio.CancelScope(deadline=deadline)
            if current is None:
                self.idle.add(wait)
            try:
                with wait:
                    data = await stream.receive_some(MAX_RECV)
            finally:
                self.idle.discard(wait)
            if wait.cancelled_caught:
                if current is not None and not current.headers_done and not self.closing:
                    await self._error(stream, Refusal(408, "REQUEST_TIMEOUT", "the request head was not complete "
                                                        f"within {self.head_timeout:g} s", retriable=True))  # fmt: skip
                return None, None
            if not data:
                return None, None
            parsing.pending += data

    async def _error(self, stream: trio.SocketStream, refusal: Refusal, *, read_all: bool = False) -> None:
        """Answer with a refusal (``error_body``) before a close (a request this layer refuses); a
        client that does not read it is not waited for.  Unless the request was read whole
        (``read_all``), a lingering close follows."""
        with trio.move_on_after(_ERROR_SEND_TIMEOUT):
            await stream.send_all(error_response(refusal, self.new_request_id(), self.error_body))
        if not read_all and not self.closing:
            await linger(stream)

    async def _http(self, stream: trio.SocketStream, parsing: Parsing, request: Request,
                    client: Any, server: Any) -> bool:  # fmt: skip
        """Run the app for one request; True to keep the connection open."""
        url = request.target
        raw_path = url.path or b"/"
        scope = {"type": "http", "asgi": ASGI, "http_version": request.version, "method": request.method,
                 "scheme": "http", "path": unquote(raw_path.decode("latin-1")), "raw_path": raw_path,
                 "query_string": url.query or b"", "root_path": "",
                 "headers": request.headers, "client": client, "server": server, "extensions": {},
                 "state": dict(self.lifespan_state)}  # fmt: skip
        exchange = Exchange(self, stream, parsing, request)
        try:
            await self.app(scope, exchange.receive, exchange.send)
        except Exception:
            log.exception("unhandled error in the app for %s %s", request.method, scope["path"])
            if not exchange.head_sent:
                await self._error(stream, FAILED_TO_ANSWER, read_all=True)
            return False
        if not exchange.head_sent:  # the app returned without answering
            await self._error(stream, FAILED_TO_ANSWER, read_all=True)
            return False
        if not exchange.body_sent:  # a stream the app abandoned (cancelled on disconnect or shutdown)
            return False
        return exchange.reusable

    # -------------------------------------------------------------- websocket
    async def _websocket(self, stream: trio.SocketStream, request: Request, leftover: bytes,
                         client: Any, server: Any) -> None:  # fmt: skip
        headers = dict(request.headers)
        key = headers.get(b"sec-websocket-key")
        if not key:
            await self._error(stream, Refusal(400, "INVALID_BODY", "a WebSocket upgrade needs Sec-WebSocket-Key"))
            return
        url = request.target
        raw_path = url.path or b"/"
        protocols = [p.strip().decode("latin-1") for p in headers.get(b"sec-websocket-protocol", b"").split(b",")
                     if p.strip()]  # fmt: skip
        scope = {"type": "websocket", "asgi": ASGI, "http_version": request.version, "scheme": "ws",
                 "path": unquote(raw_path.decode("latin-1")), "raw_path": raw_path,
                 "query_string": url.query or b"", "root_path": "", "headers": request.headers,
                 "client": client, "server": server, "subprotocols": protocols, "extensions": {},
                 "state": dict(self.lifespan_state)}  # fmt: skip
        ws = WebSocket(stream, key, leftover, self.max_ws_message)
        scope_cancel = trio.CancelScope()
        self.active.add(scope_cancel)
        try:
            with scope_cancel:
                await self.app(scope, ws.receive, ws.send)
        except Closed:
            pass  # the client went away while the app was sending
        except Exception:
            log.exception("unhandled error in the app for WebSocket %s", scope["path"])
        finally:
            self._finished(scope_cancel)
        with trio.CancelScope(shield=True), trio.move_on_after(1):
            await ws.finish()


async def serve(app: Callable[..., Awaitable[None]], bind: str, *,
                shutdown_trigger: Callable[[], Awaitable[None]],
                task_status=trio.TASK_STATUS_IGNORED, **options: Any) -> None:  # fmt: skip
    """Serve ``app`` on ``bind`` ("HOST:PORT", port 0 picks one) until ``shutdown_trigger``
    returns; ``task_status.started`` receives the bound URLs.  ``options`` are ``Server``'s
    (limits, timeouts, ``new_request_id``)."""
    host, _, port = bind.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    server = Server(app, **options)
    await server.serve(host, int(port), shutdown_trigger=shutdown_trigger, task_status=task_status)
