"""A window of records as an import job holds it, and what the job gives back after each.

The job reads a window (``import_window`` records in ``strict_temporal``, ``bulk_max_items`` in
``batch_throughput``) in a thread while the one before it is written, so it holds two windows
of mapped records, whatever the file's length.  ``prepare`` runs in that thread as each record is
read: it takes the record's scope out of its envelope and computes its ``strict_temporal`` sort
key there, off the job's loop.  The loop writes a window a bulk request at a time and
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
from typing import Any

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
