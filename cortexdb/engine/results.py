"""The engine's typed results: what a write answers (``ExperienceResult``, ``BulkResult``) and
the scopes one read covers (``Traversal``).  ``to_wire`` is the reference's body of each."""

from __future__ import annotations

from typing import Any

import attrs


@attrs.frozen
class ExperienceResult:
    """The answer to one write (reference §8.1)."""

    event_id: str
    status: str  # captured | indexed | consolidated | cancelled
    wal_offset: int
    scope: str
    replay: bool = False
    stages_completed: tuple[str, ...] | None = None
    derives: tuple[str, ...] | None = None
    elapsed_ms: dict[str, float] | None = None

    @property
    def lifecycle_stream(self) -> str:
        return f"/v1/lifecycle/stream?event_id={self.event_id}"

    def to_wire(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "event_id": self.event_id,
            "status": self.status,
            "wal_offset": self.wal_offset,
            "lifecycle_stream": self.lifecycle_stream,
        }
        if self.stages_completed is not None:
            body["stages_completed"] = list(self.stages_completed)
            body["derives"] = list(self.derives or ())
            body["elapsed_ms"] = dict(self.elapsed_ms or {})
        return body


@attrs.frozen
class BulkResult:
    """The answer to a bulk write (reference §8.2): always asynchronous."""

    batch_id: str
    accepted: int
    replayed: int
    scope: str
    ordering: str

    @property
    def lifecycle_stream(self) -> str:
        return f"/v1/lifecycle/stream?batch_id={self.batch_id}"

    def to_wire(self) -> dict[str, Any]:
        return {
            "batch_id": self.batch_id,
            "accepted": self.accepted,
            "replayed": self.replayed,
            "ordering": self.ordering,
            "lifecycle_stream": self.lifecycle_stream,
        }


@attrs.frozen
class Traversal:
    """The scopes one read covers: the one traversal rule of recall and every layer read
    (docs/decisions.md, "One traversal").  ``scopes`` are readable, the start scope first;
    ``denied`` are the scopes the view reaches but the caller may not read, as §18.2 item 4
    placeholders (``{scope, denied, item_count, denied_reason}``: existence, never content)."""

    view: str
    scopes: tuple[str, ...]
    denied: tuple[dict[str, Any], ...] = ()
