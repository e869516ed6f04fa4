"""Derived facts held for review (docs/proposals.md): in a scope whose policy is
``require_review: "derived"`` the extraction stage holds each assertion that would become a new
fact as a proposal (``source: "derivation"``, table ``PR``, written in the stage's batch) instead
of committing it; its intake entry says ``pending_review``.  An assertion that reinforces a
current fact, or that a forget suppressed, goes the usual way (``extract.apply_assertion``).
Approving commits the held fact through the derivation path (``control.commit_proposal``).

Each held assertion is indexed by its event and what it asserts (table ``PH``), a primary record
like the proposal: when the event is derived again (``rebuild``), the assertion is not held a
second time; a pending proposal stays the one that holds it, an approved one's fact is committed
again (naming its approval) and a rejected one's stays out (``again``)."""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Any

from ...derive.facts import object_key, resolve
from ...model import Event, to_wire
from ...temporal import format_ts
from . import suppress
from .common import Assertion, StageBatch, StageContext

REVIEW_DERIVED = "derived"  # the policy value: the scope's derived facts are held


async def holds(work: StageContext) -> bool:
    """The scope's record says ``policies.require_review: "derived"``."""
    record = await work.ctx.tables.scopes.get(work.scope)
    return record is not None and record.policies.get("require_review") == REVIEW_DERIVED


async def held(work: StageContext, event_id: str, assertion: Assertion) -> bool:
    """Would this assertion become a new fact (not a reinforcement, not suppressed)?"""
    if await suppress.fact_suppressed(work, event_id, assertion):
        return False
    current = await work.state.current_facts(assertion.subject.id, assertion.predicate)
    decision = resolve(object_key_=object_key(assertion.object), polarity=assertion.polarity,
                       single_valued=assertion.single_valued, valid_from=assertion.valid_from,
                       valid_to=assertion.valid_to, current=current)  # fmt: skip
    return decision.reinforce is None


def assertion_wire(assertion: Assertion) -> dict[str, Any]:
    """The candidate fact, in the form ``control.commit_assertions`` takes back."""
    return {
        "subject": to_wire(assertion.subject), "predicate": assertion.predicate,
        "object": to_wire(assertion.object), "confidence": assertion.confidence,
        "single_valued": assertion.single_valued, "polarity": assertion.polarity,
        "extractor": assertion.extractor, "source": assertion.source,
        "valid_from": format_ts(assertion.valid_from),
        "valid_to": format_ts(assertion.valid_to) if assertion.valid_to else None,
    }  # fmt: skip


def hold(work: StageContext, batch: StageBatch, event: Event, assertion: Assertion,
         now: dt.datetime) -> dict[str, Any]:  # fmt: skip
    """Write the proposal in the batch; the answer is the event's intake entry."""
    proposal = {
        "id": work.ctx.ids.new("prp"), "scope": work.scope, "status": "pending", "source": "derivation",
        "proposed_by": "derivation", "proposed_at": format_ts(now), "tenant_id": event.tenant_id,
        "experience": None, "fact": assertion_wire(assertion), "event_ids": [event.id], "rationale": None,
        "reviewed_by": None, "reviewed_at": None, "review_note": None, "committed": None,
    }  # fmt: skip
    batch.ops.append(work.tables.proposals.put_op(proposal["id"], proposal))
    batch.ops.append(work.tables.held_facts.put_op((event.id, digest(assertion)), proposal["id"]))
    return {"status": "pending_review", "proposal_id": proposal["id"]}


def digest(assertion: Assertion) -> str:
    """What an assertion says (subject, predicate, object, polarity, validity): its ``PH`` key."""
    said = [assertion.subject.id, assertion.predicate, object_key(assertion.object), str(assertion.polarity),
            format_ts(assertion.valid_from), format_ts(assertion.valid_to) if assertion.valid_to else ""]  # fmt: skip
    return hashlib.sha256("\x00".join(said).encode()).hexdigest()[:32]


async def earlier(work: StageContext, event_id: str, assertion: Assertion) -> dict[str, Any] | None:
    """The proposal that held this assertion of this event before (a rebuild derives it again)."""
    proposal_id = await work.tables.held_facts.get((event_id, digest(assertion)))
    return await work.tables.proposals.get(proposal_id) if proposal_id is not None else None
