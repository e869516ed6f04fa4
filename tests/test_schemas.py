"""The JSON Schemas: they accept the reference's examples and every record the engine produces,
and the capture path's hand-written validator agrees with the envelope schema."""

import copy
import re

import pytest

from cortexdb import schemas
from cortexdb.engine.envelope import validate_envelope
from cortexdb.errors import CortexError

from .conftest import envelope
from .test_envelope import CASES, mutate

# -- the reference's examples (§3.5.3, §7.1-§7.5, §8.9.2, §6.6), placeholders filled in --------
REFERENCE = {
    "experience_envelope": {
        "scope": "org:acme/dept:eng/user:alice",
        "observed_actor": {"id": "user:alice", "type": "user", "session": "run_abc"},
        "subject": {"id": "user:alice", "type": "user"},
        "modality": "conversation",
        "content": {
            "kind": "message",
            "role": "user",
            "text": "Acme moved to 200 seats and signed by 3:42pm",
            "media": [],
        },
        "context": {
            "observed_at": "2026-05-13T15:42:00Z",
            "source_recorded_at": None,
            "location": None,
            "preceded_by": ["evt_01H..."],
            "intent": "deal_close",
            "labels": ["sales", "q3-launch"],
        },
        "directives": {
            "extract": ["facts", "entities", "beliefs"],
            "consolidate_into": "ws:acme-q3-launch",
            "confidence_floor": 0.5,
            "ttl_for_belief_layer": "P30D",
            "embed": "lazy",
        },
        "idempotency_key": "alice-msg-1747147320-001",
    },
    "event": {
        "id": "evt_01HX...",
        "scope": "org:acme/dept:eng/user:alice",
        "actor": "agent:support_bot_v3",
        "modality": "conversation",
        "content": {"kind": "message", "role": "user", "text": "..."},
        "context": {
            "observed_at": "2026-05-13T15:42:00Z",
            "recorded_at": "2026-05-13T15:42:09Z",
            "preceded_by": ["evt_..."],
            "intent": "deal_close",
            "labels": [],
        },
        "derives": ["fact_01HX...", "belief_01HX...", "ep_01HX..."],
        "wal_offset": 134892,
        "_partial": False,
    },
    "episode": {
        "id": "ep_01HX...",
        "scope": "org:acme/dept:eng/user:alice",
        "name": "Acme deal Q3 close",
        "summary": "Multi-day negotiation culminating in 200-seat signature on May 13.",
        "events": ["evt_01HX...", "evt_01HX...", "..."],
        "started_at": "2026-05-08T...",
        "ended_at": "2026-05-13T15:42:00Z",
        "valid_from": "2026-05-08T...",
        "valid_to": None,
        "recorded_from": "2026-05-13T15:42:09Z",
        "recorded_to": None,
        "actors_involved": ["user:alice", "user:priya@acme"],
        "centrality_score": 0.78,
        "causal_chain": [
            {"event": "evt_...", "role": "trigger"},
            {"event": "evt_...", "role": "decision"},
            {"event": "evt_...", "role": "outcome"},
        ],
        "_partial": False,
    },
    "fact": {
        "id": "fact_01HX...",
        "scope": "org:acme/dept:eng/user:alice",
        "subject": {"type": "entity", "id": "ent_acme_corp", "name": "Acme Corp"},
        "predicate": "moved_to_seat_count",
        "object": {"type": "literal", "datatype": "integer", "value": 200},
        "supports": ["evt_01HX..."],
        "valid_from": "2026-05-13T15:42:00Z",
        "valid_to": None,
        "recorded_from": "2026-05-13T15:42:09Z",
        "recorded_to": None,
        "confidence": 0.94,
        "extractor": "gpt-4o-mini",
        "superseded_by": None,
        "supersedes": "fact_01HW...",
        "_partial": False,
    },
    "belief": {
        "id": "belief_01HX...",
        "scope": "org:acme/dept:eng/user:alice",
        "claim": {
            "subject": {"type": "entity", "id": "ent_acme_corp"},
            "predicate": "is_likely_to_renew",
            "object": {"type": "literal", "datatype": "boolean", "value": True},
        },
        "stance": "supported",
        "confidence": 0.62,
        "confidence_interval": {
            "lower": 0.48,
            "upper": 0.74,
            "method": "beta_posterior",
            "level": 0.90,
        },
        "calibration": {
            "model": "platt_v2",
            "brier_score_30d": 0.18,
            "samples": 47,
            "last_calibrated_at": "2026-05-13T00:00:00Z",
        },
        "supports": [
            {"type": "fact", "id": "fact_01HX...", "weight": 0.34, "polarity": "supports"},
            {"type": "fact", "id": "fact_01HX...", "weight": 0.28, "polarity": "supports"},
            {"type": "episode", "id": "ep_01HX...", "weight": 0.22, "polarity": "supports"},
        ],
        "contradicts": [
            {"belief_id": "belief_01HW...", "tension": 0.41, "resolution": "newer_wins"}
        ],
        "revision_policy": {
            "trigger": "new_supporting_evidence_or_contradiction",
            "min_evidence_delta": 0.05,
            "cooldown": "PT5M",
            "max_revisions_per_hour": 12,
        },
        "valid_from": "2026-05-13T15:42:09Z",
        "valid_to": None,
        "recorded_from": "2026-05-13T15:42:09Z",
        "recorded_to": None,
        "last_revised_at": "2026-05-13T15:42:09Z",
        "revision_count": 3,
        "supporting_evidence_redacted": False,
        "supporting_evidence_redacted_fraction": 0.0,
        "why_url": "/v1/beliefs/why?belief_id=belief_01HX...",
        "_partial": False,
    },
    "concept": {
        "id": "concept_01HX...",
        "scope": "org:acme/dept:eng",
        "name": "B2B SaaS Sales Cycle",
        "canonical_id": None,
        "version": 3,
        "previous_version": "concept_01HW...",
        "derived_from": [],
        "summary": "Multi-stage process typically involving prospecting, qualification, POC, negotiation, signature, onboarding.",
        "summary_embedding": None,
        "synthesis_inputs": {
            "layers": ["facts", "episodes", "beliefs"],
            "filters": {"topic": "sales_process"},
            "as_of": "2026-05-13T00:00:00Z",
            "synthesizer": "claude-opus-4-6",
            "synthesizer_version": "2026-05-08",
        },
        "supported_by": {
            "facts": ["fact_01HX...", "..."],
            "episodes": ["ep_01HX...", "..."],
            "beliefs": ["belief_01HX...", "..."],
            "external": [{"source": "wikipedia", "id": "Sales_process", "url": "..."}],
        },
        "edges": [
            {
                "to": "concept_01HX...",
                "relation": "specializes",
                "weight": 0.81,
                "vocabulary": "default",
            },
            {
                "to": "concept_01HX...",
                "relation": "depends_on",
                "weight": 0.55,
                "vocabulary": "default",
            },
        ],
        "valid_from": "2026-04-01T00:00:00Z",
        "valid_to": None,
        "recorded_from": "2026-05-13T15:42:09Z",
        "recorded_to": None,
        "last_synthesized_at": "2026-05-13T15:42:09Z",
        "stance": "supported",
        "confidence": 0.78,
        "staleness_score": 0.0,
        "staleness_reason": None,
        "support_loss_fraction": 0.0,
        "coverage_score": 0.91,
        "_partial": True,
        "_partial_reason": "consolidation_in_progress",
        "_progress": 0.42,
    },
    "lifecycle_event": {
        "lifecycle_id": "lce_01HX...",
        "event_id": "evt_01HX...",
        "stage": "extracted",
        "ts": "2026-05-13T15:42:09.418Z",
        "payload": {"derived": {"facts": 3, "entities": 2, "beliefs": 1}},
    },
    "error_envelope": {
        "error_code": "POLICY_DENIED",
        "message": "Cannot create scope under global:* on this deployment.",
        "request_id": "req_01HX...",
        "details": {"capability": "scope.create.global", "denied_by_tier": "deployment"},
        "retriable": False,
        "documentation": "https://docs.cortexdb.ai/errors/POLICY_DENIED",
    },
}

_ID_PLACEHOLDER = re.compile(r"^([a-z_]+_)01H[A-Z]?\.\.\.$|^([a-z_]+_)\.\.\.$")


def fill_placeholders(value):
    """The reference writes ``evt_01HX...`` and ``2026-05-08T...``; make them concrete."""
    if isinstance(value, dict):
        return {k: fill_placeholders(v) for k, v in value.items()}
    if isinstance(value, list):
        return [fill_placeholders(v) for v in value if v != "..."]
    if isinstance(value, str):
        match = _ID_PLACEHOLDER.match(value)
        if match:
            return (match.group(1) or match.group(2)) + "01HX"
        if re.match(r"^\d{4}-\d{2}-\d{2}T\.\.\.$", value):
            return value[:-3] + "00:00:00Z"
        if value.endswith("belief_id=belief_01HX..."):
            return value[:-3]
    return value


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_reference_examples_validate(name):
    validator = schemas.validator(name)
    errors = sorted(validator.iter_errors(fill_placeholders(REFERENCE[name])), key=str)
    assert errors == [], [e.message for e in errors]


def test_schemas_are_themselves_valid_draft_2020_12():
    from jsonschema import Draft202012Validator

    for name in schemas.NAMES:
        Draft202012Validator.check_schema(schemas.load(name))


# -- every record the engine produces ------------------------------------------------------------
async def test_every_record_the_engine_produces_validates(engine):
    scope = "org:acme/user:alice"
    blob_id = (await engine.blobs.put(b"reading", scope=scope, content_type="text/csv")).metadata["blob_id"]
    writes = [
        envelope(
            "I live in Paris. My favorite color is blue.",
            observed_at="2026-05-01T10:00:00Z",
            observed_actor={"id": "user:alice", "session": "s1"},
            key="a",
        ),
        envelope("I moved to Berlin.", observed_at="2026-05-02T10:00:00Z"),
        envelope("I live in Rome.", observed_at="2026-05-02T10:00:00Z"),
        envelope("Acme moved to 200 seats.", observed_at="2026-05-03T10:00:00Z", role="assistant"),
        {**envelope("x"), "content": {"kind": "json", "data": {"plan": "pro", "tags": ["a"]}}},
        {
            **envelope("x"),
            "content": {
                "kind": "triple",
                "subject": "Acme",
                "predicate": "stage",
                "object": "signed",
            },
        },
        {
            **envelope("x"),
            "content": {"kind": "blob_ref", "blob_id": blob_id},
            "modality": "sensor_reading",
        },
        envelope(
            "I don't like hiking.",
            directives={"consolidate_into": "ws:team", "extract": ["facts", "beliefs"]},
        ),
    ]
    ids = []
    for body in writes:
        ids.append(
            (await engine.experience(body, caller="user:alice", wait="consolidated")).event_id
        )
    await engine.flush(scope, seal=True)
    await engine.cancel(ids[-2])
    checks = {
        "event": [
            e
            for s in (scope, "ws:team")
            for e in (await engine.events(s, include_excluded=True))["items"]
        ],
        "fact": (await engine.facts(scope, include_superseded=True))["items"]
        + (await engine.facts("ws:team"))["items"],
        "belief": (await engine.beliefs(scope))["items"]
        + (await engine.beliefs("ws:team"))["items"],
        "episode": (await engine.episodes(scope))["items"],
        "lifecycle_event": await engine.lifecycle(limit=1000),
        "experience_envelope": writes,
    }
    for name, records in checks.items():
        assert records, name
        validator = schemas.validator(name)
        for record in records:
            errors = [e.message for e in validator.iter_errors(record)]
            assert errors == [], (name, record.get("id"), errors)
    assert {r["stage"] for r in checks["lifecycle_event"]} >= {
        "captured",
        "extracted",
        "indexed",
        "consolidated",
        "compressed",
    }


# -- the hand-written validator agrees with the schema -------------------------------------------
SEMANTIC_ONLY = {
    # rules beyond a schema's reach, enforced by the engine's semantic checks (DESIGN §5)
    ("observed_actor.type", repr("agent")),  # type must equal the id's type segment
    ("vector", repr([0.0, 0.0])),  # a zero vector has no direction
}


@pytest.mark.parametrize(
    "path,value,field,reason", CASES, ids=[f"{c[0]}={c[1]!r}"[:60] for c in CASES]
)
def test_schema_rejects_what_the_validator_rejects(path, value, field, reason):
    body = mutate(path, value)
    schema_ok = schemas.validator("experience_envelope").is_valid(body)
    if (path, repr(value)) in SEMANTIC_ONLY:
        assert schema_ok, (
            "listed as semantic-only, but the schema rejects it too: drop it from the list"
        )
    else:
        assert not schema_ok, (
            f"the schema accepts an envelope the engine rejects ({field}: {reason})"
        )


@pytest.mark.parametrize(
    "body",
    [
        mutate("modality", "sensor_reading"),
        mutate("context.labels", {"dia_id": "D1:3"}),
        {**envelope("x"), "content": {"kind": "text", "text": "plain"}},
        {**envelope("x"), "content": {"kind": "json", "data": [1, 2]}},
        {
            **envelope("x"),
            "content": {"kind": "triple", "subject": "A", "predicate": "b", "object": True},
        },
        {
            **envelope("x"),
            "observed_actor": {"id": "agent:bot"},
            "subject": {"id": "user:alice", "type": "user"},
        },
    ],
)
def test_schema_and_validator_both_accept(body):
    assert schemas.validator("experience_envelope").is_valid(body)
    validate_envelope(copy.deepcopy(body))


def test_every_error_envelope_validates():
    from cortexdb.errors import IdempotencyConflict, InvalidEnvelope, NotFound

    validator = schemas.validator("error_envelope")
    for error in (
        InvalidEnvelope("scope", "is required"),
        NotFound("gone"),
        IdempotencyConflict("x"),
        CortexError("boom"),
    ):
        assert validator.is_valid(error.to_envelope("req_1"))
