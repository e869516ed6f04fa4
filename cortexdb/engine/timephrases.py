"""Natural-language time phrases (reference §12.2, §12.4), parsed deterministically.

``resolve_phrase("last 30 days", reference)`` returns a half-open ``[start, end)`` interval in
UTC; ``None`` marks an open end.  Supported: "last|past N days|weeks|months|years", "yesterday",
"today", "this|last week|month|year", "since X", "before X", "after X", "between X and Y",
"in <Month> [<Year>]", "in <Year>", and a bare date; X and Y are ISO dates or timestamps,
"May 1[, 2026]", "1 May [2026]", a month ("May [2026]") or a year.  Weeks start on Monday.
Custom phrases registered per tenant take precedence (exact, case-insensitive match).
Anything else raises ``UNPARSEABLE_TEMPORAL``, as does a phrase longer than ``MAX_PHRASE``
characters; a phrase that names a day that does not exist ("2026-02-30") or a time outside the
years 1..9999 ("in 9999" ends in 10000, "last 99999999 days") raises ``INVALID_TIMESTAMP``.
"""

from __future__ import annotations

import calendar
import datetime as dt
import re

from ..errors import InvalidTimestamp, UnparseableTemporal
from .temporal import OUT_OF_RANGE, try_parse_rfc3339

UTC = dt.UTC
MONTHS = {name.lower(): index for index, name in enumerate(calendar.month_name) if name}
MONTHS.update({name.lower(): index for index, name in enumerate(calendar.month_abbr) if name})
MONTHS["sept"] = 9
_UNIT = r"(day|week|month|year)s?"
MAX_PHRASE = 256



Interval = tuple[dt.datetime | None, dt.datetime | None]


def _day(value: dt.datetime) -> dt.datetime:
    return value.replace(hour=0, minute=0, second=0, microsecond=0)


def _shift_months(value: dt.datetime, months: int) -> dt.datetime:
    month_index = value.year * 12 + (value.month - 1) + months
    year, month = divmod(month_index, 12)
    day = min(value.day, calendar.monthrange(year, month + 1)[1])
    return value.replace(year=year, month=month + 1, day=day)


def _month_span(year: int, month: int) -> Interval:
    start = dt.datetime(year, month, 1, tzinfo=UTC)
    return start, _shift_months(start, 1)


def _point(text: str, reference: dt.datetime) -> Interval | None:
    """A date-like expression as the interval it covers (a day, a month, a year, an instant)."""
    text = text.strip().strip(",").lower()
    exact = try_parse_rfc3339(text.upper())
    if exact is not None:
        return exact, exact
    if m := re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})", text):
        start = dt.datetime(int(m[1]), int(m[2]), int(m[3]), tzinfo=UTC)
        return start, start + dt.timedelta(days=1)
    if m := re.fullmatch(r"(\d{4})", text):
        year = int(m[1])
        return dt.datetime(year, 1, 1, tzinfo=UTC), dt.datetime(year + 1, 1, 1, tzinfo=UTC)
    if m := re.fullmatch(r"([a-z]+)\.?\s+(\d{1,2})(?:st|nd|rd|th)?(?:,?\s+(\d{4}))?", text):
        month, day, year = MONTHS.get(m[1]), int(m[2]), m[3]
        if month:
            return _dated(int(year) if year else None, month, day, reference)
    if m := re.fullmatch(r"(\d{1,2})(?:st|nd|rd|th)?\s+([a-z]+)\.?(?:,?\s+(\d{4}))?", text):
        month, day, year = MONTHS.get(m[2]), int(m[1]), m[3]
        if month:
            return _dated(int(year) if year else None, month, day, reference)
    if m := re.fullmatch(r"([a-z]+)\.?(?:,?\s+(\d{4}))?", text):
        month = MONTHS.get(m[1])
        if month:
            year = (
                int(m[2])
                if m[2]
                else (reference.year if month <= reference.month else reference.year - 1)
            )
            return _month_span(year, month)
    return None


def _dated(year: int | None, month: int, day: int, reference: dt.datetime) -> Interval | None:
    if year is None:  # the most recent such date not after the reference
        year = reference.year
        if (month, day) > (reference.month, reference.day):
            year -= 1
    try:
        start = dt.datetime(year, month, day, tzinfo=UTC)
    except ValueError:
        return None
    return start, start + dt.timedelta(days=1)


def resolve_phrase(
    phrase: str, reference: dt.datetime, custom: dict[str, Interval] | None = None
) -> Interval:
    if len(str(phrase)) > MAX_PHRASE:
        raise UnparseableTemporal(f"a time phrase is at most {MAX_PHRASE} characters",
                                  details={"field": "temporal.natural", "phrase": str(phrase)[:200]})  # fmt: skip
    text = " ".join(str(phrase).lower().split())
    if custom:
        for pattern, interval in custom.items():
            if pattern.lower() == text:
                return interval
    try:
        return _resolve(text, phrase, reference.astimezone(UTC))
    except (ValueError, OverflowError):  # the calendar arithmetic left the years 1..9999
        raise InvalidTimestamp(
            f"the time phrase {str(phrase)[:200]!r} names a day that does not exist or a time that "
            + OUT_OF_RANGE,
            details={"field": "temporal.natural", "phrase": str(phrase)[:200],
                     "reason": "not a real day, or " + OUT_OF_RANGE},
        ) from None  # fmt: skip


def _resolve(text: str, phrase: str, reference: dt.datetime) -> Interval:
    today = _day(reference)
    if m := re.fullmatch(rf"(?:last|past|previous) (\d+) {_UNIT}", text):
        count, unit = int(m[1]), m[2]
        if unit == "day":
            return reference - dt.timedelta(days=count), reference
        if unit == "week":
            return reference - dt.timedelta(weeks=count), reference
        return _shift_months(reference, -count * (12 if unit == "year" else 1)), reference
    if text == "today":
        return today, today + dt.timedelta(days=1)
    if text == "yesterday":
        return today - dt.timedelta(days=1), today
    if m := re.fullmatch(rf"(this|last|previous) {_UNIT}", text):
        which, unit = m[1], m[2]
        back = 0 if which == "this" else 1
        if unit == "day":
            start = today - dt.timedelta(days=back)
            return start, start + dt.timedelta(days=1)
        if unit == "week":
            start = today - dt.timedelta(days=today.weekday(), weeks=back)
            return start, start + dt.timedelta(weeks=1)
        if unit == "month":
            start = _shift_months(today.replace(day=1), -back)
            return start, _shift_months(start, 1)
        start = dt.datetime(reference.year - back, 1, 1, tzinfo=UTC)
        return start, dt.datetime(start.year + 1, 1, 1, tzinfo=UTC)
    if m := re.fullmatch(r"since (.+)", text):
        if point := _point(m[1], reference):
            return point[0], None
    if m := re.fullmatch(r"(?:after) (.+)", text):
        if point := _point(m[1], reference):
            return point[1], None
    if m := re.fullmatch(r"(?:before|until) (.+)", text):
        if point := _point(m[1], reference):
            return None, point[0]
    if m := re.fullmatch(r"(?:between|from) (.+?) (?:and|to|until) (.+)", text):
        first, second = _point(m[1], reference), _point(m[2], reference)
        if first and second and first[0] <= second[1]:
            return first[0], second[1]
    if m := re.fullmatch(r"(?:in|during|on) (.+)", text):
        if point := _point(m[1], reference):
            return point
    if point := _point(text, reference):
        return point
    raise UnparseableTemporal(
        f"cannot read the time phrase {phrase!r}",
        details={"field": "temporal.natural", "phrase": str(phrase)[:200],
                 "supported": ["last N days|weeks|months|years", "yesterday", "today",
                               "this|last week|month|year", "since X", "before X", "between X and Y",
                               "in <Month> [<Year>]"]},
    )  # fmt: skip
