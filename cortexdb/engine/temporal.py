"""RFC 3339 timestamps and ISO 8601 durations, the only time formats on the wire.

``parse_rfc3339`` is strict about the shape (date, ``T``, time, offset or ``Z``) and returns an
aware UTC datetime; ``format_ts`` writes ``Z`` with the fraction only when it is not zero.
"""

from __future__ import annotations

import datetime as dt
import re
from functools import lru_cache

from ..errors import InvalidTimestamp

UTC = dt.UTC

_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$"
)
_DURATION = re.compile(
    r"^P(?:(?P<years>\d+)Y)?(?:(?P<months>\d+)M)?(?:(?P<weeks>\d+)W)?(?:(?P<days>\d+)D)?"
    r"(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$"
)


MAX_TIMESTAMP_LENGTH = 40  # the longest RFC 3339 form is 35 characters (nine fraction digits)
OUT_OF_RANGE = "is outside 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999999Z once in UTC"


def try_parse_rfc3339(text: str) -> dt.datetime | None:
    if not isinstance(text, str) or len(text) > MAX_TIMESTAMP_LENGTH:  # long text: never cached
        return None
    return _parse_cached(text)


def timestamp_problem(text: object) -> str:
    """Why ``try_parse_rfc3339`` refused ``text``: a wrong shape, or a date that does not exist
    (``2026-02-30``) or cannot be represented in UTC (``9999-12-31T23:59:59-01:00``)."""
    match = (
        _RFC3339.match(text)
        if isinstance(text, str) and len(text) <= MAX_TIMESTAMP_LENGTH
        else None
    )
    if match is None:
        return "is not an RFC 3339 timestamp (e.g. 2026-05-13T15:42:00Z)"
    year, month, day, hour, minute, second, _, offset = match.groups()
    try:
        dt.datetime(int(year), int(month), int(day), int(hour), int(minute), min(int(second), 59))
    except ValueError:
        return "is not a real date and time"
    if offset not in ("Z", "z") and (int(offset[1:3]) > 23 or int(offset[4:6]) > 59):
        return "has an offset beyond -23:59 .. +23:59"
    return OUT_OF_RANGE


@lru_cache(maxsize=4096)
def _parse_cached(text: str) -> dt.datetime | None:
    match = _RFC3339.match(text)
    if not match:
        return None
    if text[10] == "T" and text[-1] == "Z" and len(text) <= 27:
        try:  # the common shape: let the C parser build it (seconds 60 and >6 digits fall through)
            return dt.datetime.fromisoformat(text).astimezone(UTC)
        except ValueError:
            pass
    year, month, day, hour, minute, second, fraction, offset = match.groups()
    micro = int((fraction[1:] + "000000")[:6]) if fraction else 0
    if offset in ("Z", "z"):
        tz = UTC
    else:
        sign = 1 if offset[0] == "+" else -1
        hours, minutes = int(offset[1:3]), int(offset[4:6])
        if hours > 23 or minutes > 59:
            return None
        tz = dt.timezone(sign * dt.timedelta(hours=hours, minutes=minutes))
    try:
        value = dt.datetime(
            int(year), int(month), int(day), int(hour), int(minute), min(int(second), 59), micro, tz
        )
        return value.astimezone(UTC)
    except (ValueError, OverflowError):  # no such day; or in UTC before year 1 or after 9999
        return None


def parse_rfc3339(text: str, *, field: str = "timestamp") -> dt.datetime:
    value = try_parse_rfc3339(text)
    if value is None:
        reason = timestamp_problem(text)
        raise InvalidTimestamp(
            f"{field} {reason}",
            details={"field": field, "reason": reason, "value": str(text)[:64]},
        )
    return value


def shift(value: dt.datetime, delta: dt.timedelta) -> dt.datetime:
    """``value + delta``, saturated at the ends of the representable range."""
    try:
        return value + delta
    except OverflowError:
        return (dt.datetime.max if delta > dt.timedelta(0) else dt.datetime.min).replace(tzinfo=UTC)


_last_formatted: tuple[dt.datetime | None, str] = (None, "")


def format_ts(value: dt.datetime) -> str:
    global _last_formatted
    if _last_formatted[0] is value:  # a group commit formats the same instant many times
        return _last_formatted[1]
    original = value
    if value.tzinfo is not UTC:
        value = value.astimezone(UTC)
    text = f"{value.year:04d}-{value.month:02d}-{value.day:02d}T{value.hour:02d}:{value.minute:02d}:{value.second:02d}"
    if value.microsecond:
        text += f".{value.microsecond:06d}".rstrip("0")
    text += "Z"
    _last_formatted = (original, text)
    return text


def parse_duration(text: str) -> dt.timedelta:
    """ISO 8601 duration (``P30D``, ``PT5M``); years and months count as 365 and 30 days."""
    match = _DURATION.match(text or "")
    if not match or text in ("P", "PT"):
        raise ValueError(f"not an ISO 8601 duration: {text!r}")
    parts = {k: float(v) for k, v in match.groupdict().items() if v}
    days = parts.get("years", 0) * 365 + parts.get("months", 0) * 30 + parts.get("days", 0)
    try:
        return dt.timedelta(
            weeks=parts.get("weeks", 0),
            days=days,
            hours=parts.get("hours", 0),
            minutes=parts.get("minutes", 0),
            seconds=parts.get("seconds", 0),
        )
    except OverflowError:  # beyond timedelta's 999,999,999 days (or an infinite float)
        raise ValueError(f"the duration {text[:40]!r} is too long") from None
