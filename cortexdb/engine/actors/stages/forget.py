"""Deletion in a scope's derivation lane: the work a ``Forget`` message carries (reference §8.5,
§11; the operations ``engine.forget.ops`` offers forget and erasure are built from these).

The lane runs each piece of work between batches, once every queued event is derived, so it is
serialised with derivation like a cancel: nothing is derived from a record while it is deleted.
Writes go in chunks of at most ``CHUNK_OPS`` operations (``Writes``), each record's dependent
rows (suppressions, the ``derives`` of its events, the records relinked around it) before its
own row, so work interrupted by a crash is completed by running it again: every piece is
idempotent, and one that finds nothing to do counts 0.

| work             | does (module)                                                             |
|------------------|---------------------------------------------------------------------------|
| ``Select``       | the ids of the records a forget selector matches (``forget_select``)      |
| ``DeleteRecords``| facts, beliefs, episodes gone for good, suppressed (``forget_records``)   |
| ``RedactEvents`` | event payloads blanked (§11.3)                      (``forget_events``)   |
| ``DeleteEvents`` | events gone: WAL entry, state, index, supports       (``forget_events``)  |
| ``MarkEvidence`` | ``supporting_evidence_redacted`` on the records citing events (``forget_events``) |
| ``Demote``       | beliefs whose evidence is all redacted demoted or deleted (``forget_events``) |
| ``SolelyRedacted`` | the records of some layers resting only on redacted events (``forget_events``) |
| ``ReplaceDerives``, ``DropSupports`` | the same, asked of the scope owning an event (follow-ups) |
| ``Tidy``         | the indexes rebuilt without what was removed (terms, sealed vector segments) |

A piece of work answers a dict of counts; ``follow_ups`` (scope -> work) is what other scopes'
lanes must do for it (their events' ``derives``), which the caller sends once this answer is in.
The lane runs each through ``forget_run.run``.
"""

from __future__ import annotations

from typing import Any

import attrs

from ...model import EventState
from ...storage import CHUNK_OPS, Op
from ...temporal import format_ts
from .common import StageContext

REDACTED = "redacted:"


def redacted(record_id: str) -> str:
    """What an event's ``derives`` says of a deleted record (§18.2 item 2)."""
    return record_id if record_id.startswith(REDACTED) else REDACTED + record_id


@attrs.frozen
class Select:
    layers: frozenset[str]
    subject_ids: frozenset[str] = frozenset()  # about_subject as entity ids (facts, beliefs)
    subject_actors: frozenset[str] = frozenset()  # about_subject as event subjects
    entity_id: str | None = None
    predicate: str | None = None
    valid: Any = None  # TemporalFilter with valid_during, or None
    recorded: Any = None  # TemporalFilter with recorded_during, or None
    memory_ids: tuple[str, ...] = ()
    filtered: bool = False  # some filter besides memory_ids is set


@attrs.frozen
class DeleteRecords:
    record_ids: tuple[str, ...]
    suppress: bool = True


@attrs.frozen
class RedactEvents:
    event_ids: tuple[str, ...]
    actor: str | None = None


@attrs.frozen
class DeleteEvents:
    event_ids: tuple[str, ...]


@attrs.frozen
class MarkEvidence:
    event_ids: tuple[str, ...]


@attrs.frozen
class Demote:
    factor: float
    floor: float


@attrs.frozen
class SolelyRedacted:
    layers: frozenset[str]
    event_ids: tuple[str, ...]


@attrs.frozen
class ReplaceDerives:
    """Events of this scope: replace record ids in their ``derives`` (event id -> old -> new)."""

    mapping: tuple[tuple[str, tuple[tuple[str, str | None], ...]], ...]


@attrs.frozen
class DropSupports:
    """Deleted events of another scope: no fact of this scope cites them any more."""

    supports: tuple[tuple[str, tuple[str, ...]], ...]  # (event id, fact ids)


@attrs.frozen
class Tidy:
    pass


class Writes:
    """Operations and event states accumulated by a piece of work, written ``CHUNK_OPS`` at a
    time (``maybe_flush`` between records) and at the end (``flush``)."""

    rewriting = True  # what a forget changes is rewritten, history included (docs/time.md)

    def __init__(self, work: StageContext) -> None:
        self.work = work
        self.ops: list[Op] = []
        self.states: dict[str, EventState] = {}

    def stamp(self, clock: Any) -> Any:
        return clock.now()

    async def state(self, event_id: str) -> EventState | None:
        state = self.states.get(event_id)
        return state if state is not None else await self.work.read_state(event_id)

    async def maybe_flush(self) -> None:
        if len(self.ops) + len(self.states) >= CHUNK_OPS:
            await self.flush()

    async def flush(self) -> None:
        ops, firsts = await self.work.tables.rewrite_history(self.ops)
        ops += [self.work.state_op(e, state) for e, state in self.states.items()]
        self.ops, self.states = [], {}
        self.work.rewritten(firsts)
        for start in range(0, len(ops), CHUNK_OPS):
            await self.work.tables.write(ops[start : start + CHUNK_OPS])
        self.work.index.backlog.release()


def note(work: StageContext, layer: str) -> dict[str, Any]:
    """What a direct lookup of a forgotten record answers (410 RESOURCE_DELETED)."""
    return {"deleted_at": format_ts(work.ctx.clock.now()), "reason": "forgotten", "layer": layer}


def map_ids(state: EventState, mapping: dict[str, str | None]) -> bool:
    """Replace (or drop, for None) record ids wherever an event's state lists them: its
    ``derives``, per stage, its intake and episode.  True when anything changed."""
    def mapped(ids: list[str]) -> list[str]:
        return [mapping.get(i, i) for i in ids if mapping.get(i, i) is not None]

    before = (list(state.derives), state.stage_derives, state.intake, state.episode_id)
    state.derives = list(dict.fromkeys(mapped(state.derives)))
    if state.stage_derives:
        state.stage_derives = {stage: mapped(ids) for stage, ids in state.stage_derives.items()}
    if state.superseded:
        state.superseded = mapped(state.superseded)
    if state.beliefs_deleted_by_cancel:
        state.beliefs_deleted_by_cancel = mapped(state.beliefs_deleted_by_cancel)
    if state.intake:
        state.intake = [{**i, "fact_id": mapping.get(i["fact_id"]) or redacted(i["fact_id"])}
                        if i.get("fact_id") in mapping else i for i in state.intake]  # fmt: skip
    if state.episode_id in mapping:
        state.episode_id = None
    return before != (state.derives, state.stage_derives, state.intake, state.episode_id)


async def replace_derives(work: StageContext, out: Writes, event_ids, mapping: dict[str, str | None],
                          result: dict[str, Any]) -> None:  # fmt: skip
    """Apply ``mapping`` to the states of ``event_ids``: here, or (an event of another scope,
    via ``consolidate_into``) as a follow-up for the scope that owns it."""
    for event_id in event_ids:
        state = await out.state(event_id)
        if state is None:
            continue
        if state.scope != work.scope:
            owed = result["follow_ups"].setdefault(state.scope, {}).setdefault(event_id, {})
            owed.update(mapping)
        elif map_ids(state, mapping):
            out.states[event_id] = state


async def past_beliefs(work: StageContext, out: Writes, event_ids) -> None:
    """The beliefs these events made that a revision deleted since keep their last versions
    (``versioning.keep_deleted_belief``): a forget of what they rested on rewrites that history
    too — a deletion of the row they no longer have makes ``Writes.flush`` drop those versions."""
    for event_id in event_ids:
        state = await out.state(event_id)
        for derived in state.derives if state is not None else ():
            if derived.startswith("belief_") and not await work.tables.beliefs.exists(derived):
                out.ops.append(work.tables.beliefs.delete_op(derived))  # ``rewrite_history``


def new_result() -> dict[str, Any]:
    return {"facts": 0, "beliefs": 0, "episodes": 0, "understanding": 0, "events": 0,
            "evidence": set(), "follow_ups": {}}  # fmt: skip


async def tidy(work: StageContext) -> None:
    """Rebuild the indexes without what was removed: no term of a deleted document stays in
    BM25, and no sealed vector segment keeps a deleted vector (annoy rebuilds, off the loop).
    A seal or merge building meanwhile (planned before the removals) is waited for first, so that
    no kept file it writes holds a deleted document after the forget answers."""
    if work.index.vector_job_running:
        await work.index.vector_job_finished()
    work.state.text_index.compact()
    await work.state.text_index.merge()  # the compacted segments to their files, off the loop
    await work.state.text_index.persist_all()  # kept files: the old ones deleted before the answer
    await work.state.vector_index.rewrite()


def forget_caches(work: StageContext) -> None:
    """Drop the lane's cached records (they reload from storage on next use)."""
    state = work.state
    state.facts.clear()
    state.fact_ids.clear()
    state.current.clear()
    state.fact_keys.clear()
    state.predicates.clear()
    state.unlisted.clear()
    state.claims.clear()
    state.stale_pairs.clear()
    state.beliefs.clear()
    state.belief_by_id.clear()
    state.subject_beliefs.clear()
    state.new_supports.clear()
    state.closing.clear()
    state.episode, state.episode_loaded = None, False
    state.suppressing = None
