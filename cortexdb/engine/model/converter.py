"""The one cattrs converter: records <-> wire dicts <-> JSON bytes.

Datetimes travel as RFC 3339 strings; ``partial``/``partial_reason``/``progress`` are renamed to
the reference's ``_partial``/``_partial_reason``/``_progress`` and the optional ones are omitted
when unset, so stored bytes and API bodies are the same shape.
"""

from __future__ import annotations

import datetime as dt
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

# a revision policy's ``confidence_rule`` is stored (and answered) only when it is not the default
# ``beta_posterior``: beliefs of the default rule keep the bytes they always had (docs/confidence.md)
converter.register_unstructure_hook(records.RevisionPolicy, make_dict_unstructure_fn(
    records.RevisionPolicy, converter, confidence_rule=override(omit_if_default=True)))

def _links(chain: list[records.CausalLink]) -> list[dict[str, str]]:
    """An episode's causal chain as cattrs writes it (a link's fields in order), without its
    dispatch per link: the chain holds a link per event of the episode."""
    return [{"event": link.event, "role": link.role} for link in chain]


# ``version`` is stored (and answered) only from 2: a record never revised keeps the bytes it
# always had, and an old data dir's records read as version 1
_VERSIONED = {"version": override(omit_if_default=True)}
for _cls in (records.Fact, records.Belief, records.Episode, records.Concept):
    _overrides = {**_PARTIAL, **(_VERSIONED if _cls is not records.Concept else {})}
    if _cls is records.Fact:  # only a fact approved from a proposal has one (docs/proposals.md)
        _overrides["proposal"] = override(omit_if_default=True)
    if _cls is records.Belief:  # only while evidence has moved it by less than the policy's delta
        _overrides["revised_confidence"] = override(omit_if_default=True)
    if _cls is records.Episode:  # an open episode is written at every commit that grows it
        _overrides.update(causal_chain=override(unstruct_hook=_links), events=override(unstruct_hook=list),
                          supports=override(unstruct_hook=list))  # fmt: skip
    converter.register_unstructure_hook(_cls, make_dict_unstructure_fn(_cls, converter, **_overrides))
    converter.register_structure_hook(_cls, make_dict_structure_fn(_cls, converter, **_overrides))

# an open episode's header (storage/episodes.py): the episode's wire form with its three lists
# empty, their members not unstructured (its member rows hold them)
_EMPTY = override(unstruct_hook=lambda _: [])
episode_header_wire = make_dict_unstructure_fn(
    records.Episode, converter, **{**_PARTIAL, **_VERSIONED}, events=_EMPTY, supports=_EMPTY, causal_chain=_EMPTY)


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
    """Hand-written: a state is written on capture and by every stage.  The first seven fields
    first (the defaults left out), then the ones a stage has set (``records.EVENT_STATE_OPTIONAL``,
    in that order; the stored JSON of an event state keeps its names, order and omissions).  Straight-line code: a
    loop over the optional names cost a tenth of the lane's own work (docs/decisions.md)."""
    wire: dict[str, Any] = {"scope": state.scope, "done": state.done, "lce": state.lce}
    # stored only when they say something (decisions.md, "Fewer bytes written per event"): a
    # state is rewritten by every stage, so each default costs bytes five times; ``derives``
    # when it is not ``stage_derives`` joined (``state_derives`` reads it back)
    stage_derives = state.stage_derives
    if state.derives != (_joined(stage_derives) if stage_derives else []):
        wire["derives"] = state.derives
    if state.errors:
        wire["errors"] = state.errors
    if state.cancelled:
        wire["cancelled"] = True
    if state.batch_id is not None:
        wire["batch_id"] = state.batch_id
    if state.passages is not None:
        wire["passages"] = state.passages
    if state.stage_derives is not None:
        wire["stage_derives"] = state.stage_derives
    if state.intake is not None:
        wire["intake"] = state.intake
    if state.touched is not None:
        wire["touched"] = state.touched
    if state.superseded is not None:
        wire["superseded"] = state.superseded
    if state.derived_records_limit is not None:
        wire["derived_records_limit"] = state.derived_records_limit
    if state.elapsed_ms is not None:
        wire["elapsed_ms"] = state.elapsed_ms
    if state.foreign is not None:
        wire["foreign"] = state.foreign
    if state.episode_id is not None:
        wire["episode_id"] = state.episode_id
    if state.stages_cancelled is not None:
        wire["stages_cancelled"] = state.stages_cancelled
    if state.beliefs_deleted_by_cancel is not None:
        wire["beliefs_deleted_by_cancel"] = state.beliefs_deleted_by_cancel
    return wire


def _joined(stage_derives: Any) -> list[str] | None:
    """What every stage derived, in stage order, each record once (None: not a stage map)."""
    if not isinstance(stage_derives, dict):
        return None
    return list(dict.fromkeys(record for ids in stage_derives.values() for record in ids))


def state_derives(data: dict[str, Any]) -> list[str]:
    """A stored event state's ``derives`` (its JSON, as ``event_state_wire`` wrote it): the
    list, or, left out, ``stage_derives`` joined.  A state written before stores the list."""
    derives = data.get("derives")
    if derives is None:
        stage_derives = data.get("stage_derives")
        derives = (_joined(stage_derives) if stage_derives else None) or []
    return derives


def event_state_from_wire(data: dict[str, Any], _: Any = None) -> records.EventState:
    get = data.get
    return records.EventState(
        scope=data["scope"], done=get("done", []), lce=get("lce", []), derives=state_derives(data),
        errors=get("errors", []), cancelled=bool(get("cancelled", False)), batch_id=get("batch_id"),
        passages=get("passages"), stage_derives=get("stage_derives"), intake=get("intake"),
        touched=get("touched"), superseded=get("superseded"),
        derived_records_limit=get("derived_records_limit"), elapsed_ms=get("elapsed_ms"),
        foreign=get("foreign"), episode_id=get("episode_id"), stages_cancelled=get("stages_cancelled"),
        beliefs_deleted_by_cancel=get("beliefs_deleted_by_cancel"),
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
