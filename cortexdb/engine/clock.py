"""Clocks: the one source of wall-clock time for ``recorded_at``, ``recorded_from`` and expiries.

Production uses :class:`SystemClock`; tests inject a :class:`ManualClock` so that every recorded
time is deterministic.  Timers that *wait* use Trio's clock (``autojump_clock`` in tests).
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Protocol

UTC = dt.UTC


class Clock(Protocol):
    def now(self) -> dt.datetime:
        """The current time, timezone-aware UTC."""
        ...


class SystemClock:
    def now(self) -> dt.datetime:
        return dt.datetime.now(UTC)

    def now_ms(self) -> int:
        """Unix milliseconds (ids read this on every capture; no datetime needed)."""
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that only moves when told to; ``tick`` advances it by a fixed step per reading."""

    def __init__(self, start: dt.datetime | str = "2026-01-01T00:00:00Z", tick_us: int = 0) -> None:
        if isinstance(start, str):
            start = dt.datetime.fromisoformat(start.replace("Z", "+00:00"))
        self._now = start.astimezone(UTC)
        self._tick = dt.timedelta(microseconds=tick_us)

    def now(self) -> dt.datetime:
        current = self._now
        self._now = current + self._tick
        return current

    def advance(self, seconds: float = 0.0, **kwargs: float) -> None:
        self._now += dt.timedelta(seconds=seconds, **kwargs)

    def set(self, when: dt.datetime) -> None:
        self._now = when.astimezone(UTC)
