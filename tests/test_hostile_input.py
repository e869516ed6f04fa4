"""Bad input is a 4xx with the API's error envelope, never a 500, and a rejected write writes
nothing: the strict request-body decoder, timestamps and phrases at the ends of the calendar,
forged cursors, and property-based tests (hypothesis) over the experience envelope, the bulk
request and the recall request, driven through the in-process app."""

from __future__ import annotations

import base64
import datetime as dt
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cortexdb import ManualClock, schemas
from cortexdb.engine import jsoncodec
from cortexdb.engine.temporal import parse_duration, parse_rfc3339, try_parse_rfc3339
from cortexdb.engine.timephrases import resolve_phrase
from cortexdb.errors import InvalidBody, InvalidEnvelope, InvalidTimestamp, UnparseableTemporal
from cortexdb.server.settings import ServerSettings

from .server_support import START, Keys, body, server

SCOPE = "org:acme/user:alice"
UTC = dt.UTC
OVERFLOWING = ["9999-12-31T23:59:59-23:59", "9999-12-31T23:00:00-01:00", "0001-01-01T00:00:00+23:59",
               "0001-01-01T00:59:59+01:00"]  # fmt: skip
IMPOSSIBLE = ["0000-01-01T00:00:00Z", "2026-02-30T00:00:00Z", "2026-01-01T24:00:00Z",
              "2026-01-01T00:00:00+24:00", "2026-13-01T00:00:00Z"]  # fmt: skip
EDGES = ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z", "9999-12-31T23:59:59Z"]
LONE_SURROGATES = ["\ud800", "\udfff", "a\ud83d", "\udc00b"]
PHRASES = ["in 9999", "during 9999", "last 99999999999 days", "last 9999999 weeks", "last 3000 years",
           "last 99999 months", "since 0001-01-01", "before 0001-01-01", "after 9999-12-31",
           "between 2026-13-45 and 2027-01-01", "in May 9999", "in December 9999", "on 9999-12-31",
           "in 0000", "today", "yesterday", "last week", "this year", "x" * 300,
           "last " + "9" * 5000 + " days"]  # fmt: skip


def dumps(value: Any) -> bytes:
    """What a hostile client may send: NaN and Infinity literals, lone surrogates as escapes."""
    return json.dumps(value, ensure_ascii=True, allow_nan=True).encode()


def nested(depth: int, inner: bytes = b"1") -> bytes:
    return b"[" * depth + inner + b"]" * depth


# -- the request-body decoder ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "reason", "path"),
    [
        (b'{"a":"\\ud800"}', "lone_surrogate", "a"),
        (b'{"a":{"b":["ok","x\\udfff"]}}', "lone_surrogate", "a.b[1]"),
        (b'{"k\\udc00":1}', "lone_surrogate", "$"),
        (b'{"a":"\\ud800","n":123456789012345678901234567890}', "lone_surrogate", "a"),  # exact path
        (b'{"a":NaN}', "non_finite_number", None),
        (b'{"a":[-Infinity]}', "non_finite_number", None),
        (b'{"a":1e400}', "non_finite_number", None),
        (b'{"a":"\xff"}', "not_utf8", None),
        (b'{"a":"\xed\xa0\x80"}', "not_utf8", None),  # a surrogate encoded as UTF-8
        (b'{"a":' + b"1" * 4301 + b"}", "number_too_long", None),
        (b'{"a":' + nested(64) + b"}", "too_deep", "a" + "[0]" * 63),
        (nested(1000), "too_deep", "$" + "[0]" * 64),
        (nested(100_000), "too_deep", None),
        (b'{"n":12345678901234567890123,"a":' + nested(70) + b"}", "too_deep", "a" + "[0]" * 63),
        (b'{"a":', "malformed", None),
        (b'{"a":1} trailing', "malformed", None),
        (b"\xef\xbb\xbf{}", "malformed", None),
    ],
)
def test_decode_request_refuses_with_a_reason(raw, reason, path):
    with pytest.raises(InvalidBody) as info:
        jsoncodec.decode_request(raw, max_depth=64)
    assert info.value.http_status == 400 and info.value.error_code == "INVALID_BODY"
    assert info.value.details["reason"] == reason
    assert info.value.details.get("field") == path
    jsoncodec.encode(info.value.to_envelope("req_1"))  # the error body itself always encodes


def test_decode_request_accepts_what_json_allows_and_keeps_integers_exact():
    assert jsoncodec.decode_request(b'{"a":' + nested(63) + b"}") == {"a": json.loads(nested(63))}
    assert jsoncodec.decode_request(b'{"e":"\\ud83d\\ude00","x":"\\u00e9"}') == {"e": "😀", "x": "é"}
    assert jsoncodec.decode_request(b'{"a":1e-400,"b":-0.0}') == {"a": 0.0, "b": -0.0}
    for number in (2**63, 2**64, -(2**63) - 1, 10**30, -(10**300), 10**4299):
        raw = b'{"n":%d}' % number
        decoded = jsoncodec.decode_request(raw)
        assert decoded == {"n": number} and type(decoded["n"]) is int
        stored = jsoncodec.encode(decoded)  # the fallback encoder marks the document ...
        assert jsoncodec.decode(stored) == {"n": number}  # ... so reading it back is exact
        assert json.loads(stored) == {"n": number}  # and it is still plain JSON
    assert jsoncodec.decode_request(b'{"id":"1234567890123456789012"}') == {"id": "1234567890123456789012"}
    assert jsoncodec.decode_request(nested(5), max_depth=5) == json.loads(nested(5))
    with pytest.raises(InvalidBody):
        jsoncodec.decode_request(nested(6), max_depth=5)


def test_max_json_depth_is_a_setting_with_a_default():
    assert ServerSettings().max_json_depth == 64 == jsoncodec.DEFAULT_MAX_DEPTH
    assert ServerSettings.from_env({"CORTEX_MAX_JSON_DEPTH": "12"}).max_json_depth == 12
    for bad in ("0", "513"):
        with pytest.raises(ValueError):
            ServerSettings.from_env({"CORTEX_MAX_JSON_DEPTH": bad})


# -- timestamps, durations, phrases --------------------------------------------------------------


@pytest.mark.parametrize("text", OVERFLOWING + IMPOSSIBLE + ["2026-05-13T15:42:00." + "0" * 100 + "Z"])
def test_timestamps_beyond_the_calendar_are_invalid_timestamps(text):
    assert try_parse_rfc3339(text) is None
    with pytest.raises(InvalidTimestamp) as info:
        parse_rfc3339(text, field="as_of")
    assert info.value.http_status == 422 and info.value.details["field"] == "as_of"
    expected = "outside" if text in OVERFLOWING else ("real date" if text in IMPOSSIBLE[:3] else "")
    assert expected in info.value.details["reason"]


def test_the_ends_of_the_calendar_still_parse():
    assert parse_rfc3339("0001-01-01T00:00:00Z") == dt.datetime.min.replace(tzinfo=UTC)
    assert parse_rfc3339("9999-12-31T23:59:59.999999Z") == dt.datetime.max.replace(tzinfo=UTC)
    assert parse_rfc3339("9999-12-31T23:59:59+01:00").hour == 22
    assert parse_rfc3339("0001-01-01T00:00:00-01:00").hour == 1


@pytest.mark.parametrize("text", ["P" + "9" * 400 + "D", "P9999999999Y", "PT99999999999999999999H"])
def test_huge_durations_are_value_errors(text):
    with pytest.raises(ValueError, match="too long"):
        parse_duration(text)


@pytest.mark.parametrize("phrase", PHRASES)
def test_time_phrases_at_the_ends_of_the_calendar(phrase):
    for reference in (dt.datetime(2026, 5, 13, tzinfo=UTC), dt.datetime.max.replace(tzinfo=UTC),
                      dt.datetime.min.replace(tzinfo=UTC)):  # fmt: skip
        try:
            start, end = resolve_phrase(phrase, reference)
        except (InvalidTimestamp, UnparseableTemporal) as exc:
            assert exc.http_status == 422 and exc.details["field"] == "temporal.natural"
        else:
            assert start is None or end is None or start <= end


# -- over HTTP: fixed hostile bodies ---------------------------------------------------------


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    return Keys(tmp_path_factory.mktemp("keys"), ManualClock(START))


async def send(h, method: str, path: str, raw: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    response = await h.client.open(path, method=method, headers=headers, data=raw)
    data = await response.get_data()
    parsed = json.loads(data) if data and "json" in (response.content_type or "") else None
    return response.status_code, parsed


async def event_count(h) -> int:
    page = await h.engine.events(SCOPE, limit=1000)
    return len(page["items"])


async def check(h, method: str, path: str, raw: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    """The properties every hostile request must keep: no 5xx; a 4xx is a valid error envelope;
    a refused write leaves the WAL and the scope's events as they were."""
    wal, events = h.engine.wal_offset, await event_count(h)
    status, data = await send(h, method, path, raw, headers)
    assert status < 500, (path, raw[:300], data)
    if status >= 400:
        schemas.validator("error_envelope").validate(data)
        if path.startswith("/v1/experience"):
            assert h.engine.wal_offset == wal, (raw[:300], data)
            assert await event_count(h) == events
    return status, data


RAW_BODIES = [
    (b'{"scope":"org:acme/user:alice","modality":"conversation","content":{"kind":"text","text":"\\ud800"},"context":{"observed_at":"2026-05-13T15:42:00Z"}}', "INVALID_BODY"),
    (b'{"scope":"org:acme/user:alice","modality":"conversation","content":{"kind":"text","text":"hi"},"context":{"observed_at":"2026-05-13T15:42:00Z","labels":{"\\udc00":1}}}', "INVALID_BODY"),
    (b'{"scope":"org:acme/user:alice","content":{"kind":"text","text":"\xc3\x28"}}', "INVALID_BODY"),
    (b'{"scope":"org:acme/user:alice","content":{"kind":"json","data":{"x":NaN}}}', "INVALID_BODY"),
    (b'{"scope":"org:acme/user:alice","content":{"kind":"json","data":{"x":1e999}}}', "INVALID_BODY"),
    (b'{"scope":"org:acme/user:alice","content":{"kind":"json","data":' + nested(1000) + b"}}", "INVALID_BODY"),
    (b'{"scope":"org:acme/user:alice","content":' + nested(100_000, b"{}") + b"}", "INVALID_BODY"),
    (nested(100_000), "INVALID_BODY"),
    (b'{"scope":"org:acme/user:alice","content":{"kind":"te', "INVALID_BODY"),
    (b"\xff\xfe{\x00}\x00", "INVALID_BODY"),
    (b"[1, 2, 3]", "INVALID_BODY"),
    (b'"a string"', "INVALID_BODY"),
    (b"null", "INVALID_BODY"),
    (b"   ", "INVALID_BODY"),
]  # fmt: skip


@pytest.mark.parametrize("path", ["/v1/experience", "/v1/experience/bulk", "/v1/recall"])
async def test_hostile_raw_bodies_are_400_invalid_body(tmp_path, keys, path):
    async with server(tmp_path, keys=keys) as h:
        headers = {**h.as_("user:alice"), "Content-Type": "application/json"}
        for raw, code in RAW_BODIES:
            status, data = await check(h, "POST", path, raw, headers)
            assert (status, data["error_code"]) == (400, code), (raw[:120], data)
            assert data.get("details", {}).get("reason") in ("lone_surrogate", "not_utf8", "non_finite_number",
                                                             "too_deep", "malformed") or "body" in data["message"]  # fmt: skip
        assert h.engine.wal_offset == 0


async def test_the_depth_limit_follows_the_setting(tmp_path, keys):
    async with server(tmp_path, keys=keys, max_json_depth=4) as h:
        headers = {**h.as_("user:alice"), "Content-Type": "application/json"}
        ok = body(content={"kind": "json", "data": {"a": [1]}})  # four levels: $, content, data, a
        status, _ = await check(h, "POST", "/v1/experience", dumps(ok), headers)
        assert status == 202
        deep = body(content={"kind": "json", "data": {"a": [[1]]}})
        status, data = await check(h, "POST", "/v1/experience", dumps(deep), headers)
        assert status == 400 and data["details"] == {"reason": "too_deep", "field": "content.data.a[0]", "limit": 4}


@pytest.mark.parametrize("stamp", OVERFLOWING + IMPOSSIBLE)
async def test_extreme_timestamps_in_writes_and_recall(tmp_path, keys, stamp):
    async with server(tmp_path, keys=keys) as h:
        headers = {**h.as_("user:alice"), "Content-Type": "application/json"}
        for field in ("observed_at", "source_recorded_at"):
            context = {"observed_at": "2026-05-13T15:42:00Z", field: stamp}
            status, data = await check(h, "POST", "/v1/experience", dumps(body(context=context)), headers)
            assert (status, data["error_code"]) == (422, "INVALID_ENVELOPE")
            assert data["details"]["field"] == f"context.{field}"
            bulk = {"scope": SCOPE, "items": [{k: v for k, v in body().items() if k != "scope"},
                                              {k: v for k, v in body(context=context).items() if k != "scope"}]}  # fmt: skip
            status, data = await check(h, "POST", "/v1/experience/bulk", dumps(bulk), headers)
            assert (status, data["details"]["field"]) == (422, f"items[1].context.{field}")
        for temporal in ({"as_of": stamp}, {"reference_date": stamp, "natural": "today"},
                         {"valid_during": [stamp, None]}, {"recorded_during": [None, stamp]},
                         {"valid_during": f"{stamp}..", "natural": "last 3 days"}):  # fmt: skip
            status, data = await check(h, "POST", "/v1/recall", dumps({"scope": SCOPE, "temporal": temporal}), headers)
            assert (status, data["error_code"]) == (422, "INVALID_TIMESTAMP"), data
            assert data["details"]["field"].startswith("temporal.")
        assert h.engine.wal_offset == 0


async def test_events_at_the_ends_of_the_calendar_are_stored_derived_and_recalled(tmp_path, keys):
    async with server(tmp_path, keys=keys) as h:
        for stamp, text in zip(EDGES, ("Alice works at Acme.", "Alice likes green tea.", "Bob joined Acme."), strict=True):
            response, data = await h.call("POST", "/v1/experience?wait=consolidated",
                                          json=body(text, context={"observed_at": stamp}))  # fmt: skip
            assert response.status_code == 200, data
        await h.engine.flush()
        response, page = await h.call("GET", f"/v1/events?scope={SCOPE}")
        assert sorted(e["context"]["observed_at"] for e in page["items"]) == sorted(EDGES)
        headers = {**h.as_("user:alice"), "Content-Type": "application/json"}
        for temporal in ({"as_of": EDGES[1]}, {"as_of": EDGES[0]}, {"natural": "in 9998"},
                         {"valid_during": [EDGES[0], EDGES[1]]}, {"natural": "since 0001-01-01"},
                         {"reference_date": "0001-01-01T00:00:00Z", "natural": "today"},
                         {"reference_date": "9999-12-30T00:00:00Z", "natural": "today"}):  # fmt: skip
            status, data = await check(h, "POST", "/v1/recall", dumps({"scope": SCOPE, "query": "Acme", "temporal": temporal}), headers)
            assert status == 200, (temporal, data)
            schemas.validator("stratified_pack").validate(data)
        status, data = await check(h, "POST", "/v1/recall", dumps({"scope": SCOPE, "temporal": {"natural": "in 9999"}}), headers)
        assert (status, data["error_code"]) == (422, "INVALID_TIMESTAMP")


async def test_an_embedded_caller_cannot_store_what_json_cannot_carry(tmp_path, keys):
    async with server(tmp_path, keys=keys) as h:
        for envelope, field in ((body("lone \ud800"), "content.text"),
                                (body(content={"kind": "json", "data": {"k": ["\udfff"]}}), "content.data.k[0]"),
                                (body(context={"observed_at": "2026-05-13T15:42:00Z", "labels": {"\ud800": 1}}), "context.labels")):  # fmt: skip
            with pytest.raises(InvalidEnvelope) as info:
                await h.engine.experience(envelope, caller="user:alice")
            assert info.value.details["field"] == field
        assert h.engine.wal_offset == 0
        result = await h.engine.experience(body(content={"kind": "json", "data": {"n": 10**30}}), caller="user:alice")
        assert h.engine.wal_offset == 1
        event = await h.engine.get_event(SCOPE, result.event_id)
        assert event["content"]["data"] == {"n": 10**30}  # exact after the round trip through storage


# -- over HTTP: query parameters -----------------------------------------------------------


def cursor(data: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


QUERY_CASES = [
    (f"/v1/events?scope={SCOPE}&since={OVERFLOWING[0]}", 422, "INVALID_TIMESTAMP"),
    (f"/v1/events?scope={SCOPE}&until={OVERFLOWING[2]}", 422, "INVALID_TIMESTAMP"),
    (f"/v1/events?scope={SCOPE}&recorded_since={IMPOSSIBLE[1]}", 422, "INVALID_TIMESTAMP"),
    (f"/v1/facts?scope={SCOPE}&as_of={OVERFLOWING[0]}", 422, "INVALID_TIMESTAMP"),
    (f"/v1/beliefs?scope={SCOPE}&as_of={OVERFLOWING[2]}&view=holistic", 422, "INVALID_TIMESTAMP"),
    (f"/v1/episodes?scope={SCOPE}&overlapping={OVERFLOWING[0]}..", 422, "INVALID_TIMESTAMP"),
    (f"/v1/episodes?scope={SCOPE}&overlapping=..{OVERFLOWING[3]}", 422, "INVALID_TIMESTAMP"),
    (f"/v1/facts?scope={SCOPE}&valid_during={OVERFLOWING[0]}..", 422, "INVALID_TIMESTAMP"),
    (f"/v1/facts?scope={SCOPE}&natural=in%209999", 422, "INVALID_TIMESTAMP"),
    (f"/v1/facts?scope={SCOPE}&natural=last%2099999999999%20days", 422, "INVALID_TIMESTAMP"),
    (f"/v1/facts?scope={SCOPE}&natural=today&reference_date=9999-12-31T23:59:59Z", 422, "INVALID_TIMESTAMP"),
    (f"/v1/facts?scope={SCOPE}&natural={'x' * 300}", 422, "UNPARSEABLE_TEMPORAL"),
    (f"/v1/events?scope={SCOPE}&since=9999-12-31T23:59:59.999999Z", 200, None),
    ("/v1/audit?since=9999-12-31T23:59:59-23:59", 422, "INVALID_TIMESTAMP"),
    (f"/v1/events?scope={SCOPE}&view=holistic&cursor={cursor({'i': 'x'})}", 400, "INVALID_QUERY"),
    (f"/v1/events?scope={SCOPE}&view=holistic&cursor={base64.urlsafe_b64encode(nested(3000)).decode()}", 400, "INVALID_QUERY"),
    (f"/v1/lifecycle?cursor={cursor({'after': {'x': 1}})}", 400, "INVALID_QUERY"),
    (f"/v1/audit?cursor={cursor({'after': 5})}", 400, "INVALID_QUERY"),
    (f"/v1/scopes?cursor={cursor({'after': [1]})}", 400, "INVALID_QUERY"),
    (f"/v1/events?scope={SCOPE}&cursor=%%%", 400, "INVALID_CURSOR"),
]  # fmt: skip


async def test_hostile_query_parameters(tmp_path, keys):
    async with server(tmp_path, keys=keys) as h:
        await h.call("POST", "/v1/experience?wait=consolidated", json=body("Alice works at Acme."))
        for path, status, code in QUERY_CASES:
            response, data = await h.call("GET", path, "user:root")
            assert response.status_code == status, (path, data)
            if code:
                assert data["error_code"] == code, (path, data)
                schemas.validator("error_envelope").validate(data)


# -- property-based: generated envelopes, bulk requests and recall requests ---------------------

FIELD_NAMES = st.sampled_from(["scope", "text", "kind", "observed_at", "zzz_unknown", "labels", "", "\ud800"])
TIMESTAMPS = st.one_of(
    st.sampled_from(OVERFLOWING + IMPOSSIBLE + EDGES + ["2026-05-13T15:42:00Z", "2026-05-13", "yesterday", ""]),
    st.builds(lambda y, mo, d, h, mi, s, off: f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}"
              + ("Z" if off == 0 else f"{'+' if off > 0 else '-'}{abs(off) // 60:02d}:{abs(off) % 60:02d}"),
              st.sampled_from([1, 2, 1970, 2026, 9998, 9999]), st.integers(1, 12), st.integers(1, 31),
              st.integers(0, 23), st.integers(0, 59), st.integers(0, 60), st.integers(-1439, 1439)),
)  # fmt: skip
NUMBERS = st.one_of(
    st.integers(-5, 5), st.integers(min_value=-(10**40), max_value=10**40),
    st.sampled_from([2**63, 2**64, -(2**63) - 1, 10**400, 0.5, -0.0, 1e308, 5e-324]),
    st.floats(allow_nan=True, allow_infinity=True),
)  # fmt: skip
STRINGS = st.one_of(
    st.text(max_size=12),
    st.sampled_from(LONE_SURROGATES + OVERFLOWING + ["", " ", "\x00", "\u202e", "😀", "org:acme/user:alice",
                                                     "user:alice", "BAD SCOPE", "P99999999999D", "evt_x"]),
    st.sampled_from([200_000, 1_000_001]).map(lambda n: "a" * n),  # large, within the body limit
)  # fmt: skip
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, STRINGS)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.one_of(st.text(max_size=5), FIELD_NAMES), inner, max_size=3),
                      max_leaves=6)  # fmt: skip
DEEP = st.builds(lambda depth, leaf: json.loads(nested(depth)) if leaf else {"a": json.loads(nested(depth))},
                 st.sampled_from([60, 63, 64, 65, 200]), st.booleans())  # fmt: skip
HOSTILE = st.one_of(SCALARS, VALUES, DEEP)


def either(valid: st.SearchStrategy) -> st.SearchStrategy:
    """Mostly the valid shape, sometimes anything at all."""
    return st.one_of(valid, valid, HOSTILE)


CONTENT = either(st.one_of(
    st.fixed_dictionaries({"kind": st.just("message"), "role": either(st.sampled_from(["user", "assistant"])),
                           "text": either(st.text(min_size=1, max_size=40))}),
    st.fixed_dictionaries({"kind": st.just("json"), "data": either(st.dictionaries(st.text(max_size=5), VALUES, max_size=3))}),
    st.fixed_dictionaries({"kind": st.just("triple"), "subject": either(st.just("Alice")), "predicate": either(st.just("likes")),
                           "object": SCALARS}, optional={"confidence": NUMBERS}),
))  # fmt: skip
CONTEXT = either(st.fixed_dictionaries(
    {"observed_at": either(TIMESTAMPS)},
    optional={"source_recorded_at": TIMESTAMPS, "labels": either(st.lists(STRINGS, max_size=3)),
              "preceded_by": either(st.lists(st.sampled_from(["evt_abc", "nope", "\ud800"]), max_size=2)),
              "intent": STRINGS},
))  # fmt: skip
DIRECTIVES = either(st.fixed_dictionaries({}, optional={
    "extract": either(st.lists(st.sampled_from(["facts", "episodes", "bogus"]), max_size=2)),
    "confidence_floor": NUMBERS, "embed": either(st.sampled_from(["lazy", "none"])),
    "ttl_for_belief_layer": st.one_of(st.sampled_from(["P30D", "P" + "9" * 400 + "D", "P9999999999Y", "PT1e5S", "P"]), HOSTILE),
    "consolidate_into": either(st.just("org:acme")),
}))  # fmt: skip
ACTOR = either(st.fixed_dictionaries({"id": either(st.sampled_from(["user:alice", "agent:bot"]))},
                                     optional={"type": STRINGS, "session": STRINGS}))  # fmt: skip
ITEM_FIELDS = {"modality": either(st.sampled_from(["conversation", "document"])), "content": CONTENT, "context": CONTEXT}
ITEM_OPTIONAL = {"observed_actor": ACTOR, "subject": ACTOR, "directives": DIRECTIVES,
                 "idempotency_key": either(st.text(min_size=1, max_size=8)), "zzz_unknown": HOSTILE}  # fmt: skip
ENVELOPES = st.fixed_dictionaries({"scope": either(st.just(SCOPE)), **ITEM_FIELDS}, optional=ITEM_OPTIONAL)
BULKS = st.fixed_dictionaries(
    {"scope": either(st.just(SCOPE)),
     "items": either(st.lists(st.fixed_dictionaries(ITEM_FIELDS, optional=ITEM_OPTIONAL), min_size=1, max_size=3))},
    optional={"ordering": either(st.sampled_from(["strict_temporal", "arrival"])), "directives": DIRECTIVES,
              "observed_actor": ACTOR, "zzz_unknown": HOSTILE},
)  # fmt: skip
CONDITION = st.dictionaries(st.sampled_from(["observed_actor", "confidence", "modality", "labels", "subject", "bogus"]),
                            either(st.dictionaries(st.sampled_from(["in", "eq", "gte", "lte", "like"]), HOSTILE, min_size=1, max_size=2)),
                            min_size=1, max_size=2)  # fmt: skip
FILTERS = either(st.recursive(CONDITION, lambda inner: st.dictionaries(st.sampled_from(["AND", "OR"]), st.lists(inner, max_size=2),
                                                                      min_size=1, max_size=1), max_leaves=4))  # fmt: skip
TEMPORAL = either(st.fixed_dictionaries({}, optional={
    "as_of": either(TIMESTAMPS), "reference_date": either(TIMESTAMPS),
    "valid_during": either(st.one_of(st.lists(st.one_of(st.none(), TIMESTAMPS), min_size=2, max_size=2),
                                     st.builds(lambda a, b: f"{a}..{b}", TIMESTAMPS, TIMESTAMPS))),
    "recorded_during": either(st.lists(st.one_of(st.none(), TIMESTAMPS), min_size=2, max_size=2)),
    "natural": either(st.sampled_from(PHRASES)),
}))  # fmt: skip
RECALLS = st.fixed_dictionaries({"scope": either(st.just(SCOPE))}, optional={
    "query": either(st.text(max_size=20)),
    "view": either(st.sampled_from(["holistic", "local", "descend", "raw", "granular", "structured", "narrative"])),
    "traversal": either(st.sampled_from(["local", "holistic", "descend"])),
    "include": either(st.lists(st.sampled_from(["events", "facts", "episodes", "beliefs", "understanding", "x"]), max_size=3)),
    "budgets": either(st.fixed_dictionaries({}, optional={
        "max_tokens": NUMBERS, "per_layer_limits": either(st.dictionaries(st.sampled_from(["events", "facts", "x"]), NUMBERS, max_size=2))})),
    "temporal": TEMPORAL, "filters": FILTERS,
    "citation_mode": either(st.sampled_from(["none", "inline_with_markers", "block_at_end", "structured_only"])),
    "diagnostics": either(st.sampled_from(["none", "summary", "full"])),
    "exclude_content": either(st.booleans()), "idempotency_key": either(st.text(min_size=1, max_size=8)),
    "stream": either(st.booleans()), "zzz_unknown": HOSTILE,
})  # fmt: skip
PROPERTY = settings(max_examples=15, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip


async def hostile_session(keys, base, path: str, documents: list[dict]) -> None:
    """One fresh server per example: one good write (so recall has something to rank and a
    refused write has something to leave alone), then every generated document."""
    async with server(base, keys=keys) as h:
        headers = {**h.as_("user:alice"), "Content-Type": "application/json"}
        await check(h, "POST", "/v1/experience", dumps(body("Alice works at Acme.")), headers)
        for document in documents:
            status, data = await check(h, "POST", path, dumps(document), headers)
            if path == "/v1/recall" and status == 200 and document.get("stream") is not True:
                schemas.validator("stratified_pack").validate(data)


@PROPERTY
@given(documents=st.lists(ENVELOPES, min_size=1, max_size=8))
@example(documents=[body(context={"observed_at": OVERFLOWING[0]}), body("\ud800"), body(content={"kind": "json", "data": {"n": float("nan")}})])
async def test_generated_envelopes_are_never_a_500_and_refused_ones_write_nothing(keys, tmp_path_factory, documents):
    await hostile_session(keys, tmp_path_factory.getbasetemp(), "/v1/experience", documents)


@PROPERTY
@given(documents=st.lists(BULKS, min_size=1, max_size=5))
@example(documents=[{"scope": SCOPE, "items": [{**body(), "directives": True}]}])  # was a 500
@example(documents=[{"scope": SCOPE, "items": [{k: v for k, v in body().items() if k != "scope"}, {"content": "\udfff"}]}])
async def test_generated_bulk_requests_are_never_a_500_and_refused_ones_write_nothing(keys, tmp_path_factory, documents):
    await hostile_session(keys, tmp_path_factory.getbasetemp(), "/v1/experience/bulk", documents)


@PROPERTY
@given(documents=st.lists(RECALLS, min_size=1, max_size=8))
@example(documents=[{"scope": ["org:acme"]}, {"scope": {"a": 1}}])  # was a 500 (unhashable scope)
@example(documents=[{"scope": SCOPE, "temporal": {"as_of": OVERFLOWING[0]}}, {"scope": SCOPE, "temporal": {"natural": "in 9999"}}])
async def test_generated_recall_requests_are_never_a_500(keys, tmp_path_factory, documents):
    await hostile_session(keys, tmp_path_factory.getbasetemp(), "/v1/recall", documents)


def test_the_request_decode_benchmark_runs():
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run([sys.executable, "bench/request_decode.py", "--repeat", "1"],
                            capture_output=True, text=True, timeout=120, cwd=root)  # fmt: skip
    assert result.returncode == 0, result.stderr
    for name in ("one envelope", "recall request", "bulk, 1000 items"):
        assert re_figures(name).search(result.stdout), result.stdout


def re_figures(name: str):
    import re

    return re.compile(rf"{re.escape(name)}\s+\d+\s+[\d.]+ µs\s+[\d.]+ µs\s+[\d.]+x")
