"""``context.preceded_by`` on re-import: the exporting engine's event ids become ours.

A line of our JSONL export names its event (``id``) and the events it follows
(``envelope.context.preceded_by``), both the exporting engine's ids.  The import keeps, for the
last ``import_link_memory`` events it wrote (or replayed) from such lines, which event of ours
each source id became (read back from the idempotency key it was written with), and rewrites
each ``preceded_by`` entry it knows before the record is written.  A bulk request is cut before
a record that follows one of the same request (its id is not known until that one is
committed), so a chain of replies is written in order.  An entry it does not know (an event not
in the file, or further back than the memory) is kept as written: a plain envelope's
``preceded_by`` names this engine's own events.  A record whose links were rewritten is a replay
when its key is live, whatever links an earlier import gave it (``Item.replay_by_key``).

A job resumed after a crash learns the ids of the records it committed before (the ones it
skips) the same way, so the records after them link to them as an uninterrupted job would.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from .mapping import Item

Lookup = Callable[[str], Awaitable[str | None]]  # an idempotency key -> the event id it wrote


class SourceIds:
    """Source event id -> our event id, for the last ``limit`` records learnt (oldest dropped)."""

    def __init__(self, limit: int) -> None:
        self._ids: dict[str, str] = {}
        self._limit = max(0, limit)

    def __len__(self) -> int:
        return len(self._ids)

    def get(self, source_id: str) -> str | None:
        return self._ids.get(source_id)

    def add(self, source_id: str, ours: str) -> None:
        self._ids.pop(source_id, None)  # the newest last: the first dropped is the oldest learnt
        self._ids[source_id] = ours
        while len(self._ids) > self._limit:
            del self._ids[next(iter(self._ids))]

    async def learn(self, items: list[Item], lookup: Lookup) -> None:
        """Our event id for each of ``items`` that names its source event (written or replayed)."""
        if not self._limit:
            return
        for item in items:
            if item.source_id is None or item.envelope is None:
                continue
            key = item.envelope.get("idempotency_key")
            ours = await lookup(key) if isinstance(key, str) else None
            if ours is not None:
                self.add(item.source_id, ours)

    def translate(self, items: list[Item]) -> None:
        """Rewrite the ``preceded_by`` entries this map knows, in place (the envelopes are the
        importer's own dicts); a record rewritten replays by key (``replay_by_key``)."""
        for item in items:
            context = _context(item)
            links = context.get("preceded_by") if context is not None else None
            if not isinstance(links, list):
                continue
            ours = [self._ids.get(link, link) if isinstance(link, str) else link for link in links]
            if ours != links:
                context["preceded_by"] = ours
                item.replay_by_key = True


def linked(items: list[Item]) -> bool:
    """Whether any of ``items`` has a ``preceded_by`` to translate."""
    return any(item.source_id is not None and (_context(item) or {}).get("preceded_by") for item in items)


def parts(items: list[Item]) -> Iterator[list[Item]]:
    """``items`` in runs, each cut before a record that follows one of the run before it."""
    run: list[Item] = []
    sources: set[str] = set()
    for item in items:
        context = _context(item)
        links = (context or {}).get("preceded_by")
        if run and isinstance(links, list) and any(isinstance(link, str) and link in sources for link in links):
            yield run
            run, sources = [], set()
        run.append(item)
        if item.source_id is not None:
            sources.add(item.source_id)
    if run:
        yield run


def _context(item: Item) -> dict[str, Any] | None:
    envelope = item.envelope
    context = envelope.get("context") if isinstance(envelope, dict) else None
    return context if isinstance(context, dict) else None
