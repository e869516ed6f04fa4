"""Every rule of reference §3.5.3 yields INVALID_ENVELOPE with details.field and details.reason."""

import copy

import pytest

from cortexdb.engine.envelope import resolve_identities, validate_envelope
from cortexdb.errors import InvalidEnvelope, InvalidScopeGrammar

from .conftest import envelope


def base():
    body = envelope(key="k-1")
    body["observed_actor"] = {"id": "user:alice", "type": "user", "session": "run_abc"}
    body["context"].update(
        {
            "preceded_by": ["evt_019e2200-a868-7113-b63c-5ab791b7584a"],
            "labels": ["sales"],
            "intent": "x",
        }
    )
    body["directives"] = {
        "extract": ["facts"],
        "confidence_floor": 0.5,
        "ttl_for_belief_layer": "P30D",
        "embed": "lazy",
    }
    return body


def mutate(path, value):
    body = base()
    target = body
    parts = path.split(".")
    for part in parts[:-1]:
        target = target[part]
    if value is DELETE:
        del target[parts[-1]]
    else:
        target[parts[-1]] = value
    return body


DELETE = object()

CASES = [
    ("scope", DELETE, "scope", "is required"),
    ("scope", 5, "scope", "must be a string"),
    ("modality", DELETE, "modality", "is required"),
    ("modality", "Not Valid!", "modality", "lowercase identifier"),
    ("content", DELETE, "content", "is required"),
    ("content", "text", "content", "must be an object"),
    ("content.kind", DELETE, "content.kind", "is required"),
    ("content.kind", "video", "content.kind", "must be one of"),
    ("content.text", DELETE, "content.text", "is required"),
    ("content.text", 42, "content.text", "must be a string"),
    ("content.role", DELETE, "content.role", "is required for kind message"),
    ("content.role", "narrator", "content.role", "must be one of"),
    ("content.media", [{"nope": 1}], "content.media[0]", "blob_id"),
    ("context", DELETE, "context", "is required"),
    ("context.observed_at", DELETE, "context.observed_at", "is required"),
    ("context.observed_at", "yesterday", "context.observed_at", "RFC 3339"),
    ("context.observed_at", "2026-05-13T15:42:00", "context.observed_at", "RFC 3339"),
    ("context.source_recorded_at", "May 13", "context.source_recorded_at", "RFC 3339"),
    ("context.preceded_by", ["fact_1"], "context.preceded_by[0]", "evt_"),
    ("context.labels", [1], "context.labels[0]", "string"),
    ("context.labels", "sales", "context.labels", "array of strings or an object"),
    ("observed_actor.id", "alice", "observed_actor.id", "type:id"),
    ("observed_actor.type", "agent", "observed_actor.type", "does not match"),
    ("subject", {"id": "nobody"}, "subject.id", "type:id"),
    ("directives.extract", ["facts", "dreams"], "directives.extract", "drawn from"),
    ("directives.confidence_floor", 1.5, "directives.confidence_floor", "between 0 and 1"),
    ("directives.ttl_for_belief_layer", "30 days", "directives.ttl_for_belief_layer", "ISO 8601"),
    ("directives.embed", "now", "directives.embed", "must be one of"),
    ("idempotency_key", "k" * 65, "idempotency_key", "longer than 64"),
    ("idempotency_key", "", "idempotency_key", "non-empty"),
    ("vector", "0.1 0.2", "vector", "must be an array of numbers"),
    ("vector", [0.1, "0.2"], "vector", "must be an array of numbers"),
    ("vector", [True, 0.5], "vector", "must be an array of numbers"),
    ("vector", [], "vector", "must hold 1 to 4096 numbers"),
    ("vector", [0.5] * 4097, "vector", "must hold 1 to 4096 numbers"),
    ("vector", [0.0, 0.0], "vector", "must not be all zeros"),
    ("happened_at", "2026-05-13T15:42:00Z", "happened_at", "not a field"),
    # a misspelt field at any depth is named by its path (issue 15), never ignored
    ("context.observd_at", "2026-05-13T15:42:00Z", "context.observd_at", "not a field"),
    ("observed_actor.sesion", "run_abc", "observed_actor.sesion", "not a field"),
    ("subject", {"id": "user:bob", "kind": "user"}, "subject.kind", "not a field"),
    ("directives.confidence_flor", 0.5, "directives.confidence_flor", "not a field"),
    ("content.txt", "I live in Paris.", "content.txt", "not a field"),
]


@pytest.mark.parametrize(
    "path,value,field,reason", CASES, ids=[f"{c[0]}={c[1]!r}"[:60] for c in CASES]
)
def test_invalid_envelope_names_field_and_reason(path, value, field, reason):
    with pytest.raises(InvalidEnvelope) as info:
        validate_envelope(mutate(path, value))
    assert info.value.error_code == "INVALID_ENVELOPE"
    assert info.value.details["field"] == field
    assert reason in info.value.details["reason"]


def test_non_object_envelope():
    with pytest.raises(InvalidEnvelope) as info:
        validate_envelope(["not", "an", "object"])
    assert info.value.details["field"] == "$"


def test_scope_grammar_in_an_envelope_is_reported_with_the_segment():
    with pytest.raises(InvalidScopeGrammar) as info:
        validate_envelope(mutate("scope", "org:acme/Bad Segment"))
    assert info.value.details["field"] == "scope"
    assert info.value.details["segment"] == "Bad Segment"


def test_valid_envelope_passes_and_scope_is_canonical():
    body = mutate("scope", " org:acme/user:alice/ ")
    valid = validate_envelope(body)
    assert valid.scope == "org:acme/user:alice"
    assert valid.idempotency_key == "k-1"


def test_unknown_modality_is_accepted_verbatim():
    assert validate_envelope(mutate("modality", "sensor_reading")).modality == "sensor_reading"


def test_text_needed_only_for_message_and_text_kinds():
    body = base()
    body["content"] = {"kind": "json", "data": {"plan": "pro"}}
    validate_envelope(body)
    body["content"] = {"kind": "json"}
    with pytest.raises(InvalidEnvelope, match="content.data"):
        validate_envelope(body)
    body["content"] = {
        "kind": "triple",
        "subject": "Acme",
        "predicate": "seat_count",
        "object": 200,
    }
    validate_envelope(body)
    body["content"] = {"kind": "triple", "subject": "Acme", "predicate": "seat_count"}
    with pytest.raises(InvalidEnvelope, match="content.object"):
        validate_envelope(body)
    body["content"] = {"kind": "text", "text": "plain text needs no role"}
    validate_envelope(body)


def test_labels_may_be_an_object_of_scalars():
    assert (
        validate_envelope(mutate("context.labels", {"dia_id": "D1:3", "turn": 3})).context[
            "labels"
        ]["turn"]
        == 3
    )


def test_oversize_text_is_refused_not_truncated():
    with pytest.raises(InvalidEnvelope, match="longer than"):
        validate_envelope(mutate("content.text", "x" * 1_000_001))


def test_identities_default_down_the_chain():
    body = base()
    del body["observed_actor"]
    ids = resolve_identities("agent:ingester", validate_envelope(body))
    assert ids.caller == "agent:ingester"
    assert ids.observed_actor == {"type": "agent", "id": "agent:ingester"}
    assert ids.subject == {"id": "agent:ingester", "type": "agent"}
    body["observed_actor"] = {"id": "user:alice"}
    ids = resolve_identities("agent:ingester", validate_envelope(body))
    assert ids.observed_actor["id"] == "user:alice" and ids.subject["id"] == "user:alice"
    body["subject"] = {"id": "user:bob"}
    ids = resolve_identities("user:admin", validate_envelope(copy.deepcopy(body)))
    assert (ids.caller, ids.observed_actor["id"], ids.subject["id"]) == (
        "user:admin",
        "user:alice",
        "user:bob",
    )


def test_an_actor_checked_before_still_has_its_session_and_type_checked():
    """Actor ids and types seen valid are remembered (a writer names few actors): what the
    memo does not cover — the session, another type with the same id — is still checked."""
    validate_envelope(base())  # user:alice / user remembered
    with pytest.raises(InvalidEnvelope) as info:
        validate_envelope(mutate("observed_actor.session", "s" * 257))
    assert info.value.details["field"] == "observed_actor.session"
    with pytest.raises(InvalidEnvelope) as info:
        validate_envelope(mutate("observed_actor.session", 7))
    assert info.value.details["field"] == "observed_actor.session"
    with pytest.raises(InvalidEnvelope) as info:
        validate_envelope(mutate("subject", {"id": "user:alice", "type": "agent"}))
    assert info.value.details["field"] == "subject.type"
    with pytest.raises(InvalidEnvelope) as info:
        validate_envelope(mutate("subject", {"id": "user:alice", "type": ["user"]}))
    assert info.value.details["field"] == "subject.type"


def test_a_source_time_equal_to_the_observed_time_is_checked_once_and_labels_hold_scalars():
    body = mutate("context.source_recorded_at", "2026-05-13T15:42:00Z")
    body["context"]["observed_at"] = "2026-05-13T15:42:00Z"
    body["context"]["labels"] = {"a": "x", "b": 1, "c": 1.5, "d": True, "e": None}
    assert validate_envelope(body).context["source_recorded_at"] == "2026-05-13T15:42:00Z"
    body["context"]["observed_at"] = body["context"]["source_recorded_at"] = "2026-02-30T00:00:00Z"
    with pytest.raises(InvalidEnvelope) as info:
        validate_envelope(body)
    assert info.value.details["field"] == "context.observed_at"

    class Text(str):
        pass

    body = base()
    body["context"]["labels"] = {"a": Text("x")}
    validate_envelope(body)  # a str subclass is a string
    body["context"]["labels"] = {"a": {"nested": 1}}
    with pytest.raises(InvalidEnvelope) as info:
        validate_envelope(body)
    assert info.value.details["field"] == "context.labels.a"


@pytest.mark.parametrize("extra", [
    {}, {"context": {"observed_at": "2026-01-01T00:00:00Z", "labels": {"b": 1, "a": "x"}}},
    {"content": {"kind": "json", "data": {1: "a non-string key", "big": 2**70}}},
    {"content": {"kind": "json", "data": {"z": {"y": [None, True, 1.5]}}}}])  # fmt: skip
def test_a_keyed_envelope_s_hash_comes_from_validation_s_encoding(extra):
    """``validate_envelope(hashed=True)`` gives the body hash ``services.body_hash`` would, from
    the encoding that checks the body can be stored (the write path encodes it once, not twice)."""
    from cortexdb.engine.actors.services import body_hash

    body = {"scope": "org:acme", "modality": "note", "idempotency_key": "k-1",
            "content": {"kind": "text", "text": "hello"}, "context": {"observed_at": "2026-01-01T00:00:00Z"}, **extra}  # fmt: skip
    valid = validate_envelope(body, hashed=True)
    assert valid.body_hash is None or valid.body_hash == body_hash(body)
    assert (valid.body_hash is None) == (2**70 in (body["content"].get("data") or {}).values())  # fallback encoder
    assert validate_envelope(body).body_hash is None  # not asked for
    assert validate_envelope({**body, "idempotency_key": None}, hashed=True).body_hash is None  # no key, no hash
