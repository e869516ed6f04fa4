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
carry the API's error envelope (§6.6).

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
HEAD_SLICE = 1024  # bytes outside a body are parsed this many at a time (bounds the parsed queue)
MAX_HEAD = 64 * 1024  # default: request line + headers; more is refused with 431
MAX_WS_MESSAGE = 1024 * 1024  # default: a larger WebSocket message closes the socket with 1009
ASGI = {"version": "3.0", "spec_version": "2.3"}
_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}
_ERROR_SEND_TIMEOUT = 5.0  # a refusal the client does not read is abandoned after this long
_LINGER_TIME = 1.0  # after a refusal, what the client still sends is read and dropped this long
_LINGER_BYTES = 1024 * 1024  # or up to this many bytes


def _random_request_id() -> str:
    return f"req_{uuid.uuid4()}"


class _Request:
    __slots__ = ("method", "url", "target", "headers", "body", "version", "keep_alive", "upgrade",
                 "refused", "head_size", "head_slices", "headers_done", "head_deadline")  # fmt: skip

    def __init__(self, head_deadline: float) -> None:
        self.head_deadline = head_deadline  # the head must be complete by then
        self.head_size = 0  # bytes of the request line and headers the callbacks have seen
        self.head_slices = 0  # bytes of the parse slices that lay wholly inside this head
        self.headers_done = False
        self.url = b""
        self.target: Any = None  # httptools.parse_url(url), set before the request is served
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = bytearray()
        self.method = "GET"
        self.version = "1.1"
        self.keep_alive = True
        self.upgrade = False
        self.refused: HttpError | None = None  # answered with this envelope, then the connection closes


class _Parsing:
    """httptools callbacks: complete requests collect in ``ready``; bytes received but not parsed
    yet wait in ``pending`` and are parsed a slice at a time (``feed``)."""

    def __init__(self, max_body: int, max_head: int, head_timeout: float) -> None:
        self.max_body = max_body
        self.max_head = max_head
        self.head_timeout = head_timeout
        self.parser = httptools.HttpRequestParser(self)
        self.current: _Request | None = None
        self.ready: deque[_Request] = deque()
        self.pending = bytearray()
        self.continue_wanted = False

    def on_message_begin(self) -> None:
        self.current = _Request(trio.current_time() + self.head_timeout)

    def on_url(self, url: bytes) -> None:
        request = self.current
        assert request is not None
        request.url += url
        request.head_size += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        request = self.current
        assert request is not None
        request.headers.append((name.lower(), value))
        request.head_size += len(name) + len(value) + 4  # ": " and CRLF

    def on_headers_complete(self) -> None:
        request = self.current
        assert request is not None
        parser = self.parser
        request.headers_done = True
        request.method = parser.get_method().decode("ascii")
        request.version = parser.get_http_version()
        request.keep_alive = parser.should_keep_alive()
        request.upgrade = parser.should_upgrade()
        request.head_size += len(request.method) + 14  # " ", " HTTP/1.1", CRLF, the final CRLF
        expect_continue = False
        hosts = 0
        for name, value in request.headers:
            if name == b"content-length" and value.strip().isdigit() and int(value) > self.max_body:
                request.refused = _too_large(self.max_body)
            elif name == b"expect" and value.strip().lower() == b"100-continue":
                expect_continue = True
            elif name == b"host":
                hosts += 1
        if max(request.head_size, request.head_slices) > self.max_head:
            request.refused = _head_too_large(self.max_head)
        elif request.refused is None and (hosts > 1 or (hosts == 0 and request.version == "1.1")):
            request.refused = HttpError(400, "INVALID_BODY", f"an HTTP/{request.version} request needs exactly "
                                                             f"one Host header ({hosts} sent)")  # fmt: skip
        self.continue_wanted = expect_continue and request.refused is None

    def on_body(self, body: bytes) -> None:
        request = self.current
        assert request is not None
        if request.refused is not None:
            return
        request.body += body
        if len(request.body) > self.max_body:
            request.refused = _too_large(self.max_body)
            request.body.clear()

    def on_message_complete(self) -> None:
        assert self.current is not None
        self.ready.append(self.current)
        self.current = None

    def feed(self) -> bytes | None:
        """Parse the next slice of ``pending``; the bytes after it if a WebSocket upgrade begins.

        A slice outside a body is at most ``HEAD_SLICE`` bytes, so one call queues a bounded
        number of pipelined requests.  The head's size is the larger of the bytes the callbacks
        saw (request line and headers, without optional whitespace) and the slices that lay
        wholly inside it (whitespace included): at most the two partial slices at its ends
        (2 KiB) short of the true size."""
        request = self.current
        in_head = request is not None and not request.headers_done
        size = MAX_RECV if request is not None and request.headers_done else HEAD_SLICE
        data = bytes(self.pending[:size])
        del self.pending[:size]
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade as upgrade:
            rest = data[int(upgrade.args[0]):] + bytes(self.pending)
            self.pending.clear()
            return rest
        current = self.current
        if current is not None and not current.headers_done:
            if in_head and current is request:
                current.head_slices += len(data)
            if max(current.head_size, current.head_slices) > self.max_head and current.refused is None:
                current.refused = _head_too_large(self.max_head)
        return None


def _too_large(max_body: int) -> HttpError:
    return HttpError(413, "PAYLOAD_TOO_LARGE", f"the request body is larger than {max_body} bytes")


def _head_too_large(max_head: int) -> HttpError:
    return HttpError(431, "REQUEST_HEADERS_TOO_LARGE", f"the request line and headers exceed {max_head} bytes")


class _Closed(Exception):
    pass


class Server:
    def __init__(self, app: Callable[..., Awaitable[None]], *, max_body: int = 16 * 1024 * 1024,
                 max_head: int = MAX_HEAD, head_timeout: float = 10.0, keep_alive_timeout: float = 5.0,
                 body_timeout: float = 30.0, max_connections: int = 1000,
                 max_ws_message: int = MAX_WS_MESSAGE, pipeline_buffer: int = MAX_RECV,
                 graceful_timeout: float = 5.0,
                 new_request_id: Callable[[], str] = _random_request_id) -> None:  # fmt: skip
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
        self.new_request_id = new_request_id  # for the envelopes of requests refused here
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
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await stream.aclose()
            return
        if self.connections >= self.max_connections:
            await self._refuse(stream)
            return
        self.connections += 1
        parsing = _Parsing(self.max_body, self.max_head, self.head_timeout)
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
                    await self._error(stream, HttpError(400, "INVALID_BODY", "the request target is not a URL path"))
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
            self.connections -= 1  # before the close: a client that sees EOF finds the slot free
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await stream.aclose()

    async def _refuse(self, stream: trio.SocketStream) -> None:
        """Over ``max_connections``: a 503 envelope, then close (what the client sent is not parsed)."""
        try:
            await self._error(stream, HttpError(503, "TOO_MANY_CONNECTIONS",
                                                f"the server holds its maximum of {self.max_connections} connections",
                                                retriable=True), ((b"retry-after", b"1"),))  # fmt: skip
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await stream.aclose()

    async def _next_request(self, stream: trio.SocketStream,
                            parsing: _Parsing) -> tuple[_Request | None, bytes | None]:  # fmt: skip
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
                    await self._error(stream, HttpError(408, "REQUEST_TIMEOUT", "the request head was not complete "
                                                        f"within {self.head_timeout:g} s", retriable=True))  # fmt: skip
                return None, None
            if not data:
                return None, None
            parsing.pending += data

    async def _error(self, stream: trio.SocketStream, error: CortexError,
                     extra: tuple[tuple[bytes, bytes], ...] = (), *, read_all: bool = False) -> None:  # fmt: skip
        """Answer with the API's error envelope before a close (a request this layer refuses); a
        client that does not read it is not waited for.  Unless the request was read whole
        (``read_all``), a lingering close follows."""
        with trio.move_on_after(_ERROR_SEND_TIMEOUT):
            await stream.send_all(error_response(error, self.new_request_id(), extra))
        if not read_all and not self.closing:
            await linger(stream)

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
            # it).  Pipelined requests that arrive meanwhile wait unparsed, up to pipeline_buffer
            # bytes; then the socket is not read until this response is done (TCP backpressure),
            # and a disconnect shows when a send fails.
            while True:
                room = self.pipeline_buffer - len(parsing.pending)
                if room <= 0:
                    await trio.sleep_forever()  # the app cancels this wait when it has answered
                try:
                    data = await stream.receive_some(min(room, MAX_RECV))
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    data = b""
                if not data:
                    keep_alive = False
                    return {"type": "http.disconnect"}
                parsing.pending += data

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
                await self._error(stream, Internal("the server failed to answer this request"), read_all=True)
            return False
        if not started or len(started) == 2:  # the app returned without answering
            await self._error(stream, Internal("the server failed to answer this request"), read_all=True)
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
        ws = _WebSocket(stream, key, leftover, self.max_ws_message)
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

    def __init__(self, stream: trio.SocketStream, key: bytes, leftover: bytes, max_message: int) -> None:
        self.stream = stream
        self.max_message = max_message
        self.size = 0  # bytes of the message being received (wsproto hands frames over as they arrive)
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
                    self.size += len(event.data.encode("utf-8"))
                    if self.size > self.max_message:
                        return await self._too_big()
                    if event.message_finished:
                        text, self.text, self.size = "".join(self.text), [], 0
                        return {"type": "websocket.receive", "text": text}
                elif isinstance(event, BytesMessage):
                    self.data.append(bytes(event.data))
                    self.size += len(event.data)
                    if self.size > self.max_message:
                        return await self._too_big()
                    if event.message_finished:
                        data, self.data, self.size = b"".join(self.data), [], 0
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

    async def _too_big(self) -> dict[str, Any]:
        """A message over ``max_message``: close with 1009 (RFC 6455 §7.4.1) and drop it."""
        self.text, self.data, self.size = [], [], 0
        self.events.clear()
        self.closed = True
        await self._send_quietly(self.conn.send(CloseConnection(
            code=CloseReason.MESSAGE_TOO_BIG, reason=f"a message is limited to {self.max_message} bytes")))  # fmt: skip
        return {"type": "websocket.disconnect", "code": int(CloseReason.MESSAGE_TOO_BIG)}

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


def error_response(error: CortexError, request_id: str, extra: tuple[tuple[bytes, bytes], ...] = ()) -> bytes:
    """A whole response carrying ``error``'s envelope, announcing the close that follows."""
    body = jsoncodec.encode(error.to_envelope(request_id))
    return _head(error.http_status, [(b"x-cortex-request-id", request_id.encode()),
                                     (b"content-type", b"application/json; charset=utf-8"),
                                     (b"content-length", str(len(body)).encode()), (b"connection", b"close"),
                                     *extra]) + body  # fmt: skip


async def linger(stream: trio.SocketStream) -> None:
    """After an answer that ends the connection: half-close, then read and drop what the client
    still sends (at most ``_LINGER_BYTES``, for ``_LINGER_TIME``), so that the close does not
    reset the connection before the client has read the answer (a client still sending a body
    it was refused would otherwise see a reset instead of the 413)."""
    dropped = 0
    with trio.move_on_after(_LINGER_TIME):
        try:
            await stream.send_eof()
            while dropped < _LINGER_BYTES and (data := await stream.receive_some(MAX_RECV)):
                dropped += len(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass


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
                shutdown_trigger: Callable[[], Awaitable[None]],
                task_status=trio.TASK_STATUS_IGNORED, **options: Any) -> None:  # fmt: skip
    """Serve ``app`` on ``bind`` ("HOST:PORT", port 0 picks one) until ``shutdown_trigger``
    returns; ``task_status.started`` receives the bound URLs.  ``options`` are ``Server``'s
    (limits, timeouts, ``new_request_id``)."""
    host, _, port = bind.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    server = Server(app, **options)
    await server.serve(host, int(port), shutdown_trigger=shutdown_trigger, task_status=task_status)
