"""Reading the lifecycle (reference §8.9, §13): one record, the catch-up history, live
subscriptions — the lifecycle bus's records in their wire form."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from ..errors import NotFound
from .actors.bus import LifecycleBus, LifecycleFilter, Subscription
from .model import LifecycleEvent, to_wire
from .scopes import canonical_scope


def make_filter(*, scope: str | None = None, event_id: str | None = None, batch_id: str | None = None,
                job_id: str | None = None, events: Any = None) -> LifecycleFilter:  # fmt: skip
    kinds = frozenset(events.split(",") if isinstance(events, str) else events) if events else None
    return LifecycleFilter(scope=canonical_scope(scope) if scope else None, event_id=event_id,
                           batch_id=batch_id, job_id=job_id, events=kinds)  # fmt: skip


def lifecycle_wire(record: LifecycleEvent) -> dict[str, Any]:
    wire = to_wire(record)
    return {k: v for k, v in wire.items() if v is not None}


async def record(bus: LifecycleBus, lifecycle_id: str) -> dict[str, Any]:
    found = await bus.get(lifecycle_id)
    if found is None:
        raise NotFound(f"no lifecycle event {lifecycle_id} in the replay window",
                       details={"lifecycle_id": lifecycle_id})  # fmt: skip
    return lifecycle_wire(found)


async def history(bus: LifecycleBus, *, since_lifecycle_id: str | None, limit: int,
                  **filters: Any) -> list[dict[str, Any]]:  # fmt: skip
    """Catch-up: published lifecycle rows after ``since_lifecycle_id``, in lce order (§8.9.4)."""
    records = await bus.history(make_filter(**filters), after=since_lifecycle_id, limit=limit)
    return [lifecycle_wire(r) for r in records]


@asynccontextmanager
async def subscription(bus: LifecycleBus, *, since_lifecycle_id: str | None, capacity: int,
                       **filters: Any) -> AsyncIterator[Subscription]:  # fmt: skip
    subscribed = await bus.subscribe(make_filter(**filters), since_lifecycle_id=since_lifecycle_id,
                                     capacity=capacity)  # fmt: skip
    try:
        yield subscribed
    finally:
        subscribed.close()
