"""The node context every actor shares (node services and configuration), how an engine opens
it, and what runs beside the actors for the engine's lifetime: the embedder check at open, the
maintenance timer, the derivation worker processes."""

from __future__ import annotations

import logging
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from ..errors import CortexError, EmbedderMismatch
from .actors.bus import LifecycleBus
from .actors.services import EntityResolver, IdempotencyTable
from .actors.supervisor import ScopeSupervisor
from .actors.wal import WalSequencer
from .blobs import BlobService
from .clock import Clock
from .config import EngineConfig
from .derive.rules import RuleExtractor
from .ids import IdGenerator
from .llm import LLMRouter
from .memtrim import fix_mmap_threshold, release_free_memory_soon
from .policy.hook import AllowAll, PolicyHook
from .retrieve.embedders import by_name
from .storage import NodeTables
from .storage.placement import FencedStore, Placement
from .vocabularies import Vocabularies

log = logging.getLogger("cortexdb.engine")


@attrs.define
class NodeContext:
    """What every actor shares: node services and configuration (no mutable shared state)."""

    store: Any
    tables: NodeTables
    clock: Clock
    ids: IdGenerator
    config: EngineConfig
    bus: LifecycleBus
    wal: WalSequencer
    idempotency: IdempotencyTable
    entities: EntityResolver
    extractor: Any
    policy: PolicyHook
    embedder: Any = None
    supervisor: ScopeSupervisor | None = None
    blobs: Any = None  # the BlobService (``Engine.blobs``): set by ``node_context``
    # derivation's CPU work on long texts: at most config.derivation_worker_limit workers at once;
    # "process" (config.derivation_workers) until a process fails, then "thread"; the engine's
    # trio-parallel worker context when processes are on
    cpu_limiter: trio.CapacityLimiter | None = None
    cpu_workers: str = "thread"
    cpu_processes: Any = None
    cpu_started: bool = False  # a worker process has answered (workers.off_loop's first call)
    cpu_probe: Any = None  # a trio.Event while that first call is under way
    signals: Any = None  # the SignalService (``Engine.signals``): recall and forget read signals through it
    proposals: Any = None  # the ProposalService (``Engine.proposals``): erasure drops a scope's proposals
    intake: Any = None  # the IntakeService (``Engine.intake``): a forget deletes the results of what it took
    packs: Any = None  # the recall pack cache (recall.cache.PackCache): a forget purges it
    llms: Any = None  # the LLM providers by model id (llm.LLMRouter): answers and narratives
    stage_observer: Any = None  # Engine.observe_stages: e.g. the server's latency histograms
    vocabularies: Any = None  # vocabularies.Vocabularies (§8.14): set by ``node_context``
    placement: Any = None  # placement.Placement: the partitions this node holds (None: one node)
    transfer_tmp: str | None = None  # a memory engine's transfer dir (transfer/spool.py): removed on close


def node_context(store: Any, *, config: EngineConfig, clock: Clock, id_seed: int | None,
                 extractor: Any, policy: PolicyHook | None, embedder: Any, llm: Any = None) -> NodeContext:  # fmt: skip
    fix_mmap_threshold(config.malloc_mmap_threshold)  # large buffers stay out of the heap (memtrim.py)
    placement = Placement(store, config) if config.node_id else None
    if placement is not None:  # several nodes share the store: scope actors' writes are fenced
        store = FencedStore(store, placement)
    tables = NodeTables(store)
    ids = IdGenerator(clock, seed=id_seed)
    ctx = NodeContext(
        store=store, tables=tables, clock=clock, ids=ids, config=config,
        bus=LifecycleBus(tables.lifecycle, ids, clock, window_seconds=config.lifecycle_window_seconds),
        wal=WalSequencer(),
        idempotency=IdempotencyTable(tables.idempotency, clock, config.idempotency_ttl_seconds),
        entities=EntityResolver(tables, ids, clock, most=config.entity_cache_max),
        extractor=extractor or RuleExtractor(),
        policy=policy or AllowAll(),
        embedder=embedder or by_name(config.embedder),
        cpu_limiter=trio.CapacityLimiter(config.derivation_worker_limit),
        cpu_workers=config.derivation_workers, llms=LLMRouter.open(config, llm),
    )  # fmt: skip
    ctx.blobs = BlobService(ctx)
    if placement is not None:
        ctx.placement, placement.ctx = placement, ctx
    ctx.vocabularies = Vocabularies(tables, clock, config)
    return ctx


async def close_context(ctx: NodeContext) -> None:
    """What the context holds beyond the engine's nursery, let go as the engine closes: the LLM
    providers' clients, and a memory engine's temporary transfer directory with its spooled
    sources and export files (``transfer/spool.py``: it cannot resume a job anyway)."""
    await ctx.llms.aclose()
    if ctx.transfer_tmp is not None:
        shutil.rmtree(ctx.transfer_tmp, ignore_errors=True)
        ctx.transfer_tmp = None


async def check_embedder(ctx: NodeContext) -> bool:
    """A data dir records its embedder: vectors of two embedders are never mixed.  True when the
    engine re-embeds (``reembed``): every stored vector is dropped and every scope re-embeds."""
    embedder, tables = ctx.embedder, ctx.tables
    current = {"name": embedder.name, "dimension": embedder.dimension}
    recorded = await tables.meta.get("embedder")
    if recorded == current:
        return False
    if recorded is not None and not ctx.config.reembed:
        raise EmbedderMismatch(
            f"this data dir was embedded with {recorded['name']} ({recorded['dimension']} dimensions), "
            f"not {embedder.name}; re-embed it with `cortexdb reembed --data DIR --embedder "
            f"{_choice(embedder.name)}` (or open it with reembed=True), or keep its embedder "
            f"(--embedder {_choice(recorded['name'])})",
            details={"recorded": recorded, "requested": current},
        )
    if recorded is not None:  # re-embed: drop every stored vector; actors re-embed on start
        await tables.all_vectors.delete_all()
    await tables.meta.put("embedder", current, sync=True)
    return recorded is not None


def _choice(name: str) -> str:
    """The ``--embedder`` choice that names an embedder (``hash-v1`` -> ``hash``)."""
    return "hash" if name.startswith("hash") else "minilm" if "MiniLM" in name else name


async def maintenance(ctx: NodeContext) -> None:
    """The engine's timers: the maintenance round every ``maintenance_interval`` and the trim of
    freed heap (``trim_memory``)."""
    async with trio.open_nursery() as timers:
        timers.start_soon(trim_memory, ctx)
        timers.start_soon(_maintain, ctx)


async def _maintain(ctx: NodeContext) -> None:
    while True:  # a periodic timer (prune expired lifecycle rows and idempotency keys; blobs)
        await trio.sleep(ctx.config.maintenance_interval)
        try:
            await ctx.bus.prune()
            await ctx.idempotency.prune()
            await ctx.blobs.collect_garbage()  # blobs no event refers to, past their grace
        except CortexError as exc:  # the store is closing; the next round will tell
            log.warning("maintenance skipped: %s", exc)


async def trim_memory(ctx: NodeContext) -> None:
    """Free heap pages back to the OS every ``memory_trim_interval`` seconds (memtrim.py; 0:
    never by this timer).  A trim runs in a worker thread and walks glibc's arenas."""
    interval = ctx.config.memory_trim_interval
    while interval > 0:
        await trio.sleep(interval)
        await release_free_memory_soon()


@asynccontextmanager
async def derivation_processes(config: EngineConfig) -> AsyncIterator[Any]:
    """The engine's own worker processes for derivation's CPU work (``derivation_workers =
    "process"``): started on first use at a lower CPU priority, shut down with the engine."""
    if config.derivation_workers != "process":
        yield None
        return
    import trio_parallel

    from .actors.workers import lower_priority

    try:
        context = trio_parallel.open_worker_context(init=lower_priority, grace_period=5.0)
        async with context as processes:
            yield processes
    except trio_parallel.BrokenWorkerError as exc:  # a worker that would not stop was killed
        log.warning("a derivation worker process did not shut down cleanly: %r", exc)
