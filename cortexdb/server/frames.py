"""How streamed records read on the wire: SSE frames, and the lifecycle frames every stream of
one server shares (``FrameCache``: a published record is encoded once, not once per subscriber;
issue 10 part 8, docs/decisions.md "Lifecycle fan-out")."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..engine import jsoncodec
from ..engine.engine import lifecycle_wire
from ..engine.model import LifecycleEvent


def sse_frame(event_id: str | None, event: str, data: Any) -> bytes:
    head = f"id: {event_id}\n" if event_id else ""
    return f"{head}event: {event}\ndata: ".encode() + jsoncodec.encode(data) + b"\n\n"


class FrameCache:
    """The encoded frames of published lifecycle records, shared by every stream of one server:
    a record is encoded once however many subscribers receive it.  Bounded: the oldest entries
    go first (a subscriber far behind re-encodes, which is correct, only slower)."""

    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = capacity
        self._sse: dict[str, tuple[LifecycleEvent, bytes]] = {}
        self._ws: dict[str, tuple[LifecycleEvent, str]] = {}
        self.encoded = 0  # how many records were encoded (statistics, tests)

    def sse(self, record: LifecycleEvent) -> bytes:
        entry = self._sse.get(record.lifecycle_id)  # (the hit inline: no closure made per record)
        if entry is not None and entry[0] is record:
            return entry[1]
        return self._frame(self._sse, record, lambda: sse_frame(record.lifecycle_id, record.stage,
                                                                lifecycle_wire(record)))  # fmt: skip

    def sse_chunk(self, batch: Iterable[Any]) -> bytes:
        """One SSE chunk: the frames of a batch's records (``sse``) and control frames
        ``(id, event, data)``, in order."""
        cache, frames = self._sse, []
        for item in batch:
            if isinstance(item, LifecycleEvent):
                entry = cache.get(item.lifecycle_id)
                frames.append(entry[1] if entry is not None and entry[0] is item else self.sse(item))
            else:
                frames.append(sse_frame(*item))
        return b"".join(frames)

    def ws(self, record: LifecycleEvent) -> str:
        entry = self._ws.get(record.lifecycle_id)
        if entry is not None and entry[0] is record:
            return entry[1]
        return self._frame(self._ws, record, lambda: jsoncodec.encode(
            {"type": "lifecycle", "id": record.lifecycle_id, "event": record.stage,
             "data": lifecycle_wire(record)}).decode())  # fmt: skip

    def _frame(self, cache: dict[str, Any], record: LifecycleEvent, encode: Any) -> Any:
        """The cached frame of *this* record object: every subscriber of a live record shares
        it, while a record read back for a resume is encoded afresh (a forget may have rewritten
        the stored row since the frame was made)."""
        entry = cache.get(record.lifecycle_id)
        if entry is not None and entry[0] is record:
            return entry[1]
        frame = encode()
        self.encoded += 1
        cache.pop(record.lifecycle_id, None)
        if len(cache) >= self.capacity:
            del cache[next(iter(cache))]  # insertion order: the oldest
        cache[record.lifecycle_id] = (record, frame)
        return frame
