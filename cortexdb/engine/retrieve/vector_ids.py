"""A sealed vector segment's ids, compact: sorted fixed-width bytes in one numpy array.

A segment's position of a vector is the rank of its id (decisions.md, "Vector ids as sorted
bytes"): the ids are its UTF-8 bytes in a numpy ``S<width>`` array (``width`` the longest id of
the segment; 40 bytes for ``evt_<uuid>``), sorted, so an id is found by binary search, a prefix's
ids are one span, and equal cosines, ranked by id, are ranked by position.  No Python object is
kept per vector: strings are made only for the ids a search returns.  The removed ones are a
boolean mask (``Dead``) beside them.

numpy's bytes arrays drop trailing NUL bytes, so an id ending in one could not be told from the
id without it: ``check`` refuses such an id when it is added (engine ids never have one).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np


def encode(doc_id: str) -> bytes:
    """An id's key: its UTF-8 bytes (lone surrogates kept, ``surrogatepass``), whose byte order is
    the code-point order ``sorted`` gives the strings."""
    return doc_id.encode("utf-8", "surrogatepass")


def check(doc_id: str) -> None:
    if doc_id.endswith("\x00"):
        raise ValueError(f"vector index: an id may not end with a NUL character: {doc_id!r}")


class SortedIds:
    """Distinct ids, ascending, by position (``keys[position]``: the id's bytes)."""

    __slots__ = ("_probe", "first", "keys", "last")

    def __init__(self, keys: np.ndarray) -> None:
        self.keys = keys  # dtype S<width>, ascending, distinct
        # a key to search for goes in here first: numpy searches an array of another width by
        # casting the whole array, and a new array of this dtype costs ~30 us (numpy 2.4), its
        # reuse ~0.5 us (look-ups run on the event loop's thread only)
        self._probe = np.empty(1, dtype=keys.dtype.str)
        # the smallest and largest id: engine ids are time-ordered and segments are sealed from
        # consecutive writes, so most look-ups fall outside all segments but one
        self.first = bytes(keys[0]) if len(keys) else b"\xff"
        self.last = bytes(keys[-1]) if len(keys) else b""

    @classmethod
    def sort(cls, ids: Iterable[str]) -> tuple[SortedIds, np.ndarray]:
        """(the ids sorted, the order: ``order[position]`` is the index in ``ids`` of the id at
        ``position``)."""
        keys = np.array([encode(doc_id) for doc_id in ids], dtype=np.bytes_)
        if not len(keys):
            keys = np.zeros(0, dtype="S1")
        order = np.argsort(keys, kind="stable")
        return cls(keys[order]), order

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, position: int) -> str:
        return bytes(self.keys[position]).decode("utf-8", "surrogatepass")

    def __iter__(self) -> Iterator[str]:
        for key in self.keys.tolist():
            yield key.decode("utf-8", "surrogatepass")

    def find(self, key: bytes) -> int:
        """The position of the id whose bytes are ``key`` (``encode``), or -1."""
        keys = self.keys
        if key > self.last or key < self.first or len(key) > keys.itemsize:
            return -1
        position = self._rank(key)
        if position < len(keys) and keys[position] == key:
            return position
        return -1

    def span(self, prefix: str) -> tuple[int, int]:
        """(start, stop): the positions of the ids starting with ``prefix``."""
        key, keys = encode(prefix), self.keys
        if len(key) > keys.itemsize:  # longer than every id here: none starts with it
            return 0, 0
        start = self._rank(key)
        after = _successor(key)  # above every id starting with ``key`` (no longer than it)
        return start, len(keys) if after is None else self._rank(after)

    def _rank(self, key: bytes) -> int:
        """How many ids sort before ``key`` (no longer than the array's width)."""
        self._probe[0] = key
        return int(self.keys.searchsorted(self._probe)[0])

    def mask(self, prefixes: Iterable[str]) -> np.ndarray:
        """True at the positions of ids starting with none of ``prefixes``."""
        skip = np.ones(len(self.keys), dtype=bool)
        for prefix in prefixes:
            start, stop = self.span(prefix)
            skip[start:stop] = False
        return skip

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes


def _successor(key: bytes) -> bytes | None:
    """The smallest byte string above every string starting with ``key`` (None: there is none)."""
    trimmed = key.rstrip(b"\xff")
    if not trimmed:
        return None
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


class Dead:
    """A segment's removed (or superseded) vectors: a boolean mask by position and its count."""

    __slots__ = ("count", "mask")

    def __init__(self, size: int) -> None:
        self.mask = np.zeros(size, dtype=bool)
        self.count = 0

    def add(self, position: int) -> None:
        if not self.mask[position]:
            self.mask[position] = True
            self.count += 1

    @classmethod
    def every(cls, size: int) -> Dead:
        """Every position dead (a reopened segment's rows until the restore confirms them)."""
        dead = cls(size)
        dead.mask[:] = True
        dead.count = size
        return dead

    def revive(self, position: int) -> None:
        if self.mask[position]:
            self.mask[position] = False
            self.count -= 1

    def __contains__(self, position: int) -> bool:
        return bool(self.mask[position])

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0
