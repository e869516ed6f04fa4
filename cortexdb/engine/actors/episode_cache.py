"""Recall's decoded episodes per scope (``ScopeActor.episode_cache``): a bounded cache of the
largest records recall reads, reused while their stored bytes are unchanged; and an episode's
*header* (``episode_header``), what ranking reads of it, decoded without its two long lists of
other records' ids (docs/decisions.md, "An episode candidate is its header until it is chosen")."""

from __future__ import annotations

import collections
from typing import Any

from .. import jsoncodec

EPISODE_CACHE_SIZE = 128


class DecodedEpisodes:
    """A scope's recently decoded episodes (``ScopeActor.episode_cache``), reused while the stored
    bytes are identical; the least recently used go first once there are ``most`` of them or
    their stored sizes add up to more than ``most_bytes`` (episodes grow with their events: a
    count alone let the cache grow through a long soak)."""

    def __init__(self, most: int = EPISODE_CACHE_SIZE, most_bytes: int = 1 << 20) -> None:
        self.most, self.most_bytes = most, most_bytes
        self._items: collections.OrderedDict[str, tuple[bytes, dict]] = collections.OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    def get(self, record_id: str, raw: bytes) -> dict[str, Any] | None:
        hit = self._items.get(record_id)
        if hit is None or hit[0] != raw:
            return None
        self._items.move_to_end(record_id)
        return hit[1]

    def put(self, record_id: str, raw: bytes, record: dict[str, Any]) -> None:
        old = self._items.pop(record_id, None)
        if old is not None:
            self.bytes -= len(old[0])
        if len(raw) > self.most_bytes:
            return  # one episode larger than the whole budget is not kept
        self._items[record_id] = (raw, record)
        self.bytes += len(raw)
        while len(self._items) > self.most or self.bytes > self.most_bytes:
            _, (gone, _) = self._items.popitem(last=False)
            self.bytes -= len(gone)

    def clear(self) -> None:
        self._items.clear()
        self.bytes = 0


def decode_episode(actor, record_id: str, raw: bytes) -> dict[str, Any]:
    """Episodes are the big records (an episode of 500 turns is ~70 KB of JSON) and most are
    sealed: keep recently decoded ones (``DecodedEpisodes``)."""
    cache = actor.episode_cache
    hit = cache.get(record_id, raw)
    if hit is not None:
        return dict(hit)
    record = jsoncodec.decode(raw)
    cache.put(record_id, raw, record)
    return dict(record)


# The two lists an episode candidate is ranked without, each cut out of the stored JSON from its
# key to the key that follows it in the stored form (``to_wire``: attrs field order).
_CUTS = ((b',"supports":[', b'],"started_at":'), (b',"causal_chain":[', b'],"strategy":'))
HEADER_KEYS = frozenset({"id", "name", "summary", "events", "ended_at", "recorded_from"})


def header_bytes(raw: bytes) -> bytes | None:
    """The stored JSON of an episode less its ``supports`` and ``causal_chain`` members, or None
    when they cannot be cut exactly.  A cut is exact when the array holds no ``]`` at all (ids,
    and causal links of two string fields): its first ``]`` is then its end, and the member's
    key and the next key (``"key":``, an unescaped quote after a comma: never inside a string)
    frame it.  Anything else (another order of keys, a nested list) gives None: decode it whole."""
    parts, at = [], 0
    for start, end in _CUTS:
        i = raw.find(start, at)
        if i < 0:
            return None
        opened = i + len(start)
        j = raw.find(b"]", opened)
        if j < 0 or not raw.startswith(end, j):
            return None
        parts.append(raw[at:i])
        at = j + 1
    parts.append(raw[at:])
    return b"".join(parts)


def episode_header(raw: bytes) -> dict[str, Any] | None:
    """The episode's wire form less ``supports`` and ``causal_chain`` (a sixth of the decoding:
    the causal chain is hundreds of small objects), or None (``header_bytes``; or the cut left a
    form without the fields ranking reads, or with either list still in it)."""
    cut = header_bytes(raw)
    if cut is None:
        return None
    try:
        header = jsoncodec.decode(cut)
    except ValueError:
        return None
    if not isinstance(header, dict) or "supports" in header or "causal_chain" in header:
        return None
    return header if header.keys() >= HEADER_KEYS else None
