"""Selective forget (reference §8.5, §11.1, §11.2; docs/forget.md).

``Engine.forget`` is a ``ForgetService``: ``await engine.forget(request, caller=...)`` checks the
request (``selector``), the caller's ``forget.cascade.<mode>`` on the scope and the idempotency
key, then, in the scope's lane:

1. selects the records of the named layers the selector matches;
2. deletes them for good (``ops.delete_records``: relinked, revised, suppressed);
3. with ``redact_events``: blanks the events behind them, and the events the selector matched
   when ``events`` is named — the records of the named layers resting only on those go too —;
   what survives citing a blanked event is marked ``supporting_evidence_redacted``, and the
   entities that no other event mentions any more are deleted (``ops.release_entities_of``), and
   so are the blobs that no other event refers to (``blobs.release_blobs_of``);
4. deletes the scope's signals the selector matches when ``signals`` is named (docs/signals.md);
5. scrubs what lies outside the scope (``ops.scrub``: pack cache, compaction).

The answer is §8.5's ``deleted`` counts (``events``: the events blanked) and ``audit_id`` (the
server's row for the call; None when embedded).  A repeated idempotency key within its 24 hours
answers the first call's answer.  The deletion operations erasure reuses are ``ops``.
"""

from __future__ import annotations

from typing import Any

from ..actors.services import Replay, body_hash
from ..blobs import release_blobs_of
from . import ops, selector

FAMILY_FORGET = "/v1/forget"


class ForgetService:
    """``Engine.forget``; ``context`` is the node context the deletion operations work through."""

    def __init__(self, ctx: Any) -> None:
        self.context = ctx

    async def __call__(self, request: dict[str, Any], *, caller: str | None = None,
                       tenant_id: str | None = None, audit_id: str | None = None) -> dict[str, Any]:  # fmt: skip
        ctx = self.context
        caller = caller or ctx.config.default_caller
        tenant = tenant_id or ctx.config.tenant_id
        spec = selector.parse(request, max_memory_ids=ctx.config.forget_max_memory_ids)
        ctx.policy.check(caller, spec.capability, spec.scope)
        reservation = None
        if spec.idempotency_key is not None:
            claim = await ctx.idempotency.begin(tenant, caller, FAMILY_FORGET, spec.idempotency_key,
                                                body_hash(request))  # fmt: skip
            if isinstance(claim, Replay):
                return claim.record["response"]
            reservation = claim
        try:
            deleted = await self.forget(spec, tenant)
            response = {"deleted": deleted, "audit_id": audit_id}
            if reservation is not None:
                await ctx.tables.write([ctx.idempotency.record_op(reservation, {"response": response})])
        except BaseException:
            if reservation is not None:
                ctx.idempotency.abort(reservation)
            raise
        if reservation is not None:
            ctx.idempotency.complete(reservation)
        return response

    async def forget(self, spec: selector.ForgetSpec, tenant: str) -> dict[str, int]:
        """Select, delete, (redact), scrub: the ``deleted`` counts."""
        ctx, scope = self.context, spec.scope
        found = await ops.run(ctx, scope, await selector.selection(ctx, spec, tenant))
        derived = [i for layer in ("facts", "beliefs", "episodes") for i in found.get(layer, ())]
        counts, evidence = await ops.delete_records_evidence(ctx, scope, derived)
        deleted = {"events": 0, **counts}
        blanked: list[str] = []
        if spec.cascade == "redact_events":
            blanked = [e for e in dict.fromkeys([*found.get("events", ()), *sorted(evidence)])
                       if await self._home(e) == scope]  # fmt: skip
            deleted["events"] = await ops.redact_events(ctx, scope, blanked)
            named = [e for e in found.get("events", ()) if e in blanked]  # the events selected
            resting = await ops.solely_redacted(ctx, scope, spec.layers, named)
            more, _ = await ops.delete_records_evidence(ctx, scope, resting)
            for layer, count in more.items():
                deleted[layer] += count
            await ops.mark_evidence_redacted(ctx, scope, blanked)
            await ops.release_entities_of(ctx, blanked)  # names no surviving event mentions go
            # the blobs only blanked events referred to go too, before the scrub compacts the store
            await release_blobs_of(ctx, blanked)
        await ctx.intake.forget(scope, event_ids=blanked, record_ids=derived)  # their hints quote them
        await ctx.proposals.forget_events(scope, blanked)  # the facts held from them quote them too
        if "signals" in spec.layers:  # primary records: only when named (docs/signals.md)
            deleted["signals"] = await self._signals(spec)
        await ops.scrub(ctx, scopes=[scope], event_ids=blanked, record_ids=derived)
        return deleted

    async def _signals(self, spec: selector.ForgetSpec) -> int:
        chosen = spec.selector
        return await self.context.signals.forget(
            spec.scope, subject=chosen.get("about_subject") or None, entity=chosen.get("about_entity") or None,
            predicate=chosen.get("predicate") or None, ids=[i for i in spec.memory_ids if i.startswith("sig_")] if spec.memory_ids else None,
            valid=spec.valid, recorded=spec.recorded, everything=not spec.filtered and not spec.memory_ids)  # fmt: skip

    async def _home(self, event_id: str) -> str | None:
        state = await self.context.tables.event_states.get(event_id)
        return state.scope if state is not None else None


__all__ = ["FAMILY_FORGET", "ForgetService", "ops", "selector"]
