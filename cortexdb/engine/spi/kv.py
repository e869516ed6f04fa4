"""The storage SPI: an ordered key-value store of bytes (DESIGN §4).

Backends know nothing of CortexDB records; keys come only from ``engine/storage/keys.py``, and
only the storage layer (``engine/storage``) calls a store.  Semantics
every backend must honour (checked by ``cortexdb.testing``):

- keys and values are ``bytes``; order is unsigned lexicographic byte order;
- ``write`` applies all of its puts and deletes atomically, in order (a later op on the same key
  wins); ``sync=True`` returns only once the batch is durable;
- ``scan`` yields ``(key, value)`` pairs with ``prefix`` and ``start <= key < stop``, ascending or
  ``reverse``, at most ``limit``; it sees a consistent view taken when iteration starts;
- ``snapshot`` is a consistent view that later writes and deletes do not change;
- ``compact(start, stop)`` reclaims what deleted and overwritten values in ``[start, stop)``
  (None: unbounded) left in the backend's storage, so their bytes are gone from it (a forget
  relies on it); it returns False when the backend keeps nothing to reclaim (memory);
- optional ``rotate()``: after compacting, start the backend's own metadata and logs afresh, so
  that no deleted key lingers in them (LevelDB reopens in place: operations wait meanwhile, and
  a scan suspended across it goes on past its last key in the reopened store);
- after ``close`` every operation raises ``StoreClosed``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol, runtime_checkable

import attrs


@attrs.frozen(slots=True)
class Put:
    key: bytes
    value: bytes


@attrs.frozen(slots=True)
class Delete:
    key: bytes


Op = Put | Delete


@runtime_checkable
class KVSnapshot(Protocol):
    async def get(self, key: bytes) -> bytes | None: ...

    def scan(
        self,
        *,
        prefix: bytes = b"",
        start: bytes | None = None,
        stop: bytes | None = None,
        reverse: bool = False,
        limit: int | None = None,
    ) -> AsyncIterator[tuple[bytes, bytes]]: ...

    async def close(self) -> None: ...


@runtime_checkable
class KVStore(Protocol):
    async def get(self, key: bytes) -> bytes | None: ...

    async def write(self, ops: Sequence[Op], *, sync: bool = False) -> None: ...

    def scan(
        self,
        *,
        prefix: bytes = b"",
        start: bytes | None = None,
        stop: bytes | None = None,
        reverse: bool = False,
        limit: int | None = None,
    ) -> AsyncIterator[tuple[bytes, bytes]]: ...

    async def snapshot(self) -> KVSnapshot: ...

    async def compact(self, start: bytes | None = None, stop: bytes | None = None) -> bool: ...

    async def close(self) -> None: ...


def scan_bounds(
    prefix: bytes, start: bytes | None, stop: bytes | None
) -> tuple[bytes, bytes | None]:
    """Fold ``prefix`` into an inclusive lower and exclusive upper bound (None = unbounded)."""
    lower = prefix
    if start is not None and start > lower:
        lower = start
    upper = prefix_end(prefix) if prefix else None
    if stop is not None and (upper is None or stop < upper):
        upper = stop
    return lower, upper


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (None if there is none)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])
