"""The one cattrs converter: records <-> wire dicts <-> JSON bytes.

Datetimes travel as RFC 3339 strings; ``partial``/``partial_reason``/``progress`` are renamed to
the reference's ``_partial``/``_partial_reason``/``_progress`` and the optional ones are omitted
when unset, so stored bytes and API bodies are the same shape.
"""

from __future__ import annotations

import datetime as dt
import operator
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from .. import jsoncodec
from ..temporal import format_ts, parse_rfc3339
from . import records

T = TypeVar("T")

converter = cattrs.Converter()
converter.register_unstructure_hook(dt.datetime, format_ts)
converter.register_structure_hook(dt.datetime, lambda value, _: parse_rfc3339(value))

_PARTIAL = {
    "partial": override(rename="_partial"),
    "partial_reason": override(rename="_partial_reason", omit_if_default=True),
    "progress": override(rename="_progress", omit_if_default=True),
}

_OMIT_NONE = ("name", "datatype", "value", "id", "unit")
converter.register_unstructure_hook(
    records.TypedValue,
    make_dict_unstructure_fn(
        records.TypedValue,
        converter,
        **{name: override(omit_if_default=True) for name in _OMIT_NONE},
    ),
)

for _cls in (records.Fact, records.Belief, records.Episode, records.Concept):
    converter.register_unstructure_hook(_cls, make_dict_unstructure_fn(_cls, converter, **_PARTIAL))
    converter.register_structure_hook(_cls, make_dict_structure_fn(_cls, converter, **_PARTIAL))


def event_wire(event: records.Event) -> dict[str, Any]:
    """Hand-written: events are serialised on every capture (cattrs' generic path costs ~5x)."""
    return {
        "id": event.id, "scope": event.scope, "tenant_id": event.tenant_id, "caller": event.caller,
        "actor": event.actor, "observed_actor": event.observed_actor, "subject": event.subject,
        "modality": event.modality, "content": event.content, "context": event.context,
        "directives": event.directives, "derives": event.derives, "wal_offset": event.wal_offset,
        "idempotency_key": event.idempotency_key, "batch_id": event.batch_id,
        "excluded_from_recall": event.excluded_from_recall,
    }  # fmt: skip


def lifecycle_wire(record: records.LifecycleEvent) -> dict[str, Any]:
    return {
        "lifecycle_id": record.lifecycle_id, "stage": record.stage, "ts": format_ts(record.ts),
        "scope": record.scope, "event_id": record.event_id, "seq": record.seq, "batch_id": record.batch_id,
        "job_id": record.job_id, "payload": record.payload,
    }  # fmt: skip


def event_state_wire(state: records.EventState) -> dict[str, Any]:
    """Hand-written: a state is written on capture and by every stage.  The always-stored fields
    first, then the ones a stage has set, in the order the stages set them (as before: the
    stored JSON of an event state keeps its names, order and omissions)."""
    wire: dict[str, Any] = {
        "scope": state.scope, "done": state.done, "lce": state.lce, "derives": state.derives,
        "errors": state.errors, "cancelled": state.cancelled, "batch_id": state.batch_id,
    }  # fmt: skip
    for name, value in zip(records.EVENT_STATE_OPTIONAL, _optional_of(state), strict=True):
        if value is not None:
            wire[name] = value
    return wire


_optional_of = operator.attrgetter(*records.EVENT_STATE_OPTIONAL)


def event_state_from_wire(data: dict[str, Any], _: Any = None) -> records.EventState:
    return records.EventState(
        scope=data["scope"], done=data.get("done", []), lce=data.get("lce", []),
        derives=data.get("derives", []), errors=data.get("errors", []),
        cancelled=bool(data.get("cancelled", False)), batch_id=data.get("batch_id"),
        **{name: data.get(name) for name in records.EVENT_STATE_OPTIONAL},
    )  # fmt: skip


converter.register_unstructure_hook(records.Event, event_wire)
converter.register_unstructure_hook(records.LifecycleEvent, lifecycle_wire)
converter.register_unstructure_hook(records.EventState, event_state_wire)
converter.register_structure_hook(records.EventState, event_state_from_wire)
encode_json = jsoncodec.encode


def to_wire(record: Any) -> dict[str, Any]:
    return converter.unstructure(record)


def from_wire(data: dict[str, Any], cls: type[T]) -> T:
    return converter.structure(data, cls)


def dumps(record: Any) -> bytes:
    data = record if isinstance(record, dict) else converter.unstructure(record)
    return jsoncodec.encode(data)


def loads(raw: bytes, cls: type[T]) -> T:
    return converter.structure(jsoncodec.decode(raw), cls)


def evolve(record: T, **changes: Any) -> T:
    return attrs.evolve(record, **changes)
