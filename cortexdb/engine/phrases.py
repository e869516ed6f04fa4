"""Custom temporal phrases (reference §8.17): per tenant, stored in the node's ``TP`` table, and
the per-tenant map (pattern -> interval) that layer reads and recall resolve ``natural`` with."""

from __future__ import annotations

from typing import Any

from ..errors import InvalidQuery, NotFound
from .retrieve.temporal_filter import parse_interval
from .storage import NodeTables

MAX_CHARS = 200  # a phrase's name and pattern


class TemporalPhrases:
    def __init__(self, tables: NodeTables) -> None:
        self.table = tables.temporal_phrases
        self._maps: dict[str, dict[str, tuple]] = {}  # tenant -> pattern -> interval

    async def register(self, tenant: str, name: str, pattern: str,
                       resolves_to: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
        for field, value in (("name", name), ("pattern", pattern)):
            if not isinstance(value, str) or not value.strip() or len(value) > MAX_CHARS:
                raise InvalidQuery(f"{field} must be a non-empty string of at most {MAX_CHARS} characters",
                                   details={"field": field})  # fmt: skip
        if not isinstance(resolves_to, dict) or "valid_during" not in resolves_to:
            raise InvalidQuery(
                "resolves_to must be {valid_during: [from, to]}", details={"field": "resolves_to"}
            )
        parse_interval(resolves_to["valid_during"], "resolves_to.valid_during")  # it must parse
        record = {
            "name": name,
            "pattern": pattern,
            "resolves_to": {"valid_during": list(resolves_to["valid_during"])},
        }
        await self.table.put((tenant, name), record, sync=True)
        self._maps.pop(tenant, None)
        return record

    async def list(self, tenant: str) -> list[dict[str, Any]]:
        return [record async for _, record in self.table.scan(tenant)]

    async def delete(self, tenant: str, name: str) -> None:
        if not await self.table.exists((tenant, name)):
            raise NotFound(f"no temporal phrase {name!r}", details={"name": name})
        await self.table.delete((tenant, name), sync=True)
        self._maps.pop(tenant, None)

    async def map(self, tenant: str) -> dict[str, tuple]:
        """The tenant's phrases as pattern -> interval (cached until one changes)."""
        if tenant not in self._maps:
            self._maps[tenant] = {
                p["pattern"]: parse_interval(p["resolves_to"]["valid_during"], "valid_during")
                for p in await self.list(tenant)
            }
        return self._maps[tenant]
