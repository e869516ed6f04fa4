"""The PostgreSQL KVStore: one table ``(k bytea PRIMARY KEY, v bytea NOT NULL)``.

``bytea`` compares bytewise (memcmp, then the shorter first): the SPI's unsigned lexicographic
order, so scans are index range scans ``k >= lower AND k < upper ORDER BY k [DESC]``.

- ``get``: one ``SELECT`` (one round trip, autocommit).
- ``write``: the batch folded to the last op per key, then one transaction: a ``DELETE ... =
  ANY(keys)`` and an ``INSERT ... SELECT unnest(keys, values) ON CONFLICT (k) DO UPDATE``,
  pipelined (one round trip).  Unsynced batches commit with ``synchronous_commit = off``;
  ``sync=True`` commits with it on, so it returns once the commit is flushed.
- ``scan``: first one ``SELECT ... LIMIT n+1``; when that is all there is (most scans), done.
  A longer scan starts again in a transaction of its own with a server-side cursor (``DECLARE``),
  read in chunks on a held connection: one snapshot for the whole scan, however long it runs.
- ``snapshot``: a held connection in a ``REPEATABLE READ READ ONLY`` transaction.
- ``compact``: ``VACUUM FULL`` of the table, which rewrites it without the dead rows that
  deletes and overwrites left (a forget relies on it); it waits for this store's snapshots and
  long scans to end, and new ones wait for it.
"""

from __future__ import annotations

import abc
import itertools
import re
from collections.abc import AsyncIterator, Sequence

import psycopg
import trio
from psycopg import sql

from ...engine.spi.kv import Delete, Op, Put, scan_bounds
from ...errors import LeaseLost, StoreClosed, WalUnavailable
from .blobs import STALE_UPLOAD_SECONDS, PostgresBlobStore
from .leases import Lease, Leases
from .notify import Listener
from .pool import Held, Pool

DEFAULT_TABLE = "cortexdb_kv"
DEFAULT_POOL_SIZE = 8
DEFAULT_MAX_HELD = 64
_NOTIFY = "SELECT pg_notify(%s, %s)"
INLINE_ITEMS = 256  # a scan's first query asks for this many (+1 to see whether there is more)
CHUNK_ITEMS = 4096  # a long scan fetches its cursor in chunks of this many
_TABLE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,49}")  # the blob tables add up to 12 characters
_cursor_ids = itertools.count(1)


class _Sql:
    """The statements of one table (composed once, with the table name quoted)."""

    def __init__(self, table: str) -> None:
        t = sql.Identifier(table)
        self.create = sql.SQL("CREATE TABLE IF NOT EXISTS {} (k bytea PRIMARY KEY, v bytea NOT NULL)").format(t)
        self.get = sql.SQL("SELECT v FROM {} WHERE k = %s").format(t)
        self.delete = sql.SQL("DELETE FROM {} WHERE k = ANY(%s)").format(t)
        self.upsert = sql.SQL(
            "INSERT INTO {} (k, v) SELECT * FROM unnest(%s::bytea[], %s::bytea[]) "
            "ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v"
        ).format(t)
        self.vacuum = sql.SQL("VACUUM FULL {}").format(t)
        self._table = t

    def select(self, bounded: bool, reverse: bool, limited: bool) -> sql.Composed:
        where = "k >= %s AND k < %s" if bounded else "k >= %s"
        order = "DESC" if reverse else "ASC"
        limit = " LIMIT %s" if limited else ""
        return sql.SQL("SELECT k, v FROM {} WHERE " + where + " ORDER BY k " + order + limit).format(self._table)


def _validate(ops: Sequence[Op]) -> dict[bytes, bytes | None]:
    """The batch's final state per key (None: deleted), or TypeError before anything is sent."""
    final: dict[bytes, bytes | None] = {}
    for op in ops:
        if not isinstance(op, Put | Delete) or not isinstance(op.key, bytes):
            raise TypeError(f"not a Put/Delete with bytes key: {op!r}")
        if isinstance(op, Put):
            if not isinstance(op.value, bytes):
                raise TypeError(f"value must be bytes: {op!r}")
            final[op.key] = op.value
        else:
            final[op.key] = None
    return final


class _Fenced(Exception):
    """Raised inside a fenced write's transaction (rolling it back) when the lease is stale."""


class _Reader(abc.ABC):
    """What a store and a snapshot share: the queries of ``get`` and ``scan`` (each supplies how
    it runs a call and where a long scan's cursor lives)."""

    _sql: _Sql

    @abc.abstractmethod
    def _check(self) -> None: ...

    @abc.abstractmethod
    async def _run(self, call): ...

    @abc.abstractmethod
    async def _cursor_conn(self) -> tuple[Held, bool]:
        """A connection for a long scan's cursor and whether the scan opens its transaction."""

    @abc.abstractmethod
    async def _cursor_done(self, held: Held, own: bool) -> None: ...

    async def get(self, key: bytes) -> bytes | None:
        self._check()
        query = self._sql.get

        def call(conn):
            row = conn.execute(query, (key,), binary=True).fetchone()
            return None if row is None else row[0]

        return await self._run(call)

    def scan(self, *, prefix=b"", start=None, stop=None, reverse=False, limit=None):
        self._check()
        return self._scan(prefix, start, stop, reverse, limit)

    async def _scan(self, prefix, start, stop, reverse, limit) -> AsyncIterator[tuple[bytes, bytes]]:
        if limit is not None and limit <= 0:
            return
        lower, upper = scan_bounds(prefix, start, stop)
        if upper is not None and upper <= lower:
            return
        self._check()
        bounds = (lower,) if upper is None else (lower, upper)
        short = limit is not None and limit <= CHUNK_ITEMS  # one query returns it all
        want = limit if short else INLINE_ITEMS
        first = self._sql.select(upper is not None, reverse, True)
        rows = await self._run(lambda conn: conn.execute(first, (*bounds, want if short else want + 1), binary=True).fetchall())
        if len(rows) <= want:  # all there is, or all that was asked for: one consistent query
            for index, row in enumerate(rows):
                if index and index % 1024 == 0:
                    await trio.lowlevel.checkpoint()
                yield row[0], row[1]
            return
        async for pair in self._cursor_scan(bounds, upper is not None, reverse, limit):
            yield pair

    async def _cursor_scan(self, bounds, bounded, reverse, limit) -> AsyncIterator[tuple[bytes, bytes]]:
        """A long scan: a server-side cursor in one transaction, fetched in chunks."""
        query = self._sql.select(bounded, reverse, limit is not None)
        params = (*bounds, limit) if limit is not None else bounds
        held, own = await self._cursor_conn()
        name = f"cortexdb_scan_{next(_cursor_ids)}"
        cursor = None
        try:
            def declare(conn):
                if own:
                    conn.execute("BEGIN")
                cur = conn.cursor(name, binary=True)
                cur.execute(query, params)
                return cur

            cursor = await held.run(declare)
            remaining = limit
            while True:
                count = CHUNK_ITEMS if remaining is None else min(CHUNK_ITEMS, remaining)
                rows = await held.run(lambda conn, count=count: cursor.fetchmany(count))
                for row in rows:
                    yield row[0], row[1]
                if remaining is not None:
                    remaining -= len(rows)
                if len(rows) < count or remaining == 0:
                    return
        finally:
            with trio.CancelScope(shield=True):
                if cursor is not None and not own and not held.conn.closed:
                    try:
                        await held.run(lambda conn: cursor.close())
                    except WalUnavailable:  # closed, or the connection broke: nothing left to close
                        pass
                await self._cursor_done(held, own)


class PostgresSnapshot(_Reader):
    def __init__(self, held: Held, store: PostgresStore) -> None:
        self._held = held
        self._store = store
        self._sql = store._sql
        self._closed = False

    def _check(self) -> None:
        if self._closed:
            raise StoreClosed("snapshot is closed")
        self._store._check()

    async def _run(self, call):
        self._check()
        return await self._held.run(call)

    async def _cursor_conn(self) -> tuple[Held, bool]:
        return self._held, False

    async def _cursor_done(self, held: Held, own: bool) -> None:
        return None

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._held.release()
            self._store._held_closed()


class PostgresStore(_Reader):
    """Open with ``await PostgresStore.open(dsn)``; see the module docstring for the SQL."""

    def __init__(self, pool: Pool, table: str) -> None:
        self._pool = pool
        self.table = table
        self._sql = _Sql(table)
        self.blob_store = PostgresBlobStore(pool, table)  # blobs beside the keys (blobs.py)
        self.leases = Leases(pool, table)  # scope-partition leases (leases.py)
        self.closed = False
        self._compacting = trio.Lock()
        self._no_held = False  # while compacting, new snapshots and long scans wait
        self._held = 0  # open snapshots and long scans: a compaction waits for them
        self._held_idle: trio.Event | None = None

    @classmethod
    async def open(cls, dsn: str, *, table: str = DEFAULT_TABLE, pool_size: int = DEFAULT_POOL_SIZE,
                   max_held: int = DEFAULT_MAX_HELD, async_commit: bool = True,
                   stale_upload_seconds: float = STALE_UPLOAD_SECONDS) -> PostgresStore:  # fmt: skip
        """Connect, and create ``table`` (and its blob tables) if missing.  ``async_commit=False``
        for servers without the ``synchronous_commit`` setting (every batch then waits for its
        flush); ``stale_upload_seconds``: blob uploads older than this were left by a crash."""
        if not _TABLE_NAME.fullmatch(table):
            raise ValueError(f"table name {table!r}: lowercase letters, digits and _, at most 50")
        pool = Pool(dsn, size=pool_size, max_held=max_held, async_commit=async_commit)
        store = cls(pool, table)
        create = store._sql.create

        def call(conn):
            try:
                conn.execute(create)
            except psycopg.errors.UniqueViolation:  # another node created it at the same moment
                pass

        try:
            await pool.run(call)
            await store.blob_store.setup(stale_upload_seconds)
            await store.leases.setup()
        except BaseException:
            await pool.close()
            raise
        return store

    def _check(self) -> None:
        if self.closed:
            raise StoreClosed("the PostgreSQL store is closed")

    async def _run(self, call):
        return await self._pool.run(call)

    async def _hold(self) -> Held:
        while self._no_held:
            async with self._compacting:
                pass
        self._check()
        held = await self._pool.hold()
        self._held += 1
        return held

    def _held_closed(self) -> None:
        self._held -= 1
        if not self._held and self._held_idle is not None:
            self._held_idle.set()

    async def _cursor_conn(self) -> tuple[Held, bool]:
        return await self._hold(), True

    async def _cursor_done(self, held: Held, own: bool) -> None:
        await held.release()
        self._held_closed()

    def _statements(self, ops: Sequence[Op]) -> list:
        """The batch as at most two statements: the deletes, then the upserts."""
        final = _validate(ops)
        deletes = [key for key, value in final.items() if value is None]
        puts = [(key, value) for key, value in final.items() if value is not None]
        statements = []
        if deletes:
            statements.append((self._sql.delete, (deletes,)))
        if puts:
            statements.append((self._sql.upsert, ([k for k, _ in puts], [v for _, v in puts])))
        return statements

    async def write(self, ops: Sequence[Op], *, sync: bool = False, notify: Sequence[tuple[str, str]] = ()) -> None:
        """``notify``: ``(channel, payload)`` pairs sent with ``pg_notify`` in the batch's
        transaction, so listeners hear of the batch exactly when it commits (notify.py)."""
        self._check()
        statements = self._statements(ops) + [(_NOTIFY, pair) for pair in notify]
        if not statements:
            await trio.lowlevel.checkpoint()
            return
        synced = sync and self._pool.async_commit

        def call(conn):
            if len(statements) == 1 and not synced:  # one statement is atomic by itself
                conn.execute(*statements[0], binary=True)
                return
            with conn.pipeline(), conn.transaction():
                if synced:
                    conn.execute("SET LOCAL synchronous_commit TO on")
                for statement, params in statements:
                    conn.execute(statement, params, binary=True)

        await self._pool.run(call)

    async def write_fenced(self, lease: Lease, ops: Sequence[Op], *, sync: bool = False,
                           notify: Sequence[tuple[str, str]] = ()) -> None:  # fmt: skip
        """``write``, applied only while ``lease`` is current: its transaction first locks the
        lease row (``FOR SHARE``) and checks owner, token and expiry, so a takeover waits for
        the batch to commit.  ``LeaseLost`` (and nothing written) otherwise (leases.py)."""
        self._check()
        statements = self._statements(ops) + [(_NOTIFY, pair) for pair in notify]
        check, args = self.leases.sql.check, {"part": lease.part, "owner": lease.owner, "token": lease.token}
        synced = sync and self._pool.async_commit

        def call(conn):
            with conn.transaction():
                if synced:
                    conn.execute("SET LOCAL synchronous_commit TO on")
                if conn.execute(check, args).fetchone() is None:
                    raise _Fenced
                for statement, params in statements:
                    conn.execute(statement, params, binary=True)

        try:
            await self._pool.run(call)
        except _Fenced:
            raise LeaseLost("the lease of this partition is no longer current: nothing was written",
                            details={"partition": lease.part, "token": lease.token}) from None

    def listener(self, channel: str) -> Listener:
        """A connection of its own that ``LISTEN``s on ``channel`` (notify.py)."""
        return Listener(self._pool.dsn, channel)

    async def snapshot(self) -> PostgresSnapshot:
        self._check()
        held = await self._hold()

        def begin(conn):
            with conn.pipeline():
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                conn.execute("SELECT 1")  # the snapshot is taken at the first statement

        try:
            await held.run(begin)
        except BaseException:
            await held.release()
            self._held_closed()
            raise
        return PostgresSnapshot(held, self)

    async def compact(self, start: bytes | None = None, stop: bytes | None = None) -> bool:
        return await self.compact_ranges([(start, stop)])

    async def compact_ranges(self, ranges: Sequence[tuple[bytes | None, bytes | None]]) -> bool:
        """``VACUUM FULL`` of the table, whatever the ranges (PostgreSQL rewrites a table
        whole): dead rows are gone from its files.  Waits for this store's snapshots and long
        scans to end (an open transaction would block it), new ones waiting meanwhile."""
        self._check()
        async with self._compacting:
            self._check()
            self._no_held = True
            try:
                while self._held:
                    self._held_idle = trio.Event()
                    await self._held_idle.wait()
                self._held_idle = None
                vacuum = self._sql.vacuum
                await self._pool.run(lambda conn: conn.execute(vacuum))
            finally:
                self._no_held = False
        return True

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            async with self._compacting:
                await self._pool.close()
