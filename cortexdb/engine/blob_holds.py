"""Holds: the blobs writes in progress refer to (``engine/blobs.py``, "References and deletions
serialise").

A write checks its blob references under the blob service's lock and adds each blob to its
``BlobHold``; a release or a garbage collection, under the same lock, keeps every held blob
(``Holds.held``).  The write releases its hold once the capture that stores its references is
answered — committed or failed.  A write whose caller was cancelled while the capture waited in
the scope's mailbox cannot know when (or whether) it will commit: its hold is *detached* and
lasts until the capture is answered, or ``DETACHED_HOLD_SECONDS`` (a capture never delivered).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import trio

#: how long a hold outlives a write whose caller stopped waiting (the capture may still commit)
DETACHED_HOLD_SECONDS = 300.0


class Holds:
    """The pin counts of one blob service's blobs, and the detached holds."""

    def __init__(self) -> None:
        self.pins: Counter[str] = Counter()
        self.detached: list[tuple[float, BlobHold]] = []

    def held(self, blob_id: str) -> bool:
        """Whether a write in progress refers to the blob (detached holds settled first)."""
        if self.detached:
            now = trio.current_time()
            for entry in list(self.detached):
                deadline, hold = entry
                if hold.settled() or now >= deadline:
                    self.detached.remove(entry)
                    hold.unpin()
        return self.pins.get(blob_id, 0) > 0


class BlobHold:
    """The blobs one write refers to: no release or collection deletes them until ``release``
    (a ``with`` block releases it)."""

    def __init__(self, holds: Holds) -> None:
        self._holds = holds
        self.ids: list[str] = []
        self.reply: Any = None  # the capture's ReplySlot, once built

    def __enter__(self) -> BlobHold:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def add(self, blob_id: str) -> None:
        self._holds.pins[blob_id] += 1
        self.ids.append(blob_id)

    def bind(self, capture: Any) -> Any:
        """The capture message carrying the write: the hold lasts until it is answered."""
        self.reply = capture.reply
        return capture

    def settled(self) -> bool:
        return self.reply is None or self.reply.answered

    def release(self) -> None:
        if not self.ids:
            return
        if not self.settled():
            self._holds.detached.append((trio.current_time() + DETACHED_HOLD_SECONDS, self))
            return
        self.unpin()

    def unpin(self) -> None:
        pins = self._holds.pins
        for blob_id in self.ids:
            pins[blob_id] -= 1
            if pins[blob_id] <= 0:
                del pins[blob_id]
        self.ids = []
