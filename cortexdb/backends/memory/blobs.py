"""An in-memory ``BlobStore`` (``engine.spi.blobs``): the memory backend's blobs, for tests and
embedding.  Contents live as long as the store object."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

import trio

from ...engine.spi.blobs import CHUNK_SIZE, check_digest
from ...errors import NotFound


class MemoryUpload:
    def __init__(self, store: MemoryBlobStore) -> None:
        self._store = store
        self._data: bytearray | None = bytearray()

    async def write(self, data: bytes) -> None:
        if self._data is None:
            raise ValueError("this upload is finished")
        self._data += data
        await trio.lowlevel.checkpoint()

    async def commit(self) -> tuple[str, int]:
        if self._data is None:
            raise ValueError("this upload is finished")
        content, self._data = bytes(self._data), None
        digest = hashlib.sha256(content).hexdigest()
        self._store.contents.setdefault(digest, content)
        await trio.lowlevel.checkpoint()
        return digest, len(content)

    async def abort(self) -> None:
        self._data = None
        await trio.lowlevel.checkpoint()


class MemoryBlobStore:
    def __init__(self) -> None:
        self.contents: dict[str, bytes] = {}

    async def begin(self) -> MemoryUpload:
        await trio.lowlevel.checkpoint()
        return MemoryUpload(self)

    async def has(self, digest: str) -> bool:
        await trio.lowlevel.checkpoint()
        return check_digest(digest) in self.contents

    async def size(self, digest: str) -> int | None:
        await trio.lowlevel.checkpoint()
        content = self.contents.get(check_digest(digest))
        return None if content is None else len(content)

    async def read(self, digest: str, *, chunk_size: int = CHUNK_SIZE) -> AsyncIterator[bytes]:
        content = self.contents.get(check_digest(digest))
        if content is None:
            raise NotFound("no stored blob content has this digest", details={"sha256": digest})
        for start in range(0, len(content), chunk_size):
            await trio.lowlevel.checkpoint()
            yield content[start : start + chunk_size]

    async def delete(self, digest: str) -> bool:
        await trio.lowlevel.checkpoint()
        return self.contents.pop(check_digest(digest), None) is not None

    async def digests(self) -> AsyncIterator[str]:
        for digest in sorted(self.contents):
            await trio.lowlevel.checkpoint()
            yield digest
