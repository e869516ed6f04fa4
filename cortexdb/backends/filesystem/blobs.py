"""A ``BlobStore`` (``engine.spi.blobs``) in a directory: the default beside a data dir.

Layout: ``<root>/sha256/<first two hex digits>/<digest>`` holds each content once;
``<root>/staging/`` holds uploads in progress.  An upload is written to a staging file (hashed
as it is written), flushed and ``fsync``-ed, then renamed onto its digest's name (``os.replace``,
atomic within a filesystem) and the directory is ``fsync``-ed: a content is visible only whole,
and a crash leaves at most a staging file, which the next open deletes (a single engine owns a
data dir: LevelDB's lock).  When the digest's file exists already the staging file is dropped:
the same bytes are stored once.

File work runs in worker threads, in slices of ``WRITE_SLICE`` bytes, so an upload of 100 MB
neither blocks the event loop nor sits in memory.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import AsyncIterator
from typing import BinaryIO

import trio

from ...engine.durable import fsync_path
from ...engine.spi.blobs import CHUNK_SIZE, check_digest
from ...errors import NotFound

WRITE_SLICE = 1 << 20  # bytes gathered before a worker thread writes them


class FileUpload:
    def __init__(self, store: FileBlobStore, file: BinaryIO, path: str) -> None:
        self._store = store
        self._file: BinaryIO | None = file
        self._path = path
        self._hash = hashlib.sha256()
        self._size = 0
        self._pending = bytearray()

    def _append(self, data: bytes) -> None:  # in a worker thread
        assert self._file is not None
        self._hash.update(data)
        self._file.write(data)

    async def write(self, data: bytes) -> None:
        if self._file is None:
            raise ValueError("this upload is finished")
        self._pending += data
        self._size += len(data)
        if len(self._pending) >= WRITE_SLICE:
            pending, self._pending = bytes(self._pending), bytearray()
            await trio.to_thread.run_sync(self._append, pending)
        else:
            await trio.lowlevel.checkpoint()

    def _finish(self, pending: bytes) -> str:  # in a worker thread
        self._append(pending)
        file, self._file = self._file, None
        assert file is not None
        try:
            file.flush()
            os.fsync(file.fileno())
        finally:
            file.close()
        digest = self._hash.hexdigest()
        target = self._store.path_of(digest)
        if os.path.exists(target):  # stored already: keep one copy
            os.unlink(self._path)
            return digest
        folder = os.path.dirname(target)
        if not os.path.isdir(folder):
            os.makedirs(folder, exist_ok=True)
            fsync_path(os.path.dirname(folder))
        os.replace(self._path, target)
        fsync_path(folder)
        return digest

    async def commit(self) -> tuple[str, int]:
        if self._file is None:
            raise ValueError("this upload is finished")
        pending, self._pending = bytes(self._pending), bytearray()
        digest = await trio.to_thread.run_sync(self._finish, pending)
        return digest, self._size

    def _discard(self) -> None:  # in a worker thread
        file, self._file = self._file, None
        if file is not None:
            file.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path)

    async def abort(self) -> None:
        self._pending = bytearray()
        await trio.to_thread.run_sync(self._discard)


class FileBlobStore:
    def __init__(self, root: str) -> None:
        """Open (creating) the store at ``root`` and delete what a crash left in staging."""
        self.root = root
        self.contents = os.path.join(root, "sha256")
        self.staging = os.path.join(root, "staging")
        os.makedirs(self.contents, exist_ok=True)
        os.makedirs(self.staging, exist_ok=True)
        for name in os.listdir(self.staging):
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                os.unlink(os.path.join(self.staging, name))

    def path_of(self, digest: str) -> str:
        digest = check_digest(digest)
        return os.path.join(self.contents, digest[:2], digest)

    def _open_staging(self) -> tuple[BinaryIO, str]:
        fd, path = tempfile.mkstemp(dir=self.staging, prefix="upload-")
        return os.fdopen(fd, "wb"), path

    async def begin(self) -> FileUpload:
        file, path = await trio.to_thread.run_sync(self._open_staging)
        return FileUpload(self, file, path)

    async def has(self, digest: str) -> bool:
        return await trio.to_thread.run_sync(os.path.isfile, self.path_of(digest))

    async def size(self, digest: str) -> int | None:
        path = self.path_of(digest)
        try:
            return (await trio.to_thread.run_sync(os.stat, path)).st_size
        except FileNotFoundError:
            return None

    async def read(self, digest: str, *, chunk_size: int = CHUNK_SIZE) -> AsyncIterator[bytes]:
        path = self.path_of(digest)
        try:
            file = await trio.to_thread.run_sync(open, path, "rb")
        except FileNotFoundError:
            raise NotFound("no stored blob content has this digest", details={"sha256": digest}) from None
        try:
            while chunk := await trio.to_thread.run_sync(file.read, chunk_size):
                yield chunk
        finally:
            file.close()

    async def delete(self, digest: str) -> bool:
        path = self.path_of(digest)
        try:
            await trio.to_thread.run_sync(os.unlink, path)
        except FileNotFoundError:
            return False
        await trio.to_thread.run_sync(fsync_path, os.path.dirname(path))
        return True

    def _listing(self) -> list[str]:
        found = []
        for folder in sorted(os.listdir(self.contents)):
            inside = os.path.join(self.contents, folder)
            if os.path.isdir(inside):
                found.extend(name for name in sorted(os.listdir(inside)) if len(name) == 64)
        return found

    async def digests(self) -> AsyncIterator[str]:
        for digest in await trio.to_thread.run_sync(self._listing):
            yield digest
