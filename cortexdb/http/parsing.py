"""Parsing requests with httptools (llhttp): complete requests queue up, each checked against
the server's limits (body, head size, ``Host``) as its head and body arrive.

A request whose body the app reads as it arrives (``Server(streamed=...)``: uploads larger than
``max_body`` is meant to hold in memory) is handed to the app once its head is in
(``Parsing.hand_over``); its ASGI ``receive`` (``receiving``) then parses the body from the socket
a slice at a time and hands each parsed piece over (``more_body``), so at most a slice
(``MAX_RECV``) is held.  A ``100 Continue`` goes out when the app first asks for the body: an app
that answers without reading it (a refusal) never invites it.  The app bounds what it reads (the
declared ``Content-Length`` is checked here); a body it leaves unread closes the connection.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import httptools
import trio

from .wire import MAX_RECV, Refusal, head_too_large, too_large

HEAD_SLICE = 1024  # bytes outside a body are parsed this many at a time (bounds the parsed queue)
# (method, path) -> the body limit of a request the app reads as it arrives; None: buffered
Streamed = Callable[[str, bytes], int | None] | None
Receive = Callable[[], Awaitable[dict[str, Any]]]
DISCONNECT = {"type": "http.disconnect"}


class Request:
    """One request as it is parsed: its head, its body, and whether it is refused."""

    __slots__ = ("method", "url", "target", "headers", "body", "version", "keep_alive", "upgrade",
                 "refused", "head_size", "head_slices", "headers_done", "head_deadline", "streamed",
                 "handed_over", "complete")  # fmt: skip

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
        self.refused: Refusal | None = None  # answered with this refusal, then the connection closes
        self.streamed = False  # the app reads the body as it arrives (``receiving``)
        self.handed_over = False  # a streamed request the app was given before its body was in
        self.complete = False  # the whole body has been parsed


class Parsing:
    """httptools callbacks: complete requests collect in ``ready``; bytes received but not parsed
    yet wait in ``pending`` and are parsed a slice at a time (``feed``)."""

    def __init__(self, max_body: int, max_head: int, head_timeout: float, streamed: Streamed = None) -> None:
        self.max_body = max_body
        self.streamed = streamed
        self.max_head = max_head
        self.head_timeout = head_timeout
        self.parser = httptools.HttpRequestParser(self)
        self.current: Request | None = None
        self.ready: deque[Request] = deque()
        self.pending = bytearray()
        self.continue_wanted = False

    def hand_over(self, request: Request) -> bool:
        """True (once) when ``request`` is streamed and its head is in: the app reads its body."""
        if request.streamed and request.headers_done and not request.handed_over:
            request.handed_over = True
        return request.handed_over

    def on_message_begin(self) -> None:
        self.current = Request(trio.current_time() + self.head_timeout)

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
        limit = self.max_body
        if self.streamed is not None:
            streamed = self.streamed(request.method, request.url.split(b"?", 1)[0])
            if streamed is not None:
                request.streamed, limit = True, streamed
        for name, value in request.headers:
            if name == b"content-length" and value.strip().isdigit() and int(value) > limit:
                request.refused = too_large(limit)
            elif name == b"expect" and value.strip().lower() == b"100-continue":
                expect_continue = True
            elif name == b"host":
                hosts += 1
        if max(request.head_size, request.head_slices) > self.max_head:
            request.refused = head_too_large(self.max_head)
        elif request.refused is None and (hosts > 1 or (hosts == 0 and request.version == "1.1")):
            request.refused = Refusal(400, "INVALID_BODY", f"an HTTP/{request.version} request needs exactly "
                                                             f"one Host header ({hosts} sent)")  # fmt: skip
        self.continue_wanted = expect_continue and request.refused is None

    def on_body(self, body: bytes) -> None:
        request = self.current
        assert request is not None
        if request.refused is not None:
            return
        request.body += body
        if request.streamed:  # drained by the app as it reads (``receiving``)
            return
        if len(request.body) > self.max_body:
            request.refused = too_large(self.max_body)
            request.body.clear()

    def on_message_complete(self) -> None:
        assert self.current is not None
        self.current.complete = True
        if not self.current.handed_over:
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
                current.refused = head_too_large(self.max_head)
        return None


def receiving(stream: trio.SocketStream, parsing: Parsing, request: Request, receive: Receive,
              body_timeout: float) -> Receive:  # fmt: skip
    """The ``receive`` the app gets: ``receive`` itself unless the request was handed over before
    its body (module docstring); else one that yields the body as it is parsed, then hands over
    to ``receive`` (the last piece, then the wait for a disconnect)."""
    if not request.handed_over:
        return receive

    gone = False

    async def streamed() -> dict[str, Any]:
        nonlocal gone
        while not request.complete and not gone:
            if request.body:
                piece = bytes(request.body)
                request.body.clear()
                return {"type": "http.request", "body": piece, "more_body": True}
            if parsing.pending:
                try:
                    parsing.feed()
                except httptools.HttpParserError:  # a malformed body: the app sees the client go
                    gone = True
                continue
            if parsing.continue_wanted:
                parsing.continue_wanted = False
                await stream.send_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            with trio.move_on_after(body_timeout):
                try:
                    data = await stream.receive_some(MAX_RECV)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    data = b""
                gone = not data
                parsing.pending += data
                continue
            gone = True  # no byte for body_timeout seconds
        return DISCONNECT if gone else await receive()

    return streamed
