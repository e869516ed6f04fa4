"""What lets a scope actor be released (``residency`` chooses which scopes, ``supervisor`` asks):
``Releasable``, a part of ``ScopeActor`` kept apart from its mailbox and handlers."""

from __future__ import annotations

from typing import Any

from .messages import Stop
from .residency import MEMBER_ROW_BYTES, scope_bytes


class Releasable:
    """Mixed into ``ScopeActor``: the idle check, the release itself, the memory estimate."""

    ctx: Any
    lane: Any
    inflight: Any
    episode_cache: Any
    tables: Any
    released: bool
    _receive: Any
    _reads: int

    def releasable(self) -> bool:
        """Nothing in hand: no message waiting, no read running, no reply owed, the lane idle
        (nothing queued or running, no vector build).  Releasing then loses nothing: the lane
        is at a batch boundary and every pending marker and foreign item is in storage."""
        channel = self._receive.statistics()
        return (self.lane.idle and not self._reads and channel.current_buffer_used == 0
                and channel.tasks_waiting_send == 0
                and all(reply.answered for reply in self.inflight))  # fmt: skip

    def release_if_idle(self, message: Stop, rest: list) -> bool:
        """A release (``Stop`` with a reply): stop if nothing follows it and nothing is in hand."""
        self.inflight.discard(message.reply)
        if rest or not self.releasable():
            message.reply.set(False)
            return False
        self.released = True
        self._receive.close()  # senders now see BrokenResourceError, wait for us, and reopen
        message.reply.set(True)
        return True

    def estimated_bytes(self) -> int:
        rows = self.tables.episodes.rows_cache
        kept_rows = rows.rows * MEMBER_ROW_BYTES if rows is not None else 0
        return scope_bytes(self.lane.state, len(self.episode_cache)) + kept_rows

    def drop_state(self) -> None:
        """Let go of the indexes and decoded records (the actor has stopped)."""
        self.lane.state.reset(self.ctx, keep_files=True)
        self.episode_cache.clear()
        self.clear_rows()

    def clear_rows(self) -> None:
        """Drop the open episodes' member rows kept decoded (storage/episode_rows.py): every read
        checks them against the stored header anyway; a forget, a rebuild, resegmentation and a
        release let them go at once rather than when each episode is next read."""
        rows = self.tables.episodes.rows_cache
        if rows is not None:
            rows.clear()
