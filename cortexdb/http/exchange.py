"""One request and its response on an HTTP/1.1 connection: the ASGI ``receive`` and ``send`` of
an ``http`` scope (``Server._http`` runs the app with them, then asks what went out).

The response head goes with the first body bytes in one ``send_all``.  Without a
``Content-Length`` from the app, a complete body gets one; a streamed body (``more_body``) goes
chunked on HTTP/1.1, and on HTTP/1.0 until the connection closes.
"""

from __future__ import annotations

from typing import Any

import trio

from .parsing import Parsing, Request
from .wire import MAX_RECV, chunk, head


class Exchange:
    """What the app was given and what it sent for one request."""

    def __init__(self, server: Any, stream: trio.SocketStream, parsing: Parsing, request: Request) -> None:  # fmt: skip
        self.server = server  # the Server: its ``closing`` and ``pipeline_buffer``
        self.stream = stream
        self.parsing = parsing
        self.request = request
        self.head_only = request.method == "HEAD"
        self.keep_alive = request.keep_alive and not server.closing
        self.status: int | None = None  # from ``http.response.start``
        self.headers: list[Any] = []
        self.head_sent = False
        self.body_sent = False  # the last body message went out
        self.chunked = False
        self.closed_on_stream = False  # an HTTP/1.0 stream: the close ends the body
        self.delivered = False  # the request body was handed to the app

    @property
    def reusable(self) -> bool:
        """May the connection take the next request once the app has answered?"""
        return self.keep_alive and not self.closed_on_stream

    async def receive(self) -> dict[str, Any]:
        if not self.delivered:
            self.delivered = True
            return {"type": "http.request", "body": bytes(self.request.body), "more_body": False}
        # Afterwards the app waits for a disconnect (Quart always does, SSE handlers rely on
        # it).  Pipelined requests that arrive meanwhile wait unparsed, up to pipeline_buffer
        # bytes; then the socket is not read until this response is done (TCP backpressure),
        # and a disconnect shows when a send fails.
        parsing = self.parsing
        while True:
            room = self.server.pipeline_buffer - len(parsing.pending)
            if room <= 0:
                await trio.sleep_forever()  # the app cancels this wait when it has answered
            try:
                data = await self.stream.receive_some(min(room, MAX_RECV))
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                data = b""
            if not data:
                self.keep_alive = False
                return {"type": "http.disconnect"}
            parsing.pending += data

    async def send(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.status, self.headers = message["status"], list(message.get("headers", []))
            self.head_sent = False
            if not any(name.lower() == b"content-length" for name, _ in self.headers):
                await self._head(b"", True)  # a stream: the head goes now, the body as it comes
            return
        if kind != "http.response.body" or self.body_sent:
            return
        body = message.get("body", b"")
        more = message.get("more_body", False)
        if self.status is not None and not self.head_sent:
            await self._head(body, more)
        elif not self.head_only:
            if self.chunked:
                await self.stream.send_all((chunk(body) if body else b"") + (b"" if more else b"0\r\n\r\n"))  # fmt: skip
            elif body:
                await self.stream.send_all(body)
        if not more:
            self.body_sent = True

    async def _head(self, body: bytes, more: bool) -> None:
        """The status line and headers, with the first body bytes when there are any."""
        status, headers = self.status, self.headers
        self.head_sent = True
        names = {name.lower() for name, _ in headers}
        if b"content-length" not in names and status >= 200 and status not in (204, 304):
            if not more:
                headers.append((b"content-length", str(len(body)).encode()))
            elif self.request.version == "1.1":
                self.chunked = True
                headers.append((b"transfer-encoding", b"chunked"))
            else:
                self.keep_alive = False
                self.closed_on_stream = True
        if self.server.closing:
            self.keep_alive = False
        if not self.keep_alive:
            headers.append((b"connection", b"close"))
        payload = head(status, headers)
        if not self.head_only:
            payload += chunk(body) if self.chunked and body else (b"" if self.chunked else body)
        if self.chunked and not more and not self.head_only:
            payload += b"0\r\n\r\n"
        await self.stream.send_all(payload)
