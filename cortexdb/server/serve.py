"""``cortexdb serve``: the HTTP server and the engine in the same Trio loop.

The HTTP layer is the built-in HTTP/1.1 + WebSocket server (``cortexdb.http``) by default, or
Hypercorn's trio worker (``--http-server hypercorn``); docs/decisions.md says why the default
changed.  Shutdown on SIGINT/SIGTERM: open streams end (``state.closing``), the server drains
requests in flight, then the engine closes (actors stop, WAL and store flushed).

Under Hypercorn, an exception that escapes one connection's handler (e.g. a malformed chunked
body racing the response: Hypercorn's ``send_eof`` and its 400 answer collide in a
``trio.BusyResourceError``) would end ``trio.serve_listeners`` and the whole process; a guarded
``TCPServer`` logs it and closes that connection only, and refuses connections over
``max_connections`` with a 503 envelope (docs/decisions.md, "HTTP limits").
"""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable

import hypercorn.trio.run
import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve
from hypercorn.trio.tcp_server import TCPServer

from ..engine.config import EngineConfig
from ..engine.engine import open_engine
from ..http import error_response, linger, too_many_connections
from ..http import serve as http_serve
from .app import create_app
from .call import RequestPolicyHook
from .loopwatch import watching
from .policy import load_preset
from .responses import error_body
from .settings import ServerSettings

log = logging.getLogger("cortexdb.server")


async def wait_for_signal() -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.info("received %s: shutting down", signal.Signals(signum).name)
            return


class _HypercornGuard:
    """Per-server state of ``_GuardedTCPServer`` (carried on the Hypercorn ``Config``)."""

    def __init__(self, max_connections: int, new_request_id: Callable[[], str]) -> None:
        self.max_connections = max_connections
        self.new_request_id = new_request_id
        self.connections = 0

    def refusal(self) -> bytes:
        return error_response(too_many_connections(self.max_connections), self.new_request_id(), error_body)


class _GuardedTCPServer(TCPServer):
    """Hypercorn's connection handler, contained: whatever one connection raises is logged and
    ends that connection, not the server; over the cap a connection gets a 503 and is closed."""

    async def run(self) -> None:
        guard: _HypercornGuard | None = getattr(self.config, "cortex_guard", None)
        if guard is None:
            await super().run()
            return
        if guard.connections >= guard.max_connections:
            # As the built-in server does: answer, then read (not parse) and drop what the client
            # sent for a moment, so that the close does not reset the answer away.
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                with trio.move_on_after(5):
                    await self.stream.send_all(guard.refusal())
                await linger(self.stream)
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await self.stream.aclose()
            return
        guard.connections += 1
        try:
            await super().run()
        except* Exception as failure:  # trio.Cancelled (a BaseException) still propagates
            log.warning("Hypercorn failed on a connection; closed that connection: %r", failure.exceptions)
            log.debug("the failure", exc_info=True)
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await self.stream.aclose()
        finally:
            guard.connections -= 1


def _guard_hypercorn() -> None:
    """Hypercorn's trio worker builds its connection handlers from ``hypercorn.trio.run.TCPServer``;
    point that at the guarded subclass (it behaves as before for a Config without a guard)."""
    if hypercorn.trio.run.TCPServer is not _GuardedTCPServer:
        if hypercorn.trio.run.TCPServer is not TCPServer:
            raise RuntimeError("Hypercorn's trio worker changed: review serve._GuardedTCPServer")
        hypercorn.trio.run.TCPServer = _GuardedTCPServer  # type: ignore[misc]


def streamed_bodies(routes: list, limit: Callable[[str], int]) -> Callable[[str, bytes], int | None]:
    """For the built-in server: the upload routes read their body as it arrives, up to
    ``limit(path)`` (``ServerSettings.upload_limit``)."""
    uploads = {(route.method, route.path.encode()) for route in routes if route.upload}
    return lambda method, path: limit(path.decode()) if (method, path) in uploads else None


def config_of(settings: ServerSettings) -> EngineConfig:
    """The engine's configuration under a server (``cortexdb serve``, ``cortexdb mcp``)."""
    return EngineConfig(
        embedder=settings.embedder,
        derivation_defer=settings.derivation_defer,
        max_event_text_bytes=settings.max_event_text_bytes,
        max_derived_per_event=settings.max_derived_per_event,
        derivation_workers=settings.derivation_workers, blob_max_bytes=settings.max_blob_bytes,
        node_id=settings.node_id, lease_ttl=settings.lease_ttl, lease_renew_interval=settings.lease_renew_interval,
        import_max_bytes=settings.max_import_bytes, import_sort_max_bytes=settings.max_import_sort_bytes,
        idle_timeout=settings.scope_idle_timeout,
        scope_memory_budget_mb=settings.scope_memory_budget_mb,
        memory_trim_interval=settings.memory_trim_interval, leveldb_block_size=settings.leveldb_block_size,
        **settings.llm_options(load_preset(settings.preset).defaults),
    )


async def run_server(settings: ServerSettings, *,
                     shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
                     engine_config: EngineConfig | None = None, clock=None, id_seed=None, llm=None,
                     task_status=trio.TASK_STATUS_IGNORED) -> None:  # fmt: skip
    """Open the engine (``llm``: ``open_engine``'s), serve until ``shutdown_trigger`` returns
    (default: SIGINT/SIGTERM), and report the bound addresses through ``task_status``
    (``nursery.start`` returns them)."""
    config = engine_config or config_of(settings)
    path = settings.store_location()
    async with open_engine(settings.backend, path, config=config, clock=clock, id_seed=id_seed,
                           policy=RequestPolicyHook(), llm=llm) as engine:  # fmt: skip
        app = create_app(engine, settings)

        def new_request_id() -> str:  # for the envelopes the HTTP layer answers itself
            return engine.new_id("req")

        hyper = Config()
        hyper.bind = [settings.bind]
        hyper.graceful_timeout = 5.0
        hyper.accesslog = None
        hyper.errorlog = logging.getLogger("hypercorn.error")
        hyper.include_server_header = False
        # The limits Hypercorn has (the body limit is the app's).  Its keep-alive timeout (5 s)
        # runs from the connection's start or last response until a complete head, reads do
        # not re-arm it: that is the head deadline under Hypercorn (a shorter one is honoured).
        hyper.h11_max_incomplete_size = settings.max_head_bytes  # h11 answers 431 over it
        hyper.websocket_max_message_size = settings.max_ws_message_bytes  # closes with 1009
        hyper.keep_alive_timeout = min(hyper.keep_alive_timeout, settings.head_timeout)
        hyper.cortex_guard = _HypercornGuard(settings.max_connections, new_request_id)  # type: ignore[attr-defined]
        trigger = shutdown_trigger or wait_for_signal
        state = app.cortex  # type: ignore[attr-defined]

        async def stop() -> None:
            await trigger()
            state.closing.set()  # end open lifecycle streams now, not after the grace period

        async def serve(task_status) -> None:
            if settings.http_server == "hypercorn":
                _guard_hypercorn()
                await hypercorn_serve(app, hyper, shutdown_trigger=stop, task_status=task_status)
            else:
                await http_serve(app, settings.bind, shutdown_trigger=stop, task_status=task_status,
                                 new_request_id=new_request_id, error_body=error_body,
                                 max_body=settings.max_body_bytes, max_head=settings.max_head_bytes,
                                 head_timeout=settings.head_timeout, max_connections=settings.max_connections,
                                 max_ws_message=settings.max_ws_message_bytes, streamed=streamed_bodies(state.routes, settings.upload_limit))  # fmt: skip

        with watching(settings.loop_slow_step_ms):  # CORTEX_LOOP_SLOW_STEP_MS (0: off)
            async with trio.open_nursery() as nursery:
                binds = await nursery.start(serve)
                if engine.placement is not None:  # where the other nodes forward this node's scopes
                    await engine.placement.advertise(settings.advertise or (binds[0] if "://" in binds[0] else f"http://{binds[0]}"))
                log.info("CortexDB serving on %s (preset %s, %s backend%s, %s HTTP server)", ", ".join(binds),
                         state.policy.preset.name, settings.backend,
                         f" at {settings.data_dir}" if settings.backend == "leveldb" else "", settings.http_server)  # fmt: skip
                task_status.started(binds)
    log.info("CortexDB stopped cleanly")
