"""What a server tells its operator: one structured log line per HTTP request (``RequestLog``)
and latency histograms per endpoint and per pipeline stage (``Metrics``, prometheus-client).

The request log is an ASGI middleware around the whole application, so it sees every HTTP
request whichever HTTP server runs it (the built-in one or Hypercorn) and whoever answers it
(a route, Quart's 404/405, /mcp).  A line is JSON on the ``cortexdb.access`` logger at INFO:
``{"request_id", "method", "path", "status", "ms"}`` — the path without its query string; never
a header (no ``Authorization``), a token or a body.  ``ServerSettings.access_log`` (default on;
``CORTEX_ACCESS_LOG=0`` or ``--access-log off``) turns it off.  Answers the HTTP layer gives
before the application (408, 431, 503 over ``max_connections``) are not logged here.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from ..engine import jsoncodec

access_log = logging.getLogger("cortexdb.access")

#: seconds: 1 ms to 30 s (requests include waits such as ``wait=consolidated``)
REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: seconds: a stage's time for one event within its batch (0.1 ms to 10 s)
STAGE_BUCKETS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


class Metrics:
    """The server's histograms, in a registry of its own (several servers may share a process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Histogram(
            "cortexdb_request_duration_seconds",
            "Time to answer an API request by route (for a stream: until its response starts)",
            ["method", "route"], buckets=REQUEST_BUCKETS, registry=self.registry)  # fmt: skip
        self.stages = Histogram(
            "cortexdb_stage_duration_seconds",
            "Derivation time per event and pipeline stage (extract, index, consolidate, compress)",
            ["stage"], buckets=STAGE_BUCKETS, registry=self.registry)  # fmt: skip

    def observe_request(self, method: str, route: str, seconds: float) -> None:
        self.requests.labels(method, route).observe(seconds)

    def observe_stage(self, stage: str, seconds: float) -> None:
        """``Engine.observe_stages``' observer: called in the scope actor, so only memory work."""
        self.stages.labels(stage).observe(seconds)

    def render(self) -> str:
        return generate_latest(self.registry).decode()


class RequestLog:
    """ASGI middleware: one ``cortexdb.access`` line per HTTP request, once it is answered."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        started = time.perf_counter()
        answer: dict[str, Any] = {"status": None, "request_id": None}

        async def watched(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
                for name, value in message.get("headers") or ():
                    if name.lower() == b"x-cortex-request-id":
                        answer["request_id"] = value.decode("latin-1")
            await send(message)

        try:
            await self.inner(scope, receive, watched)
        finally:
            line = {"request_id": answer["request_id"], "method": scope["method"], "path": scope["path"],
                    "status": answer["status"], "ms": round((time.perf_counter() - started) * 1000, 2)}  # fmt: skip
            access_log.info("%s", jsoncodec.encode(line).decode())
