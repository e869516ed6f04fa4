"""Shared helpers for the SDK tests: a real server on 127.0.0.1 with an ephemeral port (the
built-in HTTP server, memory backend, manual clock, seeded ids), and what the SDK is given to
never sleep for real."""

from __future__ import annotations

import datetime as dt
from contextlib import asynccontextmanager

import trio

from cortexdb import EngineConfig, ManualClock
from cortexdb.server.serve import run_server
from cortexdb.server.settings import ServerSettings

from .server_support import START, TENANT, Keys

NOW = dt.datetime(2026, 5, 13, 15, 42, 9, tzinfo=dt.UTC)  # START, for the SDK's observed_at


@asynccontextmanager
async def live(tmp_path, preset: str = "dev_local", engine_config: EngineConfig | None = None, **settings):
    """(base URL, issuer keys) of a server running in this test's nursery until the block ends."""
    clock = ManualClock(START)
    keys = Keys(tmp_path, clock)
    options = dict(preset=preset, backend="memory", tenant=TENANT, bind="127.0.0.1:0",
                   issuer_dirs=[str(keys.dir)], operators=("user:root",), stream_keepalive=60.0)  # fmt: skip
    options.update(settings)
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(lambda task_status: run_server(
            ServerSettings(**options), shutdown_trigger=stop.wait, clock=clock, id_seed=7,
            engine_config=engine_config or EngineConfig(episode_idle_check=3600.0),
            task_status=task_status))  # fmt: skip
        try:
            yield binds[0], keys
        finally:
            stop.set()


class Sleeps:
    """An injected sleep: records each pause and returns at once (sync and async flavours)."""

    def __init__(self) -> None:
        self.pauses: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.pauses.append(seconds)

    async def asleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        await trio.lowlevel.checkpoint()
