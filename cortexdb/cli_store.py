"""The CLI's store commands: ``inspect``, ``rebuild`` and ``reembed`` on a LevelDB data dir.

Each opens an existing data dir only (a missing one is a one-line error, and nothing is
created), with ``--embedder`` or, by default, the embedder the data dir records (its ``M``
row ``embedder``), so that they work on a store ``make serve`` (MiniLM) or ``make example``
(the hash embedder) made.  ``rebuild`` and ``reembed`` print progress lines with counts as they go.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from .engine.scopes import canonical_scope
from .engine.stages import Stage
from .errors import NotFound

#: the ``--embedder`` choices (``embedders.by_name``); ``best`` is MiniLM when installed
EMBEDDER_CHOICES = ("hash", "minilm", "best")
LAYERS = ("events", "episodes", "facts", "beliefs")


def add_parsers(commands: Any) -> None:
    """``inspect``, ``rebuild`` and ``reembed`` on the ``cortexdb`` parser's subcommands."""
    for name, help_text, scoped in (
        ("rebuild", "replay a scope's WAL into fresh derived layers (with progress)", True),
        ("inspect", "count a scope's records", True),
        ("reembed", "re-embed every stored vector with another embedder (fixes EMBEDDER_MISMATCH)", False),
    ):  # fmt: skip
        command = commands.add_parser(name, help=help_text)
        command.add_argument("--data", required=True, help="an existing LevelDB data directory")
        if scoped:
            command.add_argument("--scope", required=True, help="scope path, e.g. org:acme/user:alice")
        default = ("the one the data dir records" if scoped else
                   "$CORTEX_EMBEDDER, else best (what `cortexdb serve` uses)")  # fmt: skip
        command.add_argument("--embedder", choices=EMBEDDER_CHOICES, help=f"the embedder (default: {default})")


def run(args: Any) -> None:
    """Run one of this module's commands (``args.command``); a ``CortexError`` is main's to print."""
    scope = canonical_scope(args.scope) if getattr(args, "scope", None) else None  # grammar first
    if not os.path.isfile(os.path.join(args.data, "CURRENT")):  # every LevelDB directory has one
        what = "is not a CortexDB data directory" if os.path.exists(args.data) else "does not exist"
        raise NotFound(f"{args.command}: {args.data} {what} (nothing was created; `cortexdb serve "
                       "--data DIR` or `make example` makes one)", details={"data": args.data})  # fmt: skip
    command = {"inspect": _inspect, "rebuild": _rebuild, "reembed": _reembed}[args.command]
    trio.run(command, args, scope)


async def recorded_embedder(path: str) -> str | None:
    """The name of the embedder a data dir's vectors were made with (None: nothing recorded),
    read from its ``M`` table without opening an engine (which would record one)."""
    from .backends import open_store
    from .engine.storage import NodeTables

    store = await open_store("leveldb", path)
    try:
        recorded = await NodeTables(store).meta.get("embedder")
    finally:
        await store.close()
    return recorded["name"] if recorded else None


@asynccontextmanager
async def _opened(args: Any) -> AsyncIterator[Any]:
    from . import open_engine

    name = args.embedder or await recorded_embedder(args.data) or "hash"
    async with open_engine("leveldb", args.data, config=_config(name, reembed=False)) as engine:
        yield engine


def _config(embedder: str, *, reembed: bool):
    from .engine.config import EngineConfig

    return EngineConfig(embedder=embedder, reembed=reembed)


async def _count(read: Any, scope: str) -> int:
    total, cursor = 0, None
    while True:
        page = await read(scope, limit=1000, cursor=cursor)
        total += len(page["items"])
        if not page["has_more"]:
            return total
        cursor = page["next_cursor"]


async def _inspect(args: Any, scope: str) -> None:
    async with _opened(args) as engine:
        counts = {layer: await _count(getattr(engine, layer), scope) for layer in LAYERS}
        print(" ".join(f"{name}={value}" for name, value in counts.items()), f"wal_offset={engine.wal_offset}",
              f"embedder={engine.config.embedder}")  # fmt: skip


async def _rebuild(args: Any, scope: str) -> None:
    """Rebuild while counting the events whose derivation finished again (their ``consolidated``
    lifecycle records), printing ``k/N`` as they come."""
    async with _opened(args) as engine:
        total = await _count(engine.events, scope)
        done, seen = trio.Event(), set()
        print(f"rebuilding {scope}: {total} events", flush=True)
        progress = Progress(total, "events derived")

        async def rebuild() -> None:
            await engine.rebuild(scope)
            done.set()

        feed = engine.subscribe(scope=scope, events=Stage.CONSOLIDATED.value, capacity=max(total, 1) * 2)
        async with feed as feed, trio.open_nursery() as nursery:
            nursery.start_soon(rebuild)
            while not done.is_set():
                await feed.wait(until=done)
                seen.update(r.event_id for r in feed.take() if r.event_id)
                progress.show(len(seen))
        seen.update(r.event_id for r in feed.take() if r.event_id)
        progress.end(len(seen))
        print(f"rebuilt {scope}: {len(seen)} of {total} events derived again")


async def _reembed(args: Any, scope: None) -> None:
    """Open the data dir with the target embedder and ``reembed=True``: the stored vectors are
    dropped, the ``M`` row records the new embedder, and each scope's actor re-embeds on start
    (the engine logs ``re-embedded scope k/N`` to ``cortexdb.engine``, shown here as progress)."""
    from . import open_engine
    from .engine.retrieve.embedders import by_name

    target = by_name(args.embedder or os.environ.get("CORTEX_EMBEDDER") or "best")
    recorded = await recorded_embedder(args.data)
    if recorded == target.name:
        print(f"{args.data} is embedded with {recorded} already: nothing to do")
        return
    print(f"re-embedding {args.data}: {recorded or 'nothing recorded'} -> {target.name}", flush=True)
    handler = _ProgressHandler()
    engine_log = logging.getLogger("cortexdb.engine")
    engine_log.addHandler(handler)
    level = engine_log.level
    engine_log.setLevel(logging.INFO)  # setLevel, not the attribute: it clears the loggers' cached levels
    try:
        async with open_engine("leveldb", args.data, embedder=target, config=_config(target.name, reembed=True)) as engine:
            scopes = len(await engine.scope_paths())
    finally:
        engine_log.removeHandler(handler)
        engine_log.setLevel(level)
    print(f"re-embedded {scopes} scopes with {target.name} ({target.dimension} dimensions); "
          f"`cortexdb serve --embedder {_short(target.name)}` opens {args.data} now")  # fmt: skip


def _short(name: str) -> str:
    return "hash" if name.startswith("hash") else "minilm"


class _ProgressHandler(logging.Handler):
    """Prints the engine's ``re-embedded`` progress records to stdout."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("re-embedded"):
            print("  " + record.getMessage(), flush=True)


class Progress:
    """A progress line with counts: redrawn in place on a terminal, one line per step of a
    tenth otherwise (a log stays short)."""

    def __init__(self, total: int, what: str, out: Any = None) -> None:
        self.total, self.what, self.out = total, what, out or sys.stdout
        self.tty = self.out.isatty()
        self.shown = self.printed = -1

    def line(self, count: int) -> str:
        fraction = count / self.total if self.total else 1.0
        filled = int(round(min(fraction, 1.0) * 30))
        return f"[{'#' * filled}{'.' * (30 - filled)}] {count}/{self.total} {self.what}"

    def show(self, count: int) -> None:
        step = count if self.tty else (count * 10 // self.total if self.total else 10)
        if step != self.shown:
            self.shown = step
            self.printed = count
            print(self.line(count), end="\r" if self.tty else "\n", file=self.out, flush=True)

    def end(self, count: int) -> None:
        if self.tty or count != self.printed:
            print(self.line(count), file=self.out, flush=True)


__all__ = ["EMBEDDER_CHOICES", "Progress", "add_parsers", "recorded_embedder", "run"]
