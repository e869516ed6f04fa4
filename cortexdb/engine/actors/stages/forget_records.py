"""Deleting derived records for good (``forget.DeleteRecords``): facts, beliefs, episodes.

- a **fact** goes with its index rows (``FI``, every ``FS`` support), vector and index documents;
  the facts around it in its supersession chain are relinked as if it had never been recorded
  (what ``rebuild`` would derive without it): the fact it superseded is closed by its successor
  instead, or reopened when it had none; conflict partners forget it; the beliefs of its
  (subject, predicate) are revised without it (a belief resting on it alone is deleted);
- a **belief** goes with its claim row; the rivals of its pair are revised (their
  ``contradicts`` no longer name it);
- an **episode** goes; its members leave it, and the next episode's ``causal_predecessor``
  skips it.
Each is suppressed (``suppress``) against re-derivation, leaves a note (410 on lookup), and the
``derives`` of the events behind it say ``redacted:<id>``.  The concepts of the subjects whose
facts or beliefs went are re-synthesized without them, their history rewritten
(``understanding.refresh``).
"""

from __future__ import annotations

from typing import Any

import attrs

from ...derive.facts import object_key
from ...derive.revision import claim_key
from ...derive.suppression import claim_hash, fact_hash
from ...model import Episode, Fact, TypedRef, TypedValue
from ...model.text import belief_text
from ..state import EPISODE_WINDOW
from . import understanding
from .common import StageContext
from .consolidate import Summary, revise_beliefs
from .extract import fact_ops
from .forget import DeleteRecords, Writes, note, past_beliefs, redacted, replace_derives


async def delete(work: StageContext, out: Writes, item: DeleteRecords, result: dict[str, Any]) -> None:
    ids = list(dict.fromkeys(item.record_ids))
    pairs: set[tuple[str, str]] = set()
    gone: list[Fact] = []
    for belief_id in (i for i in ids if i.startswith("belief_")):
        pair = await _delete_belief(work, out, belief_id, item.suppress, result)
        if pair is not None:
            pairs.add(pair)
        await out.maybe_flush()
    for fact_id in (i for i in ids if i.startswith("fact_")):
        fact = await _delete_fact(work, out, fact_id, item.suppress, result)
        if fact is not None:
            pairs.add((fact.subject.id, fact.predicate))
            gone.append(fact)
        await out.maybe_flush()
    await _delete_episodes(work, out, [i for i in ids if i.startswith("ep_")], item.suppress, result)
    if item.suppress and (pairs or result["episodes"]):
        work.state.suppressing = True
    if pairs:
        await out.flush()  # the suppressions are stored before revision looks for them
        await revise_without(work, out, pairs, gone, result)
        await out.flush()  # the concepts are re-synthesized from what is stored now
        tenant = await understanding.tenant_of(work, sorted(result["evidence"]))
        await understanding.refresh(work, out, sorted({subject for subject, _ in pairs}), tenant)


async def supporters(work: StageContext, fact: Fact) -> list[str]:
    """Every event supporting a fact (the record keeps the first and latest; ``FS`` has all)."""
    found = [e async for e in work.tables.fact_supports.ids(fact.id)]
    return list(dict.fromkeys(fact.supports + found))


async def _delete_fact(work: StageContext, out: Writes, fact_id: str, suppress: bool,
                       result: dict[str, Any]) -> Fact | None:  # fmt: skip
    state, tables = work.state, work.tables
    fact = await state.fact(fact_id)
    if fact is None:
        return None
    pair = (fact.subject.id, fact.predicate)
    await state.facts_for(*pair)  # the pair's lists are loaded before they are edited
    await state.current_facts(*pair)
    events = await supporters(work, fact)
    await past_beliefs(work, out, events)
    await replace_derives(work, out, events, {fact_id: redacted(fact_id)}, result)
    if suppress:
        key = fact_hash(fact.subject, fact.predicate, fact.object, fact.polarity)
        out.ops += [tables.suppressions.put_op(("fact", e, key), {"fact": fact_id}) for e in events]
    fact_ops(work, out, await _relink(work, fact))
    state.facts.pop(fact_id, None)
    state.new_supports.pop(fact_id, None)
    if fact_id in state.fact_ids.get(pair, ()):
        state.fact_ids[pair].remove(fact_id)
    state.current.get(pair, set()).discard(fact_id)
    out.ops += [tables.fact_supports.delete_op((fact_id, e)) for e in events]
    out.ops += [tables.facts.delete_op(fact_id), tables.fact_index.delete_op((*pair, fact_id)),
                tables.forgotten.put_op(fact_id, note(work, "facts"))]  # fmt: skip
    if fact.object.type == "entity" and fact.object.id:
        out.ops.append(tables.fact_objects.delete_op((fact.object.id, fact.predicate, fact_id)))
    work.index.unindex(out.ops, fact_id)
    result["facts"] += 1
    result["evidence"].update(events)
    return fact


async def _relink(work: StageContext, fact: Fact) -> dict[str, Fact]:
    """The facts of the pair around a deleted one, relinked: what it superseded is closed by its
    successor (as if that had superseded it directly), or reopened when it had none; conflict
    partners drop it.  Returns the facts changed."""
    state = work.state
    facts = {f.id: f for f in await state.facts_for(fact.subject.id, fact.predicate)}
    successor = facts.get(fact.superseded_by) if fact.superseded_by else None
    touched: dict[str, Fact] = {}
    for other in facts.values():
        if other.id == fact.id:
            continue
        if other.superseded_by == fact.id:
            if successor is not None:
                other.superseded_by = successor.id
                other.valid_to = successor.valid_from
                if successor.supersedes in (None, fact.id):
                    successor.supersedes = other.id
                    touched[successor.id] = successor
            else:
                other.superseded_by = other.valid_to = other.recorded_to = None
            touched[other.id] = other
        if fact.id in other.conflicts_with:
            other.conflicts_with = [c for c in other.conflicts_with if c != fact.id]
            touched[other.id] = other
    if successor is not None and successor.supersedes == fact.id:
        successor.supersedes = None
        touched[successor.id] = successor
    for other in touched.values():
        state.track(other)
    return touched


async def revise_without(work: StageContext, out: Writes, pairs: set[tuple[str, str]],
                         gone: list[Fact], result: dict[str, Any]) -> None:  # fmt: skip
    """Revise the beliefs of ``pairs`` without the facts ``gone``: their claims are looked at
    once more (as excluded facts), so a belief that rested on them alone is deleted and the
    others no longer cite them."""
    state = work.state
    await _orphaned_beliefs(work, out, pairs, gone, result)
    for fact in gone:
        state.facts[fact.id] = attrs.evolve(fact, excluded_from_recall=True)
    summary = Summary()
    try:
        await revise_beliefs(work, out, sorted(pairs), summary, tuple(f.id for f in gone))
    finally:
        for fact in gone:
            state.facts.pop(fact.id, None)
    if summary.deleted:  # beliefs a revision deleted for want of evidence
        mapping = {b: redacted(b) for b in summary.deleted}
        for subject_id, predicate in sorted(pairs):
            await replace_derives(work, out, await pair_events(work, subject_id, predicate, gone), mapping, result)
    for belief_id in summary.deleted:
        work.index.unindex(out.ops, belief_id)
    beliefs = state.belief_by_id
    await work.index.index_documents(out.ops, {b: belief_text(beliefs[b]) for b in summary.created})
    result["beliefs"] += len(summary.deleted)


async def _orphaned_beliefs(work: StageContext, out: Writes, pairs: set[tuple[str, str]],
                            gone: list[Fact], result: dict[str, Any]) -> None:  # fmt: skip
    """The beliefs of claims no remaining fact asserts any more go with the facts: a rebuild
    would never derive them (revision alone keeps a claim that still has evidence against it)."""
    asserted = set()
    for subject_id, predicate in pairs:
        for fact in await work.state.facts_for(subject_id, predicate):
            if fact.polarity > 0:
                asserted.add(claim_key(subject_id, predicate, object_key(fact.object)))
    for fact in gone:
        claim = claim_key(fact.subject.id, fact.predicate, object_key(fact.object))
        belief = await work.state.belief_for(claim) if fact.polarity > 0 and claim not in asserted else None
        if belief is not None:
            await _delete_belief(work, out, belief.id, False, result)


def claim_of(claim: dict[str, Any]) -> tuple[TypedRef, str, TypedValue]:
    """A belief's claim (wire) as (subject, predicate, object) records."""
    subject = TypedRef(**{k: v for k, v in claim["subject"].items() if k in ("type", "id", "name")})
    fields = {f.name for f in attrs.fields(TypedValue)}
    obj = TypedValue(**{k: v for k, v in claim["object"].items() if k in fields})
    return subject, claim["predicate"], obj


async def pair_events(work: StageContext, subject_id: str, predicate: str,
                      extra: list[Fact] = ()) -> list[str]:  # fmt: skip
    """The events behind every fact of a (subject, predicate) pair (superseded ones too, and
    ``extra``): those whose consolidation made or revised the pair's beliefs."""
    events: list[str] = []
    for fact in [*await work.state.facts_for(subject_id, predicate), *extra]:
        events += await supporters(work, fact)
    return list(dict.fromkeys(events))


async def _delete_belief(work: StageContext, out: Writes, belief_id: str, suppress: bool,
                         result: dict[str, Any]) -> tuple[str, str] | None:  # fmt: skip
    state, tables = work.state, work.tables
    belief = state.belief_by_id.get(belief_id) or await tables.beliefs.get(belief_id)
    if belief is None:  # deleted by a revision already: its kept versions go (``rewrite_history``)
        out.ops.append(tables.beliefs.delete_op(belief_id))
        return None
    subject, predicate, obj = claim_of(belief.claim)
    claim = claim_key(subject.id, predicate, object_key(obj))
    events = await pair_events(work, subject.id, predicate)
    await replace_derives(work, out, events, {belief_id: redacted(belief_id)}, result)
    if suppress:
        row = {"upto": work.ctx.wal.last, "belief": belief_id}
        out.ops.append(tables.suppressions.put_op(("claim", claim_hash(subject, predicate, obj)), row))
    if await tables.belief_claims.get(claim) == belief_id:
        out.ops.append(tables.belief_claims.delete_op(claim))
    out.ops += [tables.beliefs.delete_op(belief_id), tables.forgotten.put_op(belief_id, note(work, "beliefs"))]
    work.index.unindex(out.ops, belief_id)
    state.keep_belief(claim, None)
    state.belief_by_id.pop(belief_id, None)
    state.deferred.discard(claim)
    result["beliefs"] += 1
    result["evidence"].update(events)
    return subject.id, predicate


async def _delete_episodes(work: StageContext, out: Writes, episode_ids: list[str], suppress: bool,
                           result: dict[str, Any]) -> None:  # fmt: skip
    predecessors: dict[str, str | None] = {}
    for episode_id in episode_ids:
        episode = await delete_episode(work, out, episode_id, suppress, result)
        if episode is not None:
            predecessors[episode.id] = episode.causal_predecessor
        await out.maybe_flush()
    if predecessors:
        await relink_episodes(work, out, predecessors)


async def delete_episode(work: StageContext, out: Writes, episode_id: str, suppress: bool,
                         result: dict[str, Any]) -> Episode | None:  # fmt: skip
    state, tables = work.state, work.tables
    episode = await state.load_episode()
    if episode is None or episode.id != episode_id:
        episode = await tables.episodes.get(episode_id)
        if episode is None:
            return None
    members = list(dict.fromkeys(episode.events + episode.supports))
    await replace_derives(work, out, members, {episode_id: redacted(episode_id)}, result)
    if suppress:
        out.ops += [tables.suppressions.put_op(("episode", e), {"episode": episode_id}) for e in members]
    if state.episode is not None and state.episode.id == episode_id:  # the open window
        state.episode = None
        out.ops.append(tables.open_episodes.delete_op(EPISODE_WINDOW))
    out.ops += [*await tables.episodes.delete_ops(episode_id), tables.forgotten.put_op(episode_id, note(work, "episodes"))]
    work.index.unindex(out.ops, episode_id)
    result["episodes"] += 1
    result["evidence"].update(members)
    return episode


async def relink_episodes(work: StageContext, out: Writes, predecessors: dict[str, str | None]) -> None:
    """Episodes whose ``causal_predecessor`` was deleted point past it (chains of deleted ones
    too); the scope's last sealed episode likewise."""
    def past(episode_id: str | None) -> str | None:
        seen = set()
        while episode_id in predecessors and episode_id not in seen:
            seen.add(episode_id)
            episode_id = predecessors[episode_id]
        return episode_id

    await out.flush()  # the episodes written so far are read back below
    state = work.state
    state.last_sealed = past(state.last_sealed)
    if state.episode is not None and state.episode.causal_predecessor in predecessors:
        state.episode.causal_predecessor = past(state.episode.causal_predecessor)
        out.ops += await work.tables.episodes.whole_ops(state.episode)
    async for episode_id, episode in work.tables.episodes.scan():
        if episode.causal_predecessor in predecessors and episode_id not in predecessors:
            if state.episode is None or state.episode.id != episode_id:
                episode.causal_predecessor = past(episode.causal_predecessor)
                out.ops += await work.tables.episodes.whole_ops(episode)
