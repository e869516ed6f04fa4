"""LISTEN on a channel, from Trio: a connection of its own, read by one worker thread.

``PostgresStore.write(..., notify=[(channel, payload)])`` sends ``pg_notify`` inside the batch's
transaction, so PostgreSQL delivers the payload to every listener when (and only if) the batch
commits, in commit order.  ``Listener.run(deliver)`` calls ``deliver(payload)`` on the Trio
thread for each one, in order, until cancelled (the thread notices within ``POLL`` seconds and
closes its connection).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import psycopg
import trio
from psycopg import sql

log = logging.getLogger("cortexdb.postgres")
RETRY = 1.0  # seconds before a failed LISTEN connection is reopened
POLL = 0.5  # seconds the thread waits for a notification before checking whether to stop


class Listener:
    def __init__(self, dsn: str, channel: str) -> None:
        self._dsn = dsn
        self.channel = channel

    async def run(self, deliver: Callable[[str], None], task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Listen (``task_status.started()`` once the LISTEN is in place) until cancelled; a
        lost connection is reopened after ``RETRY`` seconds (what was sent meanwhile is lost)."""
        while True:
            try:
                await self._session(deliver, task_status)
            except (psycopg.Error, OSError) as exc:
                log.warning("LISTEN %s: the connection failed (%r); listening again in %.0f s", self.channel, exc, RETRY)
            task_status = trio.TASK_STATUS_IGNORED
            await trio.sleep(RETRY)

    async def _session(self, deliver: Callable[[str], None], task_status) -> None:
        stop = threading.Event()
        token = trio.lowlevel.current_trio_token()
        conn = await trio.to_thread.run_sync(lambda: psycopg.connect(self._dsn, autocommit=True))
        try:
            await trio.to_thread.run_sync(conn.execute, sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        except BaseException:
            conn.close()
            raise
        task_status.started()

        def loop() -> None:
            try:
                while not stop.is_set():
                    for note in conn.notifies(timeout=POLL):
                        if stop.is_set():
                            break
                        trio.from_thread.run_sync(deliver, note.payload, trio_token=token)
            except (trio.RunFinishedError, trio.Cancelled):
                pass
            finally:
                conn.close()

        try:
            await trio.to_thread.run_sync(loop, abandon_on_cancel=True)
        finally:
            stop.set()
