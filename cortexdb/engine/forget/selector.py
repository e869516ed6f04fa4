"""A ``POST /v1/forget`` request (reference §8.5, §11.1, §11.2, §18.2 item 13), checked once.

| field            | default                | accepted                                              |
|------------------|------------------------|-------------------------------------------------------|
| ``scope``        | (required)             | a scope path                                          |
| ``layers``       | every derived layer    | a non-empty subset of events, episodes, facts, beliefs, understanding; ``events`` only with ``redact_events`` |
| ``selector``     | ``{}``                 | ``about_subject``, ``about_entity``, ``predicate`` (strings), ``memory_ids`` (ids of the named layers, at most ``forget_max_memory_ids``), ``valid_during``, ``recorded_during`` (``[from, to]`` or ``"FROM..TO"``; ``created_during`` is read as ``recorded_during``) |
| ``cascade``      | ``derived_only``       | ``derived_only`` or ``redact_events`` (true erasure is ``/v1/erasures``) |
| ``confirm_all``  | false                  | must be true when the selector is empty               |
| ``audit_note``, ``idempotency_key`` | none | strings (at most 500 and 256 characters)           |

Anything else is a 422 ``INVALID_FORGET`` naming the field (``details.field``).
"""

from __future__ import annotations

from typing import Any

import attrs

from ...errors import EmptySelectorWithoutConfirmation, InvalidForget, MissingRequiredField
from ..actors.stages.forget import Select
from ..actors.stages.forget_select import layer_of
from ..policy.capabilities import FORGET_CASCADE_DERIVED_ONLY, FORGET_CASCADE_REDACT_EVENTS
from ..retrieve.temporal_filter import TemporalFilter, parse_interval
from ..scopes import canonical_scope

LAYERS = ("events", "episodes", "facts", "beliefs", "understanding", "signals")  # signals: only when named
DERIVED_LAYERS = ("episodes", "facts", "beliefs", "understanding")
CASCADES = {"derived_only": FORGET_CASCADE_DERIVED_ONLY, "redact_events": FORGET_CASCADE_REDACT_EVENTS}
FIELDS = {"scope", "layers", "selector", "cascade", "confirm_all", "audit_note", "idempotency_key"}
SELECTOR_FIELDS = {"about_subject", "about_entity", "predicate", "memory_ids", "valid_during",
                   "recorded_during", "created_during"}  # fmt: skip
TEXT_FILTERS = ("about_subject", "about_entity", "predicate")


@attrs.frozen
class ForgetSpec:
    scope: str
    layers: frozenset[str]
    cascade: str
    selector: dict[str, Any]  # as sent, checked
    memory_ids: tuple[str, ...]
    valid: Any  # TemporalFilter or None
    recorded: Any
    confirm_all: bool
    audit_note: str | None
    idempotency_key: str | None

    @property
    def capability(self) -> str:
        return CASCADES[self.cascade]

    @property
    def filtered(self) -> bool:
        return any(self.selector.get(name) for name in TEXT_FILTERS) or bool(self.valid or self.recorded)


def _text(request: dict[str, Any], name: str, limit: int, field: str | None = None) -> str | None:
    value = request.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise InvalidForget(field or name, f"must be a string of at most {limit} characters")
    return value


def _layers(value: Any, cascade: str) -> frozenset[str]:
    if value is None:
        return frozenset(DERIVED_LAYERS)
    if not isinstance(value, list) or not value:
        raise InvalidForget("layers", f"must be a non-empty array of {', '.join(LAYERS)}")
    for position, layer in enumerate(value):
        if layer not in LAYERS:
            raise InvalidForget(f"layers[{position}]", f"must be one of {', '.join(LAYERS)}")
    if "events" in value and cascade == "derived_only":
        raise InvalidForget("layers", "derived_only leaves events untouched: blank them with "
                                      "cascade redact_events, erase them with /v1/erasures")  # fmt: skip
    return frozenset(value)


def _memory_ids(value: Any, layers: frozenset[str], limit: int) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise InvalidForget("selector.memory_ids", "must be an array of record ids")
    if len(value) > limit:
        raise InvalidForget("selector.memory_ids", f"has {len(value)} ids; at most {limit} per request")
    for position, record_id in enumerate(value):
        field = f"selector.memory_ids[{position}]"
        layer = layer_of(record_id) if isinstance(record_id, str) else None
        if isinstance(record_id, str) and record_id.startswith("sig_"):
            layer = "signals"
        if layer is None:
            raise InvalidForget(field, "must be an evt_, ep_, fact_, belief_, concept_ or sig_ id")
        if layer not in layers:
            raise InvalidForget(field, f"is a record of {layer}, which layers does not name")
    return tuple(dict.fromkeys(value))


def _selector(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidForget("selector", "must be an object")
    for name in value:
        if name not in SELECTOR_FIELDS:
            raise InvalidForget(f"selector.{name}", f"is not a selector field ({', '.join(sorted(SELECTOR_FIELDS))})")
    selector = dict(value)
    if selector.get("created_during") is not None:  # §11.2's name for it
        if selector.get("recorded_during") is not None:
            raise InvalidForget("selector.created_during", "is recorded_during: give one of them")
        selector["recorded_during"] = selector.pop("created_during")
    for name in TEXT_FILTERS:
        _text(selector, name, 1024, f"selector.{name}")
    return selector


def parse(request: Any, *, max_memory_ids: int) -> ForgetSpec:
    """The request checked: 422 ``INVALID_FORGET`` naming the field, 400 when ``scope`` is
    missing, 422 ``EMPTY_SELECTOR_WITHOUT_CONFIRMATION`` for an unconfirmed empty selector."""
    if not isinstance(request, dict):
        raise InvalidForget("$", "the forget request must be a JSON object")
    for name in request:
        if name not in FIELDS:
            raise InvalidForget(name, f"is not a field of the forget request ({', '.join(sorted(FIELDS))})")
    if request.get("scope") is None:
        raise MissingRequiredField("scope is required", details={"field": "scope"})
    if not isinstance(request["scope"], str):
        raise InvalidForget("scope", "must be a scope path")
    cascade = request.get("cascade") or "derived_only"
    if not isinstance(cascade, str) or cascade not in CASCADES:
        why = "true erasure of events goes through /v1/erasures" if cascade == "events_too" else ""
        raise InvalidForget("cascade", f"must be derived_only or redact_events {why}".strip())
    confirm = request.get("confirm_all", False)
    if not isinstance(confirm, bool):
        raise InvalidForget("confirm_all", "must be true or false")
    layers = _layers(request.get("layers"), cascade)
    selector = _selector(request.get("selector"))
    spec = ForgetSpec(
        scope=canonical_scope(request["scope"]), layers=layers, cascade=cascade, selector=selector,
        memory_ids=_memory_ids(selector.get("memory_ids"), layers, max_memory_ids),
        valid=_window(selector, "valid_during"), recorded=_window(selector, "recorded_during"),
        confirm_all=confirm, audit_note=_text(request, "audit_note", 500),
        idempotency_key=_text(request, "idempotency_key", 256),
    )  # fmt: skip
    if not spec.filtered and not spec.memory_ids and not confirm:
        raise EmptySelectorWithoutConfirmation(
            "the selector is empty: this would forget every record of the named layers in the "
            "scope; send confirm_all: true to mean it", details={"field": "selector", "scope": spec.scope},
        )  # fmt: skip
    return spec


def _window(selector: dict[str, Any], name: str) -> TemporalFilter | None:
    interval = parse_interval(selector.get(name), f"selector.{name}")
    if interval is None:
        return None
    return TemporalFilter(valid_during=interval) if name == "valid_during" else TemporalFilter(recorded_during=interval)


async def selection(ctx: Any, spec: ForgetSpec, tenant: str) -> Select:
    """The spec as lane work: names resolved to entity ids (an unknown name matches nothing)."""
    subject_ids: frozenset[str] = frozenset()
    actors: frozenset[str] = frozenset()
    subject = spec.selector.get("about_subject")
    if subject:
        entity = await ctx.entities.find(tenant, subject)
        subject_ids = frozenset({entity.id if entity else f"unknown:{subject}"})
        actors = frozenset({subject} | ({entity.actor_id} if entity and entity.actor_id else set()))
    entity_id = None
    if spec.selector.get("about_entity"):
        found = await ctx.entities.find(tenant, spec.selector["about_entity"])
        entity_id = found.id if found else f"unknown:{spec.selector['about_entity']}"
    return Select(
        layers=spec.layers, subject_ids=subject_ids, subject_actors=actors, entity_id=entity_id,
        predicate=spec.selector.get("predicate") or None, valid=spec.valid, recorded=spec.recorded,
        memory_ids=spec.memory_ids, filtered=spec.filtered,
    )  # fmt: skip
