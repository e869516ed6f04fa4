"""Dropping a whole scope's derived layers at once: the fast path of a GDPR erasure of a scope.

When an erasure takes a scope whole, every derived record of it goes and nothing there needs
revising: deleting them one by one (``forget_records``: chains relinked, beliefs revised, each
belief re-reading every supporting event of its pair) costs more per record the larger the scope
is.  Instead:

- ``DropScope(erased, kept, drop=False)`` — the *survey*: the ids of the scope's facts,
  beliefs, episodes and concepts (``dropped``); the events that stay and name one of them in
  their ``derives`` (``kept``: this scope's events being redacted; and events of other scopes,
  consolidated into this one) get ``redacted:<id>`` instead — here, or as a ``ReplaceDerives``
  follow-up for the scope that owns the event.  Nothing is deleted; the counts are what is there.
- ``DropScope(erased, kept)`` — the survey again (what changed since), then a forgotten-record
  note (410 on lookup) for each dropped record, then every table of derived records emptied by
  range (``keys.SCOPED_DERIVED_TABLES``, ``CHUNK_OPS`` deletions a write: facts and their
  ``FI``/``FS`` rows, beliefs, claims, deletion notes, episodes, the open window, concepts,
  vectors), and the lane's caches and indexes started afresh (sealed vector segments go with the
  old index).  An event of the scope that is not ``erased`` (captured after the erasure planned)
  is derived again from scratch, like a rebuild.  No suppression is written: the erased events
  are deleted or blanked, so nothing can derive the records again.
- ``DropEvents(ids)`` — the scope's erased events deleted once its layers are gone: the rows of
  ``forget_events.delete_events`` without the per-event care for derived records (there are none
  left to relink), ``CHUNK_OPS`` operations a write, each event's own row deleted last.

Every piece is idempotent: run again after a crash it finishes what was left.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from ...model import Event, EventState
from ...stages import Stage
from .common import StageContext
from .forget import Writes, note, redacted, replace_derives

LAYERS = {"facts": "facts", "beliefs": "beliefs", "episodes": "episodes", "understanding": "concepts"}


@attrs.frozen
class DropScope:
    erased: frozenset[str]  # the scope's events the erasure deletes or redacts
    kept: frozenset[str] = frozenset()  # those of them that stay, redacted
    drop: bool = True  # False: the survey alone


@attrs.frozen
class DropEvents:
    event_ids: tuple[str, ...]


def named(state: EventState) -> set[str]:
    """Every record id an event's state names."""
    ids = set(state.derives)
    for listed in (state.stage_derives or {}).values():
        ids.update(listed)
    ids.update(state.superseded or ())
    ids.update(state.beliefs_deleted_by_cancel or ())
    ids.update(i["fact_id"] for i in state.intake or () if i.get("fact_id"))
    if state.episode_id:
        ids.add(state.episode_id)
    return ids


async def survey(work: StageContext, out: Writes, item: DropScope, result: dict[str, Any]) -> dict[str, list[str]]:
    """The scope's derived record ids by layer; the ``derives`` of the events that stay rewritten."""
    tables = work.tables
    records = {layer: [i async for i in getattr(tables, name).ids()] for layer, name in LAYERS.items()}
    dropped = {i for ids in records.values() for i in ids}
    for layer, ids in records.items():
        result[layer] = len(ids)
    if not dropped:
        return records
    citing = set(item.kept)
    async for event_id in tables.fact_supports.ids():
        if event_id not in item.erased:
            citing.add(event_id)  # of another scope (or captured since the plan: derived again)
    async for _, episode in tables.episodes.json.scan():
        citing.update(e for e in [*episode.get("events", ()), *episode.get("supports", ())] if e not in item.erased)
    for event_id in sorted(citing):
        state = await out.state(event_id)
        if state is None or (state.scope == work.scope and event_id not in item.kept):
            continue
        mapping = {i: redacted(i) for i in named(state) & dropped}
        if mapping:
            await replace_derives(work, out, [event_id], mapping, result)
            await out.maybe_flush()
    return records


async def drop_scope(work: StageContext, out: Writes, item: DropScope, result: dict[str, Any],
                     enqueue: Callable[[Event], None]) -> None:  # fmt: skip
    records = await survey(work, out, item, result)
    await out.flush()
    if not item.drop:
        return
    tables = work.tables
    for layer, ids in records.items():
        gone = note(work, layer)
        for record_id in ids:
            out.ops.append(tables.forgotten.put_op(record_id, gone))
            await out.maybe_flush()
    await out.flush()
    for table in tables.derived():
        await table.delete_all()
    work.state.reset(work.ctx)
    work.state.last_sealed = None  # the scope's episodes are gone: the next one follows none
    await _derive_again(work, out, item.erased, enqueue)


async def _derive_again(work: StageContext, out: Writes, erased: frozenset[str],
                        enqueue: Callable[[Event], None]) -> None:  # fmt: skip
    """The scope's events the erasure does not take, derived again from their captured state
    (``control.rebuild`` does the same for every event)."""
    tables = work.tables
    survivors = [event_id async for event_id in tables.events.ids() if event_id not in erased]
    for event_id in survivors:
        event, state = await tables.events.get(event_id), await work.read_state(event_id)
        if event is None or (state is not None and state.cancelled):
            continue
        out.states[event_id] = EventState(scope=work.scope, done=[Stage.CAPTURED.value],
                                          lce=state.lce[:1] if state is not None else [], batch_id=event.batch_id)  # fmt: skip
        out.ops.append(tables.pending.put_op(event_id, True))
        await out.flush()
        enqueue(event)


async def drop_events(work: StageContext, out: Writes, item: DropEvents, result: dict[str, Any]) -> None:
    """Events of a dropped scope gone: row, WAL entry, state, pending marker, lifecycle rows,
    vectors and index documents, suppressions, foreign work; the facts of the scopes they were
    consolidated into no longer cite them (``DropSupports`` follow-ups); their idempotency keys
    (``keys``, which ``ops`` deletes).  Rows are read as JSON (no record is rebuilt)."""
    ctx, tables = work.ctx, work.tables
    ids = list(dict.fromkeys(item.event_ids))
    suppressed = await _fact_suppressions(work, ids)
    events = await tables.events.json.get_many(ids)  # one scan each, not a look-up per event
    states = await tables.event_states.json.get_many(events)
    for event_id in ids:
        event = events.get(event_id)
        if event is None:
            continue  # deleted before (a rerun)
        record = states.get(event_id) or {}
        if work.state.previous_turn is not None and work.state.previous_turn.event_id == event_id:
            work.state.previous_turn = None
        passages = EventState(scope=work.scope, passages=record.get("passages"))
        work.index.unindex_event(out.ops, event_id, passages)  # documents a restart indexed again
        foreign = (record.get("stage_derives") or {}).get("foreign") or []
        for target in record.get("foreign") or ():
            result.setdefault("drop_supports", {}).setdefault(target, {})[event_id] = tuple(foreign)
        out.ops += [tables.suppressions.delete_op(("fact", event_id, key)) for key in suppressed.get(event_id, ())]
        out.ops += [ctx.tables.lifecycle.delete_op(lce) for lce in record.get("lce") or ()]
        out.ops += [ctx.tables.wal.delete_op(event["wal_offset"]), tables.event_states.delete_op(event_id),
                    tables.pending.delete_op(event_id), tables.suppressions.delete_op(("episode", event_id)),
                    tables.foreign_work.delete_op(event_id),
                    tables.events.delete_op(event_id)]  # last: a rerun finds the event until all is gone  # fmt: skip
        if event.get("idempotency_key"):
            result.setdefault("keys", []).append((event["tenant_id"], event["caller"], event["idempotency_key"],
                                                  event.get("batch_id") is not None))  # fmt: skip
        result["events"] += 1
        await out.maybe_flush()


async def _fact_suppressions(work: StageContext, event_ids: list[str]) -> dict[str, list[str]]:
    """The keys of the fact suppressions (``FG`` ("fact", evt_id, key)) of ``event_ids``: one
    scan over the span of their ids, not one per event."""
    found: dict[str, list[str]] = {}
    if not event_ids:
        return found
    wanted = set(event_ids)
    table = work.tables.suppressions
    async for parts, _ in table.items("fact", after=min(wanted), upto=max(wanted)):
        if len(parts) == 3 and parts[1] in wanted:
            found.setdefault(parts[1], []).append(parts[2])
    return found
