"""The WAL sequencer: the node's ``wal_offset`` order (a node service, like those of services.py)."""

from __future__ import annotations

from ..storage import WalTable


class WalSequencer:
    """Node-monotonic ``wal_offset``: restored from the highest WAL key, so it survives restarts.

    With several nodes on one store (``engine/placement.py``) offsets come in blocks from a
    shared counter (``use_blocks``): no two nodes ever give out one offset, and a block taken
    after a partition's takeover lies above every offset its earlier owners gave out.  A capture
    ``await``s ``ensure`` for its group before taking offsets with ``next``."""

    def __init__(self) -> None:
        self.last = 0
        self._take = None  # (count) -> last of a fresh block, when offsets come in blocks
        self._block_size = 0
        self._left = 0  # offsets left in the current block (after ``last``)

    async def restore(self, wal: WalTable) -> None:
        last = await wal.last_offset()
        if last is not None:
            self.last = last

    def use_blocks(self, take, block_size: int) -> None:
        """Take offsets in blocks of ``block_size`` from ``take(count)`` (the last of them)."""
        self._take, self._block_size, self._left = take, block_size, 0

    def fresh(self) -> None:
        """Drop the rest of the current block (a partition was taken over: the next offsets
        must lie above every offset its earlier owner gave out)."""
        self._left = 0

    async def ensure(self, count: int) -> None:
        """``count`` offsets are ready for ``next`` (a no-op on one node)."""
        while self._take is not None and self._left < count:
            size = max(count, self._block_size)
            last = await self._take(size)
            if last - size >= self.last:  # (a concurrent ensure may have installed a later block)
                self.last, self._left = last - size, size

    def next(self) -> int:
        if self._take is not None:
            if self._left <= 0:
                raise AssertionError("WalSequencer.next without ensure")
            self._left -= 1
        self.last += 1
        return self.last
