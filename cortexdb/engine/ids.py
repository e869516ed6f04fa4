"""Prefixed UUID v7 identifiers (``evt_``, ``fact_``, ``lce_`` ...).

Layout (RFC 9562): 48-bit Unix milliseconds, version 7, a 12-bit counter in ``rand_a`` and 62
random bits.  Within one generator ids are strictly increasing even when the clock stalls or
steps back (the counter carries into the timestamp), so lexical order of the hex form is creation
order.  A seed makes the random bits reproducible for tests.
"""

from __future__ import annotations

import random
import re
import uuid

from .clock import Clock, SystemClock

PREFIXES = frozenset(
    {
        "evt", "ep", "fact", "belief", "concept", "ent", "lce", "job", "batch", "imp", "exp",
        "ervw", "erasure", "pack", "audit", "blob", "concept_alias", "req", "tok",
        "sig", "prp", "intk",
    }
)  # fmt: skip

ID_PATTERN = re.compile(
    r"^(?P<prefix>[a-z_]+?)_(?P<uuid>[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12})$"
)


class IdGenerator:
    """Time-ordered, node-monotonic UUID v7 ids with a type prefix."""

    def __init__(self, clock: Clock | None = None, seed: int | None = None) -> None:
        self._clock = clock or SystemClock()
        now_ms = getattr(self._clock, "now_ms", None)
        self._now_ms = now_ms or (lambda: int(self._clock.now().timestamp() * 1000))
        self._random = random.Random(seed)
        self._last_ms = -1
        self._counter = 0

    def new(self, prefix: str) -> str:
        if prefix not in PREFIXES:
            raise ValueError(f"unknown id prefix {prefix!r}")
        h = f"{self._next_int():032x}"
        return f"{prefix}_{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    def new_uuid(self) -> uuid.UUID:
        return uuid.UUID(int=self._next_int())

    def _next_int(self) -> int:
        ms = self._now_ms()
        if ms > self._last_ms:
            self._last_ms = ms
            self._counter = self._random.getrandbits(11)  # leave head-room for the counter
        else:
            self._counter += 1
            if self._counter > 0xFFF:  # counter overflow: borrow the next millisecond
                self._last_ms += 1
                self._counter = 0
        value = (self._last_ms & 0xFFFF_FFFF_FFFF) << 80
        value |= 0x7 << 76
        value |= self._counter << 64
        value |= 0b10 << 62
        value |= self._random.getrandbits(62)
        return value


def id_prefix(identifier: str) -> str | None:
    """The prefix of a CortexDB id, or None when the string is not one."""
    match = ID_PATTERN.match(identifier)
    return match.group("prefix") if match else None
