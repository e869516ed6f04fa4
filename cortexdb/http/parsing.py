"""Parsing requests with httptools (llhttp): complete requests queue up, each checked against
the server's limits (body, head size, ``Host``) as its head and body arrive."""

from __future__ import annotations

from collections import deque
from typing import Any

import httptools
import trio

from .wire import MAX_RECV, Refusal, head_too_large, too_large

HEAD_SLICE = 1024  # bytes outside a body are parsed this many at a time (bounds the parsed queue)


class Request:
    """One request as it is parsed: its head, its body, and whether it is refused."""

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
        self.refused: Refusal | None = None  # answered with this refusal, then the connection closes


class Parsing:
    """httptools callbacks: complete requests collect in ``ready``; bytes received but not parsed
    yet wait in ``pending`` and are parsed a slice at a time (``feed``)."""

    def __init__(self, max_body: int, max_head: int, head_timeout: float) -> None:
        self.max_body = max_body
        self.max_head = max_head
        self.head_timeout = head_timeout
        self.parser = httptools.HttpRequestParser(self)
        self.current: Request | None = None
        self.ready: deque[Request] = deque()
        self.pending = bytearray()
        self.continue_wanted = False

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
        for name, value in request.headers:
            if name == b"content-length" and value.strip().isdigit() and int(value) > self.max_body:
                request.refused = too_large(self.max_body)
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
        if len(request.body) > self.max_body:
            request.refused = too_large(self.max_body)
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
                current.refused = head_too_large(self.max_head)
        return None
