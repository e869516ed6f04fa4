"""How streamed records read on the wire: SSE frames, and the lifecycle frames every stream of
one server shares (``FrameCache``: a published record is encoded once, not once per subscriber;
issue 10 part 8, docs/decisions.md "Lifecycle fan-out")."""

from __future__ import annotations

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
        self._sse: dict[str, bytes] = {}
        self._ws: dict[str, str] = {}
        self.encoded = 0  # how many records were encoded (statistics, tests)

    def sse(self, record: LifecycleEvent) -> bytes:
        frame = self._sse.get(record.lifecycle_id)
        if frame is None:
            frame = sse_frame(record.lifecycle_id, record.stage, lifecycle_wire(record))
            self._keep(self._sse, record.lifecycle_id, frame)
        return frame

    def ws(self, record: LifecycleEvent) -> str:
        frame = self._ws.get(record.lifecycle_id)
        if frame is None:
            frame = jsoncodec.encode({"type": "lifecycle", "id": record.lifecycle_id, "event": record.stage,
                                      "data": lifecycle_wire(record)}).decode()  # fmt: skip
            self._keep(self._ws, record.lifecycle_id, frame)
        return frame

    def _keep(self, cache: dict[str, Any], key: str, frame: Any) -> None:
        self.encoded += 1
        if len(cache) >= self.capacity:
            del cache[next(iter(cache))]  # insertion order: the oldest
        cache[key] = frame
