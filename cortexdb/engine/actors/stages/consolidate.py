"""Stage ``consolidated``: revise the beliefs of the pairs an event's facts touched, and hand its
assertions to the scope named by ``directives.consolidate_into``.

The decisions are ``derive.revision.revise_pair``'s (pure); this stage loads the beliefs of each
pair's claims, calls it, keeps the lane's caches and writes what it decided.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import attrs
import trio

from ...derive.facts import object_key
from ...derive.revision import (
    Revision,
    claim_key,
    claim_pair,
    claims_keyed,
    keyed_facts,
    revise_pair,
)
from ...model import Event, EventState, Fact, RevisionPolicy, to_wire
from ...model.text import belief_text, concept_text
from ...stages import Stage
from ...temporal import format_ts
from . import belief_audit, suppress, understanding
from .common import StageBatch, StageContext
from .versioning import close_belief, keep_deleted_belief

SLICE_PAIRS = 16  # (subject, predicate) pairs revised between two checkpoints


@attrs.define
class Summary:
    """The belief ids a revision created, revised, deleted and deferred (in order)."""

    created: list[str] = attrs.field(factory=list)
    revised: list[str] = attrs.field(factory=list)
    deleted: list[str] = attrs.field(factory=list)
    deferred: list[str] = attrs.field(factory=list)

    @property
    def updated(self) -> list[str]:
        return self.created + self.revised

    def counts(self) -> dict[str, int]:
        return {"beliefs_updated": len(self.updated), "beliefs_created": len(self.created),
                "beliefs_deleted": len(self.deleted)}  # fmt: skip


async def run(work: StageContext, events: list[Event], states: dict[str, EventState],
              started: float, batch: StageBatch) -> None:  # fmt: skip
    created: dict[str, str] = {}  # embedded once per batch, not once per event
    objects = batch_objects(work.state.facts, [states[e.id] for e in events])
    for event in events:
        state = states[event.id]
        directives = event.directives or {}
        wanted = directives.get("extract")
        summary = Summary()
        if wanted is None or "beliefs" in wanted:
            touched = [tuple(pair) for pair in state.touched or ()]
            closed = tuple(state.superseded or ())
            await revise_beliefs(work, batch, touched, summary, closed, cause=event, objects=objects)
        else:  # its facts changed claims no revision looked at: the pairs are revised whole next
            work.state.stale_pairs.update(tuple(pair) for pair in state.touched or ())
        for belief_id in summary.updated:
            if belief_id not in state.derives:
                state.derives.append(belief_id)
        state.set_stage_derives(Stage.CONSOLIDATED.value, summary.updated)
        created.update({b: belief_text(work.state.belief_by_id[b]) for b in summary.created})
        for belief_id in summary.deleted:
            created.pop(belief_id, None)
            work.index.unindex(batch.ops, belief_id)
        payload = _payload(event, state, summary)
        target = directives.get("consolidate_into")
        if target and target != work.scope:
            payload["consolidate_into"] = {"scope": target, "status": "queued"}
        # reserve our record first: the target's record is then published after it
        work.finish_stage(batch, event, state, Stage.CONSOLIDATED, started, payload)
        if target and target != work.scope:
            await hand_off(work, event, state, target)
    await synthesize_concepts(work, batch, events, states, created)
    await work.index.index_documents(batch.ops, created)
    work.state_ops(batch, events, states)
    await work.commit(batch)


async def synthesize_concepts(work: StageContext, batch: StageBatch, events: list[Event],
                              states: dict[str, EventState], created: dict[str, str]) -> None:  # fmt: skip
    """Re-synthesize the concepts of the subjects the batch's facts touched (``understanding``);
    the concepts written are indexed for recall."""
    subjects = sorted({pair[0] for e in events for pair in states[e.id].touched or ()})
    if not subjects:
        return
    written = await understanding.synthesize(work, batch, subjects, events[0].tenant_id)
    for concept in written.values():
        if concept.stance == "deprecated":
            work.index.unindex(batch.ops, concept.id)
        else:
            created[concept.id] = concept_text(concept)


def _payload(event: Event, state: EventState, summary: Summary) -> dict[str, Any]:
    intake = state.intake or ()
    return {
        "event_id": event.id, **summary.counts(), "beliefs_deferred": len(summary.deferred),
        **conflict_counts(intake),
        "superseded_facts": state.superseded if state.superseded is not None else [],
        "intake": intake,
    }  # fmt: skip


def conflict_counts(intake) -> dict[str, int]:
    return {
        "conflicts_resolved": sum(1 for item in intake if item.get("superseded")),
        "conflicts_detected": sum(1 for item in intake if item["status"] == "conflict_detected"),
    }


async def hand_off(work: StageContext, event: Event, state: EventState, target: str) -> None:
    """Durably queue this event's assertions for consolidation into another scope."""
    facts = work.state.derived_facts(state.derives)
    extract = event.directives.get("extract")
    payload = {
        "source_scope": work.scope,
        "tenant_id": event.tenant_id,
        "want_beliefs": extract is None or "beliefs" in extract,
        "assertions": [
            {
                "subject": to_wire(f.subject), "predicate": f.predicate, "object": to_wire(f.object),
                "confidence": f.confidence, "single_valued": f.single_valued, "polarity": f.polarity,
                "extractor": f.extractor, "source": f.source, "valid_from": format_ts(f.valid_from),
            }
            for f in facts
            if event.id in f.supports
        ],
    }  # fmt: skip
    await work.ctx.supervisor.consolidate_foreign(target, work.scope, event.id, payload)
    if state.foreign is None:
        state.foreign = []
    if target not in state.foreign:
        state.foreign.append(target)


async def revise_beliefs(work: StageContext, batch: StageBatch, touched, summary: Summary,
                         closed: tuple[str, ...] = (), cause: Event | None = None,
                         objects: dict[tuple[str, str], set[str]] | None = None) -> None:  # fmt: skip
    """Revise the beliefs of the touched pairs (and of the claims waiting on the policy gate)
    from their current facts, plus ``closed``: the facts this event superseded or excluded, whose
    claims need one last revision.  ``cause``: the event being consolidated (its audit rows).
    ``objects``: the object keys of each pair's facts the batch changed (``batch_objects``);
    a pair whose claims cannot weigh on each other (``independent``) revises those claims only."""
    state = work.state
    now = batch.stamp(work.ctx.clock)
    pairs = set(touched)
    for claim in list(state.deferred):
        pairs.add(claim_pair(claim))
    extra: dict[tuple[str, str], list[Fact]] = {}
    for fact_id in closed:
        fact = state.facts.get(fact_id)
        if fact is not None:
            extra.setdefault((fact.subject.id, fact.predicate), []).append(fact)
            pairs.add((fact.subject.id, fact.predicate))
    for position, (subject_id, predicate) in enumerate(sorted(pairs), 1):
        if position % SLICE_PAIRS == 0:
            await trio.lowlevel.checkpoint()  # the store's reads do not yield
        pair = (subject_id, predicate)
        wanted = objects.get(pair) if objects is not None else None
        narrowed = None
        if wanted is not None and pair not in state.stale_pairs:
            narrowed = await _narrowed(state, subject_id, predicate, wanted, extra.get(pair, ()))
        if narrowed is not None:
            facts, keyed, claims = narrowed
        else:
            state.stale_pairs.discard(pair)
            facts = await state.current_facts(subject_id, predicate)
            seen = {f.id for f in facts}
            facts += [f for f in extra.get(pair, ()) if f.id not in seen]
            keyed = keyed_facts(facts)
            claims = claims_keyed(subject_id, predicate, keyed)
        revision = await _revise_pair(work, subject_id, predicate, facts, now, claims, keyed)
        _apply(work, batch, revision, summary, now, cause)


async def _narrowed(state: Any, subject_id: str, predicate: str, wanted: set[str],
                    closing: list[Fact]) -> tuple[list[Fact], list, dict[str, Fact]] | None:  # fmt: skip
    """The facts, keyed facts and claims of the objects ``wanted`` of a pair (with the facts this
    event ``closing``), when the pair's other claims cannot move (``independent``); else None.
    Their revision is then what revising the whole pair would decide for them: a claim's
    evidence is the facts of its own object when no fact of the pair is single-valued, and the
    others' keys come from ``pair_keys`` without reading their facts."""
    held = await state.current_keyed(subject_id, predicate, wanted)
    seen = {f.id for f in held.facts}
    facts = held.facts + [f for f in closing if f.id not in seen]
    keyed = keyed_facts(facts)
    if held.single_valued or any(f.single_valued for f in closing):
        return None
    skip = len(subject_id) + len(predicate) + 2  # a claim key is "subject\x1fpredicate\x1fokey"
    claims = claims_keyed(subject_id, predicate, keyed)
    others = {claim_key(subject_id, predicate, okey) for okey in held.others}
    others.update(claim for claim in claims if claim[skip:] not in wanted)
    if not independent(state, await state.subject_summary(subject_id), others):
        return None
    return facts, keyed, {claim: fact for claim, fact in claims.items() if claim[skip:] in wanted}


def batch_objects(cache: dict[str, Fact], states: list[EventState]) -> dict[tuple[str, str], set[str]] | None:
    """The object keys, by pair, of the facts the batch's extraction changed (each event's intake
    facts, those they superseded or conflict with: every event of the batch, since one event's
    revision sees the facts of those after it, extracted already); None when one is not in the
    lane's cache (a batch resumed after a restart): then every claim of the pairs is revised."""
    out: dict[tuple[str, str], set[str]] = {}
    for state in states:
        intake = state.intake or ()
        ids = [item["fact_id"] for item in intake if "fact_id" in item]
        ids += [other for item in intake for key in ("superseded", "conflicts_with") for other in item.get(key, ())]
        for fact_id in [*ids, *(state.superseded or ())]:
            fact = cache.get(fact_id)
            if fact is None:
                return None
            out.setdefault((fact.subject.id, fact.predicate), set()).add(object_key(fact.object))
    return out


def independent(state: Any, held: Any, others: set[str]) -> bool:
    """Whether the claims ``others`` (of objects the batch did not change, in a pair where no
    fact is of a single-valued predicate: rival claims weigh against and contradict each other)
    would revise to what they are: each has a stored belief, settled — live, not waiting on the
    revision-policy gate, contradicting nothing — as its subject's summary (``held``:
    ``subject_beliefs.Summary``) knows without reading it.  Their evidence is then what it was at
    their last revision, which wrote what it gives: they are left alone."""
    deferred, ids, unsettled = state.deferred, held.ids, held.unsettled
    return all(claim in ids and claim not in unsettled and claim not in deferred for claim in others)


async def _revise_pair(work: StageContext, subject_id: str, predicate: str, facts: list[Fact],
                       now: dt.datetime, claims: dict[str, Fact] | None = None,
                       keyed: list[tuple[str, Fact]] | None = None) -> Revision:  # fmt: skip
    if keyed is None:
        keyed = keyed_facts(facts)
    if claims is None:
        claims = claims_keyed(subject_id, predicate, keyed)
    beliefs = await work.state.beliefs_for(subject_id, claims)
    config = work.config
    return revise_pair(
        subject_id, predicate, facts, beliefs, scope=work.scope, floor=config.confidence_floor,
        policy=default_policy(config), now=now,
        new_id=lambda: work.ctx.ids.new("belief"), claims=claims,
        suppressed=await suppress.suppressed_claims(work, claims, facts, beliefs), keyed=keyed,
    )  # fmt: skip


def default_policy(config) -> RevisionPolicy:
    """The tenant's default revision policy of new beliefs (§7.4 ``revision_policy``)."""
    return RevisionPolicy(
        min_evidence_delta=config.belief_min_evidence_delta,
        cooldown=config.belief_cooldown,
        max_revisions_per_hour=config.belief_max_revisions_per_hour,
        confidence_rule=config.belief_confidence_rule,
    )


def _apply(work: StageContext, batch: StageBatch, revision: Revision, summary: Summary,
           now: dt.datetime, cause: Event | None = None) -> None:  # fmt: skip
    """Keep the caches and write what a pair's revision decided: a revision that changes what a
    belief says closes its version (``versioning``), a deleted belief's last version is kept (a
    deletion under the confidence floor with its audit row, in the same batch: ``belief_audit``),
    a new belief's home is noted (``beliefs/why`` by id)."""
    state, tables = work.state, work.tables
    for deletion in revision.deleted:
        keep_deleted_belief(work, batch, deletion.belief, now)
        batch.ops.append(tables.beliefs.delete_op(deletion.belief.id))
        batch.ops.append(tables.belief_claims.delete_op(deletion.claim))
        note = deletion.note()
        if belief_audit.audited(deletion):
            row = belief_audit.deletion_row(work, deletion, cause, work.ctx.ids.new("audit"))
            batch.ops.append(work.ctx.tables.audit_rows.put_op(row["id"], row))
            note = row["summary"]
        batch.ops.append(tables.belief_deletions.put_op(deletion.belief.id, note))
        state.keep_belief(deletion.claim, None)
        summary.deleted.append(deletion.belief.id)
    homes = work.ctx.tables.belief_homes
    for claim, belief_id in revision.new_claims.items():
        batch.ops.append(tables.belief_claims.put_op(claim, belief_id))
        batch.ops.append(homes.put_op(belief_id, work.scope))
        state.note_claim(claim)
    for claim, belief in revision.beliefs.items():
        state.keep_belief(claim, belief)
    for belief in revision.changed:  # unchanged beliefs are not rewritten
        close_belief(work, batch, revision.previous.get(belief.id), belief, now)
        batch.ops.append(tables.beliefs.put_op(belief.id, belief))
        state.closed.note(belief, now)
    state.deferred.difference_update(revision.settled)
    state.deferred.update(revision.gated)
    summary.created += revision.created
    summary.revised += revision.revised
    summary.deferred += revision.deferred
