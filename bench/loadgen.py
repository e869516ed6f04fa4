"""A lean HTTP/1.1 load generator on raw Trio sockets (keep-alive, pre-encoded requests).

httpx costs about 2.5 ms of client CPU per request under Trio on this machine, more than the
server spends; a benchmark driven by it measures the client.  This client parses only the status
line, ``Content-Length`` and the body, so the figures are the server's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from urllib.parse import urlsplit

import trio


class Connection:
    def __init__(self, stream: trio.SocketStream, host: str) -> None:
        self.stream = stream
        self.host = host
        self.buffer = b""

    @classmethod
    async def open(cls, url: str) -> Connection:
        parts = urlsplit(url)
        stream = await trio.open_tcp_stream(parts.hostname, parts.port)
        return cls(stream, f"{parts.hostname}:{parts.port}")

    def encode(self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> bytes:
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}", "Connection: keep-alive"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        if body or method in ("POST", "PUT"):
            lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + body

    async def request(self, raw: bytes) -> tuple[int, bytes]:
        await self.stream.send_all(raw)
        while b"\r\n\r\n" not in self.buffer:
            chunk = await self.stream.receive_some(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self.buffer += chunk
        head, _, rest = self.buffer.partition(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            chunk = await self.stream.receive_some(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            rest += chunk
        self.buffer = rest[length:]
        return status, rest[:length]

    async def aclose(self) -> None:
        await self.stream.aclose()


async def load(url: str, total: int, clients: int, make: Callable[[Connection, int], bytes],
               expect: int) -> tuple[float, list[float]]:  # fmt: skip
    """``total`` requests from ``clients`` connections; ``make(conn, i)`` encodes request i."""
    latencies: list[float] = []
    counter = iter(range(total))

    async def worker() -> None:
        conn = await Connection.open(url)
        try:
            for i in counter:
                raw = make(conn, i)
                t = time.perf_counter()
                status, payload = await conn.request(raw)
                latencies.append((time.perf_counter() - t) * 1000)
                if status != expect:
                    raise AssertionError(f"HTTP {status}: {payload[:300]!r}")
        finally:
            await conn.aclose()

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(clients):
            nursery.start_soon(worker)
    return total / (time.perf_counter() - started), latencies
