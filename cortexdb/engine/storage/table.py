"""``Table[T]``: one key range of the store whose values are of one type (DESIGN §1).

A table is a key prefix (``keys.prefix``: the table name, plus the scope for a per-scope table)
and a codec.  A row is named by its remaining key parts: one string (``"evt_…"``) or a tuple
(``(subject_id, predicate, fact_id)``); scans name rows by their *last* part.  Writes are
operations (``put_op``, ``delete_op``) that the caller commits in one atomic ``write`` with the
operations of other tables; ``put``/``delete`` write one row at once.

| method              | does                                                                |
|---------------------|---------------------------------------------------------------------|
| ``get(key)``        | the decoded value, or None                                          |
| ``get_many(names)`` | the rows of many one-part names, by one scan over their span        |
| ``put_op``/``delete_op`` | an operation for ``write``                                     |
| ``scan(under, …)``  | ``(last part, value)`` in key order: ``under`` (leading parts),     |
|                     | ``starting_with`` (a text prefix of the next part), ``after``       |
|                     | (exclusive) / ``upto`` (inclusive) bounds, ``reverse``, ``limit``   |
| ``ids(…)``          | the same, names only (values are not decoded)                       |
| ``items(under)``    | ``(key parts, value)``: every part of the row's name                |
| ``page(cursor, …)`` | one page of a listing with the opaque cursor (``cursor.py``)        |
| ``page_many(…)``    | the same where a row gives any number of items (a record's versions) |
| ``delete_all(under)``| every row, in writes of ``CHUNK_OPS`` operations                |
| ``raw``/``json``    | the same rows read as bytes / as decoded JSON (no record structuring)|

Codecs map values to bytes: ``Records(cls)`` (the one cattrs converter), ``JSON``, ``TEXT``,
``MARK`` (an empty value: a marker), ``VECTOR`` (float32, or float16 when given so), ``RAW``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from functools import cached_property
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from ...errors import InvalidCursor
from .. import cursor as cursors
from .. import jsoncodec
from ..model import converter
from ..spi.kv import Delete, KVStore, Op, Put
from . import keys

T = TypeVar("T")
Key = str | tuple[str, ...]
CHUNK_OPS = 10_000  # operations per write when a table is emptied or rewritten in bulk

__all__ = ["CHUNK_OPS", "JSON", "MARK", "RAW", "TEXT", "VECTOR", "Codec", "Key", "Op",
           "Records", "Table"]  # fmt: skip


class Codec(Protocol[T]):
    def encode(self, value: T) -> bytes: ...

    def decode(self, raw: bytes) -> T: ...


class Records(Generic[T]):
    """attrs records through the one cattrs converter: the bytes of ``model.dumps`` and the
    records of ``model.loads``, with the converter's hooks for ``cls`` looked up once."""

    def __init__(self, cls: type[T]) -> None:
        self.cls = cls
        self._unstructure = converter.get_unstructure_hook(cls)
        self._structure = converter.get_structure_hook(cls)

    def encode(self, value: T) -> bytes:
        return jsoncodec.encode(self._unstructure(value))

    def decode(self, raw: bytes) -> T:
        return self._structure(jsoncodec.decode(raw), self.cls)


class _Json:
    def encode(self, value: Any) -> bytes:
        return jsoncodec.encode(value)

    def decode(self, raw: bytes) -> Any:
        return jsoncodec.decode(raw)


class _Text:
    def encode(self, value: str) -> bytes:
        return value.encode()

    def decode(self, raw: bytes) -> str:
        return raw.decode()


class _Mark:
    """A marker row: its key is the information, its value is empty."""

    def encode(self, value: Any) -> bytes:
        return b""

    def decode(self, raw: bytes) -> bool:
        return True


HALF = b"\x02"  # the first byte of a float16 vector's value (its length is odd: never float32's)


class _Vector:
    """An embedding, read as float32: stored as float32 (its bytes), or, given as a float16
    array, as ``HALF`` and its float16 bytes (half the size: decisions.md, "Fewer bytes written
    per event").  A value that is neither (float32's size is a multiple of 4, float16's odd)
    reads as None."""

    def encode(self, value: Any) -> bytes:
        if isinstance(value, np.ndarray) and value.dtype == np.float16:
            return HALF + value.tobytes()
        return np.asarray(value).astype(np.float32).tobytes()

    def decode(self, raw: bytes) -> np.ndarray | None:
        if len(raw) % 4 == 0:
            return np.frombuffer(raw, dtype=np.float32)
        if len(raw) % 2 and raw[:1] == HALF:
            return np.frombuffer(raw, dtype=np.float16, offset=1).astype(np.float32)
        return None


class _Raw:
    def encode(self, value: bytes) -> bytes:
        return value

    def decode(self, raw: bytes) -> bytes:
        return raw


JSON, TEXT, MARK, VECTOR, RAW = _Json(), _Text(), _Mark(), _Vector(), _Raw()


class Table(Generic[T]):
    def __init__(self, store: KVStore, prefix: bytes, codec: Codec[T]) -> None:
        self.store = store
        self.prefix = prefix
        self.codec = codec

    def __repr__(self) -> str:
        return f"Table({self.prefix!r})"

    # -- keys ----------------------------------------------------------------------------------
    def key(self, key: Key) -> bytes:
        if isinstance(key, str):  # the common case, without building a tuple of parts
            return self.prefix + key.encode()
        return keys.within(self.prefix, *key)

    def _under(self, under: Key) -> bytes:
        parts = (under,) if isinstance(under, str) else under
        return self.prefix + "".join(part + "\x00" for part in parts).encode()

    # -- reading -------------------------------------------------------------------------------
    async def get(self, key: Key) -> T | None:
        raw = await self.store.get(self.key(key))
        return self.codec.decode(raw) if raw is not None else None

    async def exists(self, key: Key) -> bool:
        return await self.store.get(self.key(key)) is not None

    async def get_many(self, names: Collection[str]) -> dict[str, T]:
        """The rows named ``names`` (one-part names) that exist, decoded.  Ids that sort close
        together (UUID v7: captured close in time) are read with one scan over their span, a
        fraction of a point look-up each; the scan gives up after ``4 × len(names)`` rows (others
        in between), and the names past where it stopped are looked up one by one."""
        wanted = sorted(set(names))
        found: dict[str, T] = {}
        if not wanted:
            return found
        decode, skip, want = self.codec.decode, len(self.prefix), set(wanted)
        start, stop, limit = self.key(wanted[0]), self.key(wanted[-1]) + b"\x00", 4 * len(wanted) + 64
        read, reached = 0, ""
        async for key, raw in self.store.scan(start=start, stop=stop, limit=limit):
            read, reached = read + 1, key[skip:].decode()
            if reached in want:
                found[reached] = decode(raw)
        if read >= limit:  # stopped early: what lies past it was not read
            for name in wanted:
                value = await self.get(name) if name > reached else None
                if value is not None:
                    found[name] = value
        return found

    async def scan(self, under: Key = (), *, starting_with: str = "", after: str | None = None,
                   upto: str | None = None, reverse: bool = False,
                   limit: int | None = None) -> AsyncIterator[tuple[str, T]]:  # fmt: skip
        """``(last part, value)`` of the rows under ``under`` whose next part starts with
        ``starting_with``, after ``after`` and up to ``upto`` (both within ``under``)."""
        decode = self.codec.decode
        async for key, raw in self._rows(under, starting_with, after, upto, reverse, limit):
            yield keys.last_part(key), decode(raw)

    async def items(self, under: Key = (), *, after: str | None = None, upto: str | None = None,
                    reverse: bool = False, limit: int | None = None) -> AsyncIterator[tuple[tuple[str, ...], T]]:  # fmt: skip
        """``(key parts, value)`` of the rows under ``under``: every part after the table's
        prefix, for a table whose rows are named by several parts (``after``/``upto`` bound
        the next part, as in ``scan``; the rows under ``after`` itself are included)."""
        decode, skip = self.codec.decode, len(self.prefix)
        async for key, raw in self._rows(under, "", after, upto, reverse, limit):
            yield tuple(key[skip:].decode().split("\x00")), decode(raw)

    async def ids(self, under: Key = (), *, starting_with: str = "", after: str | None = None,
                  upto: str | None = None, reverse: bool = False,
                  limit: int | None = None) -> AsyncIterator[str]:  # fmt: skip
        """The last parts of the rows ``scan`` would yield, without decoding their values."""
        async for key, _ in self._rows(under, starting_with, after, upto, reverse, limit):
            yield keys.last_part(key)

    async def parts(self, under: Key = ()) -> list[str]:
        """The distinct next parts of the rows under ``under``, in order: one seek per part (it
        skips each part's rows), however many rows each holds."""
        base, out, start = self._under(under), [], None
        while True:
            first = [key async for key, _ in self.store.scan(prefix=base, start=start, limit=1)]
            if not first:
                return out
            part = first[0][len(base):].split(keys.SEP, 1)[0]
            out.append(part.decode())
            start = base + part + b"\x01"  # past every row under this part (SEP is \x00)

    def _rows(self, under: Key, starting_with: str, after: str | None, upto: str | None,
              reverse: bool, limit: int | None) -> AsyncIterator[tuple[bytes, bytes]]:  # fmt: skip
        base = self._under(under)
        start = keys.within(base, after) + keys.SEP if after is not None else None
        stop = keys.within(base, upto) + b"\x01" if upto is not None else None
        return self.store.scan(prefix=base + starting_with.encode(), start=start, stop=stop,
                               reverse=reverse, limit=limit)  # fmt: skip

    async def count(self, under: Key = ()) -> int:
        return sum([1 async for _ in self._rows(under, "", None, None, False, None)])

    async def page(self, cursor: str | None, *, limit: int, under: Key = (),
                   convert: Callable[[str, T], Awaitable[Any]] | None = None,
                   keep: Callable[[Any], bool] | None = None) -> dict[str, Any]:  # fmt: skip
        """One page of the rows under ``under``: ``convert(last part, value)`` makes each item
        (None skips it), ``keep(item)`` filters; ``next_cursor`` names the last row returned,
        so pages are stable while rows are added."""
        base = self._under(under)
        after = _after_key(cursor, base)
        start = after + keys.SEP if after is not None else None
        items: list[tuple[bytes, Any]] = []
        async for key, raw in self.store.scan(prefix=base, start=start):
            value = self.codec.decode(raw)
            item = await convert(keys.last_part(key), value) if convert is not None else value
            if item is None or (keep is not None and not keep(item)):
                continue
            items.append((key, item))
            if len(items) > limit:
                break
        has_more = len(items) > limit
        items = items[:limit]
        return {
            "items": [item for _, item in items],
            "next_cursor": cursors.encode({"after": items[-1][0].hex()}) if has_more else None,
            "has_more": has_more,
        }

    async def page_many(self, cursor: str | None, *, limit: int, under: Key = (),
                        expand: Callable[[str, T | None], Awaitable[list[Any]]],
                        more: AsyncIterator[str] | None = None) -> dict[str, Any]:  # fmt: skip
        """One page where each row gives the items ``expand(last part, value)`` returns (any
        number, in order); ``more`` (one-part names in order, e.g. records with history but no
        row any more) are visited too, with the value None.  The cursor names the last row and
        how many of its items were returned, so a row's items may span pages."""
        base = self._under(under)
        after, skip = _resume(cursor, base)
        start = None if after is None else (after if skip else after + keys.SEP)
        rows = self.store.scan(prefix=base, start=start)
        if more is not None:
            rows = _merged(rows, more, base, after if skip else (after + keys.SEP if after else None))
        items: list[tuple[bytes, int, int, Any]] = []  # (row key, position in its row, row's count, item)
        async for key, raw in rows:
            value = self.codec.decode(raw) if raw is not None else None
            found = await expand(keys.last_part(key), value)
            first = skip if key == after else 0
            for position, item in enumerate(found[first:], first):
                items.append((key, position, len(found), item))
            if len(items) > limit:
                break
        has_more = len(items) > limit
        items = items[:limit]
        cursor_data = None
        if has_more:  # a row done is named as ``page`` names it; one cut short, with its position
            key, position, count, _ = items[-1]
            cursor_data = {"after": key.hex()} if position + 1 == count else {"after": key.hex(), "skip": position + 1}
        return {
            "items": [item for *_, item in items],
            "next_cursor": cursors.encode(cursor_data) if cursor_data else None,
            "has_more": has_more,
        }

    # -- writing -------------------------------------------------------------------------------
    def put_op(self, key: Key, value: T) -> Op:
        # ``key`` inlined: a put is built for every row a stage writes
        raw = self.prefix + key.encode() if isinstance(key, str) else keys.within(self.prefix, *key)
        return Put(raw, self.codec.encode(value))

    def delete_op(self, key: Key) -> Op:
        return Delete(self.key(key))

    async def put(self, key: Key, value: T, *, sync: bool = False) -> None:
        await self.store.write([self.put_op(key, value)], sync=sync)

    async def delete(self, key: Key, *, sync: bool = False) -> None:
        await self.store.write([self.delete_op(key)], sync=sync)

    async def write(self, ops: Sequence[Op], *, sync: bool = False) -> None:
        """Apply operations (of this or other tables of the same store) in one atomic write."""
        await self.store.write(ops, sync=sync)

    async def delete_all(self, under: Key = ()) -> int:
        """Delete every row under ``under`` (all of them by default), ``CHUNK_OPS`` rows per
        write; returns how many."""
        doomed = [Delete(key) async for key, _ in self.store.scan(prefix=self._under(under))]
        for start in range(0, len(doomed), CHUNK_OPS):
            await self.store.write(doomed[start : start + CHUNK_OPS])
        return len(doomed)

    # -- other readings of the same rows -------------------------------------------------------
    @cached_property
    def raw(self) -> Table[bytes]:
        """The same rows as stored bytes (sizes, byte-identical caches)."""
        return Table(self.store, self.prefix, RAW)

    @cached_property
    def json(self) -> Table[Any]:
        """The same rows as decoded JSON, not structured into records (cheaper to read)."""
        return Table(self.store, self.prefix, JSON)


def _resume(cursor: str | None, base: bytes) -> tuple[bytes | None, int]:
    """Where a ``page_many`` cursor resumes: the row it names, and how many of that row's items
    were returned (0: the row is done — a ``page`` cursor — and the page starts past it)."""
    after = _after_key(cursor, base)
    skip = cursors.decode(cursor).get("skip", 0) if cursor else 0
    if not isinstance(skip, int) or isinstance(skip, bool) or skip < 0:
        raise InvalidCursor("the cursor is not one this server issued", details={"cursor": cursor[:128]})
    return after, skip


async def _merged(rows: AsyncIterator[tuple[bytes, bytes]], names: AsyncIterator[str], base: bytes,
                  start: bytes | None) -> AsyncIterator[tuple[bytes, bytes | None]]:  # fmt: skip
    """``rows`` and the keys ``names`` would have under ``base`` (from ``start`` on), in key
    order, each key once (a name with a row comes with its value, one without with None)."""
    pending: list[bytes] = []

    async def next_name() -> bytes | None:
        async for name in names:
            key = base + name.encode()
            if start is None or key >= start:
                return key
        return None

    name = await next_name()
    async for key, raw in rows:
        while name is not None and name < key:
            pending.append(name)
            name = await next_name()
        for extra in pending:
            yield extra, None
        pending.clear()
        if name == key:
            name = await next_name()
        yield key, raw
    while name is not None:
        yield name, None
        name = await next_name()


def _after_key(cursor: str | None, base: bytes) -> bytes | None:
    """The key a page cursor names; ``INVALID_CURSOR`` for one this server did not issue or one
    of another listing."""
    if not cursor:
        return None
    data = cursors.decode(cursor)
    try:
        key = bytes.fromhex(data["after"]) if isinstance(data, dict) else None
    except (KeyError, TypeError, ValueError):
        key = None
    if key is None:
        raise InvalidCursor(
            "the cursor is not one this server issued", details={"cursor": cursor[:128]}
        )
    if not key.startswith(base):
        raise InvalidCursor(
            "the cursor belongs to a different listing", details={"cursor": cursor[:128]}
        )
    return key
