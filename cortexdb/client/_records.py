"""Typed records: what the SDK returns instead of bare JSON.

Every record is a frozen attrs class built from the server's JSON by ``from_wire``:

- the fields it declares are attributes (nested records converted: ``pack.layers.beliefs[0]``);
- every field it does not declare is kept, and still reads as an attribute (``rec.new_field``),
  so a newer server that adds fields never breaks an older SDK;
- ``rec["field"]``, ``rec.get("field")``, ``"field" in rec`` and ``rec.to_dict()`` read the JSON
  exactly as it came (``rec.raw``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, TypeVar

import attrs

R = TypeVar("R", bound="Record")


def nested(record: type[Record] | str, *, many: bool = False, wire: str | None = None) -> Any:
    """A field holding a record (``many``: a list of them) built from the JSON's object(s);
    ``record`` may name a class of this package not defined yet."""
    meta = {"record": record, "many": many, "wire": wire}
    return attrs.field(factory=list, metadata=meta) if many else attrs.field(default=None, metadata=meta)


def wire(name: str, default: Any = None) -> Any:
    """A field whose JSON name is not a Python name (``_partial``, ``from``)."""
    return attrs.field(default=default, metadata={"wire": name})


_REGISTRY: dict[str, type[Record]] = {}


@attrs.frozen(kw_only=True, eq=True)
class Record:
    """A server record: declared fields as attributes, the rest kept in ``raw``."""

    raw: dict[str, Any] = attrs.field(factory=dict, repr=False, eq=False)

    # fields a record fills from the response, not the body (set by the SDK; not in ``raw``)
    LOCAL: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        _REGISTRY[cls.__name__] = cls

    @classmethod
    def from_wire(cls: type[R], data: Any, /, **local: Any) -> R:
        if isinstance(data, cls):
            return attrs.evolve(data, **local) if local else data
        if not isinstance(data, Mapping):
            raise TypeError(f"{cls.__name__} expects a JSON object, got {type(data).__name__}")
        values: dict[str, Any] = {}
        for field in attrs.fields(cls):
            name = field.metadata.get("wire") or field.name
            if field.name == "raw" or field.name in cls.LOCAL or name not in data:
                continue
            values[field.name] = _convert(field, data[name])
        return cls(raw=dict(data), **values, **local)

    def __getattr__(self, name: str) -> Any:
        # only reached when ``name`` is not a declared field: a field this SDK does not know
        if name.startswith("__") or name == "raw":
            raise AttributeError(name)
        raw = object.__getattribute__(self, "raw")
        if name in raw:
            return raw[name]
        raise AttributeError(f"{type(self).__name__} has no field {name!r}")

    def __getitem__(self, key: str) -> Any:
        return self.raw[key]

    def __contains__(self, key: object) -> bool:
        return key in self.raw

    def get(self, key: str, default: Any = None) -> Any:
        return self.raw.get(key, default)

    def keys(self) -> Any:
        return self.raw.keys()

    def to_dict(self) -> dict[str, Any]:
        """The record's JSON, as the server sent it."""
        return dict(self.raw)


def _convert(field: attrs.Attribute, value: Any) -> Any:
    record = field.metadata.get("record")
    if record is None or value is None:
        return value
    if isinstance(record, str):
        record = _REGISTRY[record]
    if field.metadata.get("many"):
        if not isinstance(value, list):
            return value
        return [record.from_wire(item) if isinstance(item, Mapping) else item for item in value]
    return record.from_wire(value) if isinstance(value, Mapping) else value


@attrs.frozen(kw_only=True)
class Page(Record):
    """One page of a listing (reference §6.4): ``items`` (typed records), ``next_cursor`` and
    ``has_more``.  ``client.facts.iter(...)`` and friends follow the cursors for you."""

    items: list[Any] = attrs.field(factory=list)
    next_cursor: str | None = None
    has_more: bool = False

    @classmethod
    def of(cls, data: Any, item: type[Record]) -> Page:
        page = cls.from_wire(data)
        items = [item.from_wire(x) if isinstance(x, Mapping) else x for x in page.items]
        return attrs.evolve(page, items=items)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)
