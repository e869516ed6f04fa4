"""The built-in HTTP/1.1 + WebSocket server (cortexdb/server/http11.py), over raw loopback sockets.

Small ASGI apps pin each protocol behaviour; the whole CortexDB app runs on this server in
test_server_e2e.py.  No sleeps: tests wait on events the apps set, or on the socket.
"""

from __future__ import annotations

import json
from contextlib import asynccontextmanager

import pytest
import trio
import trio_websocket

from cortexdb.server import http11


class Probe:
    """An ASGI app recording what it sees; behaviour picked by path."""

    def __init__(self) -> None:
        self.lifespan: list[str] = []
        self.bodies: list[bytes] = []
        self.stream_release = trio.Event()
        self.disconnected = trio.Event()
        self.in_flight = trio.Event()
        self.finish_slow = trio.Event()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                self.lifespan.append(message["type"])
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] == "websocket":
            assert (await receive())["type"] == "websocket.connect"
            await send({"type": "websocket.accept"})
            while True:
                message = await receive()
                if message["type"] == "websocket.disconnect":
                    return
                if message.get("text") == "bye":
                    await send({"type": "websocket.close", "code": 1000})
                    return
                await send({"type": "websocket.send", "text": f"echo {message.get('text')} {scope['query_string'].decode()}"})
            return
        message = await receive()
        body = message.get("body", b"")
        self.bodies.append(body)
        path = scope["path"]
        if path == "/boom":
            raise RuntimeError("the app failed")
        if path == "/stream":
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
            await self.stream_release.wait()
            await send({"type": "http.response.body", "body": b"data: one\n\n", "more_body": True})
            while (await receive())["type"] != "http.disconnect":
                pass
            self.disconnected.set()
            return
        if path == "/slow":
            self.in_flight.set()
            await self.finish_slow.wait()
        payload = json.dumps({"method": scope["method"], "path": path, "query": scope["query_string"].decode(),
                              "body": body.decode(), "version": scope["http_version"]}).encode()  # fmt: skip
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]})  # fmt: skip
        await send({"type": "http.response.body", "body": payload})


@asynccontextmanager
async def serving(app, **options):
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(lambda task_status: http11.serve(
            app, "127.0.0.1:0", shutdown_trigger=stop.wait, task_status=task_status, **options))  # fmt: skip
        host, port = binds[0].removeprefix("http://").split(":")
        try:
            yield int(port), stop
        finally:
            stop.set()


class Raw:
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = b""

    @classmethod
    async def open(cls, port: int) -> Raw:
        return cls(await trio.open_tcp_stream("127.0.0.1", port))

    async def fill(self) -> bool:
        data = await self.stream.receive_some(65536)
        self.buffer += data
        return bool(data)

    async def response(self, head_only: bool = False) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buffer:
            assert await self.fill(), f"closed before a response: {self.buffer!r}"
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        if "content-length" in headers and not head_only:
            size = int(headers["content-length"])
            while len(self.buffer) < size:
                assert await self.fill()
            body, self.buffer = self.buffer[:size], self.buffer[size:]
            return status, headers, body
        return status, headers, b""

    async def closed(self) -> bool:
        while await self.fill():
            pass
        return True


def get(path: str, extra: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: t\r\n{extra}\r\n".encode()


async def test_keep_alive_pipelining_and_lifespan():
    app = Probe()
    async with serving(app) as (port, stop):
        assert app.lifespan == ["lifespan.startup"]
        conn = await Raw.open(port)
        await conn.stream.send_all(get("/a?x=1"))
        status, _, body = await conn.response()
        assert status == 200 and json.loads(body) == {"method": "GET", "path": "/a", "query": "x=1", "body": "",
                                                      "version": "1.1"}  # fmt: skip
        await conn.stream.send_all(get("/b") + get("/c%20d"))  # two requests in one packet
        first, second = await conn.response(), await conn.response()
        assert [json.loads(first[2])["path"], json.loads(second[2])["path"]] == ["/b", "/c d"]
        stop.set()
    assert app.lifespan == ["lifespan.startup", "lifespan.shutdown"]


async def test_request_bodies_chunked_and_expect_continue():
    app = Probe()
    async with serving(app) as (port, _):
        conn = await Raw.open(port)
        await conn.stream.send_all(b"POST /p HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                                   b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")  # fmt: skip
        status, _, body = await conn.response()
        assert status == 200 and json.loads(body)["body"] == "hello world"
        await conn.stream.send_all(b"POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
        interim, _, _ = await conn.response()
        assert interim == 100
        await conn.stream.send_all(b"abcd")
        status, _, body = await conn.response()
        assert status == 200 and json.loads(body)["body"] == "abcd"


async def test_head_connection_close_and_http10():
    app = Probe()
    async with serving(app) as (port, _):
        conn = await Raw.open(port)
        await conn.stream.send_all(b"HEAD /h HTTP/1.1\r\nHost: t\r\n\r\n" + get("/after"))
        status, headers, _ = await conn.response(head_only=True)
        assert status == 200 and int(headers["content-length"]) > 0
        status, _, body = await conn.response()  # no body bytes were sent for HEAD: the next response parses
        assert json.loads(body)["path"] == "/after"
        await conn.stream.send_all(get("/bye", "Connection: close\r\n"))
        status, headers, _ = await conn.response()
        assert status == 200 and headers["connection"] == "close"
        assert await conn.closed()
        old = await Raw.open(port)
        await old.stream.send_all(b"GET /old HTTP/1.0\r\n\r\n")
        status, _, body = await old.response()
        assert status == 200 and json.loads(body)["version"] == "1.0"
        assert await old.closed()


async def test_malformed_and_oversize_requests_get_an_envelope_and_a_close():
    app = Probe()
    async with serving(app, max_body=10) as (port, _):
        conn = await Raw.open(port)
        await conn.stream.send_all(b"NOT A REQUEST\r\n\r\n")
        status, _, body = await conn.response()
        assert status == 400 and json.loads(body)["error_code"] == "INVALID_BODY"
        assert await conn.closed()
        target = await Raw.open(port)  # a request line whose target is no URL
        await target.stream.send_all(b"GET http://[bad HTTP/1.1\r\nHost: t\r\n\r\n")
        status, headers, body = await target.response()
        assert status == 400 and json.loads(body)["error_code"] == "INVALID_BODY"
        assert headers["x-cortex-request-id"] == json.loads(body)["request_id"]
        big = await Raw.open(port)
        await big.stream.send_all(b"POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: 11\r\n\r\n01234567890")
        status, _, body = await big.response()
        assert status == 413 and json.loads(body)["error_code"] == "PAYLOAD_TOO_LARGE"
        assert await big.closed()
        chunked = await Raw.open(port)  # no Content-Length to refuse early: counted as it arrives
        await chunked.stream.send_all(b"POST /p HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                                      b"b\r\n01234567890\r\n0\r\n\r\n")  # fmt: skip
        status, _, _ = await chunked.response()
        assert status == 413
        endless = await Raw.open(port)  # headers that never end are cut off, not buffered forever
        await endless.stream.send_all(b"GET / HTTP/1.1\r\nHost: t\r\n" + b"X-Pad: " + b"a" * 70_000)
        status, _, body = await endless.response()
        assert status == 431 and json.loads(body)["error_code"] == "REQUEST_HEADERS_TOO_LARGE"
        assert app.bodies == []  # the app never saw any of them


async def test_an_app_failure_is_a_500_envelope():
    async with serving(Probe()) as (port, _):
        conn = await Raw.open(port)
        await conn.stream.send_all(get("/boom"))
        status, _, body = await conn.response()
        envelope = json.loads(body)
        assert status == 500 and envelope["error_code"] == "INTERNAL" and envelope["retriable"] is True
        assert envelope["request_id"].startswith("req_")


async def test_streamed_response_is_chunked_head_first_and_a_disconnect_reaches_the_app():
    app = Probe()
    async with serving(app) as (port, _):
        conn = await Raw.open(port)
        await conn.stream.send_all(get("/stream"))
        status, headers, _ = await conn.response()  # the head arrives before any body exists
        assert status == 200 and headers["transfer-encoding"] == "chunked"
        app.stream_release.set()
        while b"data: one" not in conn.buffer:
            assert await conn.fill()
        assert conn.buffer.startswith(b"b\r\ndata: one\n\n\r\n")
        await conn.stream.aclose()
        await app.disconnected.wait()  # the app's receive() reported http.disconnect


async def test_shutdown_drains_a_request_in_flight_and_closes_idle_connections():
    app = Probe()
    async with serving(app) as (port, stop):
        busy, idle = await Raw.open(port), await Raw.open(port)
        await idle.stream.send_all(get("/first"))
        await idle.response()
        await busy.stream.send_all(get("/slow"))
        await app.in_flight.wait()
        stop.set()
        assert await idle.closed()  # the idle keep-alive connection is closed at once
        app.finish_slow.set()
        status, headers, body = await busy.response()  # the request in flight is answered
        assert status == 200 and json.loads(body)["path"] == "/slow" and headers["connection"] == "close"


async def test_websocket_upgrade_echo_and_close():
    async with (
        serving(Probe()) as (port, _),
        trio_websocket.open_websocket_url(f"ws://127.0.0.1:{port}/ws?room=1") as ws,
    ):
        await ws.send_message("hi")
        assert await ws.get_message() == "echo hi room=1"
        await ws.send_message("bye")
        with pytest.raises(trio_websocket.ConnectionClosed) as closed:
            await ws.get_message()
        assert closed.value.reason.code == 1000
