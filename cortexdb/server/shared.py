"""Several nodes on one store (docs/scale-out.md): this server's in-memory copies of the node-wide
tables — scope records with their members (the gate's ACLs), policy documents, revoked tokens —
follow the other nodes' writes.

Every write to one of those tables sends, with its batch, a ``!<table> <row key>`` line on the
store's lifecycle channel (``placement.shared_changes``); PostgreSQL delivers it when the batch
commits.  Each server listens on that channel too (a LISTEN connection of its own) and re-reads
what changed: the scope record (``ScopeRegistry.refresh``), the revoked token, or every policy
document (``PolicyEngine.reload``).  So a member removed, a policy tightened or a token revoked
through one node holds on every node once the commit is heard — typically milliseconds, not at the
next restart.  A server that falls ``BACKLOG`` changes behind reloads all three tables.  Changes
committed while its LISTEN connection was down (it reconnects after a second) are not heard:
docs/scale-out.md says so.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

log = logging.getLogger("cortexdb.server")
BACKLOG = 10_000  # changes heard and not yet applied (beyond: everything is reloaded)


def follows(engine: Any, node_id: str) -> bool:
    """Whether this server shares its store with other nodes (and can hear their writes)."""
    return bool(node_id) and hasattr(engine.store, "listener")


async def follow(state: Any, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Apply the other nodes' changes to the shared tables until cancelled."""
    store, me = state.engine.store, state.settings.node_id
    send, receive = trio.open_memory_channel(BACKLOG)
    behind = False

    def heard(payload: str) -> None:
        nonlocal behind
        node, _, rest = payload.partition("\n")
        lines = [line for line in rest.split("\n") if line.startswith("!")] if node != me else []
        if lines:
            try:
                send.send_nowait(lines)
            except trio.WouldBlock:
                behind = True

    async with trio.open_nursery() as nursery:
        await nursery.start(store.listener(f"{store.table}_lifecycle").run, heard)
        task_status.started()
        async for lines in receive:
            if behind:
                behind = False
                log.warning("node %s: %d shared-table changes behind; reloading them all", me, BACKLOG)
                await reload_all(state)
                continue
            await apply(state, lines)


async def apply(state: Any, lines: list[str]) -> None:
    """Re-read what ``lines`` (``!<table> <row key>``) name."""
    tables = state.engine.tables
    policy = False
    for line in lines:
        table, _, key = line[1:].partition(" ")
        if table == "S":
            before = state.registry.acl(key)
            state.registry.refresh(key, await tables.scopes.get(key))
            if before is not None and state.registry.acl(key) != before:
                state.policy.changed("scope", key)  # members or review changed: open streams re-check
        elif table == "RV":
            record = await tables.revoked.get(key)
            if record is not None:
                state.revocations.revoked[key] = int(record["exp"])
            else:
                state.revocations.revoked.pop(key, None)
        elif table == "PO":
            policy = True
    if policy:
        await state.policy.reload()


async def reload_all(state: Any) -> None:
    state.registry.acls.clear()
    state.registry.writers.clear()
    await state.registry.load()
    await state.revocations.load()
    await state.policy.reload()
