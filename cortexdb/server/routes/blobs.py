"""Blobs (reference §8.13): ``POST /v1/blobs`` uploads, ``GET /v1/blobs/{blob_id}`` reads back.

A blob belongs to a scope, given as ``?scope=`` on upload (required): uploading needs
``blob.upload`` there (a writer's right), reading ``blob.read`` on the blob's scope (a reader's
right), so a blob is exactly as private as the scope's events.  The body is either
``multipart/form-data`` with the blob in the field ``file`` (its part's file name and content
type are the blob's), or the raw bytes, whose ``Content-Type`` is the blob's (``?filename=``
names it).  Either way the body is read as it arrives and streamed to the blob store's staging
file (``Route.upload``): at most ``max_blob_bytes`` (100 MiB) of blob, 413 beyond.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

from quart import Response
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.http import parse_options_header
from werkzeug.sansio.multipart import NEED_DATA, Data, Epilogue, Event, File, MultipartDecoder

from ...engine.policy import capabilities as cap
from ...errors import InvalidBody
from ..call import Blueprint, Call, current_request
from ..params import query_args, required, scope_param
from ..responses import json_response

api = Blueprint()

SLICE = 64 * 1024  # bytes handed to the multipart decoder at a time (bounds its buffer)
MAX_PARTS = 64  # form fields an upload may carry besides ``file`` (they are ignored)
FORM_FIELD_BYTES = 64 * 1024  # bytes of those fields, together
HEAD_BYTES = 4 * SLICE  # the decoder's buffer: a part's head (or the preamble) fits in it


@api("POST", "/v1/blobs", rate="write", status=201, upload=True,
     query=("scope!", "filename"), summary="Upload a blob (multipart field `file`, or the raw body) into ?scope=")  # fmt: skip
async def upload(call: Call):
    args = query_args()
    scope = scope_param(required(args, "scope"))
    call.primary = cap.BLOB_UPLOAD
    call.check(cap.BLOB_UPLOAD, scope)
    req = current_request()
    kind, options = parse_options_header(req.headers.get("Content-Type"))
    async with contextlib.aclosing(body_chunks(req)) as chunks:
        if kind == "multipart/form-data":
            form = MultipartUpload(chunks, options.get("boundary", ""))
            await form.open()
            data, content_type, filename = form.data(), form.content_type, form.filename
        else:
            data, content_type, filename = chunks, req.headers.get("Content-Type"), args.get("filename")
        async with contextlib.aclosing(data):
            stored = await call.state.engine.blobs.put(
                data, scope=scope, content_type=content_type, filename=filename,
                caller=call.principal.actor, tenant_id=call.principal.tenant,
                max_bytes=call.state.settings.max_blob_bytes)  # fmt: skip
    if stored.replay:
        call.headers["X-Cortex-Replay"] = "true"
    return json_response(stored.to_wire(), 200 if stored.replay else 201)


@api("GET", "/v1/blobs/{blob_id}", summary="A blob's bytes, with its original Content-Type", response_schema="bytes")
async def read(call: Call, blob_id: str):
    record, chunks = await call.state.engine.blobs.open(blob_id, caller=call.principal.actor,
                                                        tenant_id=call.principal.tenant)  # fmt: skip
    call.check(cap.BLOB_READ, record["scope"])  # asked by the engine already: recorded once
    response = Response(chunks, content_type=record["content_type"])
    response.timeout = None  # type: ignore[attr-defined]  # 100 MiB to a slow client takes its time
    response.headers.update({
        "Content-Length": str(record["size_bytes"]), "ETag": f'"{record["sha256"]}"',
        "X-Content-Type-Options": "nosniff",  # an uploaded page is not run as this server's
        "Content-Security-Policy": "sandbox", "Cache-Control": "private, max-age=0",
    })  # fmt: skip
    if record["filename"]:
        response.headers["Content-Disposition"] = f"inline; filename*=UTF-8''{quote(record['filename'], safe='')}"
    return response


def body_chunks(req: Any) -> AsyncIterator[bytes]:
    """The request body as it arrives: the direct dispatcher's, or Quart's."""
    chunks = getattr(req, "chunks", None)
    if chunks is not None:
        return chunks()
    return _quart_body(req)


async def _quart_body(req: Any) -> AsyncIterator[bytes]:
    async for chunk in req.body:
        yield chunk


class MultipartUpload:
    """The ``file`` part of a ``multipart/form-data`` body, decoded as it arrives (werkzeug's
    sans-IO decoder): ``open`` reads up to the part's head, ``data`` yields its bytes and then
    checks that the body ends well (one file; other fields are read and ignored)."""

    def __init__(self, chunks: AsyncIterator[bytes], boundary: str) -> None:
        if not boundary or len(boundary) > 200:
            raise InvalidBody("a multipart/form-data body needs a boundary parameter in its Content-Type",
                              details={"field": "Content-Type"})  # fmt: skip
        self.decoder = MultipartDecoder(boundary.encode("latin-1"), HEAD_BYTES, max_parts=MAX_PARTS + 1)
        self.chunks = chunks
        self.rest = b""
        self.ended = False
        self.filename: str | None = None
        self.content_type: str | None = None
        self.field_bytes = 0

    async def _event(self) -> Event:
        while True:
            try:
                event = self.decoder.next_event()
            except ValueError as exc:
                raise InvalidBody(f"malformed multipart body: {exc}") from None
            except RequestEntityTooLarge:
                raise InvalidBody(f"the multipart body has more than {MAX_PARTS} fields") from None
            if event is not NEED_DATA:
                return event
            if not self.rest and not self.ended:
                self.rest = await anext(self.chunks, b"")
                self.ended = not self.rest
            if not self.rest:
                self.decoder.receive_data(None)
                continue
            piece, self.rest = self.rest[:SLICE], self.rest[SLICE:]
            try:
                self.decoder.receive_data(piece)
            except RequestEntityTooLarge:
                raise InvalidBody(f"malformed multipart body: a part's head is over {HEAD_BYTES} bytes") from None

    async def open(self) -> None:
        while True:
            event = await self._event()
            if isinstance(event, File):
                if event.name != "file":
                    raise InvalidBody(f"send the blob in the form field 'file', not {event.name[:100]!r}",
                                      details={"field": "file"})  # fmt: skip
                self.filename = event.filename
                self.content_type = event.headers.get("Content-Type")
                return
            self._ignored(event)

    def _ignored(self, event: Event) -> None:
        if isinstance(event, Epilogue):
            raise InvalidBody("the multipart body has no 'file' part", details={"field": "file"})
        if isinstance(event, Data):
            self.field_bytes += len(event.data)
            if self.field_bytes > FORM_FIELD_BYTES:
                raise InvalidBody(f"the form fields beside 'file' exceed {FORM_FIELD_BYTES} bytes")

    async def data(self) -> AsyncIterator[bytes]:
        while True:
            event = await self._event()
            if isinstance(event, Data):
                if event.data:
                    yield event.data
                if not event.more_data:
                    break
        while True:  # the rest of the body: fields only
            event = await self._event()
            if isinstance(event, Epilogue):
                return
            if isinstance(event, File):
                raise InvalidBody("one blob per upload: the body has a second file", details={"field": "file"})
            self._ignored(event)
