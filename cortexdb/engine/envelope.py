"""Experience envelope validation (reference §3.5.3) and identity resolution (§3.5.1).

This is the capture path's validator: hand-written because it runs on every write and must cost
microseconds (a generic JSON Schema validator costs ~100x more).  ``tests/test_schemas.py``
checks that it accepts and rejects the same documents as ``schemas/experience_envelope.schema.json``.
Every rejection is ``INVALID_ENVELOPE`` with ``details.field`` (a dotted path) and
``details.reason``; scope grammar errors are ``INVALID_SCOPE_GRAMMAR`` naming the segment.
"""

from __future__ import annotations

import re
from typing import Any

import attrs
import numpy as np
import orjson

from ..errors import InvalidEnvelope, InvalidScopeGrammar
from .given_vector import MAX_VECTOR, validate_vector  # noqa: F401 (the envelope's, re-exported)
from .jsoncodec import MAX_DEPTH_CEILING, canonical_digest, first_fault
from .model.fields import ANY, unknown_field
from .scopes import canonical_scope
from .temporal import timestamp_problem, try_parse_rfc3339

MODALITIES = frozenset(
    {"conversation", "document", "tool_result", "observation", "feedback", "imported"}
)
CONTENT_KINDS = frozenset({"message", "text", "json", "blob_ref", "triple"})
ROLES = frozenset({"user", "assistant", "tool", "system"})
EXTRACT_STAGES = frozenset({"facts", "entities", "beliefs", "episodes"})
EMBED_MODES = frozenset({"lazy", "eager", "none"})
_ACTOR = {"id": ANY, "type": ANY, "session": ANY}
# every field of an envelope, at every depth.  ``content`` holds every kind's fields (a blob
# reference's words too: model.text.MEDIA_WORDS, and its stored size); ``content.media[]`` items,
# ``content.data`` and ``context.labels`` are open (media items take indexing hints, §3.5.4).
ENVELOPE_SHAPE = {
    "scope": ANY, "observed_actor": _ACTOR, "subject": _ACTOR, "modality": ANY,
    "content": dict.fromkeys(("kind", "text", "role", "media", "data", "subject", "predicate", "object",
                              "datatype", "unit", "confidence", "single_valued", "negated", "blob_id",
                              "content_type", "filename", "size_bytes", "caption", "alt", "title",
                              "description", "valid_from", "valid_to"), ANY),
    "context": dict.fromkeys(("observed_at", "source_recorded_at", "recorded_at", "location", "preceded_by",
                              "intent", "labels", "thread"), ANY),
    "directives": dict.fromkeys(("extract", "consolidate_into", "confidence_floor", "ttl_for_belief_layer",
                                 "embed"), ANY),
    "idempotency_key": ANY, "vector": ANY,
}  # fmt: skip
MAX_TEXT = 1_000_000
MAX_IDEMPOTENCY_KEY = 64
MAX_LIST = 1000
ACTOR_ID = re.compile(r"^[a-z][a-z0-9_]*:[^\s/]{1,256}$")
EVENT_ID = re.compile(r"^evt_[A-Za-z0-9_-]{1,64}$")
MODALITY = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


@attrs.frozen
class Identities:
    caller: str
    observed_actor: dict[str, Any]
    subject: dict[str, Any]


def _fail(field: str, reason: str):
    raise InvalidEnvelope(field, reason)


def _obj(value: Any, field: str, *, required: bool) -> dict | None:
    if value is None:
        if required:
            _fail(field, "is required")
        return None
    if not isinstance(value, dict):
        _fail(field, "must be an object")
    return value


def _string(value: Any, field: str, *, required: bool = False, max_len: int = 4096) -> str | None:
    if value is None:
        if required:
            _fail(field, "is required")
        return None
    if not isinstance(value, str):
        _fail(field, "must be a string")
    if required and not value:
        _fail(field, "must not be empty")
    if len(value) > max_len:
        _fail(field, f"is longer than {max_len} characters")
    return value


def _timestamp(value: Any, field: str, *, required: bool) -> None:
    if value is None:
        if required:
            _fail(field, "is required")
        return
    if not isinstance(value, str) or try_parse_rfc3339(value) is None:
        problem = timestamp_problem(value)
        if problem.startswith("is not an RFC 3339"):
            _fail(field, "must be an RFC 3339 timestamp (e.g. 2026-05-13T15:42:00Z)")
        _fail(field, f"must be an RFC 3339 timestamp of a real instant: this one {problem}")


def _scope(value: Any, field: str) -> str:
    if value is None:
        _fail(field, "is required")
    if not isinstance(value, str):
        _fail(field, "must be a string")
    try:
        return canonical_scope(value)
    except InvalidScopeGrammar as exc:
        exc.details["field"] = field
        raise


# actor ids and types found valid, remembered (a writer names few actors; a bulk write the same
# one in every item): their regex and type check run once, not twice a record (docs/decisions.md)
_ACTORS_SEEN = 4096
_actors_seen: dict[tuple[Any, Any], bool] = {}
_SCALARS = frozenset((str, int, float, bool, type(None)))  # a label's value (bool: int's subclass)


def _actor(value: Any, field: str) -> dict | None:
    actor = _obj(value, field, required=False)
    if actor is None:
        return None
    actor_id = actor.get("id")
    kind = actor.get("type")
    seen = (actor_id, kind) if type(actor_id) is str and (kind is None or type(kind) is str) else None
    if seen is not None and seen in _actors_seen:  # this id and type were checked before
        _string(actor.get("session"), f"{field}.session", max_len=256)
        return actor
    if not isinstance(actor_id, str) or not ACTOR_ID.match(actor_id):
        _fail(f"{field}.id", "must be an actor id of the form type:id (e.g. user:alice)")
    if kind is not None:
        if not isinstance(kind, str):
            _fail(f"{field}.type", "must be a string")
        if kind != actor_id.split(":", 1)[0]:
            _fail(f"{field}.type", f"does not match the type of id {actor_id!r}")
    _string(actor.get("session"), f"{field}.session", max_len=256)
    if seen is not None and len(actor_id) <= 512:  # the memo holds short strings only
        if len(_actors_seen) >= _ACTORS_SEEN:
            _actors_seen.clear()
        _actors_seen[seen] = True
    return actor


def validate_content(content: Any, field: str = "content") -> dict:
    content = _obj(content, field, required=True)
    kind = content.get("kind")
    if kind is None:
        _fail(f"{field}.kind", "is required")
    if kind not in CONTENT_KINDS:
        _fail(f"{field}.kind", f"must be one of {sorted(CONTENT_KINDS)}")
    if kind in ("message", "text"):
        text = _string(content.get("text"), f"{field}.text", required=True, max_len=MAX_TEXT)
        del text
    elif "text" in content:
        _string(content.get("text"), f"{field}.text", max_len=MAX_TEXT)
    if kind == "message":
        role = content.get("role")
        if role is None:
            _fail(f"{field}.role", "is required for kind message")
        if role not in ROLES:
            _fail(f"{field}.role", f"must be one of {sorted(ROLES)}")
    elif "role" in content and content["role"] is not None and content["role"] not in ROLES:
        _fail(f"{field}.role", f"must be one of {sorted(ROLES)}")
    if kind == "json" and not isinstance(content.get("data"), dict | list):
        _fail(f"{field}.data", "is required for kind json and must be an object or array")
    if kind == "triple":
        for part in ("subject", "predicate"):
            _string(content.get(part), f"{field}.{part}", required=True, max_len=1024)
        if "object" not in content or content["object"] is None:
            _fail(f"{field}.object", "is required for kind triple")
        if isinstance(content["object"], dict | list):
            _fail(f"{field}.object", "must be a string, number or boolean")
        confidence = content.get("confidence")
        if confidence is not None and (
            not isinstance(confidence, int | float)
            or isinstance(confidence, bool)
            or not 0 <= confidence <= 1
        ):
            _fail(f"{field}.confidence", "must be a number between 0 and 1")
        _validity(content, field)
    if kind == "blob_ref":
        _string(content.get("blob_id"), f"{field}.blob_id", required=True, max_len=128)
    media = content.get("media")
    if media is not None:
        if not isinstance(media, list) or len(media) > MAX_LIST:
            _fail(f"{field}.media", f"must be an array of at most {MAX_LIST} blob references")
        for index, item in enumerate(media):
            if not isinstance(item, dict) or not isinstance(item.get("blob_id"), str):
                _fail(f"{field}.media[{index}]", "must be an object with a blob_id")
    return content


def _validity(content: dict, field: str) -> None:
    """A triple's optional world-time window: the fact it derives is valid from ``valid_from``
    (else the event's ``observed_at``) until ``valid_to`` (else open-ended)."""
    _timestamp(content.get("valid_from"), f"{field}.valid_from", required=False)
    _timestamp(content.get("valid_to"), f"{field}.valid_to", required=False)
    start, end = content.get("valid_from"), content.get("valid_to")
    if start is not None and end is not None and try_parse_rfc3339(end) < try_parse_rfc3339(start):
        _fail(f"{field}.valid_to", "must not be before valid_from")


def _default_start(content: dict, context: dict) -> None:
    """Without ``valid_from`` a triple's fact is valid from ``observed_at``: ``valid_to`` may not
    be earlier."""
    end = content.get("valid_to") if content["kind"] == "triple" else None
    if end is None or content.get("valid_from") is not None:
        return
    if try_parse_rfc3339(end) < try_parse_rfc3339(context["observed_at"]):
        _fail(
            "content.valid_to",
            "is before context.observed_at, from which the fact is valid when valid_from is "
            "absent: give valid_from",
        )


def blob_ids_of(content: dict[str, Any]) -> list[tuple[str, str]]:
    """``(field, blob_id)`` of every blob a validated content refers to: a ``blob_ref``
    content's own and each ``media`` item's (engine/blobs.py checks and records them)."""
    found = []
    if content.get("kind") == "blob_ref":
        found.append(("content.blob_id", content["blob_id"]))
    for index, item in enumerate(content.get("media") or ()):
        found.append((f"content.media[{index}].blob_id", item["blob_id"]))
    return found


def validate_context(context: Any, field: str = "context") -> dict:
    context = _obj(context, field, required=True)
    observed = context.get("observed_at")
    _timestamp(observed, f"{field}.observed_at", required=True)
    recorded = context.get("source_recorded_at")
    if recorded is not None and recorded != observed:  # the same text is the same instant: checked
        _timestamp(recorded, f"{field}.source_recorded_at", required=False)
    preceded = context.get("preceded_by")
    if preceded is not None:
        if not isinstance(preceded, list) or len(preceded) > MAX_LIST:
            _fail(f"{field}.preceded_by", f"must be an array of at most {MAX_LIST} event ids")
        for index, item in enumerate(preceded):
            if not isinstance(item, str) or not EVENT_ID.match(item):
                _fail(f"{field}.preceded_by[{index}]", "must be a memory event id (evt_...)")
    labels = context.get("labels")
    if labels is not None:
        if isinstance(labels, list):
            if len(labels) > MAX_LIST:
                _fail(f"{field}.labels", f"has more than {MAX_LIST} labels")
            for index, label in enumerate(labels):
                if not isinstance(label, str) or len(label) > 1024:
                    _fail(f"{field}.labels[{index}]", "must be a string of at most 1024 characters")
        elif isinstance(labels, dict):
            for name, value in labels.items():
                if type(value) not in _SCALARS and not isinstance(value, str | int | float | bool):
                    _fail(f"{field}.labels.{name}", "must be a string, number, boolean or null")
        else:
            _fail(f"{field}.labels", "must be an array of strings or an object of scalars")
    _string(context.get("intent"), f"{field}.intent", max_len=256)
    _string(context.get("thread"), f"{field}.thread", max_len=256)  # the ``thread`` segment strategy's key
    return context


def validate_directives(directives: Any, field: str = "directives") -> dict:
    directives = _obj(directives, field, required=False)
    if directives is None:
        return {}
    extract = directives.get("extract")
    if extract is not None:
        if not isinstance(extract, list) or any(stage not in EXTRACT_STAGES for stage in extract):
            _fail(f"{field}.extract", f"must be an array drawn from {sorted(EXTRACT_STAGES)}")
    if directives.get("consolidate_into") is not None:
        directives = {
            **directives,
            "consolidate_into": _scope(directives["consolidate_into"], f"{field}.consolidate_into"),
        }
    floor = directives.get("confidence_floor")
    if floor is not None and (
        not isinstance(floor, int | float) or isinstance(floor, bool) or not 0 <= floor <= 1
    ):
        _fail(f"{field}.confidence_floor", "must be a number between 0 and 1")
    ttl = directives.get("ttl_for_belief_layer")
    if ttl is not None:
        from .temporal import parse_duration

        try:
            parse_duration(ttl if isinstance(ttl, str) else "")
        except ValueError:
            _fail(f"{field}.ttl_for_belief_layer", "must be an ISO 8601 duration (e.g. P30D)")
    embed = directives.get("embed")
    if embed is not None and embed not in EMBED_MODES:
        _fail(f"{field}.embed", f"must be one of {sorted(EMBED_MODES)}")
    return directives


def validate_idempotency_key(value: Any, field: str = "idempotency_key") -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        _fail(field, "must be a non-empty string")
    if len(value) > MAX_IDEMPOTENCY_KEY:
        _fail(field, f"is longer than {MAX_IDEMPOTENCY_KEY} characters")
    return value


def validate_modality(value: Any, field: str = "modality") -> str:
    if value is None:
        _fail(field, "is required")
    if not isinstance(value, str) or not MODALITY.match(value):
        _fail(
            field, "must be a lowercase identifier (known: " + ", ".join(sorted(MODALITIES)) + ")"
        )
    return value


@attrs.frozen
class ValidEnvelope:
    scope: str
    observed_actor: dict | None
    subject: dict | None
    modality: str
    content: dict
    context: dict
    directives: dict
    idempotency_key: str | None
    vector: np.ndarray | None = attrs.field(default=None, eq=False)  # unit float32: the event's own
    body_hash: str | None = attrs.field(default=None, eq=False)  # ``validate_envelope(hashed=True)``'s


def validate_envelope(body: Any, *, shaped: bool = False, hashed: bool = False) -> ValidEnvelope:
    """Check one envelope; return it with the scope in canonical form.  ``shaped``: its field
    names are an importer's own constants (``transfer/imports.py``), not walked for unknown ones;
    ``hashed``: a keyed envelope's ``body_hash`` (``services.body_hash``) comes with it, from the
    encoding that checks it can be stored (one encoding, not two)."""
    if not isinstance(body, dict):
        raise InvalidEnvelope("$", "the envelope must be a JSON object")
    unknown = None if shaped else unknown_field(body, ENVELOPE_SHAPE)
    if unknown is not None:
        _fail(unknown, "is not a field of the experience envelope")
    valid = ValidEnvelope(
        scope=_scope(body.get("scope"), "scope"),
        observed_actor=_actor(body.get("observed_actor"), "observed_actor"),
        subject=_actor(body.get("subject"), "subject"),
        modality=validate_modality(body.get("modality")),
        content=validate_content(body.get("content")),
        context=validate_context(body.get("context")),
        directives=validate_directives(body.get("directives")),
        idempotency_key=validate_idempotency_key(body.get("idempotency_key")),
        vector=validate_vector(body.get("vector")),
        body_hash=_storable(body, hashed and body.get("idempotency_key") is not None),  # after the checks above
    )
    _default_start(valid.content, valid.context)
    return valid


def _storable(body: dict, hashed: bool = False) -> str | None:
    """What a Python caller may hand the engine and no JSON can carry (an HTTP body cannot: the
    request decoder refuses it): a lone surrogate, or nesting the encoder cannot follow.  orjson
    refuses both (and big integers, which are fine), so the tree is only walked when it refuses.
    ``hashed``: encoded as ``body_hash`` encodes (sorted keys; what either encoding refuses, the
    other does too, but for keys that are not strings, which are fine), and that hash returned."""
    try:
        if hashed:
            return canonical_digest(body, strict=True)
        orjson.dumps(body, default=str)
        return None
    except orjson.JSONEncodeError:
        pass
    fault = first_fault(body, MAX_DEPTH_CEILING)
    if fault is not None:
        reason, path = fault
        _fail(path, "contains a lone UTF-16 surrogate, which no UTF-8 text can hold"
              if reason == "lone_surrogate" else f"nests more than {MAX_DEPTH_CEILING} levels")  # fmt: skip


def resolve_identities(caller: str, envelope: ValidEnvelope) -> Identities:
    """caller from the token; observed_actor defaults to caller; subject to observed_actor."""
    observed = envelope.observed_actor or {"id": caller}
    observed = {"type": observed["id"].split(":", 1)[0], **observed}
    subject = envelope.subject or {"id": observed["id"], "type": observed["type"]}
    subject = {"type": subject["id"].split(":", 1)[0], **subject}
    return Identities(caller=caller, observed_actor=observed, subject=subject)


def provenance_source(modality: str, observed_actor_id: str) -> str:
    """human | agent | import — who asserted what an event says (DESIGN §10)."""
    if modality == "imported":
        return "import"
    kind = observed_actor_id.split(":", 1)[0]
    if kind in ("agent", "service", "system", "app"):
        return "agent"
    return "human"
