"""The extract stage's intake report, completed (docs/intake.md; the rules are ``derive.clarify``):
hints on conflicts, questions for ambiguous assertions, noise reported as ``rejected``; and the
rows of the scope's pending-results queue (``IQ``) for the statuses an agent must act on
(``EngineConfig.intake_queue_statuses``), written in the stage's batch.

The queue is derived from the events like every layer: ``rebuild`` empties it and derives it
again, a scope erased whole loses it.  Acknowledgements are primary records (``IA``, keyed by the
event and what the result says: ``clarify.fingerprint``), so a result acknowledged before a
rebuild is not queued again."""

from __future__ import annotations

import functools
from typing import Any

from ...derive import clarify
from ...derive.entities import normalise_alias
from ...model import Event, Fact
from ...model.text import content_text, fact_text
from ...temporal import format_ts
from ..workers import OFF_LOOP_CHARS, off_loop
from .common import StageContext

READ_KINDS = ("text", "message")


async def complete(work: StageContext, event: Event, intake: list[dict[str, Any]], touched: dict[str, Fact],
                   read: bool, derived_anything: bool) -> list[Any]:  # fmt: skip
    """Add hints, questions and the noise entry to ``intake`` (in place); the queue rows."""
    facts = work.state.facts
    for entry in intake:
        if entry.get("status") == "conflict_detected" and entry.get("fact_id") in touched:
            olds = [facts[i] for i in entry.get("conflicts_with", ()) if i in facts]
            entry["surfacing_hint"] = clarify.conflict_hint(fact_text(touched[entry["fact_id"]]),
                                                            [fact_text(o) for o in olds])  # fmt: skip
    text_read = read and event.content.get("kind") in READ_KINDS
    added = await _pronoun_questions(work, content_text(event.content)) if text_read else []
    for entry in list(intake):
        fact = touched.get(entry.get("fact_id")) if entry.get("status") in ("accepted", "conflict_detected") else None
        if fact is not None:
            added += [e for e in [await _ambiguous(work, event.tenant_id, fact, ref) for ref in (fact.subject, fact.object)] if e]
    intake += added
    quiet = clarify.noise(intake, text_read, derived_anything)
    if quiet is not None:
        intake.append(quiet)
    return await _queue(work, event, intake)


async def _pronoun_questions(work: StageContext, text: str) -> list[dict[str, Any]]:
    """``clarify.pronoun_questions``; a long text's pass runs off the event loop (as its read)."""
    ask = functools.partial(clarify.pronoun_questions, text, work.config.intake_max_questions,
                            work.config.intake_name_candidates)  # fmt: skip
    return await off_loop(work.ctx, ask) if len(text) > OFF_LOOP_CHARS else ask()


async def _ambiguous(work: StageContext, tenant: str, fact: Fact, ref: Any) -> dict[str, Any] | None:
    name, entity_id = getattr(ref, "name", None), getattr(ref, "id", None)
    if getattr(ref, "type", None) != "entity" or not name or " " in name.strip():
        return None
    others: set[str] = set()
    tables = work.ctx.tables
    async for _, other_id in tables.entity_aliases.scan((tenant,), starting_with=normalise_alias(name) + " ",
                                                         limit=work.config.intake_name_candidates):  # fmt: skip
        if other_id != entity_id:
            others.add(other_id)
    names = [entity.name for entity in [await tables.entities.get((tenant, i)) for i in sorted(others)] if entity]
    return clarify.ambiguous_entity(name, names, fact.id)


async def _queue(work: StageContext, event: Event, intake: list[dict[str, Any]]) -> list[Any]:
    wanted = work.config.intake_queue_statuses
    now = format_ts(work.ctx.clock.now())
    ops = []
    for entry in intake:
        if entry.get("status") in wanted and not await work.tables.intake_acks.exists((event.id, clarify.fingerprint(entry))):
            item_id = work.ctx.ids.new("intk")
            item = {"id": item_id, "scope": work.scope, "event_id": event.id, "caller": event.caller,
                    "created_at": now, **entry}  # fmt: skip
            ops.append(work.tables.intake_queue.put_op(item_id, item))
    return ops
