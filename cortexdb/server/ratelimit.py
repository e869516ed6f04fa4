"""Per-actor token buckets (reference §6.5): one bucket per (actor, read|write)."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable

import attrs

_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(s|sec|second|m|min|minute|h|hour)\s*$")
_UNIT = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600}


def parse_rate(text: str) -> float:
    """``"100/s"`` → 100.0 tokens per second."""
    return _rate(str(text))


@functools.lru_cache(maxsize=64)  # a policy names a few rates; every request parsed one (0.16 % of the soak)
def _rate(text: str) -> float:
    match = _RATE.match(text)
    if not match:
        raise ValueError(f"not a rate: {text!r} (expected e.g. '100/s')")
    return float(match.group(1)) / _UNIT[match.group(2)]


@attrs.define
class Bucket:
    rate: float
    capacity: float
    tokens: float
    updated: float


@attrs.frozen
class Verdict:
    allowed: bool
    limit: int
    remaining: int
    reset: int  # unix seconds when the bucket is full again
    retry_after: int  # seconds (only meaningful when not allowed)


class RateLimiter:
    def __init__(self, monotonic: Callable[[], float], wall: Callable[[], float]) -> None:
        self._monotonic = monotonic
        self._wall = wall
        self._buckets: dict[tuple[str, str], Bucket] = {}

    def take(self, actor: str, kind: str, rate_text: str) -> Verdict:
        rate = parse_rate(rate_text)
        capacity = max(1.0, rate)  # one second of burst
        now = self._monotonic()
        bucket = self._buckets.get((actor, kind))
        if bucket is None or bucket.rate != rate:
            bucket = self._buckets[(actor, kind)] = Bucket(rate, capacity, capacity, now)
        bucket.tokens = min(bucket.capacity, bucket.tokens + (now - bucket.updated) * rate)
        bucket.updated = now
        allowed = bucket.tokens >= 1.0
        if allowed:
            bucket.tokens -= 1.0
        missing = bucket.capacity - bucket.tokens
        reset = int(math.ceil(self._wall() + missing / rate))
        retry = 0 if allowed else max(1, int(math.ceil((1.0 - bucket.tokens) / rate)))
        return Verdict(allowed, int(capacity), int(bucket.tokens), reset, retry)
