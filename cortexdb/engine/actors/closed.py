"""The facts and beliefs of a scope whose current version's validity has closed, so that a recall
that keeps only what holds now skips them without reading them (decisions.md, "Recall skips
what has closed without reading it").

A record is *closed* when its stored current version (its head) has a ``valid_to`` and no
``recorded_to`` (a superseded or invalidated fact, a belief whose claim stopped holding): from
``max(valid_to, recorded_from)`` on, a read with no ``as_of``, no ``include_superseded`` and no
window keeps none of its versions (``candidates._version``: the head is judged alone, and fails
``valid_to > at``).  The set is kept where heads are written (``note``: ``extract.fact_ops``,
the belief writes) and rebuilt from the tables on restore (``stages/index.restore``); a rebuild
resets it with the rest of the state.  A record is only noted once its closing has passed (a
``valid_to`` in the future leaves it out); ``since``, the latest closing of any record ever
noted, guards a clock set back: a recall at an earlier moment skips nothing.  A record written
again open (or deleted) leaves the set.

Nearly every fact of a long conversation is superseded soon, so the set grows with the writes
and is held compactly (decisions.md, "The closed records as sorted bytes"): an engine id
(``fact_<uuid>``, ``belief_<uuid>``) is 17 bytes (the UUID's 16 and a tag for its prefix) in one
sorted numpy array, found by binary search; the ids noted or removed since the last merge wait
in two small sets (merged at ``MERGE_AT``), and an id of another form stays a string in a set of
its own.  The set only spares reads (a read under a plain clip drops a closed head anyway), so
its answers never change a recall's; which is why it may be bounded: beyond ``most`` ids
(``EngineConfig.closed_records_max``) the oldest quarter (the lowest UUIDs: the earliest made) is
forgotten, and a search that finds one of them reads it and drops it, as before the set existed.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import numpy as np

MERGE_AT = 1024  # ids noted (or removed) since the last merge that make the next one
_TAGS = {"fact": b"\x01", "belief": b"\x02"}  # at the end of a key: no key ends with a NUL byte
_PREFIXES = {tag: prefix for prefix, tag in _TAGS.items()}
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_WIDTH = 17


def key_of(record_id: str) -> bytes | None:
    """An engine id's 17-byte key (its UUID's bytes, then its prefix's tag), or None for an id of
    another form (one key, one id: the UUID's text is checked to be the canonical lower-case one)."""
    prefix, _, rest = record_id.partition("_")
    tag = _TAGS.get(prefix)
    if tag is None or _UUID.fullmatch(rest) is None:
        return None
    return bytes.fromhex(rest.replace("-", "")) + tag


def id_of(key: bytes) -> str:
    h = key[:16].hex()
    return f"{_PREFIXES[key[16:]]}_{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class ClosedRecords:
    __slots__ = ("_dropped", "_keys", "_others", "_others_added", "_probe", "_recent", "most", "since")

    def __init__(self, most: int = 1_000_000) -> None:
        self.most = most  # ids held at most (EngineConfig.closed_records_max)
        self._keys = np.zeros(0, dtype=f"S{_WIDTH}")  # sorted, distinct
        self._probe = np.empty(1, dtype=f"S{_WIDTH}")  # a key searched for goes in here (vector_ids.py)
        self._recent: set[bytes] = set()  # noted since the last merge, not in ``_keys``
        self._dropped: set[bytes] = set()  # removed since the last merge, still in ``_keys``
        self._others: set[str] = set()  # ids with no key
        self._others_added = 0  # to ``_others`` since the last merge (a merge applies the bound)
        self.since: dt.datetime | None = None  # the latest closing of any record noted

    def note(self, record: Any, now: dt.datetime) -> None:
        """A fact's or a belief's head as written (or read on restore)."""
        closed = closing(record)
        if closed is None or closed > now:
            self.discard(record.id)
            return
        self._add(record.id)
        if self.since is None or closed > self.since:
            self.since = closed

    def _add(self, record_id: str) -> None:
        key = key_of(record_id)
        if key is None:
            self._others.add(record_id)
            self._others_added += 1
            if self._others_added >= MERGE_AT:
                self._merge()
        elif key in self._dropped:
            self._dropped.discard(key)
        elif not self._stored(key):
            self._recent.add(key)
            if len(self._recent) >= MERGE_AT:
                self._merge()

    def discard(self, record_id: str) -> None:
        key = key_of(record_id)
        if key is None:
            self._others.discard(record_id)
        elif key in self._recent:
            self._recent.discard(key)
        elif key not in self._dropped and self._stored(key):
            self._dropped.add(key)
            if len(self._dropped) >= MERGE_AT:
                self._merge()

    def __contains__(self, record_id: str) -> bool:
        key = key_of(record_id)
        if key is None:
            return record_id in self._others
        return key in self._recent or (key not in self._dropped and self._stored(key))

    def __len__(self) -> int:
        return len(self._keys) - len(self._dropped) + len(self._recent) + len(self._others)

    @property
    def ids(self) -> set[str]:
        """Every id held, as strings (made on demand: for tests and inspection)."""
        keys = {bytes(k) for k in self._keys.tolist()} - self._dropped | self._recent
        return {id_of(k) for k in keys} | self._others

    @property
    def nbytes(self) -> int:
        return self._keys.nbytes

    def _stored(self, key: bytes) -> bool:
        keys = self._keys
        if not len(keys):
            return False
        self._probe[0] = key
        position = int(keys.searchsorted(self._probe)[0])
        return position < len(keys) and keys[position] == self._probe[0]

    def _merge(self) -> None:
        """Fold the pending removals and additions into the sorted array (linear in its size)."""
        keys = self._keys
        if self._dropped:
            gone = np.array(sorted(self._dropped), dtype=keys.dtype)
            keys = np.delete(keys, keys.searchsorted(gone))
        if self._recent:
            new = np.array(sorted(self._recent), dtype=keys.dtype)
            keys = np.insert(keys, keys.searchsorted(new), new)
        if len(keys) + len(self._others) > self.most:  # the oldest quarter goes
            self._others = set()  # ids of another form have no age: they go first
            excess = max(0, len(keys) - self.most * 3 // 4)
            keys = keys[excess:].copy()
        self._keys = keys
        self._recent, self._dropped, self._others_added = set(), set(), 0

    def skipped(self, clip: Any) -> ClosedRecords | frozenset[str]:
        """What a read with ``clip`` would drop after reading it (``in``): every id held when the
        clip keeps only what holds at its moment (now) and that moment is past every closing
        noted; none otherwise."""
        if self.since is None or clip.pinned or clip.include_superseded:
            return frozenset()
        if clip.recorded is not None or clip.valid is not None or clip.at < self.since:
            return frozenset()
        return self


def closing(record: Any) -> dt.datetime | None:
    """From when a head keeps none of its record's versions in a plain read, or None."""
    if record.valid_to is None or record.recorded_to is not None:
        return None
    return max(record.valid_to, record.recorded_from)
