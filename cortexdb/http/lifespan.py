"""The ASGI lifespan protocol: startup before the first request, shutdown after the last."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

ASGI = {"version": "3.0", "spec_version": "2.3"}

log = logging.getLogger("cortexdb.server.http")


class Lifespan:
    """The ASGI lifespan protocol: startup before the first request, shutdown after the last."""

    def __init__(self, app: Callable[..., Awaitable[None]], state: dict[str, Any]) -> None:
        self.app = app
        self.state = state
        self.to_app_send, self.to_app = trio.open_memory_channel[dict[str, Any]](1)
        self.started = trio.Event()
        self.stopped = trio.Event()
        self.failure: str | None = None
        self.supported = True

    async def start(self, nursery: trio.Nursery) -> None:
        nursery.start_soon(self._run)
        await self.to_app_send.send({"type": "lifespan.startup"})
        await self.started.wait()
        if self.failure:
            raise RuntimeError(f"the app failed to start: {self.failure}")

    async def _run(self) -> None:
        scope = {"type": "lifespan", "asgi": ASGI, "state": self.state}
        try:
            await self.app(scope, self.to_app.receive, self._send)
        except Exception as exc:  # an app without lifespan support, or a failed startup
            if not self.started.is_set():
                self.supported = False
                log.debug("lifespan not supported: %r", exc)
        finally:
            self.started.set()
            self.stopped.set()

    async def _send(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "lifespan.startup.complete":
            self.started.set()
        elif kind == "lifespan.startup.failed":
            self.failure = message.get("message", "startup failed")
            self.started.set()
        elif kind in ("lifespan.shutdown.complete", "lifespan.shutdown.failed"):
            self.stopped.set()

    async def shutdown(self) -> None:
        if self.supported and not self.stopped.is_set():
            await self.to_app_send.send({"type": "lifespan.shutdown"})
            with trio.move_on_after(10):
                await self.stopped.wait()

