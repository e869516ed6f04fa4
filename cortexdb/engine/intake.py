"""The pending intake results (docs/intake.md): ``Engine.intake``.

The extract stage queues, per scope, the intake entries an agent must act on (``conflict_detected``
and ``needs_clarification`` by default, ``EngineConfig.intake_queue_statuses``), each naming the
event and the caller who wrote it (``actors/stages/intake_report.py``).  An agent reads its own
pending results and acknowledges each once it has acted; an acknowledged result is deleted, and
its acknowledgement kept (table ``IA``, by event and ``clarify.fingerprint``) so a rebuild that
derives the same result again does not queue it again.  A forget takes the results of what it
forgets, and their acknowledgements, with it.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ..errors import InvalidRequest, NotFound
from .actors.messages import ScopeRecords
from .derive.clarify import fingerprint
from .policy.capabilities import INTAKE_ACK, INTAKE_READ
from .scopes import canonical_scope
from .temporal import format_ts


class IntakeService:
    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx

    async def _ask(self, scope: str, work: Any) -> Any:
        return await self.ctx.supervisor.request(scope, lambda reply: ScopeRecords(work, reply))

    async def pending(self, scope: str, *, caller: str | None = None, status: str | None = None,
                      limit: int | None = None, cursor: str | None = None) -> dict[str, Any]:  # fmt: skip
        """A page of the caller's unacknowledged results in ``scope``, oldest first."""
        scope, caller = canonical_scope(scope), caller or self.ctx.config.default_caller
        self.ctx.policy.check(caller, INTAKE_READ, scope)
        limit = limit or self.ctx.config.read_default_limit
        if not 1 <= limit <= self.ctx.config.read_max_limit:
            raise InvalidRequest(f"limit must be from 1 to {self.ctx.config.read_max_limit}", details={"field": "limit"})

        def keep(item: dict[str, Any]) -> bool:
            return item["caller"] == caller and (status is None or item["status"] == status)

        return await self._ask(scope, lambda tables: tables.intake_queue.page(cursor, limit=limit, keep=keep))

    async def ack(self, scope: str, item_id: str, *, caller: str | None = None) -> dict[str, Any]:
        """Acknowledge (and delete) one of the caller's results; another's is not found."""
        scope, caller = canonical_scope(scope), caller or self.ctx.config.default_caller
        self.ctx.policy.check(caller, INTAKE_ACK, scope)
        now = format_ts(self.ctx.clock.now())

        async def ack(tables: Any) -> dict[str, Any]:
            item = await tables.intake_queue.get(item_id) if "\x00" not in item_id else None
            if item is None or item["caller"] != caller:
                raise NotFound(f"no pending intake result {item_id} of {caller} in {scope}", details={"id": item_id})
            done = {"acknowledged_at": now, "acknowledged_by": caller}
            await tables.write([tables.intake_queue.delete_op(item_id),
                                tables.intake_acks.put_op((item["event_id"], fingerprint(item)), done)], sync=True)  # fmt: skip
            return {**item, **done}

        return await self._ask(scope, ack)

    async def forget(self, scope: str, *, event_ids: Collection[str] = (), record_ids: Collection[str] = ()) -> int:
        """Delete the results of the events and the records a forget took (their hints quote them)."""
        events, records = set(event_ids), set(record_ids)
        if not events and not records:
            return 0

        def gone(item: dict[str, Any]) -> bool:
            named = {item.get("fact_id"), *item.get("conflicts_with", ()), *item.get("superseded", ())}
            return item["event_id"] in events or bool(named & records)

        async def delete(tables: Any) -> int:
            ops = [tables.intake_queue.delete_op(i) async for i, item in tables.intake_queue.scan() if gone(item)]
            queued = len(ops)
            for event_id in sorted(events):  # what was acknowledged of them goes with them
                ops += [tables.intake_acks.delete_op((event_id, f)) async for f in tables.intake_acks.ids((event_id,))]
            if ops:
                await tables.write(ops, sync=True)
            return queued

        return await self._ask(canonical_scope(scope), delete)
