"""ASGI WebSocket messages over wsproto's frame layer (RFC 6455; the handshake is answered here)."""

from __future__ import annotations

from collections import deque
from typing import Any

import trio
from wsproto.connection import Connection as WsConnection
from wsproto.connection import ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Ping, TextMessage
from wsproto.frame_protocol import CloseReason
from wsproto.utilities import generate_accept_token

from .wire import MAX_RECV, head


class Closed(Exception):
    """The client went away while the app was sending."""


class WebSocket:
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
            await self.stream.send_all(head(101, headers))
        elif kind == "websocket.send":
            if self.closed:
                raise Closed()
            if message.get("text") is not None:
                payload = self.conn.send(TextMessage(data=message["text"]))
            else:
                payload = self.conn.send(BytesMessage(data=message.get("bytes") or b""))
            await self.stream.send_all(payload)
        elif kind == "websocket.close":
            if not self.accepted:  # refused before the handshake: a plain 403
                self.closed = True
                await self.stream.send_all(head(403, [(b"content-length", b"0"), (b"connection", b"close")]))
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
                await self._send_quietly(head(403, [(b"content-length", b"0"), (b"connection", b"close")]))
            return
        if not self.closed:
            self.closed = True
            await self._send_quietly(self.conn.send(CloseConnection(code=CloseReason.INTERNAL_ERROR)))

