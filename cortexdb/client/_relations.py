"""``client.relationships``: the relationship walk and explicit relationships (docs/relationships.md)."""

from __future__ import annotations

from typing import Any

from ._ops import Namespace, new_key, record
from ._records import Record
from ._transport import Call


class Relationships(Namespace):
    def walk(self, from_: str, *, scope: str | None = None, type: str | list[str] | None = None,
             direction: str | None = None, depth: int | None = None, as_of: str | None = None,
             min_confidence: float | None = None) -> Any:  # fmt: skip
        """``GET /v1/relationships``: the edges reached from the entity ``from_`` (an ``ent_``
        id, an actor id or a name), the filters applied while walking."""
        types = ",".join(type) if isinstance(type, list) else type
        params = {"scope": self.resolve_scope(scope), "from": from_, "type": types, "direction": direction,
                  "depth": depth, "as_of": as_of, "min_confidence": min_confidence}  # fmt: skip
        return self.run(Call("GET", "/v1/relationships", params=params, parse=record(Record)))

    __call__ = walk

    def create(self, from_: str, type: str, to: str, *, scope: str | None = None,
               confidence: float | None = None, valid_from: str | None = None, valid_to: str | None = None,
               idempotency_key: str | None = None) -> Any:  # fmt: skip
        """``POST /v1/relationships``: assert ``from_ -type-> to``; answers once it is indexed,
        with the ids of the relationships (facts) it derived."""
        body = {"scope": self.resolve_scope(scope), "from": from_, "type": type, "to": to,
                "idempotency_key": idempotency_key or new_key()}  # fmt: skip
        for name, value in (("confidence", confidence), ("valid_from", valid_from), ("valid_to", valid_to)):
            if value is not None:
                body[name] = value
        return self.run(Call("POST", "/v1/relationships", json=body, parse=record(Record)))
