"""Several CortexDB nodes on one shared store: scope partitions, their leases, fenced writes.

A *partition* is a top scope (the first segment of a scope path: ``org:acme`` holds
``org:acme/user:u1`` and everything else under it; docs/decisions.md says why).  With
``EngineConfig.node_id`` set, a node serves a scope only while it holds its partition's lease in
the store (``store.leases``, backends/postgres/leases.py):

- the first request for a scope of a free (or expired) partition *claims* it: the node acquires
  the lease, and from then on renews it every ``lease_renew_interval`` seconds (``run``);
- a partition another node holds is refused with ``503 SCOPE_OWNED_ELSEWHERE``;
- every write a scope actor makes runs inside its partition's lease (``FENCE``, set by the
  supervisor for the actor's tasks): ``FencedStore.write`` turns it into ``store.write_fenced``,
  so a node that lost the lease writes nothing (``LeaseLost``), and the node drops the
  partition at once;
- when a lease expires (its node died or stalled), the next ``sweep`` of any node takes the
  partition over (or a request for one of its scopes claims it first), and the sweep restarts
  the actors of its scopes with unfinished work: they reload their
  state from the store and finish the derivations of every captured event (the partition's
  WAL slice: ``P`` markers);
- WAL offsets come in blocks from a counter in the store (``WalSequencer.use_blocks``), and a
  takeover starts a fresh block, so offsets stay unique across nodes and grow within a scope.

It sits with storage because it is the store as this node may write it; it only decides ownership; idle eviction of actors is the supervisor's own business.
"""

from __future__ import annotations

import contextvars
import logging
from typing import Any

import trio

from ...errors import CortexError, LeaseLost, ScopeOwnedElsewhere
from ..spi.kv import Put
from . import keys

log = logging.getLogger("cortexdb.placement")

#: the lease a scope actor's tasks write under (set by the supervisor; None: an unfenced write)
FENCE: contextvars.ContextVar[Any] = contextvars.ContextVar("cortexdb_fence", default=None)
WAL_COUNTER = "wal"
LIFECYCLE_PREFIX = keys.prefix(keys.LIFECYCLE)
NOTIFY_BYTES = 7900  # PostgreSQL's limit on a notification's payload is 8000 bytes
HEARD_BUFFER = 100_000  # notifications heard and not yet published (beyond: dropped, logged)


def partition_of(scope: str) -> str:
    """The partition of a canonical scope: its top scope."""
    return scope.split("/", 1)[0]


#: the node-wide tables every node's server keeps in memory (scope records with their members,
#: policy documents, revoked tokens): a change is announced to the other nodes as a ``!`` line
SHARED_TABLES = {keys.prefix(keys.SCOPES): "S", keys.prefix(keys.POLICY_DOCS): "PO", keys.prefix(keys.REVOKED): "RV"}


def shared_changes(ops) -> list[bytes]:
    """``!<table> <row key>`` for each write to a shared table (``SHARED_TABLES``): the other
    nodes' servers re-read that row (server/shared.py)."""
    out = []
    for op in ops:
        for prefix, name in SHARED_TABLES.items():
            if op.key.startswith(prefix) and len(op.key) - len(prefix) < NOTIFY_BYTES // 4:
                out.append(b"!" + name.encode() + b" " + op.key[len(prefix):].replace(b"\x00", b"\x01"))
    return out


class FencedStore:
    """The engine's store when it shares it with other nodes: a write made under ``FENCE`` is
    ``write_fenced`` with that lease; everything else is the store's own."""

    def __init__(self, store: Any, placement: Placement) -> None:
        self._store = store
        self._placement = placement

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def write(self, ops, *, sync: bool = False) -> None:
        lease, notify = FENCE.get(), self._placement.notes(ops)
        if lease is None:
            await self._store.write(ops, sync=sync, notify=notify)
            return
        try:
            await self._store.write_fenced(lease, ops, sync=sync, notify=notify)
        except LeaseLost:
            self._placement.lost(lease)
            raise


class Placement:
    """This node's partitions (``NodeContext.placement``; None on a single node)."""

    def __init__(self, store: Any, config: Any) -> None:
        if not all(hasattr(store, name) for name in ("leases", "write_fenced", "listener")):
            raise ValueError(f"node_id is set but the {type(store).__name__} store has no leases: several "
                             "nodes need a shared store with leases (the postgres backend)")  # fmt: skip
        self.node = config.node_id
        self.ttl = config.lease_ttl
        self.interval = config.lease_renew_interval
        self._leases = store.leases
        self._held: dict[str, Any] = {}  # partition -> Lease
        self._locks: dict[str, trio.Lock] = {}
        self._unresumed: set[str] = set()  # partitions claimed whose pending scopes were not resumed
        self.ctx: Any = None  # set by node_context
        self.channel = f"{store.table}_lifecycle"  # pg_notify channel of the lifecycle records
        self._listener = store.listener(self.channel)
        self._heard_send, self._heard_receive = trio.open_memory_channel(HEARD_BUFFER)
        self.ping: Any = None  # the message that starts an actor (``start_placement``)

    # -- which partitions ------------------------------------------------------------------------
    def holds(self, scope: str) -> bool:
        return partition_of(scope) in self._held

    def lease(self, scope: str) -> Any:
        return self._held.get(partition_of(scope))

    def partitions(self) -> list[str]:
        return sorted(self._held)

    async def claim(self, scope: str) -> Any:
        """The lease of the scope's partition: held already, or acquired now (a free or expired
        one); ``ScopeOwnedElsewhere`` when another node holds it."""
        part = partition_of(scope)
        lock = self._locks.setdefault(part, trio.Lock())
        async with lock:
            lease = self._held.get(part)
            if lease is not None:
                return lease
            lease = await self._leases.acquire(part, self.node, self.ttl)
            if lease is None:
                holder = await self._leases.holder(part)
                raise ScopeOwnedElsewhere(
                    f"scope {scope} belongs to partition {part}, which node {holder[0] if holder else '?'} holds",
                    details={"scope": scope, "partition": part, "owner": holder[0] if holder else None})  # fmt: skip
            self.ctx.wal.fresh()  # offsets above every one an earlier owner gave out
            self._held[part] = lease
            self._unresumed.add(part)  # its other scopes' unfinished work: the next sweep resumes it
            log.info("node %s holds partition %s (token %d)", self.node, part, lease.token)
            return lease

    def lost(self, lease: Any) -> None:
        """The lease is no longer current: drop the partition, and stop its actors (their state
        may be stale by now; a later request claims the partition again, or finds its owner)."""
        if self._held.get(lease.part) is None or self._held[lease.part].token != lease.token:
            return
        del self._held[lease.part]
        log.warning("node %s lost partition %s (token %d)", self.node, lease.part, lease.token)
        supervisor = self.ctx.supervisor
        if supervisor is not None:
            supervisor.retire(lambda scope: partition_of(scope) == lease.part)

    # -- lifecycle records across nodes -------------------------------------------------------------
    def notes(self, ops) -> list[tuple[str, str]]:
        """The ``pg_notify`` payloads telling the other nodes of a batch's lifecycle records:
        ``node`` then one line per record (its stored JSON, or ``@`` and its id when too long
        for one notification), at most ``NOTIFY_BYTES`` each."""
        lines = [op.value if len(op.value) < NOTIFY_BYTES // 2 else b"@" + op.key[len(LIFECYCLE_PREFIX):]
                 for op in ops if isinstance(op, Put) and op.key.startswith(LIFECYCLE_PREFIX)]  # fmt: skip
        lines += shared_changes(ops)
        notes: list[tuple[str, str]] = []
        head = self.node.encode()
        chunk = [head]
        for line in lines:
            if sum(len(part) + 1 for part in chunk) + len(line) > NOTIFY_BYTES:
                notes.append((self.channel, b"\n".join(chunk).decode()))
                chunk = [head]
            chunk.append(line)
        if len(chunk) > 1:
            notes.append((self.channel, b"\n".join(chunk).decode()))
        return notes

    def _heard(self, payload: str) -> None:
        """A notification (on the Trio thread, in commit order): queued for ``_relay``."""
        node, _, rest = payload.partition("\n")
        if node != self.node and rest:
            try:
                self._heard_send.send_nowait(rest)
            except trio.WouldBlock:
                log.warning("node %s: lifecycle notifications are %d behind; records dropped", self.node, HEARD_BUFFER)

    async def _relay(self) -> None:
        """Publish the records other nodes committed on this node's bus, in the order heard."""
        table, bus = self.ctx.tables.lifecycle, self.ctx.bus
        async for rest in self._heard_receive:
            for line in rest.split("\n"):
                if line.startswith("!"):
                    continue  # a shared table changed: the server's own listener applies it (server/shared.py)
                record = await table.get(line[1:]) if line.startswith("@") else table.codec.decode(line.encode())
                if record is not None:
                    bus.publish_remote(record)

    # -- addresses (the server forwards a request to a partition's owner) -------------------------
    async def advertise(self, address: str) -> None:
        """Record this node's HTTP base URL beside the leases."""
        await self._leases.advertise(self.node, address)

    async def address_of(self, node: str) -> str | None:
        return await self._leases.address(node)

    # -- the timer -------------------------------------------------------------------------------
    async def start(self) -> None:
        """Before the first capture: offsets come from the shared counter, above this store's."""
        wal = self.ctx.wal
        await self._leases.raise_to(WAL_COUNTER, wal.last)
        wal.use_blocks(lambda count: self._leases.take(WAL_COUNTER, count), self.ctx.config.wal_block)

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Renew the held leases and take expired partitions over, every ``interval`` seconds."""
        task_status.started()
        while True:
            await trio.sleep(self.interval)
            try:
                await self.renew()
                await self.sweep()
            except CortexError as exc:  # the store is unreachable: the next round will tell
                log.warning("lease renewal skipped: %s", exc)

    async def renew(self) -> None:
        for part, lease in list(self._held.items()):
            renewed = await self._leases.renew(lease, self.ttl)
            if renewed is None:
                self.lost(lease)
            elif self._held.get(part) is lease:
                self._held[part] = renewed

    async def sweep(self) -> list[str]:
        """Take over every expired partition that another node does not take first, and resume
        its scopes' unfinished work; returns the partitions taken."""
        taken = []
        for part in await self._leases.expired():
            if part in self._held:
                continue
            try:
                await self.claim(part)
            except ScopeOwnedElsewhere:  # another node was quicker
                continue
            taken.append(part)
        # and the partitions a request claimed since the last sweep (it started only its own scope)
        claimed = [part for part in self._unresumed if part in self._held]
        self._unresumed.clear()
        if claimed:
            await self.resume(claimed)
        return taken

    async def resume(self, parts: list[str]) -> None:
        """Start the actors of the partitions' scopes with unfinished work: each reloads its
        state and finishes its pipeline (replaying the partition's captured, underived events)."""
        for scope in await self.ctx.tables.scopes_with_pending_work():
            if partition_of(scope) in parts:
                await self.ctx.supervisor.request(scope, self.ping)

    async def release_all(self) -> None:
        """A graceful stop: hand every partition over at once (the actors have stopped)."""
        for lease in list(self._held.values()):
            try:
                await self._leases.release(lease)
            except CortexError as exc:
                log.warning("could not release partition %s: %s", lease.part, exc)
        self._held.clear()


async def ping_pending(supervisor: Any, scope: str, ping: Any) -> bool:
    """Start a scope's actor at engine start (it resumes its pipeline); False when another node
    holds its partition (that node resumes it)."""
    try:
        await supervisor.request(scope, ping)
    except ScopeOwnedElsewhere:
        return False
    return True


async def start_placement(ctx: Any, nursery: trio.Nursery, ping: Any) -> None:
    """At engine start, when several nodes share the store: the WAL counter, the lease timer,
    the lifecycle records of the other nodes."""
    placement = ctx.placement
    if placement is not None:
        placement.ping = ping
        await placement.start()
        nursery.start_soon(placement.run)
        await nursery.start(placement._listener.run, placement._heard)
        nursery.start_soon(placement._relay)


async def release_placement(ctx: Any) -> None:
    """At engine stop, after the actors stopped: hand the partitions over."""
    if ctx.placement is not None:
        await ctx.placement.release_all()
