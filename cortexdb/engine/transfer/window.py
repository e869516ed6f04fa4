"""A window of records as an import job holds it, and what the job gives back after each.

A ``batch_throughput`` job reads a window (``bulk_max_items`` records) in a thread while the one
before it is written, a piece at a time as the one before shrinks (``Pacer``), so it holds one
window of mapped records and a piece, whatever the file's length (``strict_temporal`` sorts on
disk instead: ``extsort.py``, whose key is ``order`` here).  ``prepare`` runs in that thread as
each record is read: it takes the record's scope out of its envelope there, off the job's loop.  The loop writes a window a bulk request at a time and
``release``\\ s each request's envelopes once written, so a window shrinks as it is written.

What the window freed is given back to the operating system after every ``import_window``
records (``memtrim.release_free_memory_soon``, as after a vector segment is built): a mapped
record is a tree of small objects (envelope, context, labels, actors), and windows of them freed
one after another, while the engine allocates its own long-lived state in between, left free
heap pages mapped to the process, so the job's RSS grew with the file's length
(docs/decisions.md, "Import memory: windows released and trimmed").
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import trio

from ..temporal import try_parse_rfc3339
from .mapping import Item


def prepare(item: Item, strict: bool) -> Item:
    """``item`` as a window holds it (in the reading thread): ``scope`` taken out of its
    envelope (the bulk request names it), its ``observed_at`` order computed (``strict``)."""
    envelope = item.envelope
    if not isinstance(envelope, dict):
        return item
    item.scope = envelope.pop("scope", None)
    if strict:
        item.order = order(envelope, item.position)
    return item


def release(items: list[Item]) -> None:
    """Drop the written records' envelopes: a window shrinks as its requests are written."""
    for item in items:
        item.envelope = None


def order(envelope: dict[str, Any], position: int) -> tuple[bool, float, int]:
    """The ``strict_temporal`` sort key: ``observed_at``, then the file's order (records without
    a readable time last)."""
    context = envelope.get("context")
    text = context.get("observed_at") if isinstance(context, dict) else None
    if type(text) is str and len(text) == 20 and text[19] == "Z" and text[10] == "T" and text[:4].isdigit():
        try:  # the common YYYY-MM-DDTHH:MM:SSZ, by the C parser: the same instant the strict one reads
            return (False, dt.datetime.fromisoformat(text).timestamp(), position)
        except ValueError:
            pass  # a leap second, a date that does not exist, ...: the strict parser decides
    value = try_parse_rfc3339(str(text)) if isinstance(context, dict) else None
    return (value is None, value.timestamp() if value is not None else 0.0, position)


class Pacer:
    """The records an import holds mapped (read and not yet written), at most ``limit``: the
    window being written and the next, read a piece at a time as the first is written
    (docs/decisions.md, "Import memory: the next window is read as this one is written")."""

    def __init__(self, limit: int) -> None:
        self.free = limit
        self._freed = trio.Event()
        self._given = 0  # of the window being written

    def give(self, count: int) -> None:
        if count > 0:
            self.free += count
            self._freed.set()
            self._freed = trio.Event()

    async def take(self, count: int) -> None:
        while self.free < count:
            await self._freed.wait()
        self.free -= count

    def written(self, count: int) -> None:
        """``count`` records of the window being written were written and released."""
        self._given += count
        self.give(count)

    def window_done(self, size: int) -> None:
        """The window of ``size`` records is done (written, failed or skipped): all of it freed."""
        self.give(size - self._given)
        self._given = 0


async def read_window(read: Callable[[int], tuple[list[Item], int]], size: int, piece: int, pacer: Pacer,
                      run: Any = trio.to_thread.run_sync) -> tuple[list[Item], int]:  # fmt: skip
    """A window of up to ``size`` records, read (``read(n)``, by ``run``: in a thread) ``piece``
    records at a time, each piece once ``pacer`` has room for it: (records, the file's position
    after)."""
    items: list[Item] = []
    position = 0
    while len(items) < size:
        want = min(piece, size - len(items))
        await pacer.take(want)
        got, position = await run(read, want)
        pacer.give(want - len(got))
        items += got
        if len(got) < want:
            break
    return items, position
