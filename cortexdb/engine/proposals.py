"""Memory write proposals (docs/proposals.md): ``Engine.proposals``.

An agent proposes a write — an experience envelope, checked now as a capture would check it — and
it is held in its scope (table ``PR``) until a reviewer approves or rejects it.  An approved
proposal commits through the normal write path (``Engine.experience``) as the approver, with
``context.labels`` naming the proposal, its proposer and its approver, and an idempotency key
derived from the proposal id, so a retried approval never writes twice.  A scope registered with
``policies.require_review`` holds the writes of its non-owners the same way (the server's
experience route proposes them instead of capturing them: ``source: "require_review"``).  A
scope registered with ``require_review: "derived"`` captures every write but holds each new fact
its extraction derives (``source: "derivation"``: ``actors.stages.review``); approving commits the
fact through the derivation path (``control.commit_proposal``).

| status     | becomes                  | by                                       |
|------------|--------------------------|------------------------------------------|
| pending    | approved (and committed) | ``approve``: ``proposal.review`` (the scope's owners) |
| pending    | rejected                 | ``reject``: ``proposal.review``           |
| approved, rejected | —                | a second review is a 422 ``INVALID_REQUEST`` (``details.reason: not_pending``) |
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import trio

from ..errors import InvalidRequest, NotFound, UnknownField
from .actors.messages import CommitProposal, ScopeRecords
from .envelope import validate_envelope
from .limits import check_event_size
from .policy.capabilities import PROPOSAL_CREATE, PROPOSAL_READ, PROPOSAL_REVIEW
from .scopes import canonical_scope
from .temporal import format_ts

FIELDS = {"scope", "experience", "rationale"}
STATUSES = ("pending", "approved", "rejected")
SOURCES = ("agent", "require_review", "derivation")


def _text(body: dict[str, Any], field: str, most: int) -> str | None:
    value = body.get(field)
    if value is not None and (not isinstance(value, str) or len(value) > most):
        raise InvalidRequest(f"{field} must be a string of at most {most} characters (proposal_text_max_chars)",
                             details={"field": field, "limit": most})  # fmt: skip
    return value


def provenance(envelope: dict[str, Any], proposal: dict[str, Any], approver: str) -> dict[str, Any]:
    """The envelope to commit: its labels name the proposal, proposer and approver (an object's
    keys, or ``name=value`` entries of a list), its idempotency key is the proposal's."""
    marks = {"proposal_id": proposal["id"], "proposed_by": proposal["proposed_by"], "approved_by": approver}
    context = dict(envelope.get("context") or {})
    labels = context.get("labels")
    if isinstance(labels, list):
        context["labels"] = [*labels, *(f"{name}={value}" for name, value in marks.items())]
    else:
        context["labels"] = {**(labels or {}), **marks}
    return {**envelope, "context": context, "idempotency_key": f"proposal-{proposal['id']}"}


class ProposalService:
    def __init__(self, engine: Any, ctx: Any) -> None:
        self.engine = engine  # approvals commit through Engine.experience
        self.ctx = ctx

    async def _ask(self, scope: str, work: Any) -> Any:
        return await self.ctx.supervisor.request(scope, lambda reply: ScopeRecords(work, reply))

    def _who(self, caller: str | None, tenant: str | None) -> tuple[str, str]:
        return caller or self.ctx.config.default_caller, tenant or self.ctx.config.tenant_id

    async def propose(self, request: Any, *, caller: str | None = None, tenant: str | None = None,
                      source: str = "agent") -> dict[str, Any]:  # fmt: skip
        """Hold a write for review; the answer is the pending proposal."""
        caller, tenant = self._who(caller, tenant)
        if not isinstance(request, dict):
            raise InvalidRequest("a proposal is a JSON object", details={"field": "body"})
        unknown = sorted(set(request) - FIELDS)
        if unknown:
            raise UnknownField(f"unknown field {unknown[0]}", details={"field": unknown[0], "allowed": sorted(FIELDS)})
        for field in ("scope", "experience"):
            if field not in request:
                raise InvalidRequest(f"{field} is required", details={"field": field})
        if not isinstance(request["scope"], str):
            raise InvalidRequest("scope must be a scope path", details={"field": "scope"})
        scope = canonical_scope(request["scope"])
        envelope = request["experience"]
        if not isinstance(envelope, dict):
            raise InvalidRequest("experience must be an experience envelope", details={"field": "experience"})
        envelope = {**envelope, "scope": envelope.get("scope", scope)}
        check_event_size(envelope, self.ctx.config.max_event_text_bytes, "experience.")
        if validate_envelope(envelope).scope != scope:
            raise InvalidRequest("experience.scope must be the proposal's scope", details={"field": "experience.scope"})
        self.ctx.policy.check(caller, PROPOSAL_CREATE, scope)
        proposal = {
            "id": self.ctx.ids.new("prp"), "scope": scope, "status": "pending", "source": source,
            "proposed_by": caller, "proposed_at": format_ts(self.ctx.clock.now()), "tenant_id": tenant,
            "experience": envelope, "rationale": _text(request, "rationale", self.ctx.config.proposal_text_max_chars),
            "reviewed_by": None, "reviewed_at": None, "review_note": None, "committed": None,
        }  # fmt: skip

        async def write(tables: Any) -> None:
            await tables.proposals.put(proposal["id"], proposal, sync=True)

        await self._ask(scope, write)
        return proposal

    async def list(self, scope: str, *, caller: str | None = None, status: str | None = None,
                   limit: int | None = None, cursor: str | None = None) -> dict[str, Any]:  # fmt: skip
        """A page of the scope's proposals, oldest first (``status`` filters)."""
        scope = canonical_scope(scope)
        self.ctx.policy.check(self._who(caller, None)[0], PROPOSAL_READ, scope)
        if status is not None and status not in STATUSES:
            raise InvalidRequest(f"status must be one of {list(STATUSES)}", details={"field": "status"})
        limit = limit or self.ctx.config.read_default_limit
        if not 1 <= limit <= self.ctx.config.read_max_limit:
            raise InvalidRequest(f"limit must be from 1 to {self.ctx.config.read_max_limit}", details={"field": "limit"})
        keep = (lambda p: p["status"] == status) if status else None
        return await self._ask(scope, lambda tables: tables.proposals.page(cursor, limit=limit, keep=keep))

    async def get(self, scope: str, proposal_id: str, *, caller: str | None = None) -> dict[str, Any]:
        scope = canonical_scope(scope)
        self.ctx.policy.check(self._who(caller, None)[0], PROPOSAL_READ, scope)
        return await self._ask(scope, lambda tables: self._load(tables, scope, proposal_id))

    @staticmethod
    async def _load(tables: Any, scope: str, proposal_id: str) -> dict[str, Any]:
        found = await tables.proposals.get(proposal_id) if isinstance(proposal_id, str) and "\x00" not in proposal_id else None
        if found is None:
            raise NotFound(f"no proposal {proposal_id} in scope {scope}", details={"proposal_id": proposal_id})
        return found

    async def _review(self, scope: str, proposal_id: str, status: str, caller: str, note: Any,
                      expect: str = "pending") -> dict[str, Any]:  # fmt: skip
        """Move a proposal from ``expect`` to ``status`` inside its actor (one reviewer wins)."""
        now = format_ts(self.ctx.clock.now())

        async def review(tables: Any) -> dict[str, Any]:
            proposal = await self._load(tables, scope, proposal_id)
            if proposal["status"] != expect:
                raise InvalidRequest(f"proposal {proposal_id} is {proposal['status']}, not {expect}",
                                     details={"field": "proposal_id", "reason": "not_pending",
                                              "status": proposal["status"]})  # fmt: skip
            reviewed = {"reviewed_by": caller, "reviewed_at": now, "review_note": note} if status != "pending" else \
                {"reviewed_by": None, "reviewed_at": None, "review_note": None}  # fmt: skip
            proposal = {**proposal, "status": status, **reviewed}
            await tables.proposals.put(proposal_id, proposal, sync=True)
            return proposal

        return await self._ask(scope, review)

    async def reject(self, scope: str, proposal_id: str, *, caller: str | None = None,
                     note: str | None = None) -> dict[str, Any]:  # fmt: skip
        scope, caller = canonical_scope(scope), self._who(caller, None)[0]
        self.ctx.policy.check(caller, PROPOSAL_REVIEW, scope)
        return await self._review(scope, proposal_id, "rejected", caller, _text({"note": note}, "note", self.ctx.config.proposal_text_max_chars))

    async def approve(self, scope: str, proposal_id: str, *, caller: str | None = None, tenant: str | None = None,
                      note: str | None = None, wait: str | None = None) -> dict[str, Any]:  # fmt: skip
        """Approve and commit the write as ``caller``; a failed commit leaves it pending again."""
        scope, (caller, tenant) = canonical_scope(scope), self._who(caller, tenant)
        self.ctx.policy.check(caller, PROPOSAL_REVIEW, scope)
        proposal = await self._review(scope, proposal_id, "approved", caller, _text({"note": note}, "note", self.ctx.config.proposal_text_max_chars))
        try:
            committed = await self._commit(proposal, scope, caller, tenant, wait)
        except BaseException:
            with trio.CancelScope(shield=True):
                await self._review(scope, proposal_id, "pending", caller, None, expect="approved")
            raise

        async def record(tables: Any) -> dict[str, Any]:
            done = {**await self._load(tables, scope, proposal_id), "committed": committed}
            await tables.proposals.put(proposal_id, done, sync=True)
            return done

        return await self._ask(scope, record)

    async def _commit(self, proposal: dict[str, Any], scope: str, caller: str, tenant: str,
                      wait: str | None) -> dict[str, Any]:  # fmt: skip
        """An agent's write commits through ``Engine.experience``; a derived fact held by the
        scope's policy through the derivation path, in the scope's lane (``control.commit_proposal``)."""
        if proposal["source"] == "derivation":
            return await self.ctx.supervisor.request(scope, lambda reply: CommitProposal(proposal, caller, reply))
        result = await self.engine.experience(provenance(proposal["experience"], proposal, caller),
                                              caller=caller, tenant_id=tenant, wait=wait)  # fmt: skip
        return {**result.to_wire(), "scope": result.scope}

    async def forget_events(self, scope: str, event_ids: Collection[str]) -> int:
        """The derivation proposals of events a forget blanked (they quote what the events said),
        and their ``PH`` rows; how many proposals were deleted."""
        events = set(event_ids)
        if not events:
            return 0

        async def delete(tables: Any) -> int:
            ops = [tables.proposals.delete_op(i) async for i, p in tables.proposals.scan()
                   if p.get("source") == "derivation" and events & set(p.get("event_ids") or ())]  # fmt: skip
            count = len(ops)
            for event_id in sorted(events):
                ops += [tables.held_facts.delete_op((event_id, d)) async for d in tables.held_facts.ids((event_id,))]
            if ops:
                await tables.write(ops, sync=True)
            return count

        return await self._ask(canonical_scope(scope), delete)

    async def drop(self, scope: str) -> int:
        """Every proposal of a scope deleted (a GDPR erasure of the scope: they hold its writes),
        with the scope's index of held facts and its intake acknowledgements (primary rows a
        rebuild keeps, so nothing else would delete them)."""

        async def delete(tables: Any) -> int:
            await tables.held_facts.delete_all()
            await tables.intake_acks.delete_all()
            return await tables.proposals.delete_all()

        return await self._ask(canonical_scope(scope), delete)
