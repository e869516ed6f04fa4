"""Blobs (reference §8.13): uploaded bytes, their metadata, and the events that refer to them.

``Engine.blobs`` is a ``BlobService``.  The bytes live in a ``BlobStore`` (``spi/blobs.py``:
files under the data dir, or memory), once per SHA-256; the node's tables (``storage.node``)
hold the rest:

- ``blobs`` (BL): blob_id -> metadata: blob_id, sha256, size_bytes, content_type, filename,
  created_at, scope, uploader, tenant_id.  A blob belongs to the scope it was uploaded to:
  uploading needs ``blob.upload`` there, reading ``blob.read`` there (the policy hook; under
  the server, the gate with the scope's members);
- ``blob_contents`` (BH): (sha256, blob_id) — the blob ids sharing a content.  Uploading the
  same bytes again to the same scope, with the same content type and file name, returns the
  first upload's blob_id (a replay); anything else gets a new blob_id whose bytes are the same
  stored content (docs/decisions.md, "Blobs");
- ``blob_references`` (BR, blob_id -> evt_id) and ``event_blobs`` (BE, evt_id -> blob_id):
  an event's ``content.media[].blob_id`` and a ``blob_ref`` content's ``blob_id``, written in
  the event's own capture write (``NodeTables.blob_reference_ops``).  Capture refuses a
  reference to a blob the writer may not read or that does not exist (422
  ``INVALID_ENVELOPE``), and stores each reference with the blob's content type, file name and
  size beside what the writer gave (``resolve``); ``model.text.media_text`` makes those and any
  caption or alt text part of the event's indexed text.

``release_blobs_of(engine, event_ids, scopes=())`` is the forget and erasure cascade: it drops
those events' references and deletes every blob no other event refers to (its metadata, and its
bytes when no other blob id shares them); an erasure names its inside ``scopes`` too, whose
uploads no surviving event refers to go as well.  ``BlobService.collect_garbage`` deletes the
blobs no event refers to that were uploaded more than ``blob_orphan_grace_seconds`` ago (the
engine's maintenance timer runs it).  Both are idempotent and safe to run again after a crash.

**References and deletions serialise.** A write's blob references are checked under the
service's lock, and each blob it names is *held* (``BlobHold``) until the capture's write has
committed its ``BR``/``BE`` rows (or failed): a release or a collection, under the same lock,
keeps a held blob.  So a capture either finds the blob gone (422) or its reference lands before
anything may delete the blob — never a reference to deleted bytes.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import AsyncIterable, AsyncIterator, Collection
from typing import Any

import attrs
import trio

from ..backends import open_blob_store
from ..errors import InvalidBody, InvalidEnvelope, NotFound, PayloadTooLarge
from . import jsoncodec
from .blob_holds import BlobHold, Holds
from .envelope import blob_ids_of
from .policy.capabilities import BLOB_READ, BLOB_UPLOAD
from .scopes import canonical_scope
from .storage import CHUNK_OPS, Op
from .temporal import format_ts, parse_rfc3339

DEFAULT_CONTENT_TYPE = "application/octet-stream"
MEDIA_TYPE = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}\Z")
MAX_FILENAME = 255
GC_PAGE = 256  # blobs one collection step looks at under the lock


@attrs.frozen
class StoredBlob:
    """What an upload returns: the blob's metadata, and whether an identical earlier upload's
    blob was returned (``replay``) instead of a new one."""

    metadata: dict[str, Any]
    replay: bool = False

    def to_wire(self) -> dict[str, Any]:
        return dict(self.metadata)


def too_large(limit: int, size: int, field: str = "blob") -> PayloadTooLarge:
    """413 for an upload over a limit (``size``: the bytes received when it was passed)."""
    return PayloadTooLarge(field, limit, size, message=f"the {field} is larger than {limit} bytes, the most allowed here")


def clean_content_type(value: str | None) -> str:
    """``type/subtype`` (lowercase) and its parameters as given; octet-stream when absent."""
    if value is None or not value.strip():
        return DEFAULT_CONTENT_TYPE
    main, _, parameters = value.partition(";")
    main, parameters = main.strip().lower(), parameters.strip()
    if len(value) > 255 or not value.isprintable() or not MEDIA_TYPE.match(main):
        raise InvalidBody("the content type must be a media type such as image/png (at most 255 characters)",
                          details={"field": "content_type", "content_type": value[:255]})  # fmt: skip
    return f"{main}; {parameters}" if parameters else main


def clean_filename(value: str | None) -> str | None:
    """The last component of a file name (a client may send a path), or None."""
    if value is None:
        return None
    name = value.replace("\\", "/").rsplit("/", 1)[-1].strip()
    if len(name) > MAX_FILENAME or not name.isprintable():
        raise InvalidBody(f"the file name must be printable and at most {MAX_FILENAME} characters",
                          details={"field": "filename"})  # fmt: skip
    return name or None


def _described(record: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """A reference as stored: what the writer gave, plus the blob's type, name and size where
    the writer gave none."""
    known = {"content_type": record["content_type"], "filename": record["filename"],
             "size_bytes": record["size_bytes"]}  # fmt: skip
    return {**given, **{k: v for k, v in known.items() if v is not None and k not in given}}


async def release_blobs_of(engine: Any, event_ids: Collection[str], *, scopes: Collection[str] = ()) -> int:
    """The forget / erasure cascade: drop the references of ``event_ids`` (deleted or redacted
    events) and delete the blobs no other event refers to, and the blobs uploaded to ``scopes``
    (an erasure's inside scopes) that no other event refers to; how many blobs were deleted."""
    return await engine.blobs.release(event_ids, scopes=scopes)


class BlobService:
    """``Engine.blobs``: upload, read and release blobs (module docstring)."""

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        self._tables = ctx.tables
        self.store = open_blob_store(ctx.store)
        # metadata changes (an upload's commit, a release, a collection) and reference checks one
        # at a time: a release never deletes bytes an upload is committing, nor a blob a write
        # has checked and not yet committed its reference to (``blob_holds``)
        self._lock = trio.Lock()
        self._holds = Holds()

    def hold(self) -> BlobHold:
        """What a write holds its blobs with (``resolve(..., hold=)``); release it once the
        capture is answered (a ``with`` block)."""
        return BlobHold(self._holds)

    def _who(self, caller: str | None, tenant_id: str | None) -> tuple[str, str]:
        config = self._ctx.config
        return caller or config.default_caller, tenant_id or config.tenant_id

    # -- upload --------------------------------------------------------------------------------
    async def put(self, data: bytes | AsyncIterable[bytes], *, scope: str, content_type: str | None = None,
                  filename: str | None = None, caller: str | None = None, tenant_id: str | None = None,
                  max_bytes: int | None = None) -> StoredBlob:  # fmt: skip
        """Store ``data`` (bytes, or chunks as they arrive) as a blob of ``scope``; more than
        ``EngineConfig.blob_max_bytes`` (or a smaller ``max_bytes``: the server's setting) is
        refused with 413 and nothing is kept."""
        caller, tenant = self._who(caller, tenant_id)
        scope = canonical_scope(scope)
        self._ctx.policy.check(caller, BLOB_UPLOAD, scope)
        content_type, filename = clean_content_type(content_type), clean_filename(filename)
        upload = await self.store.begin()
        committed = False
        try:
            size = await self._receive(upload, data, min(max_bytes or self._ctx.config.blob_max_bytes,
                                                         self._ctx.config.blob_max_bytes))  # fmt: skip
            async with self._lock:
                digest, stored = await upload.commit()
                committed = True
                same = await self._same(digest, tenant, scope, content_type, filename)
                if same is not None:
                    return StoredBlob(same, replay=True)
                record = {"blob_id": self._ctx.ids.new("blob"), "sha256": digest, "size_bytes": size,
                          "content_type": content_type, "filename": filename,
                          "created_at": format_ts(self._ctx.clock.now()), "scope": scope,
                          "uploader": caller, "tenant_id": tenant}  # fmt: skip
                await self._record(record, digest)
                return StoredBlob(record)
        except BaseException:
            if not committed:
                with trio.CancelScope(shield=True):
                    await upload.abort()
            raise

    async def _receive(self, upload: Any, data: bytes | AsyncIterable[bytes], limit: int) -> int:
        if isinstance(data, bytes | bytearray | memoryview):
            if len(data) > limit:
                raise too_large(limit, len(data))
            await upload.write(bytes(data))
            return len(data)
        size = 0
        async for chunk in data:
            size += len(chunk)
            if size > limit:
                raise too_large(limit, size)
            if chunk:
                await upload.write(bytes(chunk))
        return size

    async def _same(self, digest: str, tenant: str, scope: str, content_type: str,
                    filename: str | None) -> dict[str, Any] | None:  # fmt: skip
        """An earlier upload of the same bytes, scope, type and name (its blob is returned)."""
        async for blob_id in self._tables.blob_contents.ids(digest):
            record = await self._tables.blobs.get(blob_id)
            if record is not None and (record["tenant_id"], record["scope"], record["content_type"],
                                       record["filename"]) == (tenant, scope, content_type, filename):  # fmt: skip
                return record
        return None

    async def _record(self, record: dict[str, Any], digest: str) -> None:
        """Write a new blob's metadata; if that fails, its bytes go unless another blob has them."""
        tables = self._tables
        try:
            await tables.write([tables.blobs.put_op(record["blob_id"], record),
                                tables.blob_contents.put_op((digest, record["blob_id"]), True)], sync=True)  # fmt: skip
        except BaseException:
            with trio.CancelScope(shield=True):
                if not [b async for b in tables.blob_contents.ids(digest, limit=1)]:
                    await self.store.delete(digest)
            raise

    # -- reading -------------------------------------------------------------------------------
    async def _find(self, blob_id: Any, tenant: str) -> dict[str, Any] | None:
        if not isinstance(blob_id, str) or not blob_id.startswith("blob_") or "\x00" in blob_id:
            return None
        record = await self._tables.blobs.get(blob_id)
        return record if record is not None and record["tenant_id"] == tenant else None

    async def stat(self, blob_id: str, *, caller: str | None = None,
                   tenant_id: str | None = None) -> dict[str, Any]:  # fmt: skip
        """A blob's metadata (``blob.read`` on its scope); 404 for a blob that does not exist."""
        caller, tenant = self._who(caller, tenant_id)
        record = await self._find(blob_id, tenant)
        if record is None:
            raise NotFound(f"no blob {str(blob_id)[:100]}", details={"blob_id": str(blob_id)[:100]})
        self._ctx.policy.check(caller, BLOB_READ, record["scope"])
        return dict(record)

    async def open(self, blob_id: str, *, caller: str | None = None, tenant_id: str | None = None,
                   chunk_size: int = 1 << 20) -> tuple[dict[str, Any], AsyncIterator[bytes]]:  # fmt: skip
        """A blob's metadata and its bytes, in chunks of at most ``chunk_size``."""
        record = await self.stat(blob_id, caller=caller, tenant_id=tenant_id)
        if not await self.store.has(record["sha256"]):  # released meanwhile
            raise NotFound(f"no blob {blob_id}", details={"blob_id": blob_id})
        return record, self.store.read(record["sha256"], chunk_size=chunk_size)

    async def read(self, blob_id: str, *, caller: str | None = None, tenant_id: str | None = None) -> bytes:
        """A blob's bytes, whole (``open`` streams them)."""
        _, chunks = await self.open(blob_id, caller=caller, tenant_id=tenant_id)
        return b"".join([chunk async for chunk in chunks])

    async def references(self, blob_id: str, *, caller: str | None = None,
                         tenant_id: str | None = None) -> list[str]:  # fmt: skip
        """The events that refer to a blob, in id order."""
        await self.stat(blob_id, caller=caller, tenant_id=tenant_id)
        return [event_id async for event_id in self._tables.blob_references.ids(blob_id)]

    # -- references from events ----------------------------------------------------------------
    async def resolve(self, envelope: Any, *, caller: str, tenant: str, hold: BlobHold | None = None) -> Any:
        """The validated envelope with its blob references checked (each blob exists and the
        writer may read it) and described (``_described``); unchanged without references.  The
        check runs under the lock, and each blob found is added to ``hold``: nothing deletes it
        until the write releases the hold."""
        content = envelope.content
        found = blob_ids_of(content)
        if not found:
            return envelope
        records: dict[str, dict[str, Any]] = {}
        async with self._lock:
            for field, blob_id in found:
                record = await self._find(blob_id, tenant)
                if record is None:
                    raise InvalidEnvelope(field, f"names no blob ({blob_id[:100]}): upload it first with POST /v1/blobs",
                                          blob_id=blob_id[:100])  # fmt: skip
                self._ctx.policy.check(caller, BLOB_READ, record["scope"])
                records[blob_id] = record
                if hold is not None:
                    hold.add(blob_id)
        content = dict(content)
        if content.get("kind") == "blob_ref":
            content = _described(records[content["blob_id"]], content)
        if content.get("media"):
            content["media"] = [_described(records[item["blob_id"]], item) for item in content["media"]]
        return attrs.evolve(envelope, content=content)

    # -- the cascade ---------------------------------------------------------------------------
    async def release(self, event_ids: Collection[str], *, scopes: Collection[str] = ()) -> int:
        """``release_blobs_of``: each blob's rows go in one write (never split across writes),
        after its bytes, so a rerun after a crash finds the same blobs to finish.  With
        ``scopes``, the blobs uploaded there that no other event refers to go too."""
        tables, doomed = self._tables, set(event_ids)
        # the candidates are read before the lock (the doomed events' rows do not change; a new
        # reference or hold is what ``_referred_elsewhere`` checks under it)
        by_blob: dict[str, list[str]] = {}
        if doomed:  # one scan over the span of their ids (time-ordered), not one per event
            async for (event_id, blob_id), _ in tables.event_blobs.items(after=min(doomed), upto=max(doomed)):
                if event_id in doomed:
                    by_blob.setdefault(blob_id, []).append(event_id)
        for blob_id in await self._uploaded_to(set(scopes)):
            by_blob.setdefault(blob_id, [])
        async with self._lock:
            released: set[str] = set()
            ops: list[Op] = []
            for blob_id, events in sorted(by_blob.items()):
                blob_ops = [op for e in events for op in (tables.event_blobs.delete_op((e, blob_id)),
                                                           tables.blob_references.delete_op((blob_id, e)))]  # fmt: skip
                if not await self._referred_elsewhere(blob_id, doomed):
                    blob_ops += await self._delete_blob(blob_id, released)
                if len(ops) + len(blob_ops) > CHUNK_OPS and ops:
                    await tables.write(ops, sync=True)
                    ops = []
                ops += blob_ops
            if ops:
                await tables.write(ops, sync=True)
            return len(released)

    async def _uploaded_to(self, scopes: set[str]) -> list[str]:
        """The blobs uploaded to one of ``scopes`` (their metadata is searched for the quoted
        scope first; only those that contain one are decoded)."""
        if not scopes:
            return []
        needles = [jsoncodec.encode(scope) for scope in scopes]
        found = []
        async for blob_id, raw in self._tables.blobs.raw.scan():
            if any(needle in raw for needle in needles) and jsoncodec.decode(raw)["scope"] in scopes:
                found.append(blob_id)
        return found

    async def _referred_elsewhere(self, blob_id: str, doomed: set[str]) -> bool:
        if self._holds.held(blob_id):
            return True  # a write in progress refers to it
        async for event_id in self._tables.blob_references.ids(blob_id):
            if event_id not in doomed:
                return True
        return False

    async def _delete_blob(self, blob_id: str, released: set[str]) -> list[Op]:
        """Delete a blob's bytes unless a blob id not being released shares them; its rows' ops."""
        tables = self._tables
        record = await tables.blobs.get(blob_id)
        if record is None:  # released before (a rerun), or never stored: only the references go
            return []
        digest = record["sha256"]
        released.add(blob_id)
        sharing = [b async for b in tables.blob_contents.ids(digest) if b not in released]
        if not sharing:
            await self.store.delete(digest)
        return [tables.blobs.delete_op(blob_id), tables.blob_contents.delete_op((digest, blob_id))]

    # -- garbage ---------------------------------------------------------------------------------
    async def collect_garbage(self, *, grace_seconds: float | None = None) -> dict[str, int]:
        """Delete the blobs no event refers to that were uploaded more than ``grace_seconds``
        (``EngineConfig.blob_orphan_grace_seconds``, 24 h) ago by the engine's clock: an upload
        never referenced, or whose referring events were all forgotten while a write held it.
        A blob a write in progress refers to is kept.  ``GC_PAGE`` blobs are looked at under the
        lock at a time, so uploads and captures go on meanwhile.  -> ``{"examined": n,
        "collected": n}`` (``collected``: blob ids deleted; bytes go with the last id using them)."""
        grace = self._ctx.config.blob_orphan_grace_seconds if grace_seconds is None else grace_seconds
        cutoff = self._ctx.clock.now() - dt.timedelta(seconds=grace)
        tables = self._tables
        examined, collected, after = 0, 0, None
        while True:
            async with self._lock:
                page = [(blob_id, record) async for blob_id, record in tables.blobs.scan(after=after, limit=GC_PAGE)]
                released: set[str] = set()
                ops: list[Op] = []
                for blob_id, record in page:
                    examined += 1
                    if parse_rfc3339(record["created_at"]) > cutoff or await self._referred_elsewhere(blob_id, set()):
                        continue
                    ops += await self._delete_blob(blob_id, released)
                if ops:
                    await tables.write(ops, sync=True)
                collected += len(released)
            if len(page) < GC_PAGE:
                return {"examined": examined, "collected": collected}
            after = page[-1][0]
