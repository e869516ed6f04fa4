"""Ids, scopes, timestamps, errors: the small pieces everything else relies on."""

import datetime as dt

import pytest

from cortexdb.engine.clock import ManualClock
from cortexdb.engine.ids import ID_PATTERN, IdGenerator, id_prefix
from cortexdb.engine.scopes import ancestors, canonical_scope, is_within
from cortexdb.engine.temporal import format_ts, parse_duration, parse_rfc3339, try_parse_rfc3339
from cortexdb.errors import InvalidEnvelope, InvalidScopeGrammar, InvalidTimestamp


def test_ids_are_prefixed_uuid_v7_and_strictly_increasing_even_when_the_clock_stalls():
    gen = IdGenerator(ManualClock("2026-01-01T00:00:00Z"), seed=1)
    ids = [gen.new("evt") for _ in range(5000)]
    assert ids == sorted(ids) and len(set(ids)) == 5000
    for identifier in ids[:10]:
        match = ID_PATTERN.match(identifier)
        assert match and match.group("prefix") == "evt"
    assert id_prefix(ids[0]) == "evt"
    assert id_prefix("nope") is None


def test_ids_follow_the_clock_and_are_reproducible_with_a_seed():
    clock_a, clock_b = ManualClock("2026-01-01T00:00:00Z"), ManualClock("2026-01-01T00:00:00Z")
    a, b = IdGenerator(clock_a, seed=42), IdGenerator(clock_b, seed=42)
    assert [a.new("fact") for _ in range(3)] == [b.new("fact") for _ in range(3)]
    first = a.new("lce")
    clock_a.advance(1)
    later = a.new("lce")
    assert later > first
    assert (
        int(later[4:].replace("-", "")[:12], 16) - int(first[4:].replace("-", "")[:12], 16) >= 1000
    )


def test_ids_stay_monotonic_when_the_clock_steps_back():
    clock = ManualClock("2026-01-01T00:00:10Z")
    gen = IdGenerator(clock, seed=3)
    first = gen.new("evt")
    clock.advance(-5)
    assert gen.new("evt") > first


def test_unknown_prefix_is_refused():
    with pytest.raises(ValueError):
        IdGenerator(seed=1).new("bogus")


@pytest.mark.parametrize(
    "path,canonical",
    [
        ("org:acme", "org:acme"),
        ("org:acme/dept:eng/user:alice", "org:acme/dept:eng/user:alice"),
        ("  org:acme/user:Al-ice_2/ ", "org:acme/user:Al-ice_2"),
        ("custom_type9:x", "custom_type9:x"),
    ],
)
def test_scope_canonical_form(path, canonical):
    assert canonical_scope(path) == canonical


@pytest.mark.parametrize(
    "path,segment,reason",
    [
        ("org:acme/Dept:eng", "Dept:eng", "type must match"),
        ("org:acme/dept", "dept", "not of the form"),
        ("org:acme//user:a", "", "not of the form"),
        ("org:ac me", "org:ac me", "id must match"),
        ("9org:a", "9org:a", "type must match"),
        ("org:" + "x" * 129, "org:" + "x" * 129, "longer than 128"),
        ("t" * 33 + ":x", "t" * 33 + ":x", "longer than 32"),
    ],
)
def test_scope_grammar_errors_name_the_offending_segment(path, segment, reason):
    with pytest.raises(InvalidScopeGrammar) as info:
        canonical_scope(path)
    assert info.value.error_code == "INVALID_SCOPE_GRAMMAR"
    assert info.value.http_status == 422
    assert info.value.details["segment"] == segment
    assert reason in info.value.details["reason"]


def test_scope_limits_on_segments_and_length():
    assert canonical_scope("/".join(f"t:{i}" for i in range(32)))
    with pytest.raises(InvalidScopeGrammar, match="33 segments"):
        canonical_scope("/".join(f"t:{i}" for i in range(33)))
    with pytest.raises(InvalidScopeGrammar, match="4096"):
        canonical_scope("/".join(f"t:{'x' * 128}" for i in range(32)))
    with pytest.raises(InvalidScopeGrammar, match="empty"):
        canonical_scope("   ")


def test_scope_ancestry():
    assert ancestors("org:a/dept:b/user:c") == ["org:a/dept:b", "org:a"]
    assert ancestors("org:a") == []
    assert is_within("org:a/dept:b", "org:a") and is_within("org:a", "org:a")
    assert not is_within("org:ab", "org:a")


def test_rfc3339_parsing_is_strict_and_normalises_to_utc():
    assert parse_rfc3339("2026-05-13T15:42:00Z") == dt.datetime(2026, 5, 13, 15, 42, tzinfo=dt.UTC)
    assert parse_rfc3339("2026-05-13T17:42:00.5+02:00") == dt.datetime(
        2026, 5, 13, 15, 42, 0, 500000, tzinfo=dt.UTC
    )
    for bad in (
        "2026-05-13",
        "2026-05-13T15:42:00",
        "13/05/2026",
        "2026-02-30T00:00:00Z",
        "",
        None,
        5,
    ):
        assert try_parse_rfc3339(bad) is None
    with pytest.raises(InvalidTimestamp) as info:
        parse_rfc3339("yesterday", field="as_of")
    assert info.value.details["field"] == "as_of"


def test_timestamps_format_with_z_and_minimal_fraction():
    assert format_ts(dt.datetime(2026, 5, 13, 15, 42, tzinfo=dt.UTC)) == "2026-05-13T15:42:00Z"
    assert (
        format_ts(dt.datetime(2026, 5, 13, 15, 42, 0, 418000, tzinfo=dt.UTC))
        == "2026-05-13T15:42:00.418Z"
    )


def test_durations():
    assert parse_duration("PT5M") == dt.timedelta(minutes=5)
    assert parse_duration("P30D") == dt.timedelta(days=30)
    assert parse_duration("P1DT2H") == dt.timedelta(days=1, hours=2)
    with pytest.raises(ValueError):
        parse_duration("5 minutes")


def test_error_envelope_shape():
    error = InvalidEnvelope("content.text", "is required")
    body = error.to_envelope("req_1")
    assert body["error_code"] == "INVALID_ENVELOPE"
    assert body["details"] == {"field": "content.text", "reason": "is required"}
    assert body["retriable"] is False and body["request_id"] == "req_1"
    assert error.http_status == 422
