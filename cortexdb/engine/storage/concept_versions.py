"""``ConceptVersions``: the closed versions of concepts (table ``CV``), stored compact.

A row is a closed version whole (``Concept``'s wire form: old data dirs, and one version in every
``chain``), or compact: its scalar fields and its summary and lists as edits of the version that
replaced it (``derive.concept_delta``).  Reading a version reads forward from its row to the next
whole one, or to the concept's current row, and applies the edits backwards.

| method                             | does                                                   |
|------------------------------------|--------------------------------------------------------|
| ``put_op(id, closed, v, later, chain)`` | the row of ``v``, closed at ``closed`` and replaced by ``later`` |
| ``key_moment(id, now)``            | the moment to key a row closed ``now`` at: past the concept's last row |
| ``rows(id, after=T, head=)``       | its closed versions as ``Concept`` in time order (closed after ``T`` only) |
| ``wires(id, after=T, head=)``      | the same as wire forms                                 |

A compact row reads the row after it in key order, so each concept's rows must be keyed in the
order its versions closed: ``key_moment`` keys a row just past the concept's last one when the
clock has not moved past it (two commits at one clock reading would otherwise share a key, one
row replacing the other; a clock stepped back would sort a newer row first).  The row's own
``recorded_to`` stays the clock's.

``record_ids``, ``delete_ops``, ``first_recorded`` and ``has`` are ``Versions``'; a forget, a
cancel or an erasure deletes every row of a concept at once (``Partition.rewrite_history``), so
no chain is left half.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

from ..derive import concept_delta as delta
from ..model import Concept, from_wire, to_wire
from ..spi.kv import KVStore, Op
from . import keys
from .table import JSON, Table
from .versions import Versions


class ConceptVersions(Versions[Any]):
    def __init__(self, store: KVStore, prefix: bytes, heads: Table[Concept]) -> None:
        super().__init__(store, prefix, JSON)
        self.heads = heads

    def put_op(self, record_id: str, closed: dt.datetime, value: Any, later: Concept | None = None,
               chain: int = 1) -> Op:  # fmt: skip
        """The row of ``value`` (a ``Concept``), closed at ``closed``; compact against ``later``
        (the version that replaced it, as stored) unless ``delta.whole`` says otherwise."""
        wire = to_wire(value)
        if later is not None and not delta.whole(value.version, later.version, chain):
            # the fields a compact row reads are stored as the record holds them (no converter
            # hook changes a str, a list or a dict of JSON values): read them off the record
            wire = delta.compact(wire, {name: getattr(later, name) for name in delta.DELTA_FIELDS})
        return self.table.put_op((record_id, keys.version_stamp(closed)), wire)

    async def key_moment(self, record_id: str, now: dt.datetime) -> dt.datetime:
        """``now``, or a microsecond past ``record_id``'s last row when that is not before ``now``."""
        async for stamp in self.table.ids(record_id, reverse=True, limit=1):
            last = keys.stamp_moment(stamp)
            if last >= now:
                return last + dt.timedelta(microseconds=1)
        return now

    async def wires(self, record_id: str, *, after: dt.datetime | None = None, limit: int | None = None,
                    head: Concept | None = None) -> AsyncIterator[dict[str, Any]]:  # fmt: skip
        """The closed versions' wire forms in time order (closed after ``after`` only); a compact
        one is read once the rows up to the next whole one (or the current row: ``head`` when
        the caller has it) are."""
        pending: list[dict[str, Any]] = []
        count = 0
        async for row in super().rows(record_id, after=after):
            pending.append(row)
            if delta.is_compact(row):
                continue
            for wire in _expanded(pending, None):
                yield wire
                count += 1
                if limit is not None and count >= limit:
                    return
            pending = []
        if pending:
            if head is None:
                head = await self.heads.get(record_id)
            if head is None:
                raise delta.broken(record_id, "compact versions without a current one")
            for wire in _expanded(pending, to_wire(head)):
                yield wire
                count += 1
                if limit is not None and count >= limit:
                    return

    async def rows(self, record_id: str, *, after: dt.datetime | None = None, limit: int | None = None,
                   head: Concept | None = None) -> AsyncIterator[Concept]:  # fmt: skip
        async for wire in self.wires(record_id, after=after, limit=limit, head=head):
            yield from_wire(wire, Concept)


def _expanded(rows: list[dict[str, Any]], later: dict[str, Any] | None) -> list[dict[str, Any]]:
    """``rows`` (compact ones, then a whole one unless ``later`` is given) as wire forms."""
    out: list[dict[str, Any]] = []
    for row in reversed(rows):
        later = row if not delta.is_compact(row) else delta.expand(row, later)
        out.append(later)
    return out[::-1]
