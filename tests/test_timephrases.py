"""Natural time phrases, anchored to a reference date."""

import datetime as dt

import pytest

from cortexdb.engine.timephrases import resolve_phrase
from cortexdb.errors import UnparseableTemporal

REF = dt.datetime(2026, 5, 13, 15, 42, tzinfo=dt.UTC)  # a Wednesday


def d(*parts):
    return dt.datetime(*parts, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    "phrase,expected",
    [
        ("last 30 days", (REF - dt.timedelta(days=30), REF)),
        ("past 2 weeks", (REF - dt.timedelta(weeks=2), REF)),
        ("last 3 months", (d(2026, 2, 13, 15, 42), REF)),
        ("last 1 year", (d(2025, 5, 13, 15, 42), REF)),
        ("yesterday", (d(2026, 5, 12), d(2026, 5, 13))),
        ("today", (d(2026, 5, 13), d(2026, 5, 14))),
        ("this week", (d(2026, 5, 11), d(2026, 5, 18))),
        ("last week", (d(2026, 5, 4), d(2026, 5, 11))),
        ("this month", (d(2026, 5, 1), d(2026, 6, 1))),
        ("last month", (d(2026, 4, 1), d(2026, 5, 1))),
        ("this year", (d(2026, 1, 1), d(2027, 1, 1))),
        ("last year", (d(2025, 1, 1), d(2026, 1, 1))),
        ("since 2026-04-01", (d(2026, 4, 1), None)),
        ("since April 1", (d(2026, 4, 1), None)),
        ("before May 2025", (None, d(2025, 5, 1))),
        ("between March 3 and April 10", (d(2026, 3, 3), d(2026, 4, 11))),
        ("between 2026-01-01 and 2026-01-31", (d(2026, 1, 1), d(2026, 2, 1))),
        ("in May", (d(2026, 5, 1), d(2026, 6, 1))),
        ("in June", (d(2025, 6, 1), d(2025, 7, 1))),  # the most recent June
        ("in June 2023", (d(2023, 6, 1), d(2023, 7, 1))),
        ("in 2024", (d(2024, 1, 1), d(2025, 1, 1))),
        ("8 May, 2023", (d(2023, 5, 8), d(2023, 5, 9))),
        ("  Last   7 Days ", (REF - dt.timedelta(days=7), REF)),
    ],
)
def test_phrases(phrase, expected):
    assert resolve_phrase(phrase, REF) == expected


def test_custom_phrases_take_precedence():
    custom = {
        "fiscal Q3": (d(2026, 7, 1), d(2026, 10, 1)),
        "this week": (d(2000, 1, 1), d(2000, 1, 2)),
    }
    assert resolve_phrase("Fiscal q3", REF, custom) == (d(2026, 7, 1), d(2026, 10, 1))
    assert resolve_phrase("this week", REF, custom) == (d(2000, 1, 1), d(2000, 1, 2))


@pytest.mark.parametrize(
    "phrase", ["the other day", "soonish", "between May and", "February 30", ""]
)
def test_unparseable(phrase):
    with pytest.raises(UnparseableTemporal) as info:
        resolve_phrase(phrase, REF)
    assert info.value.error_code == "UNPARSEABLE_TEMPORAL" and info.value.http_status == 422
