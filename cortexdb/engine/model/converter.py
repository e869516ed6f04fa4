"""The one cattrs converter: records <-> wire dicts <-> JSON bytes.

Datetimes travel as RFC 3339 strings; ``partial``/``partial_reason``/``progress`` are renamed to
the reference's ``_partial``/``_partial_reason``/``_progress`` and the optional ones are omitted
when unset, so stored bytes and API bodies are the same shape.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

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
    converter.register_unstructure_hook(
        _cls, make_dict_unstructure_fn(_cls, converter, **_PARTIAL)
    )
    converter.register_structure_hook(_cls, make_dict_structure_fn(_cls, converter, **_PARTIAL))

def to_wire(record: Any) -> dict[str, Any]:
    return converter.unstructure(record)


def from_wire(data: dict[str, Any], cls: type[T]) -> T:
    return converter.structure(data, cls)


def dumps(record: Any) -> bytes:
    data = record if isinstance(record, dict) else converter.unstructure(record)
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


def loads(raw: bytes, cls: type[T]) -> T:
    return converter.structure(json.loads(raw), cls)


def evolve(record: T, **changes: Any) -> T:
    return attrs.evolve(record, **changes)
