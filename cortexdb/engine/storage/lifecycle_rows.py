"""How a lifecycle record is stored (table ``L``): its wire form without what it repeats.

Every event writes four records that live as long as the replay window, so each byte is written
and compacted four times an event.  The stored JSON leaves out a ``batch_id`` or ``job_id`` that
is null, and the payload's leading ``event_id`` when it is the record's own: such a payload is
stored as ``p``, the rest of its fields in their order (decisions.md, "Fewer bytes written per
event").  Reading puts them back, so the record (and what SSE, WebSocket and
``GET /v1/lifecycle/...`` serve) is the same; rows written before, with every field, read as
they did.  ``prune`` reads the rows as JSON for ``ts`` alone, which stays.
"""

from __future__ import annotations

from typing import Any

from .. import jsoncodec
from ..model import LifecycleEvent, converter


class LifecycleRows:
    """The codec of table ``L`` (a ``Records(LifecycleEvent)`` with ``compact`` and ``expand``)."""

    cls = LifecycleEvent

    def __init__(self) -> None:
        self._unstructure = converter.get_unstructure_hook(LifecycleEvent)
        self._structure = converter.get_structure_hook(LifecycleEvent)

    def encode(self, value: LifecycleEvent) -> bytes:
        return jsoncodec.encode(compact(self._unstructure(value)))

    def decode(self, raw: bytes) -> LifecycleEvent:
        return self._structure(expand(jsoncodec.decode(raw)), LifecycleEvent)


def compact(data: dict[str, Any]) -> dict[str, Any]:
    """The stored form of a record's wire dict (``model.converter.lifecycle_wire``)."""
    if data.get("job_id", 0) is None:
        del data["job_id"]
    if data.get("batch_id", 0) is None:
        del data["batch_id"]
    payload, event_id = data.get("payload"), data.get("event_id")
    if payload and event_id is not None and next(iter(payload)) == "event_id" and payload["event_id"] == event_id:
        del data["payload"]
        data["p"] = {key: value for key, value in payload.items() if key != "event_id"}
    return data


def expand(data: dict[str, Any]) -> dict[str, Any]:
    """A stored row's wire dict again (a row written before ``compact`` is one already)."""
    rest = data.pop("p", None)
    if rest is not None:
        data["payload"] = {"event_id": data["event_id"], **rest}
    return data
