"""Stage ``extracted``: read each event with the extractor, resolve its assertions into facts.

The extractor runs per passage of a long text, off the event loop when the text is long
(``read_event`` is a module-level function, so a worker process can run it).  Every assertion is
resolved against the scope's current facts (``derive.facts.resolve``): reinforced, accepted,
superseding or in conflict — nothing is dropped.  Entities are resolved node-wide, and the
batch's write records which entities each event mentions (``NM``/``NE``: an entity goes when its
last mentioning event is erased or redacted, ``EntityResolver.release``).
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
from typing import Any

import trio

from ...derive.facts import noisy_or, object_key, resolve
from ...derive.intake import Selection, select
from ...envelope import provenance_source
from ...model import Event, EventState, Fact, TypedRef, TypedValue
from ...model.text import content_text
from ...retrieve import passages
from ...spi.extractor import ExtractionContext, TermRef
from ...stages import Stage
from ...temporal import parse_rfc3339
from ..indexer import SLICE_DOCUMENTS
from ..services import EntityResolver
from ..workers import OFF_LOOP_CHARS, handover, off_loop
from . import intake_report, review, suppress
from .common import Assertion, StageBatch, StageContext
from .versioning import close_fact, fact_version_ops

log = logging.getLogger("cortexdb.pipeline")

FACT_SUPPORTS_KEPT = 64  # supports kept in a fact record: the first and the latest 63
ERRORS_KEPT = 5  # extractor failures recorded per event (the last one counts them all)


def read_event(
    extractor, event: Event, *, max_chars: int, limit: int
) -> tuple[list | None, Selection, list[str]]:
    """Split a long text into passages, run the extractor (per passage for message and text
    content, whose rules read sentence by sentence) and select what the event derives.  Pure
    CPU work: the lane runs it in a worker (thread or process) for a long text."""
    text = content_text(event.content)
    spans = passages.split(text, max_chars) if len(text) > max_chars else None
    content = event.content
    labels = event.context.get("labels")

    def context(body: dict[str, Any]) -> ExtractionContext:
        return ExtractionContext(content=body, modality=event.modality, subject_id=event.subject["id"],
                                 observed_actor_id=event.actor,
                                 labels=tuple(labels) if isinstance(labels, list) else ())  # fmt: skip

    per_passage = content.get("kind") in ("message", "text") and content.get("text") is text
    if spans is not None and per_passage:
        contexts = (context({**content, "text": text[start:end]}) for start, end in spans)
    else:
        contexts = iter([context(content)])
    errors: list[str] = []

    def extractions():
        for item in contexts:
            try:
                yield extractor.extract(item)
                handover()
            except Exception as exc:  # an extractor bug must not stall the scope
                log.warning("extractor failed on %s: %r", event.id, exc)
                errors.append(repr(exc)[:500])

    directives = event.directives or {}
    wanted = directives.get("extract")
    selection = select(
        extractions(), limit=limit, floor=float(directives.get("confidence_floor") or 0.0),
        want_facts=wanted is None or "facts" in wanted, want_entities=wanted is None or "entities" in wanted,
        alias=EntityResolver.alias_of,
    )  # fmt: skip
    return spans, selection, errors


def extractor_name(ctx) -> str:
    return getattr(ctx.extractor, "name", type(ctx.extractor).__name__)


async def run(work: StageContext, events: list[Event], states: dict[str, EventState],
              started: float, batch: StageBatch) -> None:  # fmt: skip
    touched: dict[str, Fact] = {}
    batch.review = await review.holds(work)  # policies.require_review: "derived"
    for event in events:
        state = states[event.id]
        spans, selection, errors = await _read(work, event)
        _record_errors(state, errors)
        if spans is not None:
            state.passages = [list(span) for span in spans]
        intake, entity_ids = await _intake(work, event, selection, touched, batch,
                                           batch.stamp(work.ctx.clock))  # fmt: skip
        wanted = (event.directives or {}).get("extract")
        batch.ops += await intake_report.complete(work, event, intake, touched, read=not selection.unread and (
            wanted is None or "facts" in wanted), derived_anything=bool(selection.steps or entity_ids))  # fmt: skip
        batch.ops += work.ctx.tables.mention_ops(event.id, event.tenant_id, work.scope, sorted(entity_ids))
        fact_ids = [item["fact_id"] for item in intake if "fact_id" in item]
        for fact_id in fact_ids:
            if fact_id not in state.derives:
                state.derives.append(fact_id)
        state.set_stage_derives(Stage.EXTRACTED.value, sorted(set(fact_ids)))
        state.intake = intake
        state.touched = sorted({(touched[f].subject.id, touched[f].predicate) for f in fact_ids})
        state.superseded = sorted({s for item in intake for s in item.get("superseded", ())})
        payload = _payload(work, event, state, selection, spans, fact_ids, entity_ids)
        work.finish_stage(batch, event, state, Stage.EXTRACTED, started, payload)
    fact_ops(work, batch, touched)
    work.state_ops(batch, events, states)
    await work.commit(batch)


async def _read(work: StageContext, event: Event):
    config = work.config
    read = functools.partial(read_event, work.ctx.extractor, event,
                             max_chars=config.passage_max_chars, limit=config.max_derived_per_event)  # fmt: skip
    if len(content_text(event.content)) > OFF_LOOP_CHARS:
        return await off_loop(work.ctx, read)
    return read()


def _record_errors(state: EventState, errors: list[str]) -> None:
    for message in errors[:ERRORS_KEPT]:
        state.errors.append({"stage": Stage.EXTRACTED.value, "error": "EXTRACTOR_FAILED",
                             "message": message})  # fmt: skip
    if len(errors) > ERRORS_KEPT:
        state.errors[-1]["failures"] = len(errors)


async def _intake(work: StageContext, event: Event, selection: Selection, touched: dict[str, Fact],
                  batch: StageBatch, now: dt.datetime) -> tuple[list[dict[str, Any]], set[str]]:  # fmt: skip
    """Resolve the selected assertions and entities: the event's intake report and the entities
    it mentions (``held``: the batch's, until the lane lets them go after its commit).  In a
    scope that reviews its derived facts, a new fact is held as a proposal (``review``)."""
    held = batch.entity_ids
    intake: list[dict[str, Any]] = []
    entity_ids: set[str] = set()
    name = extractor_name(work.ctx)
    source = provenance_source(event.modality, event.actor)
    valid_from = parse_rfc3339(event.context["observed_at"])
    for position, (step, item) in enumerate(selection.steps, 1):
        if position % SLICE_DOCUMENTS == 0:
            await trio.lowlevel.checkpoint()  # up to max_derived_per_event assertions
        if step == "intake":
            intake.append(item)
            continue
        assertion = await _assertion(work, event, item, name, source, valid_from, held)
        entity_ids.update(assertion.entity_ids)
        earlier = await review.earlier(work, event.id, assertion) if batch.review else None
        if earlier is not None:  # held before this event was derived again (a rebuild)
            intake.append(await _reviewed(work, earlier, event.id, assertion, touched, now))
            continue
        if batch.review and await review.held(work, event.id, assertion):
            intake.append(review.hold(work, batch, event, assertion, now))
            continue
        intake.append(await apply_assertion(work, assertion, event.id, touched, now))
    for term in selection.entities:
        entity = await work.ctx.entities.resolve(event.tenant_id, term, held)
        entity_ids.add(entity.id)
    intake += selection.summary(work.config.max_derived_per_event)
    return intake, entity_ids


async def _reviewed(work: StageContext, proposal: dict[str, Any], event_id: str, assertion: Assertion,
                    touched: dict[str, Fact], now: dt.datetime) -> dict[str, Any]:  # fmt: skip
    """An assertion a proposal held before, as its review went: still pending, rejected (it stays
    out), or approved (committed again, the fact naming its approval)."""
    marks = {"proposal_id": proposal["id"]}
    if await suppress.fact_suppressed(work, event_id, assertion):
        return {"status": "rejected", "reason": "forgotten", **marks}
    if proposal["status"] == "pending":
        return {"status": "pending_review", **marks}
    if proposal["status"] == "rejected":
        return {"status": "rejected", "reason": "review_rejected", **marks}
    entry = await apply_assertion(work, assertion, event_id, touched, now)
    if entry["status"] in ("accepted", "conflict_detected"):
        touched[entry["fact_id"]].proposal = {"proposal_id": proposal["id"], "approved_by": proposal["reviewed_by"]}
    return {**entry, **marks}


def _payload(work: StageContext, event: Event, state: EventState, selection: Selection, spans,
             fact_ids: list[str], entity_ids: set[str]) -> dict[str, Any]:  # fmt: skip
    limit = work.config.max_derived_per_event
    payload: dict[str, Any] = {
        "event_id": event.id,
        "derived": {"facts": len(set(fact_ids)), "entities": len(entity_ids), "beliefs": 0,
                    "episodes": 0},
        "intake": state.intake,
    }  # fmt: skip
    if selection.facts_over or selection.entities_over:
        state.derived_records_limit = payload["derived_records_limit"] = {
            "limit": limit, "facts_not_derived": selection.facts_over,
            "entities_not_derived": selection.entities_over,
        }  # fmt: skip
    if spans is not None:
        payload["passages"] = len(spans)
    if selection.unread:
        kind = event.content.get("kind")
        payload["unread"] = f"content kind {kind!r} is not read by {extractor_name(work.ctx)}"
    return payload


async def _assertion(work: StageContext, event: Event, candidate, extractor: str, source: str,
                     valid_from: dt.datetime, held: set[str]) -> Assertion:  # fmt: skip
    entities = work.ctx.entities
    subject_entity = await entities.resolve(event.tenant_id, candidate.subject, held)
    entity_ids = [subject_entity.id]
    if isinstance(candidate.object_value, TermRef):
        obj_entity = await entities.resolve(event.tenant_id, candidate.object_value, held)
        entity_ids.append(obj_entity.id)
        obj = TypedValue(type="entity", id=obj_entity.id, name=obj_entity.name)
    else:
        obj = TypedValue(type="literal", datatype=candidate.datatype, value=candidate.object_value,
                         unit=candidate.unit)  # fmt: skip
    return Assertion(
        subject=TypedRef(type="entity", id=subject_entity.id, name=subject_entity.name),
        predicate=await work.ctx.vocabularies.predicate(event.tenant_id, work.scope, candidate.predicate),
        object=obj, confidence=candidate.confidence, single_valued=candidate.single_valued, polarity=candidate.polarity,
        extractor=f"{extractor}/{candidate.pattern}", source=source,
        valid_from=candidate.valid_from or valid_from, valid_to=candidate.valid_to, entity_ids=tuple(entity_ids),
    )  # fmt: skip


async def apply_assertion(work: StageContext, assertion: Assertion, event_id: str,
                          touched: dict[str, Fact], now: dt.datetime) -> dict[str, Any]:  # fmt: skip
    """Resolve one assertion against the scope's facts (DESIGN §6); never drops anything —
    except what a forget suppressed for this event (``suppress``): rejected, reason forgotten.
    A change to what an existing fact says closes its version (``versioning``): a supersession
    keeps the old fact as it was known (open-ended) and records the end it learnt as a new
    version; the new fact is recorded at ``now``, the commit's moment."""
    if await suppress.fact_suppressed(work, event_id, assertion):
        return {"status": "rejected", "reason": "forgotten"}
    state = work.state
    okey = object_key(assertion.object)
    if assertion.single_valued:
        current = await state.current_facts(assertion.subject.id, assertion.predicate)
    else:  # only the facts of its own object can reinforce or oppose it (``resolve``)
        current = (await state.current_keyed(assertion.subject.id, assertion.predicate, {okey})).facts
    decision = resolve(object_key_=okey, polarity=assertion.polarity,
                       single_valued=assertion.single_valued, valid_from=assertion.valid_from,
                       valid_to=assertion.valid_to, current=current)  # fmt: skip
    if decision.reinforce is not None:
        fact = state.facts[decision.reinforce]
        if not await _supported_by(work, fact, event_id):  # replayed evidence counts once
            _add_support(state, fact, event_id)
            fact.confidence = noisy_or(fact.confidence, assertion.confidence)
            fact.evidence_weight = round(fact.evidence_weight + assertion.confidence, 4)
            fact.reinforcements += 1
            _restate_window(work, fact, assertion, now)
        touched[fact.id] = fact
        return {"fact_id": fact.id, "status": "reinforced"}
    fact = Fact(
        id=work.ctx.ids.new("fact"), scope=work.scope, subject=assertion.subject,
        predicate=assertion.predicate, object=assertion.object, supports=[event_id],
        valid_from=assertion.valid_from, valid_to=min(filter(None, (assertion.valid_to, decision.valid_to)), default=None),
        recorded_from=now,
        confidence=round(assertion.confidence, 4), evidence_weight=round(assertion.confidence, 4),
        extractor=assertion.extractor, source=assertion.source, single_valued=assertion.single_valued,
        polarity=assertion.polarity, status=decision.status, conflicts_with=list(decision.conflicts_with),
    )  # fmt: skip
    state.new_supports.setdefault(fact.id, []).append(event_id)
    for old_id in decision.supersede:
        old = state.facts[old_id]
        close_fact(work, old, now)
        old.valid_to = assertion.valid_from
        old.superseded_by = fact.id
        fact.supersedes = fact.supersedes or old_id
        state.track(old)
        touched[old.id] = old
    for other_id in decision.conflicts_with:
        other = state.facts[other_id]
        if fact.id not in other.conflicts_with:
            close_fact(work, other, now)
            other.conflicts_with.append(fact.id)
        touched[other.id] = other
    state.add_fact(fact)
    touched[fact.id] = fact
    outcome: dict[str, Any] = {"fact_id": fact.id, "status": decision.status}
    if decision.supersede:
        outcome["superseded"] = list(decision.supersede)
    if decision.conflicts_with:
        outcome["conflicts_with"] = list(decision.conflicts_with)
    return outcome


def _restate_window(work: StageContext, fact: Fact, assertion: Assertion, now: dt.datetime) -> None:
    """A reinforcing assertion that moves the fact's validity makes a new version of it."""
    if assertion.valid_from < fact.valid_from:  # known to hold since earlier
        close_fact(work, fact, now)
        fact.valid_from = assertion.valid_from
    if _ends_sooner(assertion, fact):  # the same span, now known to end sooner
        close_fact(work, fact, now)
        fact.valid_to = assertion.valid_to


def _ends_sooner(assertion: Assertion, fact: Fact) -> bool:
    """Whether ``assertion`` states an end for the span ``fact`` holds that is sooner than the
    fact's (open or later): it covers the fact's start (the same span, not a window inside it)
    and ends after it.  A re-imported Zep edge invalidated since (``invalid_at`` set or moved
    earlier) is this; a window inside the fact's, or a later end, only corroborates."""
    end = assertion.valid_to
    return (end is not None and assertion.valid_from <= fact.valid_from < end
            and (fact.valid_to is None or end < fact.valid_to))  # fmt: skip


async def _supported_by(work: StageContext, fact: Fact, event_id: str) -> bool:
    if event_id in fact.supports or event_id in work.state.new_supports.get(fact.id, ()):
        return True
    if fact.supports_total <= len(fact.supports):
        return False  # the record holds every support
    return await work.tables.fact_supports.exists((fact.id, event_id))


def _add_support(state, fact: Fact, event_id: str) -> None:
    """Every support goes to the ``FS`` table; the record keeps the first and the latest
    ``FACT_SUPPORTS_KEPT - 1`` (a statement repeated 10,000 times must not make its fact a
    400 KB record that recall decodes; the API says ``supports_total`` and pages the rest)."""
    fact.supports.append(event_id)
    fact.supports_total += 1
    if len(fact.supports) > FACT_SUPPORTS_KEPT:
        del fact.supports[1 : len(fact.supports) - FACT_SUPPORTS_KEPT + 1]
    state.new_supports.setdefault(fact.id, []).append(event_id)


def fact_ops(work: StageContext, batch: StageBatch, touched: dict[str, Fact]) -> None:
    """The writes of the facts a stage touched: the record, its index row, new supports."""
    tables, closed, now = work.tables, work.state.closed, work.ctx.clock.now()
    for fact in touched.values():
        closed.note(fact, now)  # a superseded or invalidated head: skipped by a plain recall
        for event_id in work.state.new_supports.pop(fact.id, ()):
            batch.ops.append(tables.fact_supports.put_op((fact.id, event_id), True))
        batch.ops += fact_version_ops(work, fact)
        batch.ops.append(tables.facts.put_op(fact.id, fact))
        batch.ops.append(tables.fact_index.put_op((fact.subject.id, fact.predicate, fact.id), True))
        if fact.object.type == "entity" and fact.object.id:  # a relationship: found from its target too
            batch.ops.append(tables.fact_objects.put_op((fact.object.id, fact.predicate, fact.id), True))
