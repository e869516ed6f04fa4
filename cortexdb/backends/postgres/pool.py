"""Connections to PostgreSQL for a Trio program: blocking psycopg calls in worker threads.

psycopg's async API needs asyncio, so each call runs the *blocking* driver in a Trio worker
thread (docs/decisions.md, "PostgreSQL from Trio", has the measurements against asyncpg over
trio-asyncio).  A thread call does its whole exchange with the server (often one round trip:
statements are pipelined) and returns; Trio's thread cache keeps the threads warm.

Two kinds of use:

- ``run(call)``: ``call(conn)`` on a pooled connection, at most ``size`` at once (a
  ``CapacityLimiter``); the connection goes back to the pool when the call returns.
- ``hold()``: a connection kept across many calls (a snapshot's transaction, a long scan's
  cursor), at most ``max_held`` at once; it does not count against ``size``, so a task that
  iterates a scan and reads inside the loop cannot starve itself.

A connection that broke (server restart, network) is closed and replaced by a fresh one on the
next call; the error of the call that saw it break is raised as ``WalUnavailable``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import psycopg
import trio
from psycopg.pq import TransactionStatus

from ...errors import StoreClosed, WalUnavailable

T = TypeVar("T")


class Pool:
    def __init__(self, dsn: str, *, size: int, max_held: int, async_commit: bool) -> None:
        if size < 1 or max_held < 1:
            raise ValueError("pool_size and max_held must be at least 1")
        self._dsn = dsn
        self._size = size
        self.async_commit = async_commit
        self._idle: list[psycopg.Connection] = []
        self._lock = threading.Lock()
        self._limiter = trio.CapacityLimiter(size)
        self._held = trio.Semaphore(max_held)
        self.closed = False

    @property
    def dsn(self) -> str:
        return self._dsn

    def _connect(self) -> psycopg.Connection:
        conn = psycopg.connect(self._dsn, autocommit=True)
        if self.async_commit:  # unsynced batches skip the WAL flush; ``sync=True`` turns it on
            conn.execute("SET synchronous_commit TO off")
        return conn

    def _take(self) -> psycopg.Connection:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        try:
            return self._connect()
        except psycopg.Error as exc:
            raise WalUnavailable(f"cannot connect to PostgreSQL: {exc}") from exc

    def _give(self, conn: psycopg.Connection) -> None:
        if not conn.closed and not conn.broken:
            if conn.info.transaction_status != TransactionStatus.IDLE:
                try:
                    conn.rollback()
                except psycopg.Error:
                    conn.close()
            with self._lock:
                if not self.closed and not conn.closed and len(self._idle) < self._size:
                    self._idle.append(conn)
                    return
        conn.close()

    def _check(self) -> None:
        if self.closed:
            raise StoreClosed("the PostgreSQL store is closed")

    async def run(self, call: Callable[[psycopg.Connection], T]) -> T:
        """``call(conn)`` in a worker thread on a pooled connection (never abandoned midway)."""
        self._check()

        def work() -> T:
            conn = self._take()
            try:
                return _driver_errors(call, conn)
            finally:
                self._give(conn)

        return await trio.to_thread.run_sync(work, limiter=self._limiter)

    async def hold(self) -> Held:
        """A connection of one's own until ``Held.release``."""
        self._check()
        await self._held.acquire()
        try:
            conn = await trio.to_thread.run_sync(self._take)
        except BaseException:
            self._held.release()
            raise
        return Held(self, conn)

    async def close(self) -> None:
        with self._lock:
            self.closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            await trio.to_thread.run_sync(conn.close)


class Held:
    """A connection held across calls; its calls are serialised by psycopg's connection lock."""

    def __init__(self, pool: Pool, conn: psycopg.Connection) -> None:
        self._pool = pool
        self.conn = conn
        self.released = False

    async def run(self, call: Callable[[psycopg.Connection], T]) -> T:
        self._pool._check()
        if self.released:  # the connection is back in the pool: someone else's now
            raise StoreClosed("this snapshot or scan is closed")
        return await trio.to_thread.run_sync(_driver_errors, call, self.conn)

    async def release(self) -> None:
        """Roll back what the connection has open and give it back (shielded: always done)."""
        if self.released:
            return
        self.released = True
        with trio.CancelScope(shield=True):
            try:
                await trio.to_thread.run_sync(self._pool._give, self.conn)
            finally:
                self._pool._held.release()


def _driver_errors(call: Callable[[psycopg.Connection], T], conn: psycopg.Connection) -> T:
    """Run ``call``; any failure of the server, the connection or a statement is
    ``WalUnavailable`` (503, retriable): the store holds only bytes, so an error is never the
    caller's input."""
    try:
        return call(conn)
    except psycopg.Error as exc:
        raise WalUnavailable(f"PostgreSQL failed: {type(exc).__name__}: {exc}") from exc
