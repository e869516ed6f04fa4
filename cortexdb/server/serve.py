"""``cortexdb serve``: the HTTP server and the engine in the same Trio loop.

The HTTP layer is the built-in HTTP/1.1 + WebSocket server (``http11.py``) by default, or
Hypercorn's trio worker (``--http-server hypercorn``); docs/decisions.md says why the default
changed.  Shutdown on SIGINT/SIGTERM: open streams end (``state.closing``), the server drains
requests in flight, then the engine closes (actors stop, WAL and store flushed).
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Awaitable, Callable

import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve

from ..engine.config import EngineConfig
from ..engine.engine import open_engine
from . import http11
from .app import create_app
from .settings import ServerSettings

log = logging.getLogger("cortexdb.server")


async def wait_for_signal() -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.info("received %s: shutting down", signal.Signals(signum).name)
            return


async def run_server(settings: ServerSettings, *,
                     shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
                     engine_config: EngineConfig | None = None, clock=None, id_seed=None,
                     task_status=trio.TASK_STATUS_IGNORED) -> None:  # fmt: skip
    """Open the engine, serve until ``shutdown_trigger`` returns (default: SIGINT/SIGTERM), and
    report the bound addresses through ``task_status`` (``nursery.start`` returns them)."""
    config = engine_config or EngineConfig(
        embedder=settings.embedder,
        derivation_defer=settings.derivation_defer,
        max_event_text_bytes=settings.max_event_text_bytes,
        max_derived_per_event=settings.max_derived_per_event,
        derivation_workers=settings.derivation_workers,
    )
    path = settings.data_dir if settings.backend == "leveldb" else None
    async with open_engine(settings.backend, path, config=config, clock=clock, id_seed=id_seed) as engine:
        app = create_app(engine, settings)
        hyper = Config()
        hyper.bind = [settings.bind]
        hyper.graceful_timeout = 5.0
        hyper.accesslog = None
        hyper.errorlog = logging.getLogger("hypercorn.error")
        hyper.include_server_header = False
        trigger = shutdown_trigger or wait_for_signal
        state = app.cortex  # type: ignore[attr-defined]

        async def stop() -> None:
            await trigger()
            state.closing.set()  # end open lifecycle streams now, not after the grace period

        async def serve(task_status) -> None:
            if settings.http_server == "hypercorn":
                await hypercorn_serve(app, hyper, shutdown_trigger=stop, task_status=task_status)
            else:
                await http11.serve(app, settings.bind, shutdown_trigger=stop, max_body=settings.max_body_bytes,
                                   new_request_id=lambda: engine._ctx.ids.new("req"), task_status=task_status)  # fmt: skip

        async with trio.open_nursery() as nursery:
            binds = await nursery.start(serve)
            log.info("CortexDB serving on %s (preset %s, %s backend%s, %s HTTP server)", ", ".join(binds),
                     state.policy.preset.name, settings.backend,
                     f" at {settings.data_dir}" if path else "", settings.http_server)  # fmt: skip
            task_status.started(binds)
    log.info("CortexDB stopped cleanly")
