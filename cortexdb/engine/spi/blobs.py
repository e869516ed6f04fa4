"""The blob SPI: a content-addressed store of byte strings (reference §8.13, DESIGN §4).

A blob store keeps bytes under their SHA-256 (lowercase hex, 64 characters) and knows nothing of
CortexDB records: which blob ids, scopes and events refer to a content is the engine's metadata
(``engine/blobs.py``).  Semantics every store must honour (checked by
``cortexdb.testing.blob_conformance``):

- ``begin`` opens an upload; ``write`` appends bytes to it; ``commit`` makes the whole content
  visible under its digest at once and returns ``(sha256, size)``.  Until ``commit`` returns,
  nothing of the upload is visible (``has``, ``size``, ``read``, ``digests``), and a crash at
  any point never leaves a partial content under a digest: after a restart a digest either
  names its whole content or nothing.  ``abort`` (or a crash) discards an upload;
- the same bytes committed twice are stored once (``digests`` lists them once);
- ``read`` yields the content in chunks of at most ``chunk_size`` bytes, or raises
  ``NotFound`` for a digest the store does not hold;
- ``delete`` removes a content (True) or reports that there was none (False);
- a digest that is not 64 lowercase hex characters is refused with ``ValueError``.

A ``KVStore`` may bring the blob store that goes with it as its ``blob_store`` attribute (a
third-party backend keeping blobs beside its keys); otherwise a store with a data directory
(``path``: LevelDB) keeps them in ``<path>/blobs/`` and the memory backend in memory
(``backends.open_blob_store``).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

DIGEST = re.compile(r"^[0-9a-f]{64}\Z")
CHUNK_SIZE = 1 << 20  # bytes per chunk a read yields by default


def check_digest(digest: str) -> str:
    """``digest`` if it is a SHA-256 in lowercase hex; ``ValueError`` otherwise (a digest names a
    file of the filesystem store, so nothing else may reach a path)."""
    if not isinstance(digest, str) or not DIGEST.match(digest):
        raise ValueError(f"not a SHA-256 digest in lowercase hex: {str(digest)[:80]!r}")
    return digest


@runtime_checkable
class BlobUpload(Protocol):
    async def write(self, data: bytes) -> None: ...

    async def commit(self) -> tuple[str, int]: ...

    async def abort(self) -> None: ...


@runtime_checkable
class BlobStore(Protocol):
    async def begin(self) -> BlobUpload: ...

    async def has(self, digest: str) -> bool: ...

    async def size(self, digest: str) -> int | None: ...

    def read(self, digest: str, *, chunk_size: int = CHUNK_SIZE) -> AsyncIterator[bytes]: ...

    async def delete(self, digest: str) -> bool: ...

    def digests(self) -> AsyncIterator[str]: ...
