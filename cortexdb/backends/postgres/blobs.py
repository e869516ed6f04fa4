"""Blobs in PostgreSQL beside the KV table, so every node that shares the table shares them.

Three tables, named after the KV table ``t``:

- ``t_blobs (digest text PRIMARY KEY, size bigint)``: the committed contents;
- ``t_blob_chunks (digest, seq, data bytea)``: their bytes, in chunks of at most ``CHUNK_BYTES``;
- ``t_uploads (upload, seq, data, created)``: uploads in progress, a chunk per row as it fills.

``commit`` moves an upload's rows into ``t_blob_chunks`` and adds its ``t_blobs`` row in one
transaction (nothing if the digest is already there), so a digest names its whole content or
nothing, whatever crashes when.  An upload left by a crashed process is deleted once older than
``stale_upload_seconds`` (default one day) by the next store to open: another node may still be
writing a younger one.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator

import psycopg
import trio
from psycopg import sql

from ...engine.spi.blobs import CHUNK_SIZE, check_digest
from ...errors import NotFound
from .pool import Pool

CHUNK_BYTES = 1 << 20
STALE_UPLOAD_SECONDS = 86_400
PAGE = 1000  # digests listed per query


class _BlobSql:
    def __init__(self, table: str) -> None:
        blobs, chunks, uploads = (sql.Identifier(f"{table}_{name}") for name in ("blobs", "blob_chunks", "uploads"))
        self.create = [
            sql.SQL("CREATE TABLE IF NOT EXISTS {} (digest text PRIMARY KEY, size bigint NOT NULL)").format(blobs),
            sql.SQL("CREATE TABLE IF NOT EXISTS {} (digest text, seq integer, data bytea NOT NULL, "
                    "PRIMARY KEY (digest, seq))").format(chunks),  # fmt: skip
            sql.SQL("CREATE TABLE IF NOT EXISTS {} (upload text, seq integer, data bytea NOT NULL, "
                    "created timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (upload, seq))").format(uploads),  # fmt: skip
        ]
        self.stale = sql.SQL("DELETE FROM {} WHERE created < now() - make_interval(secs => %s)").format(uploads)
        self.stage = sql.SQL("INSERT INTO {} (upload, seq, data) VALUES (%s, %s, %s)").format(uploads)
        self.unstage = sql.SQL("DELETE FROM {} WHERE upload = %s").format(uploads)
        self.claim = sql.SQL("INSERT INTO {} (digest, size) VALUES (%s, %s) ON CONFLICT (digest) DO NOTHING "
                             "RETURNING digest").format(blobs)  # fmt: skip
        self.move = sql.SQL("INSERT INTO {} (digest, seq, data) SELECT %s, seq, data FROM {} WHERE upload = %s").format(chunks, uploads)
        self.size = sql.SQL("SELECT size FROM {} WHERE digest = %s").format(blobs)
        self.chunk = sql.SQL("SELECT data FROM {} WHERE digest = %s AND seq = %s").format(chunks)
        self.delete = sql.SQL("DELETE FROM {} WHERE digest = %s RETURNING digest").format(blobs)
        self.delete_chunks = sql.SQL("DELETE FROM {} WHERE digest = %s").format(chunks)
        self.page = sql.SQL("SELECT digest FROM {} WHERE digest > %s ORDER BY digest LIMIT %s").format(blobs)


class PostgresUpload:
    def __init__(self, store: PostgresBlobStore) -> None:
        self._store = store
        self._id = uuid.uuid4().hex
        self._hash = hashlib.sha256()
        self._size = 0
        self._buffer = bytearray()
        self._seq = 0
        self._staged = False
        self._done = False

    async def _flush(self, data: bytes) -> None:
        query, upload, seq = self._store._sql.stage, self._id, self._seq
        self._seq += 1
        self._staged = True
        await self._store._pool.run(lambda conn: conn.execute(query, (upload, seq, data), binary=True))

    async def write(self, data: bytes) -> None:
        if self._done:
            raise ValueError("this upload is finished")
        self._hash.update(data)
        self._size += len(data)
        self._buffer += data
        while len(self._buffer) >= CHUNK_BYTES:
            chunk = bytes(self._buffer[:CHUNK_BYTES])
            del self._buffer[:CHUNK_BYTES]
            await self._flush(chunk)
        await trio.lowlevel.checkpoint()

    async def commit(self) -> tuple[str, int]:
        if self._done:
            raise ValueError("this upload is finished")
        if self._buffer:
            await self._flush(bytes(self._buffer))
            self._buffer.clear()
        self._done = True
        digest, size, q, upload = self._hash.hexdigest(), self._size, self._store._sql, self._id

        def call(conn):
            with conn.pipeline(), conn.transaction():
                claimed = conn.execute(q.claim, (digest, size)).fetchone()
                if claimed is not None:
                    conn.execute(q.move, (digest, upload))
                conn.execute(q.unstage, (upload,))

        await self._store._pool.run(call)
        return digest, size

    async def abort(self) -> None:
        was_done, self._done = self._done, True
        self._buffer.clear()
        if self._staged and not was_done:
            query, upload = self._store._sql.unstage, self._id
            await self._store._pool.run(lambda conn: conn.execute(query, (upload,)))
        else:
            await trio.lowlevel.checkpoint()


class PostgresBlobStore:
    def __init__(self, pool: Pool, table: str) -> None:
        self._pool = pool
        self._sql = _BlobSql(table)

    async def setup(self, stale_upload_seconds: float = STALE_UPLOAD_SECONDS) -> None:
        """Create the tables if missing; delete the uploads crashed processes left."""
        statements, stale = self._sql.create, self._sql.stale

        def call(conn):
            for statement in statements:
                try:
                    conn.execute(statement)
                except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable):
                    pass  # another node created it at the same moment (several nodes start at once)
            conn.execute(stale, (stale_upload_seconds,))

        await self._pool.run(call)

    async def begin(self) -> PostgresUpload:
        await trio.lowlevel.checkpoint()
        return PostgresUpload(self)

    async def has(self, digest: str) -> bool:
        return await self.size(digest) is not None

    async def size(self, digest: str) -> int | None:
        query, digest = self._sql.size, check_digest(digest)
        row = await self._pool.run(lambda conn: conn.execute(query, (digest,)).fetchone())
        return None if row is None else row[0]

    async def read(self, digest: str, *, chunk_size: int = CHUNK_SIZE) -> AsyncIterator[bytes]:
        if await self.size(digest) is None:
            raise NotFound("no stored blob content has this digest", details={"sha256": digest})
        query, seq, pending = self._sql.chunk, 0, b""
        while True:
            row = await self._pool.run(lambda conn, seq=seq: conn.execute(query, (digest, seq), binary=True).fetchone())
            if row is None:
                break
            seq += 1
            pending += row[0]
            while len(pending) >= chunk_size:
                yield pending[:chunk_size]
                pending = pending[chunk_size:]
        if pending:
            yield pending

    async def delete(self, digest: str) -> bool:
        q, digest = self._sql, check_digest(digest)

        def call(conn):
            with conn.pipeline(), conn.transaction():
                gone = conn.execute(q.delete, (digest,)).fetchone()
                conn.execute(q.delete_chunks, (digest,))
            return gone is not None

        return await self._pool.run(call)

    async def digests(self) -> AsyncIterator[str]:
        query, after = self._sql.page, ""
        while True:
            rows = await self._pool.run(lambda conn, after=after: conn.execute(query, (after, PAGE)).fetchall())
            for (digest,) in rows:
                yield digest
            if len(rows) < PAGE:
                return
            after = rows[-1][0]
