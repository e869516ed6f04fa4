"""The read side of the engine: a layer read's parameters checked once, then asked of the scope's
actor as a typed query (``actors.messages.QUERY_TYPES``)."""

from __future__ import annotations

from typing import Any

import attrs

from ..errors import InvalidQuery, NotFound
from .actors.messages import Query
from .model import aspects
from .phrases import TemporalPhrases
from .retrieve.temporal_filter import TemporalFilter, bound
from .scopes import canonical_scope
from .temporal import parse_rfc3339

FLAGS = ("include_superseded", "include_excluded", "include_deprecated", "with_causal_chain")
TEMPORAL_KEYS = ("valid_during", "recorded_during", "natural", "reference_date")
TIMES = ("as_of", "since", "until", "recorded_since", "recorded_until")
DATES = ("overlapping_from", "overlapping_to")  # a timestamp or a bare date (§8.7.2)


class Reads:
    def __init__(self, ctx: Any, phrases: TemporalPhrases) -> None:
        self.ctx = ctx  # the engine's NodeContext
        self.phrases = phrases

    async def ask(self, scope: str, kind: type[Query], **params: Any) -> Any:
        """Check ``params``, build a ``kind`` query of the ones it takes (others are ignored, as
        they always were) and ask the scope's actor."""
        scope = canonical_scope(scope)
        query = await self.checked(params)
        fields = attrs.fields_dict(kind)
        taken = {name: value for name, value in query.items() if name in fields and name != "reply"}
        return await self.ctx.supervisor.request(scope, lambda reply: kind(reply=reply, **taken))

    async def checked(self, query: dict[str, Any]) -> dict[str, Any]:
        """A read's common parameters checked and parsed: ``limit``, ``min_confidence``, the
        flags, ``cursor``, the temporal block (a ``TemporalFilter`` as ``temporal``) and times."""
        config = self.ctx.config
        limit = query.get("limit")
        if limit is not None:
            if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
                raise InvalidQuery("limit must be a positive integer", details={"field": "limit"})
            if limit > config.read_max_limit:
                raise InvalidQuery(f"limit may be at most {config.read_max_limit}",
                                   details={"field": "limit", "max": config.read_max_limit})  # fmt: skip
        confidence = query.get("min_confidence")
        if confidence is not None and (isinstance(confidence, bool) or not isinstance(confidence, int | float)
                                       or not 0 <= confidence <= 1):  # fmt: skip
            raise InvalidQuery("min_confidence must be a number between 0 and 1",
                               details={"field": "min_confidence"})  # fmt: skip
        for flag in FLAGS:
            if flag in query and not isinstance(query[flag], bool):
                raise InvalidQuery(f"{flag} must be true or false", details={"field": flag})
        if query.get("aspect") is not None:
            aspects.check(query["aspect"])
        cursor = query.get("cursor")
        if cursor is not None and not isinstance(cursor, str):
            raise InvalidQuery("cursor must be a string", details={"field": "cursor"})
        block = {name: query.pop(name) for name in TEMPORAL_KEYS if query.get(name) is not None}
        for name in TEMPORAL_KEYS:
            query.pop(name, None)
        if block:
            phrases = await self.phrases.map(query.pop("tenant", None) or config.tenant_id)
            query["temporal"] = TemporalFilter.from_query(block, self.ctx.clock.now(), phrases)
        for name in TIMES:
            value = query.get(name)
            if isinstance(value, str):
                query[name] = parse_rfc3339(value, field=name)
        for name in DATES:
            value = query.get(name)
            if isinstance(value, str):
                query[name] = bound(value, "overlapping")
        return query

    async def home_scope(self, record_id: str) -> str:
        """The scope an event was captured in (its state says), or a belief was created in (the
        ``BS`` row its creation wrote; an old data dir's beliefs get theirs on the first miss,
        ``NodeTables.note_belief_homes``)."""
        tables = self.ctx.tables
        if record_id.startswith("belief_"):
            scope = await tables.belief_homes.get(record_id)
            if scope is None and await tables.note_belief_homes():
                scope = await tables.belief_homes.get(record_id)
            if scope is None:
                raise NotFound(f"no belief {record_id[:64]}", details={"belief_id": record_id[:64]})
            return scope
        state = await tables.event_states.get(record_id)
        if state is None:
            raise NotFound(f"no memory event {record_id}", details={"event_id": record_id})
        return state.scope

    async def subject_id(self, subject: str | None, tenant: str | None) -> str | None:
        """An ``ent_`` id, an actor id or a name, as the entity id reads filter on."""
        if subject is None:
            return None
        entity = await self.ctx.entities.find(tenant or self.ctx.config.tenant_id, subject)
        return entity.id if entity else f"unknown:{subject}"
