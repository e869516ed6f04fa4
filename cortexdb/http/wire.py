"""Bytes on the wire: response heads, chunks, the answers the server gives itself, lingering closes.

A *refusal* is an answer this server gives without the app (a malformed request, an oversize
body or head, a head that took too long, too many connections, an app that failed to answer).
How its body reads is the embedding application's choice: ``Server(error_body=...)`` is given
``(refusal, request_id) -> (headers, body)``; the default is a small JSON object.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

import attrs
import trio

MAX_RECV = 65536
REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}
LINGER_TIME = 1.0  # after a refusal, what the client still sends is read and dropped this long
LINGER_BYTES = 1024 * 1024  # or up to this many bytes

Headers = list[tuple[bytes, bytes]]


@attrs.frozen
class Refusal:
    """An answer the server gives itself: the status, a machine-readable code, a message for
    people, whether retrying may succeed, and extra response headers (e.g. ``retry-after``)."""

    status: int
    code: str
    message: str
    retriable: bool = False
    headers: tuple[tuple[bytes, bytes], ...] = ()


# (refusal, request id) -> (response headers, body); content-length and connection are added
ErrorBody = Callable[[Refusal, str], tuple[Headers, bytes]]


def plain_error_body(refusal: Refusal, request_id: str) -> tuple[Headers, bytes]:
    """The default body of a refusal: ``{"error", "message", "request_id", "retriable"}``."""
    body = json.dumps({"error": refusal.code, "message": refusal.message, "request_id": request_id,
                       "retriable": refusal.retriable}).encode()  # fmt: skip
    return [(b"x-request-id", request_id.encode()), (b"content-type", b"application/json")], body


def too_large(max_body: int) -> Refusal:
    return Refusal(413, "PAYLOAD_TOO_LARGE", f"the request body is larger than {max_body} bytes")


def head_too_large(max_head: int) -> Refusal:
    return Refusal(431, "REQUEST_HEADERS_TOO_LARGE", f"the request line and headers exceed {max_head} bytes")


def too_many_connections(limit: int) -> Refusal:
    """The answer to a connection over the cap (also what a guard in front of another server
    may answer, e.g. ``cortexdb serve --http-server hypercorn``)."""
    return Refusal(503, "TOO_MANY_CONNECTIONS", f"the server holds its maximum of {limit} connections",
                   retriable=True, headers=((b"retry-after", b"1"),))  # fmt: skip


FAILED_TO_ANSWER = Refusal(500, "INTERNAL", "the server failed to answer this request", retriable=True)


def error_response(refusal: Refusal, request_id: str, error_body: ErrorBody = plain_error_body) -> bytes:
    """A whole response carrying ``refusal`` (its body by ``error_body``), announcing the close
    that follows."""
    headers, body = error_body(refusal, request_id)
    return head(refusal.status, [*headers, (b"content-length", str(len(body)).encode()),
                                 (b"connection", b"close"), *refusal.headers]) + body  # fmt: skip


async def linger(stream: trio.SocketStream) -> None:
    """After an answer that ends the connection: half-close, then read and drop what the client
    still sends (at most ``LINGER_BYTES``, for ``LINGER_TIME``), so that the close does not
    reset the connection before the client has read the answer (a client still sending a body
    it was refused would otherwise see a reset instead of the 413)."""
    dropped = 0
    with trio.move_on_after(LINGER_TIME):
        try:
            await stream.send_eof()
            while dropped < LINGER_BYTES and (data := await stream.receive_some(MAX_RECV)):
                dropped += len(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass


def head(status: int, headers: Headers) -> bytes:
    """The status line and headers of a response, with the blank line that ends them."""
    lines = [b"HTTP/1.1 %d %s" % (status, REASONS.get(status, b"Unknown"))]
    lines += [bytes(name) + b": " + bytes(value) for name, value in headers]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def random_request_id() -> str:
    """The default id of an answer the server gives itself (``Server(new_request_id=...)``)."""
    return f"req_{uuid.uuid4()}"


def socket_address(address: Any) -> Any:
    """A socket address as ASGI's ``(host, port)``, or None."""
    if isinstance(address, tuple) and len(address) >= 2:
        return (address[0], address[1])
    return None
