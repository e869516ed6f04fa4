"""Blobs over HTTP (reference §8.13): ``POST /v1/blobs`` (multipart and raw), ``GET
/v1/blobs/{id}``, their limits and errors, and the upload streamed through both HTTP servers
(the built-in one and Hypercorn) with bodies far over ``max_body_bytes``."""

from __future__ import annotations

import hashlib
import json
from contextlib import asynccontextmanager

import pytest
import trio

from .server_support import body, server
from .test_http11 import Raw, serving

ALICE = "org:acme/user:alice"
BOUNDARY = "cortex-test-boundary"


def multipart(*parts: tuple[str, str | None, str | None, bytes], boundary: str = BOUNDARY,
              close: bool = True) -> bytes:  # fmt: skip
    """A multipart/form-data body of (field, file name, content type, bytes) parts."""
    out = b""
    for name, filename, content_type, data in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename is not None else "")
        out += f"--{boundary}\r\nContent-Disposition: {disposition}\r\n".encode()
        if content_type:
            out += f"Content-Type: {content_type}\r\n".encode()
        out += b"\r\n" + data + b"\r\n"
    return out + (f"--{boundary}--\r\n".encode() if close else b"")


def form_headers(h, actor: str = "user:alice", boundary: str = BOUNDARY) -> dict[str, str]:
    return {**h.as_(actor), "Content-Type": f"multipart/form-data; boundary={boundary}"}


def raw_headers(h, content_type: str | None, actor: str = "user:alice") -> dict[str, str]:
    headers = h.as_(actor)
    if content_type:
        headers["Content-Type"] = content_type
    return headers


async def digests(h) -> list[str]:
    return [d async for d in h.engine.blobs.store.digests()]


async def test_raw_and_multipart_uploads_read_back_with_their_type(tmp_path):
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8
    async with server(tmp_path) as h:
        response, blob = await h.call("POST", f"/v1/blobs?scope={ALICE}&filename=chart.png",
                                      hdrs=raw_headers(h, "image/png"), data=png)  # fmt: skip
        assert response.status_code == 201, blob
        assert blob["sha256"] == hashlib.sha256(png).hexdigest() and blob["size_bytes"] == len(png)
        assert (blob["content_type"], blob["filename"], blob["scope"]) == ("image/png", "chart.png", ALICE)
        got, _ = await h.call("GET", f"/v1/blobs/{blob['blob_id']}")
        assert got.status_code == 200 and await got.get_data() == png
        assert got.headers["Content-Type"] == "image/png" and got.headers["Content-Length"] == str(len(png))
        assert got.headers["ETag"] == f'"{blob["sha256"]}"' and got.headers["X-Content-Type-Options"] == "nosniff"
        assert got.headers["Content-Disposition"] == "inline; filename*=UTF-8''chart.png"
        again, same = await h.call("POST", f"/v1/blobs?scope={ALICE}&filename=chart.png",
                                   hdrs=raw_headers(h, "image/png"), data=png)  # fmt: skip
        assert again.status_code == 200 and again.headers["X-Cortex-Replay"] == "true" and same == blob

        form = multipart(("note", None, None, b"ignored field"), ("file", "notes.txt", "text/plain", b"buy milk\n"))
        response, notes = await h.call("POST", f"/v1/blobs?scope={ALICE}", hdrs=form_headers(h), data=form)
        assert response.status_code == 201, notes
        assert (notes["content_type"], notes["filename"], notes["size_bytes"]) == ("text/plain", "notes.txt", 9)
        got, _ = await h.call("GET", f"/v1/blobs/{notes['blob_id']}")
        assert await got.get_data() == b"buy milk\n" and got.headers["Content-Type"] == "text/plain"
        # no type given: octet-stream; an empty body is an empty blob
        response, empty = await h.call("POST", f"/v1/blobs?scope={ALICE}", hdrs=raw_headers(h, None), data=b"")
        assert response.status_code == 201 and empty["content_type"] == "application/octet-stream"
        assert empty["size_bytes"] == 0
        _, rows = await h.call("GET", "/v1/audit?capability=blob.upload", "user:root")
        assert rows["items"] and rows["items"][0]["decision"] == "allow"


async def test_uploads_are_refused_when_malformed_and_leave_nothing(tmp_path):
    file_part = ("file", "a.txt", "text/plain", b"data")
    cases = [
        ("/v1/blobs", raw_headers, b"no scope", 400, "MISSING_REQUIRED_FIELD"),
        (f"/v1/blobs?scope={ALICE}&colour=red", raw_headers, b"x", 400, "INVALID_QUERY"),
        (f"/v1/blobs?scope={ALICE}", form_headers, multipart(("note", None, None, b"only a field")), 400, "INVALID_BODY"),
        (f"/v1/blobs?scope={ALICE}", form_headers, multipart(("upload", "a.txt", None, b"x")), 400, "INVALID_BODY"),
        (f"/v1/blobs?scope={ALICE}", form_headers, multipart(file_part, file_part), 400, "INVALID_BODY"),
        (f"/v1/blobs?scope={ALICE}", form_headers, multipart(file_part, close=False), 400, "INVALID_BODY"),
        (f"/v1/blobs?scope={ALICE}", form_headers, b"not multipart at all", 400, "INVALID_BODY"),
        ("/v1/blobs?scope=not a scope!", raw_headers, b"x", 422, "INVALID_SCOPE_GRAMMAR"),
    ]  # fmt: skip
    async with server(tmp_path) as h:
        for path, headers, data, status, code in cases:
            hdrs = headers(h) if headers is form_headers else headers(h, "text/plain")
            response, error = await h.call("POST", path, hdrs=hdrs, data=data)
            assert (response.status_code, error["error_code"]) == (status, code), (path, data[:60], error)
        no_boundary = {**h.as_("user:alice"), "Content-Type": "multipart/form-data"}
        response, error = await h.call("POST", f"/v1/blobs?scope={ALICE}", hdrs=no_boundary, data=multipart(file_part))
        assert response.status_code == 400 and "boundary" in error["message"]
        response, error = await h.call("GET", "/v1/blobs/blob_nope")
        assert response.status_code == 404 and error["error_code"] == "NOT_FOUND"
        assert await digests(h) == []


async def test_the_blob_limit_is_a_setting_and_the_body_limit_does_not_apply(tmp_path):
    async with server(tmp_path, max_body_bytes=2000, max_blob_bytes=10_000) as h:
        big = bytes(range(256)) * 39  # 9,984 bytes: over max_body_bytes, under the blob limit
        response, blob = await h.call("POST", f"/v1/blobs?scope={ALICE}", hdrs=raw_headers(h, "application/pdf"), data=big)
        assert response.status_code == 201 and blob["size_bytes"] == len(big)
        form = multipart(("file", "big.bin", None, big))
        response, blob = await h.call("POST", f"/v1/blobs?scope={ALICE}", hdrs=form_headers(h), data=form)
        assert response.status_code == 201 and blob["filename"] == "big.bin"  # another name: another blob
        for data, headers in ((big + b"0" * 17, raw_headers(h, "text/plain")),
                              (multipart(("file", "x.bin", None, big + b"0" * 17)), form_headers(h))):  # fmt: skip
            response, error = await h.call("POST", f"/v1/blobs?scope={ALICE}", hdrs=headers, data=data)
            assert response.status_code == 413 and error["error_code"] == "PAYLOAD_TOO_LARGE", error
            assert error["details"]["limit"] == 10_000
        # the JSON routes keep max_body_bytes
        response, error = await h.call("POST", "/v1/experience", json=body("x" * 3000, scope=ALICE))
        assert response.status_code == 413 and error["error_code"] == "PAYLOAD_TOO_LARGE"
        assert len(await digests(h)) == 1


async def test_only_upload_routes_take_non_json_bodies(tmp_path):
    async with server(tmp_path) as h:
        response, error = await h.call("POST", "/v1/experience", hdrs=raw_headers(h, "text/plain"), data=b"hello")
        assert response.status_code == 415 and error["error_code"] == "UNSUPPORTED_MEDIA_TYPE"
        response, _ = await h.call("POST", f"/v1/blobs?scope={ALICE}", hdrs=raw_headers(h, "text/plain"), data=b"hello")
        assert response.status_code == 201


async def test_experiences_refer_to_blobs_by_id(tmp_path):
    async with server(tmp_path) as h:
        _, blob = await h.call("POST", f"/v1/blobs?scope={ALICE}&filename=receipt.pdf",
                               hdrs=raw_headers(h, "application/pdf"), data=b"%PDF-1.7")  # fmt: skip
        unknown = body("see attached", scope=ALICE)
        unknown["content"]["media"] = [{"blob_id": "blob_nope"}]
        response, error = await h.call("POST", "/v1/experience", json=unknown)
        assert response.status_code == 422 and error["details"]["field"] == "content.media[0].blob_id"
        known = body("see attached", scope=ALICE)
        known["content"]["media"] = [{"blob_id": blob["blob_id"], "caption": "dinner receipt"}]
        response, result = await h.call("POST", "/v1/experience?wait=indexed", json=known)
        assert response.status_code == 200, result
        response, pack = await h.call("POST", "/v1/recall", json={"scope": ALICE, "query": "receipt pdf"})
        assert pack["layers"]["events"][0]["id"] == result["event_id"]
        # bob may not read alice's blob, so he may not attach it either
        bobs = body("mine now", scope="org:acme/user:bob")
        bobs["content"]["media"] = [{"blob_id": blob["blob_id"]}]
        response, error = await h.call("POST", "/v1/experience", "user:bob", json=bobs)
        assert response.status_code == 403 and error["details"]["capability"] == "blob.read"
        response, error = await h.call("GET", f"/v1/blobs/{blob['blob_id']}", "user:bob")
        assert response.status_code == 403 and error["error_code"] == "NOT_A_MEMBER"


# -- through real HTTP servers ----------------------------------------------------------------------
@asynccontextmanager
async def live(http_server: str, **settings):
    """The whole app (memory backend, dev_local: the actor header identifies) on a free port."""
    from cortexdb.server.serve import run_server
    from cortexdb.server.settings import ServerSettings

    options = ServerSettings(backend="memory", embedder="hash", bind="127.0.0.1:0", http_server=http_server,
                             derivation_workers="thread", **settings)  # fmt: skip
    stop = trio.Event()
    with trio.fail_after(60):  # a hang guard only
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(lambda task_status: run_server(options, shutdown_trigger=stop.wait,
                                                                       task_status=task_status))  # fmt: skip
            try:
                yield int(binds[0].rsplit(":", 1)[1])
            finally:
                stop.set()


def post(path: str, headers: dict[str, str], length: int | None = None) -> bytes:
    framing = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return f"POST {path} HTTP/1.1\r\nHost: t\r\nX-Cortex-Actor: user:alice\r\n{lines}{framing}\r\n\r\n".encode()


def chunked(data: bytes, size: int = 50_000) -> bytes:
    out = b"".join(b"%x\r\n%s\r\n" % (len(data[i : i + size]), data[i : i + size]) for i in range(0, len(data), size))
    return out + b"0\r\n\r\n"


@pytest.mark.parametrize("http_server", ["cortex", "hypercorn"])
async def test_uploads_far_over_the_body_limit_stream_through_both_servers(http_server):
    blob = bytes(range(256)) * 12_000  # about 3 MB, with max_body_bytes 64 KiB
    async with live(http_server, max_body_bytes=65_536, max_blob_bytes=4_000_000) as port:
        conn = await Raw.open(port)
        await conn.stream.send_all(post(f"/v1/blobs?scope={ALICE}", {"Content-Type": "video/mp4"}, len(blob)) + blob)
        status, _, raw = await conn.response()
        assert status == 201, raw
        stored = json.loads(raw)
        form = multipart(("file", "clip.mp4", "video/mp4", blob[::-1]))
        await conn.stream.send_all(post(f"/v1/blobs?scope={ALICE}", {
            "Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}) + chunked(form))  # fmt: skip
        status, _, raw = await conn.response()  # the same connection: the body was read to its end
        assert status == 201, raw
        assert json.loads(raw)["sha256"] == hashlib.sha256(blob[::-1]).hexdigest()
        await conn.stream.send_all(f"GET /v1/blobs/{stored['blob_id']} HTTP/1.1\r\nHost: t\r\n"
                                   "X-Cortex-Actor: user:alice\r\n\r\n".encode())  # fmt: skip
        status, headers, data = await conn.response()
        assert status == 200 and data == blob and headers["content-type"] == "video/mp4"
        # a JSON body over max_body_bytes is still refused
        await conn.stream.send_all(post("/v1/experience", {"Content-Type": "application/json"}, 70_000) + b" " * 70_000)
        assert (await conn.response())[0] == 413


@pytest.mark.parametrize("http_server", ["cortex", "hypercorn"])
async def test_an_upload_over_the_blob_limit_gets_413_through_both_servers(http_server):
    async with live(http_server, max_blob_bytes=100_000) as port:
        conn = await Raw.open(port)  # declared too large: refused before the body is sent
        await conn.stream.send_all(post(f"/v1/blobs?scope={ALICE}", {"Expect": "100-continue"}, 5_000_000))
        status, _, raw = await conn.response()
        if status == 100 and http_server == "hypercorn":  # Hypercorn invites the body at once
            status, _, raw = await conn.response()
        assert status == 413 and json.loads(raw)["error_code"] == "PAYLOAD_TOO_LARGE"
        conn = await Raw.open(port)  # undeclared (chunked): refused when the limit is passed
        await conn.stream.send_all(post(f"/v1/blobs?scope={ALICE}", {}) + chunked(b"z" * 150_000))
        status, _, raw = await conn.response()
        assert status == 413 and json.loads(raw)["details"]["limit"] == 100_000


# -- the built-in server's streamed bodies, alone -----------------------------------------------------
class Upload:
    """An app that reads its body as it arrives and answers with the pieces it was handed."""

    def __init__(self, read_body: bool = True) -> None:
        self.read_body = read_body
        self.asked = trio.Event()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        pieces = []
        if self.read_body:
            while True:
                self.asked.set()
                message = await receive()
                pieces.append(len(message.get("body", b"")))
                if message["type"] != "http.request" or not message.get("more_body"):
                    break
        payload = json.dumps({"pieces": pieces}).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(payload)).encode())]})  # fmt: skip
        await send({"type": "http.response.body", "body": payload})


def streamed_upload(method: str, path: bytes) -> int | None:
    return 10_000_000 if path == b"/upload" else None


async def test_a_streamed_body_reaches_the_app_in_bounded_pieces():
    async with serving(Upload(), max_body=1000, streamed=streamed_upload) as (port, _):
        conn = await Raw.open(port)
        data = b"q" * 1_000_000
        await conn.stream.send_all(b"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000\r\n\r\n" + data)
        status, _, raw = await conn.response()
        pieces = json.loads(raw)["pieces"]
        assert status == 200 and sum(pieces) == len(data) and max(pieces) <= 65_536 and len(pieces) > 10
        await conn.stream.send_all(b"POST /other HTTP/1.1\r\nHost: t\r\nContent-Length: 2000\r\n\r\n" + b"x" * 2000)
        assert (await conn.response())[0] == 413  # other paths keep max_body


async def test_100_continue_waits_for_the_app_and_an_unread_body_closes_the_connection():
    app = Upload()
    async with serving(app, streamed=streamed_upload) as (port, _):
        conn = await Raw.open(port)
        await conn.stream.send_all(b"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        await app.asked.wait()
        assert (await conn.response())[0] == 100
        await conn.stream.send_all(b"hello")
        status, _, raw = await conn.response()
        assert status == 200 and sum(json.loads(raw)["pieces"]) == 5
    async with serving(Upload(read_body=False), streamed=streamed_upload) as (port, _):
        conn = await Raw.open(port)
        await conn.stream.send_all(b"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 50000\r\n\r\n" + b"x" * 100)
        status, _, raw = await conn.response()
        assert status == 200 and json.loads(raw)["pieces"] == []
        assert await conn.closed()  # its body was left unread: the connection cannot go on


# -- the documentation's walk-through --------------------------------------------------------------
def test_the_blobs_walkthrough_runs_as_written(tmp_path):
    import os
    import re
    import signal
    import subprocess
    from pathlib import Path

    from .test_server_e2e import _start

    doc = (Path(__file__).resolve().parents[1] / "docs" / "blobs.md").read_text()
    block = re.search(r"<!-- blobs walkthrough -->\s*```bash\n(.*?)```", doc, re.S)
    assert block, "docs/blobs.md has a ```bash block after <!-- blobs walkthrough -->"
    process, url = _start(tmp_path / "data", "--preset", "dev_local", "--embedder", "hash")
    try:
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", block.group(1)], capture_output=True,
                                text=True, timeout=120, env={**os.environ, "CORTEX": url})  # fmt: skip
        assert result.returncode == 0, result.stderr + result.stdout
        output = result.stdout + result.stderr
        assert '"content_type":"image/png"' in output and '"filename":"roadmap.png"' in output
        assert '"filename":"notes.txt"' in output and '"content_type":"text/plain"' in output
        assert '"caption":"whiteboard sketch of the launch"' in output
        assert re.search(r"(?im)^content-type: image/png", output)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    stored = list((tmp_path / "data" / "blobs" / "sha256").rglob("*"))
    assert len([p for p in stored if p.is_file()]) == 2  # one file per distinct content


def test_blobs_benchmark_runs_on_a_slice():
    import os
    import re
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run([sys.executable, "bench/blobs.py", "--mb", "2", "--servers", "cortex"],
                            capture_output=True, text=True, timeout=300, cwd=root)  # fmt: skip
    assert result.returncode == 0, result.stderr
    for name in ("raw upload", "multipart upload", "download"):
        assert re.search(rf"cortex\s+{name}\s+2 MB:\s+[\d.]+ MB/s\s+peak RSS growth\s+[+-][\d.]+ MB", result.stdout)
