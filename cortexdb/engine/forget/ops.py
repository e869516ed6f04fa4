"""The deletion operations forget and erasure are built from (docs/forget.md).

Each runs through the owning scope's actor, in its derivation lane (``actors.stages.forget``):
serialised with derivation, after every queued event is derived, in requests of at most
``RECORDS_PER_REQUEST`` ids whose writes go ``CHUNK_OPS`` at a time.  Each is idempotent — run
again after a crash it completes what was left and counts only that — and each ends by
rebuilding the scope's indexes without what it removed (``Tidy``: BM25 terms, sealed vector
segments).  ``engine`` is the ``Engine``; its deletion context is ``engine.forget.context``.

| operation                 | does                                                            |
|---------------------------|-----------------------------------------------------------------|
| ``delete_records``        | facts, beliefs, episodes (and understanding) gone for good; chains relinked, beliefs revised, suppressed against re-derivation; the events' ``derives`` say ``redacted:<id>`` |
| ``redact_events``         | payloads blanked (§11.3); the records derived from them untouched |
| ``delete_events``         | events gone: WAL entry, state, indexes, supports, idempotency record |
| ``mark_evidence_redacted``| ``supporting_evidence_redacted`` on the records citing the events |
| ``demote_beliefs``        | beliefs resting only on redacted evidence demoted, or deleted under the floor |
| ``release_entities_of``   | the events' entity mentions dropped; entities no other event mentions deleted |
| ``scrub``                 | nothing left outside the partitions: pack cache, then the store compacted |
| ``drop_scope``            | a scope erased whole: every derived record of it gone at once, without revision |
| ``drop_events``           | the events of a dropped scope gone (``delete_events`` without per-record care) |
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ..actors.messages import Forget
from ..actors.stages import forget as work
from ..actors.stages import forget_drop
from ..scopes import canonical_scope
from ..writes import FAMILY_BULK, FAMILY_EXPERIENCE

RECORDS_PER_REQUEST = 1000  # ids one lane request handles: the lane derives in between
COUNTED = ("facts", "beliefs", "episodes", "understanding")


def context(engine: Any) -> Any:
    """The node context the operations work through (an ``Engine``, or the context itself)."""
    forget = getattr(engine, "forget", None)
    return forget.context if forget is not None else engine


async def run(ctx: Any, scope: str, item: Any) -> dict[str, Any]:
    """One piece of lane work in ``scope``, then what it owes other scopes (their events'
    ``derives``), each asked of that scope's lane in turn."""
    answer = await ctx.supervisor.request(scope, lambda reply: Forget(item, reply))
    for target, items in answer.get("follow_ups", {}).items():
        for follow in items:
            await run(ctx, target, follow)
    return answer


def chunks(ids: Collection[str]) -> list[tuple[str, ...]]:
    unique = list(dict.fromkeys(ids))
    return [tuple(unique[i : i + RECORDS_PER_REQUEST]) for i in range(0, len(unique), RECORDS_PER_REQUEST)]


async def tidy(ctx: Any, scope: str) -> None:
    await run(ctx, scope, work.Tidy())


async def delete_records_evidence(ctx: Any, scope: str,
                                  record_ids: Collection[str]) -> tuple[dict[str, int], set[str]]:  # fmt: skip
    """``delete_records``, and the events that supported what was deleted."""
    counts = dict.fromkeys(COUNTED, 0)
    evidence: set[str] = set()
    for chunk in chunks(record_ids):
        answer = await run(ctx, scope, work.DeleteRecords(chunk))
        for layer in COUNTED:
            counts[layer] += answer[layer]
        evidence.update(answer["evidence"])
    await tidy(ctx, scope)
    return counts, evidence


async def delete_records(engine: Any, scope: str, record_ids: Collection[str]) -> dict[str, int]:
    """Derived records deleted for good: rows, index documents and vectors (sealed segments
    rebuilt), supersession chains relinked, beliefs citing deleted facts revised, the supporting
    events' ``derives`` entries replaced by ``redacted:<id>``, suppressed against re-derivation.
    -> ``{"facts": n, "beliefs": n, "episodes": n, "understanding": n}`` (beliefs include those
    a revision deleted for want of evidence)."""
    counts, _ = await delete_records_evidence(context(engine), canonical_scope(scope), record_ids)
    return counts


async def _each(ctx: Any, scope: str, ids: Collection[str], make) -> list[dict[str, Any]]:
    answers = [await run(ctx, scope, make(chunk)) for chunk in chunks(ids)]
    await tidy(ctx, scope)
    return answers


async def redact_events(engine: Any, scope: str, event_ids: Collection[str], *,
                        actor: str | None = None) -> int:  # fmt: skip
    """§11.3: content -> ``{"kind": "redacted", "original_kind": ...}``; the actor replaced when
    given; id, wal_offset, scope, observed_at, recorded_at kept; the events' index documents,
    passages and vectors removed.  Records derived from them are not touched.  -> how many
    events were redacted now (0 for those redacted already)."""
    answers = await _each(context(engine), canonical_scope(scope), event_ids,
                          lambda chunk: work.RedactEvents(chunk, actor))  # fmt: skip
    return sum(a["events"] for a in answers)


async def delete_events(engine: Any, scope: str, event_ids: Collection[str]) -> int:
    """Events truly gone: event row, WAL row, state, pending marker, lifecycle rows, vectors,
    passages, index documents, fact-support rows (facts here and in the scopes they were
    consolidated into no longer cite them), foreign work, suppressions, idempotency records.
    -> how many events were deleted."""
    ctx = context(engine)
    answers = await _each(ctx, canonical_scope(scope), event_ids, work.DeleteEvents)
    doomed = []
    for tenant, caller, key, bulk in (k for a in answers for k in a.get("keys", ())):
        doomed.append(ctx.tables.idempotency.delete_op((tenant, caller, FAMILY_BULK if bulk else FAMILY_EXPERIENCE, key)))
    if doomed:
        await ctx.tables.write(doomed)
    return sum(a["events"] for a in answers)


async def mark_evidence_redacted(engine: Any, scope: str, event_ids: Collection[str]) -> int:
    """Every surviving derived record of ``scope`` citing one of ``event_ids`` says
    ``supporting_evidence_redacted`` (facts and episodes with ``_partial``; beliefs also with
    ``supporting_evidence_redacted_fraction``, recomputed).  -> how many records changed."""
    answers = await _each(context(engine), canonical_scope(scope), event_ids, work.MarkEvidence)
    return sum(a["facts"] + a["beliefs"] + a["episodes"] for a in answers)


async def demote_beliefs(engine: Any, scope: str, *, factor: float = 0.5,
                         floor: float = 0.3) -> dict[str, int]:  # fmt: skip
    """Beliefs whose supporting evidence is fully redacted: confidence *= factor, ``_partial``
    with ``supporting_evidence_redacted``; below ``floor`` deleted (410 on lookup).  A belief is
    demoted once.  -> ``{"demoted": n, "deleted": n}``."""
    ctx, scope = context(engine), canonical_scope(scope)
    answer = await run(ctx, scope, work.Demote(factor, floor))
    await tidy(ctx, scope)
    return {"demoted": answer.get("demoted", 0), "deleted": answer.get("deleted", 0)}


async def release_entities_of(engine: Any, event_ids: Collection[str]) -> int:
    """The entity cascade of erased or redacted events: their mentions go, and so does every
    entity no other event of the tenant still mentions (its record, its aliases, the resolver's
    caches; ``EntityResolver.release``).  Idempotent.  -> how many entities were deleted."""
    return await context(engine).entities.release(event_ids)


async def solely_redacted(ctx: Any, scope: str, layers: Collection[str],
                          event_ids: Collection[str]) -> list[str]:  # fmt: skip
    """The records of ``layers`` citing ``event_ids`` whose every supporting event is redacted."""
    ids: list[str] = []
    for chunk in chunks(event_ids):
        ids += (await run(ctx, scope, work.SolelyRedacted(frozenset(layers), chunk)))["ids"]
    return list(dict.fromkeys(ids))


async def scrub(engine: Any, *, scopes: Collection[str], event_ids: Collection[str],
                record_ids: Collection[str]) -> None:
    """Nothing left behind outside the partitions once the operations above ran: the recall
    pack cache is emptied (``use_pack_id`` and idempotent recall replays included; a recall in
    flight cannot put its pack back), each scope's indexes are tidied, and the key ranges the
    operations rewrote are compacted (``NodeTables.forget_ranges``: the scopes' derived tables;
    for ``event_ids``, the span of their events and event states, and the lifecycle rows that
    replay and SSE resume serve), so that on LevelDB the old values leave the files and the log
    (``KVStore.compact``).  ``record_ids`` name the records removed (the operations already
    cleaned the rows citing them)."""
    ctx = context(engine)
    if ctx.packs is not None:
        ctx.packs.purge()
    ranges = []
    for scope in dict.fromkeys(canonical_scope(s) for s in scopes):
        await tidy(ctx, scope)
        ranges += ctx.tables.forget_ranges(scope, list(event_ids))
    if ranges:
        await ctx.tables.compact(*dict.fromkeys(ranges))


# -- a scope erased whole (the erasure's fast path: actors/stages/forget_drop.py) -------------------
async def survey_scope(engine: Any, scope: str, erased: Collection[str], *,
                       kept: Collection[str] = ()) -> dict[str, int]:  # fmt: skip
    """What ``drop_scope`` would delete — ``{"facts": n, "beliefs": n, "episodes": n,
    "understanding": n}`` — with the ``derives`` of the events that stay already saying
    ``redacted:<id>`` of them (``kept``: the scope's events being redacted; events of other
    scopes consolidated into it).  Deletes nothing; idempotent."""
    ctx, scope = context(engine), canonical_scope(scope)
    answer = await run(ctx, scope, forget_drop.DropScope(frozenset(erased), frozenset(kept), drop=False))
    return {layer: answer[layer] for layer in COUNTED}


async def drop_scope(engine: Any, scope: str, erased: Collection[str], *, kept: Collection[str] = (),
                     surveyed: bool = False) -> dict[str, int]:  # fmt: skip
    """Every derived record of ``scope`` deleted at once, for an erasure that takes the scope
    whole (``erased``: its events the erasure deletes or redacts; ``kept``: those redacted): no
    relinking, no revision, no suppression — nothing is left to derive them again.  The events
    that stay say ``redacted:<id>`` in their ``derives`` (the survey runs first, so a crash
    never leaves one naming a deleted record), each record leaves a note (410 on lookup), an
    event of the scope not in ``erased`` is derived again.  ``surveyed``: the caller ran
    ``survey_scope`` already (its follow-ups are done).  -> the counts of the survey (of the
    drop's own one when ``surveyed``)."""
    counts = None if surveyed else await survey_scope(engine, scope, erased, kept=kept)
    ctx, scope = context(engine), canonical_scope(scope)
    answer = await run(ctx, scope, forget_drop.DropScope(frozenset(erased), frozenset(kept)))
    await tidy(ctx, scope)
    return counts if counts is not None else {layer: answer[layer] for layer in COUNTED}


async def drop_events(engine: Any, scope: str, event_ids: Collection[str]) -> int:
    """``delete_events`` for the events of a scope ``drop_scope`` emptied: the same rows go (and
    their idempotency records), without looking for derived records to relink.  -> how many."""
    ctx = context(engine)
    answers = await _each(ctx, canonical_scope(scope), event_ids, forget_drop.DropEvents)
    doomed = [ctx.tables.idempotency.delete_op((tenant, caller, FAMILY_BULK if bulk else FAMILY_EXPERIENCE, key))
              for answer in answers for tenant, caller, key, bulk in answer.get("keys", ())]  # fmt: skip
    if doomed:
        await ctx.tables.write(doomed)
    return sum(a["events"] for a in answers)
