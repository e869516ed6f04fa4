"""The lane's control work, run between batches: cancelling an event (§8.9.5), consolidating
another scope's assertions into this one (``consolidate_into``) or taking them back, recording
what other scopes derived from this scope's events (derives back-pointers), and rebuilding the
derived layers from the WAL."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...model import Event, EventState, Fact, TypedRef, TypedValue
from ...model.text import belief_text, fact_text
from ...stages import EPISODE_SEALED, FOREIGN_DERIVES, LIFECYCLE_STAGES, Stage
from ...storage import CHUNK_OPS, Op
from ...temporal import parse_rfc3339
from . import understanding
from .common import Assertion, StageBatch, StageContext
from .compress import leave_episode
from .consolidate import Summary, conflict_counts, revise_beliefs
from .extract import apply_assertion, fact_ops


async def _stages_of(work: StageContext, state: EventState) -> tuple[list[str], list[str]]:
    """(completed, cancelled) stages of an event being cancelled, as ``GET
    /v1/lifecycle/memory-event`` reports them: ``compressed`` is done once the event's episode is
    sealed (joining an open window is not; the cancel takes the event out of it)."""
    if state.cancelled and state.stages_cancelled is not None:  # cancelled before: as then
        return [s.value for s in LIFECYCLE_STAGES if s.value not in state.stages_cancelled], state.stages_cancelled
    order = LIFECYCLE_STAGES[1:]
    episode = await work.tables.episodes.get(state.episode_id) if state.episode_id else None
    sealed = episode is not None and episode.status == EPISODE_SEALED
    completed = [Stage.CAPTURED.value] + [
        s.value for s in order if s in state.done or (s == Stage.COMPRESSED and sealed)
    ]  # fmt: skip
    return completed, [s.value for s in order if s.value not in completed]


async def cancel(work: StageContext, event_id: str) -> dict[str, Any]:
    """§8.9.5: the event's queued stages are dropped (the lane has taken it off its queue) and
    nothing derived shows it any more — its index documents (passages too) go, the facts it
    alone supports are excluded (not deleted) and their beliefs revised, it leaves its episode,
    and the scopes it was consolidated into are told to do the same."""
    state = await work.read_state(event_id)
    if state is None:
        raise KeyError(event_id)
    completed, cancelled = await _stages_of(work, state)
    if not state.cancelled:
        state.cancelled = True
        state.stages_cancelled = cancelled
        facts = await _withdraw(work, event_id, state)
        pairs = sorted({(f.subject.id, f.predicate) for f in facts if event_id in f.supports})
        for target in state.foreign or ():
            work_item = {"cancel": True, "pairs": [list(p) for p in pairs]}
            await work.ctx.supervisor.consolidate_foreign(target, work.scope, event_id, work_item)
    return {
        "event_id": event_id,
        "stages_cancelled": cancelled if state.stages_cancelled is None else state.stages_cancelled,
        "stages_already_completed": completed,
        "excluded_from_recall": True,
    }


async def _withdraw(work: StageContext, event_id: str, state: EventState) -> list[Fact]:
    """Take a cancelled event out of every derived layer in one write; its waiters are woken
    with its cancelled state.  Returns the facts it had derived.  Like a forget, a cancel
    rewrites the history of what it touches (no earlier version shows the event either)."""
    batch = StageBatch()
    batch.rewriting = True
    work.index.unindex_event(batch.ops, event_id, state)
    previous = work.state.previous_turn
    if previous is not None and previous.event_id == event_id:
        work.state.previous_turn = None  # the next turn's vector must not carry its text
    # records this event already produced are excluded too (not deleted, §8.9.5)
    facts = []
    for record_id in state.derives:
        if record_id.startswith("fact_"):
            fact = await work.state.fact(record_id)
            if fact is not None:
                facts.append(fact)
    deleted = await exclude_sole_support(work, batch, facts, event_id)
    if deleted:
        state.beliefs_deleted_by_cancel = deleted
    event = await work.tables.events.get(event_id)
    if facts and event is not None:  # the concepts that cited what it derived
        await understanding.refresh(work, batch, sorted({f.subject.id for f in facts}), event.tenant_id)
    await leave_episode(work, batch, state, event_id)
    batch.ops.append(work.tables.pending.delete_op(event_id))
    batch.ops.append(work.state_op(event_id, state))
    await work.commit(batch)
    work.ctx.bus.release_event(event_id, state)
    return facts


async def exclude_sole_support(work: StageContext, batch: StageBatch, facts: list[Fact],
                               event_id: str) -> list[str]:  # fmt: skip
    """Exclude the facts whose only support is ``event_id``; revise their beliefs.  Returns
    the ids of the beliefs deleted for want of evidence."""
    touched: dict[str, Fact] = {}
    for fact in facts:
        if fact.supports == [event_id] and not fact.excluded_from_recall:
            fact.excluded_from_recall = True
            work.state.facts[fact.id] = fact
            work.state.track(fact)
            work.index.unindex(batch.ops, fact.id)
            touched[fact.id] = fact
    fact_ops(work, batch, touched)
    if not touched:
        return []
    summary = Summary()
    pairs = sorted({(f.subject.id, f.predicate) for f in touched.values()})
    await revise_beliefs(work, batch, pairs, summary, tuple(touched))
    for belief_id in summary.deleted:
        work.index.unindex(batch.ops, belief_id)
    await _index_created(work, batch, summary)
    return summary.deleted


async def _index_created(work: StageContext, batch: StageBatch, summary: Summary) -> None:
    beliefs = work.state.belief_by_id
    await work.index.index_documents(batch.ops, {b: belief_text(beliefs[b]) for b in summary.created})


async def derived(work: StageContext, event_id: str, derives: tuple[str, ...]) -> None:
    """Records another scope derived from one of this scope's events: listed in its state."""
    state = await work.read_state(event_id)
    if state is None:
        return
    added = [d for d in derives if d not in state.derives]
    if added:
        state.derives.extend(added)
        if state.stage_derives is None:
            state.stage_derives = {}
        foreign = state.stage_derives.setdefault(FOREIGN_DERIVES, [])
        foreign.extend(d for d in added if d not in foreign)
        await work.tables.write([work.state_op(event_id, state)])


async def foreign(work: StageContext, event_id: str) -> None:
    """Consolidate another scope's assertions about one of its events into this scope, or
    take them back when that event was cancelled.  The stored work item decides: a cancel
    overwrites a consolidation not run yet, so it never runs."""
    item = await work.tables.foreign_work.get(event_id)
    if item is None:
        return  # done already
    batch = StageBatch()
    if item.get("cancel"):
        batch.rewriting = True  # as ``_withdraw``
        facts = []
        for subject_id, predicate in item.get("pairs", ()):
            facts += await work.state.facts_for(subject_id, predicate)
        await exclude_sole_support(work, batch, facts, event_id)
        batch.ops.append(work.tables.foreign_work.delete_op(event_id))
        await work.commit(batch)
        return
    intake, summary = await _consolidate_foreign(work, batch, event_id, item)
    derives = sorted({i["fact_id"] for i in intake if "fact_id" in i}
                     | set(summary.created) | set(summary.revised))  # fmt: skip
    record = work.ctx.bus.reserve(
        Stage.CONSOLIDATED, scope=work.scope, event_id=event_id,
        payload={"event_id": event_id, "foreign": True, "source_scope": item["source_scope"],
                 **summary.counts(), **conflict_counts(intake),
                 "superseded_facts": sorted({s for i in intake for s in i.get("superseded", ())}),
                 "intake": intake, "derives": derives},
    )  # fmt: skip
    batch.records.append(record)
    # what waits on this stage (``consolidated@<this scope>``) is handed this scope's view
    batch.states[event_id] = EventState(scope=work.scope, done=[Stage.CONSOLIDATED.value],
                                        derives=list(derives), stage_derives={FOREIGN_DERIVES: derives})  # fmt: skip
    batch.ops.append(work.tables.foreign_work.delete_op(event_id))
    await work.commit(batch)
    if derives:
        await work.ctx.supervisor.notify_derived(item["source_scope"], event_id, derives, work.scope)


async def _consolidate_foreign(work: StageContext, batch: StageBatch, event_id: str,
                               item: dict[str, Any]) -> tuple[list[dict[str, Any]], Summary]:  # fmt: skip
    touched: dict[str, Fact] = {}
    intake = []
    for raw in item["assertions"]:
        assertion = Assertion(
            subject=TypedRef(**raw["subject"]), predicate=raw["predicate"], object=TypedValue(**raw["object"]),
            confidence=raw["confidence"], single_valued=raw["single_valued"], polarity=raw["polarity"],
            extractor=raw["extractor"], source=raw["source"], valid_from=parse_rfc3339(raw["valid_from"]),
            valid_to=parse_rfc3339(raw["valid_to"]) if raw.get("valid_to") else None,
        )  # fmt: skip
        intake.append(await apply_assertion(work, assertion, event_id, touched, batch.stamp(work.ctx.clock)))
    fact_ops(work, batch, touched)
    facts = work.state.facts
    derived = [i["fact_id"] for i in intake if "fact_id" in i]  # not those a forget suppressed
    documents = {fact_id: fact_text(facts[fact_id]) for fact_id in derived}
    await work.index.index_documents(batch.ops, documents, embed_known=False)
    summary = Summary()
    if item.get("want_beliefs", True):
        pairs = {(facts[fact_id].subject.id, facts[fact_id].predicate) for fact_id in derived}
        closed = tuple(s for i in intake for s in i.get("superseded", ()))
        await revise_beliefs(work, batch, sorted(pairs), summary, closed)
    await _index_created(work, batch, summary)
    return intake, summary


async def commit_proposal(work: StageContext, proposal: dict[str, Any], approver: str) -> dict[str, Any]:
    """Commit an approved derivation proposal's fact (docs/proposals.md) as consolidation commits
    an assertion: fact resolution against the scope's facts now, versions, beliefs, index.  The
    event's state lists what it derived; an event cancelled or erased since derives nothing."""
    event_id = proposal["event_ids"][0]
    state = await work.read_state(event_id)
    marks = {"proposal_id": proposal["id"], "approved_by": approver, "event_ids": proposal["event_ids"]}
    if state is None or state.cancelled:
        return {"status": "rejected", "reason": "event_gone", "fact_id": None, **marks}
    batch = StageBatch()
    intake, summary = await _consolidate_foreign(work, batch, event_id, {"assertions": [proposal["fact"]]})
    derived = [intake[0]["fact_id"], *summary.updated] if intake[0].get("fact_id") else []
    if intake[0]["status"] in ("accepted", "conflict_detected"):  # a new fact: it names its approval
        fact = work.state.facts[intake[0]["fact_id"]]
        fact.proposal = {"proposal_id": proposal["id"], "approved_by": approver}
        batch.ops.append(work.tables.facts.put_op(fact.id, fact))  # after fact_ops' put: this one stands
        work.state.closed.note(fact, work.ctx.clock.now())
    state.derives += [d for d in dict.fromkeys(derived) if d not in state.derives]
    batch.ops.append(work.state_op(event_id, state))
    await work.commit(batch)
    return {"fact_id": None, **intake[0], **summary.counts(), **marks}


async def rebuild(work: StageContext, clear_queue: Callable[[], None],
                  enqueue: Callable[[Event], None]) -> None:  # fmt: skip
    """Empty this scope's derived layers and requeue every event that was not cancelled, from
    its captured state (the lane then drains the queue and seals the last episode)."""
    tables = work.tables
    for table in tables.derived():
        await table.delete_all()
    work.state.reset(work.ctx)
    clear_queue()
    ops: list[Op] = []
    async for _, event in tables.events.scan():
        state = await work.read_state(event.id)
        if state is not None and state.cancelled:
            continue
        fresh = EventState(scope=work.scope, done=[Stage.CAPTURED.value],
                           lce=state.lce[:1] if state is not None else [], batch_id=event.batch_id)  # fmt: skip
        ops.append(work.state_op(event.id, fresh))
        ops.append(tables.pending.put_op(event.id, True))
        enqueue(event)
        if len(ops) >= CHUNK_OPS:
            await tables.write(ops)
            ops = []
    if ops:
        await tables.write(ops)
