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
e.g. an SSE stream), WebSocket upgrades (RFC 6455 through wsproto's frame layer), idle and
header timeouts, and a graceful drain on shutdown.  Errors the server itself answers (a
malformed request or target, an oversize body or head) carry the API's error envelope (§6.6).
"""

from __future__ import annotations

import logging
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

import httptools
import trio
from wsproto.connection import Connection as WsConnection
from wsproto.connection import ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Ping, TextMessage
from wsproto.frame_protocol import CloseReason
from wsproto.utilities import generate_accept_token

from ..engine import jsoncodec
from ..errors import CortexError, HttpError, Internal

log = logging.getLogger("cortexdb.server.http")

MAX_RECV = 65536
MAX_HEAD = 64 * 1024  # request line + headers; more is refused with 431
ASGI = {"version": "3.0", "spec_version": "2.3"}
_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}



def _random_request_id() -> str:
    return f"req_{uuid.uuid4()}"


class _Request:
    __slots__ = ("method", "url", "target", "headers", "body", "version", "keep_alive", "upgrade",
                 "too_large", "head_size", "headers_done")  # fmt: skip

    def __init__(self) -> None:
        self.head_size = 0  # bytes received while the head was incomplete
        self.headers_done = False
        self.url = b""
        self.target: Any = None  # httptools.parse_url(url), set before the request is served
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = bytearray()
        self.method = "GET"
        self.version = "1.1"
        self.keep_alive = True
        self.upgrade = False
        self.too_large = False


class _Parsing:
    """httptools callbacks: complete requests collect in ``ready``."""

    def __init__(self, max_body: int) -> None:
        self.max_body = max_body
        self.parser = httptools.HttpRequestParser(self)
        self.current: _Request | None = None
        self.ready: deque[_Request] = deque()
        self.continue_wanted = False

    def on_message_begin(self) -> None:
        self.current = _Request()

    def on_url(self, url: bytes) -> None:
        self.current.url += url  # type: ignore[union-attr]

    def on_header(self, name: bytes, value: bytes) -> None:
        self.current.headers.append((name.lower(), value))  # type: ignore[union-attr]

    def on_headers_complete(self) -> None:
        request = self.current
        assert request is not None
        parser = self.parser
        request.headers_done = True
        request.method = parser.get_method().decode("ascii")
        request.version = parser.get_http_version()
        request.keep_alive = parser.should_keep_alive()
        request.upgrade = parser.should_upgrade()
        expect_continue = False
        for name, value in request.headers:
            if name == b"content-length" and value.strip().isdigit() and int(value) > self.max_body:
                request.too_large = True
            elif name == b"expect" and value.strip().lower() == b"100-continue":
                expect_continue = True
        self.continue_wanted = expect_continue and not request.too_large

    def on_body(self, body: bytes) -> None:
        request = self.current
        assert request is not None
        if request.too_large:
            return
        request.body += body
        if len(request.body) > self.max_body:
            request.too_large = True
            request.body.clear()

    def on_message_complete(self) -> None:
        assert self.current is not None
        self.ready.append(self.current)
        self.current = None

    def feed(self, data: bytes) -> int | None:
        """Parse ``data``; the offset of the upgraded bytes if a WebSocket upgrade begins."""
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade as upgrade:
            return int(upgrade.args[0])
        if self.current is not None and not self.current.headers_done:
            self.current.head_size += len(data)
        return None


class _Closed(Exception):
    pass


class Server:
    def __init__(self, app: Callable[..., Awaitable[None]], *, max_body: int = 16 * 1024 * 1024,
                 keep_alive_timeout: float = 5.0, header_timeout: float = 30.0,
                 graceful_timeout: float = 5.0,
                 new_request_id: Callable[[], str] = _random_request_id) -> None:  # fmt: skip
        self.app = app
        self.max_body = max_body
        self.keep_alive_timeout = keep_alive_timeout
        self.header_timeout = header_timeout
        self.graceful_timeout = graceful_timeout
        self.new_request_id = new_request_id  # for the envelopes of requests refused here
        self.closing = False
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
        lifespan = _Lifespan(self.app, self.lifespan_state)
        async with trio.open_nursery() as nursery:
            await lifespan.start(nursery)
            task_status.started(lifespan)
            await trio.sleep_forever()

    # ----------------------------------------------------------- connections
    async def _connection(self, stream: trio.SocketStream) -> None:
        try:  # (trio's SocketStream sets TCP_NODELAY itself)
            client = _address(stream.socket.getpeername())
            server = _address(stream.socket.getsockname())
        except OSError:
            return
        parsing = _Parsing(self.max_body)
        try:
            while not self.closing:
                request, leftover = await self._next_request(stream, parsing)
                if request is None:
                    return
                try:
                    request.target = httptools.parse_url(request.url or b"/")
                except httptools.HttpParserInvalidURLError:
                    await self._error(stream, HttpError(400, "INVALID_BODY", "the request target is not a URL path"))
                    return
                upgraded = request.upgrade and leftover is not None
                if upgraded and dict(request.headers).get(b"upgrade", b"").lower() == b"websocket":
                    await self._websocket(stream, request, leftover, client, server)
                    return
                if request.too_large:
                    await self._error(stream, HttpError(413, "PAYLOAD_TOO_LARGE",
                                                        f"the request body is larger than {self.max_body} bytes"))  # fmt: skip
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
        except (trio.BrokenResourceError, trio.ClosedResourceError, _Closed, OSError):
            return
        except httptools.HttpParserError as exc:
            try:
                await self._error(stream, HttpError(400, "INVALID_BODY", f"malformed HTTP request: {exc}"))
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
        except Exception:  # one broken connection never takes the server down
            log.exception("HTTP connection from %s failed", client)
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await stream.aclose()

    async def _next_request(self, stream: trio.SocketStream,
                            parsing: _Parsing) -> tuple[_Request | None, bytes | None]:  # fmt: skip
        """Read until a whole request is parsed; (None, None) when the peer closes or idles out."""
        while not parsing.ready:
            if parsing.continue_wanted:
                parsing.continue_wanted = False
                await stream.send_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            partial = parsing.current is not None
            idle = trio.CancelScope(deadline=trio.current_time()
                                    + (self.header_timeout if partial else self.keep_alive_timeout))  # fmt: skip
            if not partial:
                self.idle.add(idle)
            try:
                with idle:
                    data = await stream.receive_some(MAX_RECV)
            finally:
                self.idle.discard(idle)
            if idle.cancelled_caught or not data:
                return None, None
            offset = parsing.feed(data)
            if parsing.current is not None and parsing.current.too_large:
                return parsing.current, None  # refused now, not after reading a body we won't keep
            if parsing.current is not None and parsing.current.head_size > MAX_HEAD:
                await self._error(stream, HttpError(431, "REQUEST_HEADERS_TOO_LARGE",
                                                    f"the request line and headers exceed {MAX_HEAD} bytes"))  # fmt: skip
                return None, None
            if offset is not None:
                if parsing.current is not None:  # headers done, body of the upgrade request pending
                    parsing.on_message_complete()
                request = parsing.ready.popleft()
                return request, data[offset:]
        request = parsing.ready.popleft()
        return request, None

    async def _error(self, stream: trio.SocketStream, error: CortexError) -> None:
        """Answer with the API's error envelope and close (a request this layer refuses)."""
        request_id = self.new_request_id()
        body = jsoncodec.encode(error.to_envelope(request_id))
        await stream.send_all(_head(error.http_status, [(b"x-cortex-request-id", request_id.encode()),(b"content-type", b"application/json; charset=utf-8"),
                                             (b"content-length", str(len(body)).encode()),
                                             (b"connection", b"close")]) + body)  # fmt: skip

    async def _http(self, stream: trio.SocketStream, parsing: _Parsing, request: _Request,
                    client: Any, server: Any) -> bool:  # fmt: skip
        """Run the app for one request; True to keep the connection open."""
        url = request.target
        raw_path = url.path or b"/"
        scope = {"type": "http", "asgi": ASGI, "http_version": request.version, "method": request.method,
                 "scheme": "http", "path": unquote(raw_path.decode("latin-1")), "raw_path": raw_path,
                 "query_string": url.query or b"", "root_path": "",
                 "headers": request.headers, "client": client, "server": server, "extensions": {},
                 "state": dict(self.lifespan_state)}  # fmt: skip
        head_only = request.method == "HEAD"
        keep_alive = request.keep_alive and not self.closing
        body_sent = False
        started: list[Any] = []  # [status, headers]
        chunked = False
        closed_on_stream = False
        delivered = False

        async def receive() -> dict[str, Any]:
            nonlocal delivered, keep_alive
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": bytes(request.body), "more_body": False}
            # Afterwards the app waits for a disconnect (Quart always does, SSE handlers rely on
            # it); pipelined requests that arrive meanwhile are parsed and queued.
            while True:
                try:
                    data = await stream.receive_some(MAX_RECV)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    data = b""
                if not data:
                    keep_alive = False
                    return {"type": "http.disconnect"}
                try:
                    if parsing.feed(data) is not None:
                        keep_alive = False  # a pipelined upgrade: not supported
                except httptools.HttpParserError:
                    keep_alive = False
                    return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            nonlocal body_sent, chunked, keep_alive, closed_on_stream
            kind = message["type"]
            if kind == "http.response.start":
                started[:] = [message["status"], list(message.get("headers", []))]
                if not any(name.lower() == b"content-length" for name, _ in started[1]):
                    await send_head(b"", True)  # a stream: the head goes now, the body as it comes
                return
            if kind != "http.response.body" or body_sent:
                return
            body = message.get("body", b"")
            more = message.get("more_body", False)
            if started and len(started) == 2:
                await send_head(body, more)
            elif not head_only:
                if chunked:
                    await stream.send_all((_chunk(body) if body else b"") + (b"" if more else b"0\r\n\r\n"))
                elif body:
                    await stream.send_all(body)
            if not more:
                body_sent = True

        async def send_head(body: bytes, more: bool) -> None:
            """The status line and headers, with the first body bytes when there are any."""
            nonlocal chunked, keep_alive, closed_on_stream
            status, headers = started
            started.append(True)
            names = {name.lower() for name, _ in headers}
            if b"content-length" not in names and status >= 200 and status not in (204, 304):
                if not more:
                    headers.append((b"content-length", str(len(body)).encode()))
                elif request.version == "1.1":
                    chunked = True
                    headers.append((b"transfer-encoding", b"chunked"))
                else:
                    keep_alive = False
                    closed_on_stream = True
            if self.closing:
                keep_alive = False
            if not keep_alive:
                headers.append((b"connection", b"close"))
            payload = _head(status, headers)
            if not head_only:
                payload += _chunk(body) if chunked and body else (b"" if chunked else body)
            if chunked and not more and not head_only:
                payload += b"0\r\n\r\n"
            await stream.send_all(payload)

        try:
            await self.app(scope, receive, send)
        except Exception:
            log.exception("unhandled error in the app for %s %s", request.method, scope["path"])
            if not started or len(started) == 2:
                await self._error(stream, Internal("the server failed to answer this request"))
            return False
        if not started or len(started) == 2:  # the app returned without answering
            await self._error(stream, Internal("the server failed to answer this request"))
            return False
        if not body_sent:  # a stream the app abandoned (cancelled on disconnect or shutdown)
            return False
        return keep_alive and not closed_on_stream

    # -------------------------------------------------------------- websocket
    async def _websocket(self, stream: trio.SocketStream, request: _Request, leftover: bytes,
                         client: Any, server: Any) -> None:  # fmt: skip
        headers = dict(request.headers)
        key = headers.get(b"sec-websocket-key")
        if not key:
            await self._error(stream, HttpError(400, "INVALID_BODY", "a WebSocket upgrade needs Sec-WebSocket-Key"))
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
        ws = _WebSocket(stream, key, leftover)
        scope_cancel = trio.CancelScope()
        self.active.add(scope_cancel)
        try:
            with scope_cancel:
                await self.app(scope, ws.receive, ws.send)
        except _Closed:
            pass  # the client went away while the app was sending
        except Exception:
            log.exception("unhandled error in the app for WebSocket %s", scope["path"])
        finally:
            self._finished(scope_cancel)
        with trio.CancelScope(shield=True), trio.move_on_after(1):
            await ws.finish()


class _WebSocket:
    """ASGI WebSocket messages over wsproto's frame layer (the handshake is answered here)."""

    def __init__(self, stream: trio.SocketStream, key: bytes, leftover: bytes) -> None:
        self.stream = stream
        self.key = key
        self.conn = WsConnection(ConnectionType.SERVER)
        self.leftover = leftover
        self.connected = False
        self.accepted = False
        self.closed = False
        self.events: deque[Any] = deque()
        self.text: list[str] = []
        self.data: list[bytes] = []

    async def receive(self) -> dict[str, Any]:
        if not self.connected:
            self.connected = True
            return {"type": "websocket.connect"}
        while True:
            while self.events:
                event = self.events.popleft()
                if isinstance(event, CloseConnection):
                    if not self.closed:
                        self.closed = True
                        await self._send_quietly(self.conn.send(event.response()))
                    return {"type": "websocket.disconnect", "code": event.code}
                if isinstance(event, Ping):
                    await self._send_quietly(self.conn.send(event.response()))
                elif isinstance(event, TextMessage):
                    self.text.append(event.data)
                    if event.message_finished:
                        text, self.text = "".join(self.text), []
                        return {"type": "websocket.receive", "text": text}
                elif isinstance(event, BytesMessage):
                    self.data.append(bytes(event.data))
                    if event.message_finished:
                        data, self.data = b"".join(self.data), []
                        return {"type": "websocket.receive", "bytes": data}
            if self.closed:
                return {"type": "websocket.disconnect", "code": 1006}
            if self.leftover:
                data, self.leftover = self.leftover, b""
            else:
                try:
                    data = await self.stream.receive_some(MAX_RECV)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    data = b""
            if not data:
                self.closed = True
                return {"type": "websocket.disconnect", "code": 1006}
            self.conn.receive_data(data)
            self.events.extend(self.conn.events())

    async def send(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "websocket.accept":
            accept = generate_accept_token(self.key)
            headers = [(b"upgrade", b"websocket"), (b"connection", b"Upgrade"), (b"sec-websocket-accept", accept)]
            if message.get("subprotocol"):
                headers.append((b"sec-websocket-protocol", message["subprotocol"].encode()))
            headers += [(bytes(k).lower(), bytes(v)) for k, v in message.get("headers", [])]
            self.accepted = True
            await self.stream.send_all(_head(101, headers))
        elif kind == "websocket.send":
            if self.closed:
                raise _Closed()
            if message.get("text") is not None:
                payload = self.conn.send(TextMessage(data=message["text"]))
            else:
                payload = self.conn.send(BytesMessage(data=message.get("bytes") or b""))
            await self.stream.send_all(payload)
        elif kind == "websocket.close":
            if not self.accepted:  # refused before the handshake: a plain 403
                self.closed = True
                await self.stream.send_all(_head(403, [(b"content-length", b"0"), (b"connection", b"close")]))
                return
            if not self.closed:
                self.closed = True
                code = message.get("code", 1000)
                await self._send_quietly(self.conn.send(CloseConnection(code=code, reason=message.get("reason") or None)))

    async def _send_quietly(self, payload: bytes) -> None:
        try:
            await self.stream.send_all(payload)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.closed = True

    async def finish(self) -> None:
        if not self.accepted:
            if not self.closed:
                await self._send_quietly(_head(403, [(b"content-length", b"0"), (b"connection", b"close")]))
            return
        if not self.closed:
            self.closed = True
            await self._send_quietly(self.conn.send(CloseConnection(code=CloseReason.INTERNAL_ERROR)))


class _Lifespan:
    """The ASGI lifespan protocol: startup before the first request, shutdown after the last."""

    def __init__(self, app: Callable[..., Awaitable[None]], state: dict[str, Any]) -> None:
        self.app = app
        self.state = state
        self.to_app_send, self.to_app = trio.open_memory_channel[dict[str, Any]](1)
        self.started = trio.Event()
        self.stopped = trio.Event()
        self.failure: str | None = None
        self.supported = True

    async def start(self, nursery: trio.Nursery) -> None:
        nursery.start_soon(self._run)
        await self.to_app_send.send({"type": "lifespan.startup"})
        await self.started.wait()
        if self.failure:
            raise RuntimeError(f"the app failed to start: {self.failure}")

    async def _run(self) -> None:
        scope = {"type": "lifespan", "asgi": ASGI, "state": self.state}
        try:
            await self.app(scope, self.to_app.receive, self._send)
        except Exception as exc:  # an app without lifespan support, or a failed startup
            if not self.started.is_set():
                self.supported = False
                log.debug("lifespan not supported: %r", exc)
        finally:
            self.started.set()
            self.stopped.set()

    async def _send(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "lifespan.startup.complete":
            self.started.set()
        elif kind == "lifespan.startup.failed":
            self.failure = message.get("message", "startup failed")
            self.started.set()
        elif kind in ("lifespan.shutdown.complete", "lifespan.shutdown.failed"):
            self.stopped.set()

    async def shutdown(self) -> None:
        if self.supported and not self.stopped.is_set():
            await self.to_app_send.send({"type": "lifespan.shutdown"})
            with trio.move_on_after(10):
                await self.stopped.wait()


def _head(status: int, headers: list[tuple[bytes, bytes]]) -> bytes:
    lines = [b"HTTP/1.1 %d %s" % (status, _REASONS.get(status, b"Unknown"))]
    lines += [bytes(name) + b": " + bytes(value) for name, value in headers]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _address(address: Any) -> Any:
    if isinstance(address, tuple) and len(address) >= 2:
        return (address[0], address[1])
    return None


async def serve(app: Callable[..., Awaitable[None]], bind: str, *,
                shutdown_trigger: Callable[[], Awaitable[None]], max_body: int = 16 * 1024 * 1024,
                new_request_id: Callable[[], str] = _random_request_id, graceful_timeout: float = 5.0,
                task_status=trio.TASK_STATUS_IGNORED) -> None:  # fmt: skip
    """Serve ``app`` on ``bind`` ("HOST:PORT", port 0 picks one) until ``shutdown_trigger``
    returns; ``task_status.started`` receives the bound URLs."""
    host, _, port = bind.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    server = Server(app, max_body=max_body, new_request_id=new_request_id, graceful_timeout=graceful_timeout)
    await server.serve(host, int(port), shutdown_trigger=shutdown_trigger, task_status=task_status)
