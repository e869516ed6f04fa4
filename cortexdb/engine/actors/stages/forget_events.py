"""Redacting and deleting events, and what that means for the records citing them (§11.3).

- ``redact``: the payload is blanked — ``content`` becomes ``{"kind": "redacted",
  "original_kind": …}``, ``context`` keeps ``observed_at`` and ``recorded_at``, directives and
  the idempotency key go, the actor is replaced when asked; ``id``, ``wal_offset``, ``scope``
  and the identities' ids stay.  Its index documents and vectors go, its state forgets what its
  text said (passages, rejected predicates, extractor messages, lifecycle payloads), its episode
  is described again without its text, and the suppressions keyed by its claims go (a blank
  event asserts nothing).  The records derived from it are not touched: the caller decides.
- ``delete_events``: the event is gone — row, WAL entry, state, pending marker, lifecycle rows,
  index documents, vectors, suppressions, foreign work; facts and episodes no longer cite it
  (an episode left without events is deleted).
- ``mark``: records citing redacted events say ``supporting_evidence_redacted`` (facts and
  episodes through ``_partial_reason``; beliefs also with the redacted fraction of their
  evidence); ``demote``: beliefs whose evidence is all redacted lose confidence, or go under the
  floor (§11.3 phase 5).
"""

from __future__ import annotations

from typing import Any

import attrs

from ...derive.clarify import QUOTING
from ...derive.facts import object_key
from ...derive.revision import claim_key
from ...model import Belief, Event, EventState, Fact
from ...model.text import episode_text
from ...stages import EPISODE_OPEN
from .common import StageContext
from .compress import redescribe
from .extract import fact_ops
from .forget import (
    Demote,
    DropSupports,
    MarkEvidence,
    RedactEvents,
    SolelyRedacted,
    Writes,
    note,
    past_beliefs,
)
from .forget_records import claim_of, delete_episode, relink_episodes, supporters

REDACTED_KIND = "redacted"
EVIDENCE_REDACTED = "supporting_evidence_redacted"


def is_redacted(event: Event | None) -> bool:
    return event is None or event.content.get("kind") == REDACTED_KIND


def blank(event: Event, actor: str | None) -> Event:
    """The event as §11.3 keeps it."""
    kind = event.content.get("original_kind") if is_redacted(event) else event.content.get("kind")
    actor = actor or event.actor
    context = {k: event.context[k] for k in ("observed_at", "recorded_at") if k in event.context}
    return attrs.evolve(
        event, content={"kind": REDACTED_KIND, "original_kind": kind}, context=context,
        directives={}, idempotency_key=None, actor=actor, observed_actor={"id": actor},
        subject={"id": event.subject.get("id")},
    )  # fmt: skip


def scrub_state(state: EventState) -> None:
    """What an event's state said of its text: gone."""
    state.passages = None
    state.touched = None
    if state.intake:
        state.intake = [{k: v for k, v in i.items() if k not in QUOTING} for i in state.intake]
    for error in state.errors:
        error["message"] = "redacted"


async def redact(work: StageContext, out: Writes, item: RedactEvents, result: dict[str, Any]) -> None:
    state, tables = work.state, work.tables
    for event_id in dict.fromkeys(item.event_ids):
        event = await tables.events.get(event_id)
        record = await out.state(event_id)
        if event is None or record is None:
            continue
        changed = blank(event, item.actor)
        if changed == event:
            continue  # redacted already
        out.ops.append(tables.events.put_op(event_id, changed))
        if event_id in state.events:
            state.events[event_id] = changed
        if state.previous_turn is not None and state.previous_turn.event_id == event_id:
            state.previous_turn = None
        work.index.unindex_event(out.ops, event_id, record)
        scrub_state(record)
        out.states[event_id] = record
        await _scrub_lifecycle(work, out, record.lce)
        async for key in tables.suppressions.ids(("fact", event_id)):
            out.ops.append(tables.suppressions.delete_op(("fact", event_id, key)))
        if record.episode_id:
            await _refresh_episode(work, out, record.episode_id, {event_id: changed}, result)
        result["events"] += 1
        await out.flush()  # one event at a time: the next one reads what this one wrote


async def _scrub_lifecycle(work: StageContext, out: Writes, lifecycle_ids: list[str]) -> None:
    """The event's lifecycle rows (what replay and SSE resume serve) without its text."""
    table = work.ctx.tables.lifecycle
    for lifecycle_id in lifecycle_ids:
        row = await table.get(lifecycle_id)
        if row is None or not isinstance(row.payload.get("intake"), list):
            continue
        intake = [{k: v for k, v in i.items() if k not in QUOTING} for i in row.payload["intake"]]
        if intake != row.payload["intake"]:
            out.ops.append(table.put_op(lifecycle_id, attrs.evolve(row, payload={**row.payload, "intake": intake})))


async def _refresh_episode(work: StageContext, out: Writes, episode_id: str,
                           replaced: dict[str, Event | None], result: dict[str, Any]) -> None:  # fmt: skip
    """Describe an episode again from its members (``replaced``: the members changing now, None
    for one leaving); an episode left without members is deleted."""
    episode = await work.state.load_episode()
    if episode is None or episode.id != episode_id:
        episode = await work.tables.episodes.get(episode_id)
        if episode is None:
            return
    gone = {e for e, event in replaced.items() if event is None}
    episode.events = [e for e in episode.events if e not in gone]
    episode.supports = [e for e in episode.supports if e not in gone]
    members: list[Event] = []
    informative = 0
    for member_id in episode.events:
        event = replaced[member_id] if member_id in replaced else await work.state.event(member_id)
        if event is not None:
            members.append(event)
            member = await out.state(member_id)
            informative += any(d.startswith("fact_") for d in (member.derives if member else ()))
    if not members:
        await delete_episode(work, out, episode_id, False, result)
        await relink_episodes(work, out, {episode_id: episode.causal_predecessor})
        return
    redescribe(work, episode, members, informative)
    out.ops += await work.tables.episodes.whole_ops(episode)
    await work.index.index_documents(out.ops, {episode.id: episode_text(episode)})


async def delete_events(work: StageContext, out: Writes, event_ids, result: dict[str, Any]) -> None:
    ctx, tables = work.ctx, work.tables
    for event_id in dict.fromkeys(event_ids):
        event = await tables.events.get(event_id)
        record = await out.state(event_id)
        if event is None:
            continue
        if work.state.previous_turn is not None and work.state.previous_turn.event_id == event_id:
            work.state.previous_turn = None
        record = record or EventState(scope=work.scope)
        work.index.unindex_event(out.ops, event_id, record)
        await _drop_support(work, out, event_id, [d for d in record.derives if d.startswith("fact_")])
        foreign = (record.stage_derives or {}).get("foreign") or []
        for target in record.foreign or ():
            result.setdefault("drop_supports", {}).setdefault(target, {})[event_id] = tuple(foreign)
        if record.episode_id:
            await _refresh_episode(work, out, record.episode_id, {event_id: None}, result)
        async for key in tables.suppressions.ids(("fact", event_id)):
            out.ops.append(tables.suppressions.delete_op(("fact", event_id, key)))
        out.ops += [ctx.tables.lifecycle.delete_op(lce) for lce in record.lce]
        out.ops += [tables.events.delete_op(event_id), ctx.tables.wal.delete_op(event.wal_offset),
                    tables.event_states.delete_op(event_id), tables.pending.delete_op(event_id),
                    tables.suppressions.delete_op(("episode", event_id)),
                    tables.foreign_work.delete_op(event_id)]  # fmt: skip
        out.states.pop(event_id, None)
        if event.idempotency_key:
            result.setdefault("keys", []).append((event.tenant_id, event.caller, event.idempotency_key,
                                                  event.batch_id is not None))  # fmt: skip
        result["events"] += 1
        await out.flush()  # one event at a time: the next one reads what this one wrote


async def _drop_support(work: StageContext, out: Writes, event_id: str, fact_ids: list[str]) -> None:
    """Facts of this scope no longer cite ``event_id``."""
    touched: dict[str, Fact] = {}
    for fact_id in fact_ids:
        fact = await work.state.fact(fact_id)
        if fact is None:
            continue
        listed = event_id in fact.supports
        stored = await work.tables.fact_supports.exists((fact_id, event_id))
        if not (listed or stored):
            continue
        fact.supports = [e for e in fact.supports if e != event_id]
        fact.supports_total = max(0, fact.supports_total - 1)
        if not fact.supports and fact.supports_total:  # refill from the full list
            fact.supports = [e async for e in work.tables.fact_supports.ids(fact_id, limit=64) if e != event_id]
        out.ops.append(work.tables.fact_supports.delete_op((fact_id, event_id)))
        touched[fact_id] = fact
    fact_ops(work, out, touched)


async def drop_supports(work: StageContext, out: Writes, item: DropSupports, result: dict[str, Any]) -> None:
    for event_id, fact_ids in item.supports:
        await _drop_support(work, out, event_id, list(fact_ids))


# -- evidence ---------------------------------------------------------------------------------
class _Redaction:
    """Which events are redacted (read once each)."""

    def __init__(self, work: StageContext) -> None:
        self.work = work
        self.known: dict[str, bool] = {}

    async def __call__(self, event_id: str) -> bool:
        if event_id not in self.known:
            state = await self.work.read_state(event_id)
            tables = self.work.ctx.tables.partition(state.scope) if state is not None else None
            self.known[event_id] = is_redacted(await tables.events.get(event_id) if tables else None)
        return self.known[event_id]

    async def fraction(self, fact: Fact, events: list[str]) -> float:
        return sum([await self(e) for e in events]) / len(events) if events else 1.0


async def _citing(work: StageContext, event_ids) -> tuple[dict[str, Fact], set[str]]:
    """The facts and episodes of this scope citing ``event_ids`` (through their states)."""
    facts: dict[str, Fact] = {}
    episodes: set[str] = set()
    for event_id in event_ids:
        state = await work.read_state(event_id)
        if state is None:
            continue
        for derived in state.derives:
            if derived.startswith("fact_") and derived not in facts:
                fact = await work.state.fact(derived)
                if fact is not None:
                    facts[derived] = fact
        if state.episode_id and state.scope == work.scope:
            episodes.add(state.episode_id)
    return facts, episodes


async def _beliefs_of(work: StageContext, facts: dict[str, Fact]) -> list[Belief]:
    found: dict[str, Belief] = {}
    async for belief_id, belief in work.tables.beliefs.scan():
        if any(s.id in facts for s in belief.supports):
            found[belief_id] = work.state.belief_by_id.get(belief_id, belief)
    return list(found.values())


async def mark(work: StageContext, out: Writes, item: MarkEvidence, result: dict[str, Any]) -> None:
    await past_beliefs(work, out, item.event_ids)
    facts, episodes = await _citing(work, item.event_ids)
    redaction = _Redaction(work)
    shares: dict[str, float] = {}
    for fact in facts.values():
        shares[fact.id] = await redaction.fraction(fact, await supporters(work, fact))
        if fact.partial_reason != EVIDENCE_REDACTED:
            fact.partial, fact.partial_reason = True, EVIDENCE_REDACTED
            fact_ops(work, out, {fact.id: fact})
            result["facts"] += 1
    for belief in await _beliefs_of(work, facts):
        weights = [(s.weight, shares.get(s.id, 0.0)) for s in belief.supports if s.polarity == "supports"]
        total = sum(w for w, _ in weights)
        fraction = round(sum(w * r for w, r in weights) / total, 4) if total else 0.0
        if not belief.supporting_evidence_redacted or belief.supporting_evidence_redacted_fraction != fraction:
            belief.supporting_evidence_redacted = True
            belief.supporting_evidence_redacted_fraction = fraction
            out.ops.append(work.tables.beliefs.put_op(belief.id, belief))
            work.state.closed.note(belief, work.ctx.clock.now())
            result["beliefs"] += 1
    for episode_id in episodes:
        episode = await work.tables.episodes.get(episode_id)
        if episode is not None and episode.partial_reason != EVIDENCE_REDACTED and episode.status != EPISODE_OPEN:
            episode.partial, episode.partial_reason = True, EVIDENCE_REDACTED
            out.ops += await work.tables.episodes.whole_ops(episode)
            result["episodes"] += 1


async def demote(work: StageContext, out: Writes, item: Demote, result: dict[str, Any]) -> None:
    state, tables = work.state, work.tables
    async for belief_id, stored in tables.beliefs.scan():
        belief = state.belief_by_id.get(belief_id, stored)
        if belief.supporting_evidence_redacted_fraction < 1.0 or belief.partial_reason == EVIDENCE_REDACTED:
            continue
        belief.confidence = round(belief.confidence * item.factor, 4)
        subject, predicate, obj = claim_of(belief.claim)
        if belief.confidence < item.floor:
            claim = claim_key(subject.id, predicate, object_key(obj))
            out.ops += [tables.beliefs.delete_op(belief_id), tables.belief_claims.delete_op(claim),
                        tables.belief_deletions.put_op(belief_id, {**note(work, "beliefs"), "reason": EVIDENCE_REDACTED,
                                                                   "belief_id": belief_id,
                                                                   "confidence": belief.confidence})]  # fmt: skip
            work.index.unindex(out.ops, belief_id)
            state.keep_belief(claim, None)
            state.belief_by_id.pop(belief_id, None)
            result["deleted"] = result.get("deleted", 0) + 1
        else:
            belief.partial, belief.partial_reason = True, EVIDENCE_REDACTED
            out.ops.append(tables.beliefs.put_op(belief_id, belief))
            state.closed.note(belief, work.ctx.clock.now())
            result["demoted"] = result.get("demoted", 0) + 1
        await out.maybe_flush()


async def solely_redacted(work: StageContext, out: Writes, item: SolelyRedacted, result: dict[str, Any]) -> None:
    """The records of ``item.layers`` citing ``item.event_ids`` whose every supporting event is
    redacted: nothing they say rests on anything else."""
    facts, episodes = await _citing(work, item.event_ids)
    redaction = _Redaction(work)
    only = [f.id for f in facts.values() if await redaction.fraction(f, await supporters(work, f)) == 1.0]
    ids: list[str] = only if "facts" in item.layers else []
    if "beliefs" in item.layers:
        doomed = set(only)
        ids += [b.id for b in await _beliefs_of(work, facts)
                if all(s.id in doomed for s in b.supports if s.polarity == "supports")]  # fmt: skip
    if "episodes" in item.layers:
        for episode_id in sorted(episodes):
            episode = await work.tables.episodes.get(episode_id)
            if episode is not None and all([await redaction(e) for e in episode.events]):
                ids.append(episode_id)
    result["ids"] = ids


HANDLERS = {RedactEvents: redact, MarkEvidence: mark, Demote: demote, SolelyRedacted: solely_redacted,
            DropSupports: drop_supports}  # fmt: skip
