"""Administration (reference §8.15): version, health, Prometheus metrics, flushing queued
derivations, compaction — and ``GET /v1/openapi.json``, the document of every declared route."""

from __future__ import annotations

import os
import time
from typing import Any

import attrs
import trio
from quart import Response

from ... import __version__
from ...engine.policy import capabilities as cap
from ..call import Blueprint, Call, ServerState
from ..declare import BOOLEAN, obj
from ..openapi import document
from ..params import scope_param

api = Blueprint()
# installed after every other family, so the document lists it last (as it always has)
openapi_api = Blueprint()


@api("GET", "/v1/admin/version", open=True, rate=None, summary="Build information")
async def version(call: Call):
    return {"name": "cortexdb", "version": __version__, "api": "v1",
            "deployment_preset": call.state.policy.preset.name}  # fmt: skip


@api("GET", "/v1/admin/health", access="tenant", summary="Liveness and diagnostics")
async def health(call: Call):
    call.check(cap.ADMIN_HEALTH)
    state, engine = call.state, call.state.engine
    stats = engine.statistics()
    return {"status": "ok", "uptime_s": round(uptime(state), 1), "wal_offset": engine.wal_offset,
            "deployment_preset": state.policy.preset.name, "open_streams": state.open_streams,
            "backend": state.settings.backend, "http_server": state.settings.http_server,
            "embedder": {"name": engine.embedder.name, "dimension": engine.embedder.dimension},
            "engine": stats_wire(stats)}  # fmt: skip


@api("GET", "/v1/admin/metrics", access="tenant", summary="Prometheus metrics")
async def metrics(call: Call):
    call.check(cap.ADMIN_HEALTH)
    state, engine = call.state, call.state.engine
    lines = ["# HELP cortexdb_requests_total HTTP requests by route and status",
             "# TYPE cortexdb_requests_total counter"]  # fmt: skip
    for key, value in sorted(state.counters.items()):
        method, path, status = key.split(" ")
        lines.append(f'cortexdb_requests_total{{method="{method}",route="{path}",status="{status}"}} {value}')
    lines += ["# HELP cortexdb_wal_offset Last WAL offset", "# TYPE cortexdb_wal_offset gauge",
              f"cortexdb_wal_offset {engine.wal_offset}",
              "# HELP cortexdb_open_streams Open lifecycle streams", "# TYPE cortexdb_open_streams gauge",
              f"cortexdb_open_streams {state.open_streams}",
              "# HELP cortexdb_uptime_seconds Seconds since start", "# TYPE cortexdb_uptime_seconds gauge",
              f"cortexdb_uptime_seconds {uptime(state):.1f}"]  # fmt: skip
    for name, value in stats_wire(engine.statistics()).items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            lines += [f"# TYPE cortexdb_engine_{name} gauge", f"cortexdb_engine_{name} {value}"]
    text = "\n".join(lines) + "\n" + state.metrics.render()  # the latency histograms (observe.py)
    return Response(text, content_type="text/plain; version=0.0.4; charset=utf-8")


@api("POST", "/v1/admin/flush-views", tier="experimental", rate="write", access="tenant", body=obj({"scope": {"type": ["string", "null"]}, "seal": BOOLEAN}), body_required=False,
     summary="Wait for queued derivations (seal=true also seals open episodes)")
async def flush_views(call: Call):
    call.check(cap.ADMIN_FLUSH)
    body = call.json() if call.raw.strip() else {}
    scope = scope_param(body["scope"]) if body.get("scope") else None
    engine = call.state.engine
    await engine.flush(scope, seal=bool(body.get("seal", False)))
    return {"flushed": True, "scope": scope, "wal_offset": engine.wal_offset}


@api("POST", "/v1/admin/compact", tier="experimental", rate="write", access="tenant", summary="Compact the store",
     body=obj({}), body_required=False)
async def compact(call: Call):
    """Compact the store and say how much it took off the disk: the data dir's bytes and files
    before and after (LevelDB's tables, logs and manifests; the compaction ends by reopening the
    store, so its old log and manifest go too)."""
    call.check(cap.ADMIN_COMPACT)
    if call.raw.strip():
        call.json()  # it takes no field: any is refused
    engine = call.state.engine
    path = getattr(engine.store, "path", None)
    before = await trio.to_thread.run_sync(disk_usage, path) if path else None
    if not await engine.compact():
        return {"compacted": False, "reason": "this backend has nothing to compact"}
    if before is None:
        return {"compacted": True}
    after = await trio.to_thread.run_sync(disk_usage, path)
    return {"compacted": True, "bytes_before": before[0], "bytes_after": after[0],
            "bytes_reclaimed": before[0] - after[0], "files_before": before[1], "files_after": after[1]}  # fmt: skip


def disk_usage(path: str) -> tuple[int, int]:
    """(bytes, files) under a directory; files vanishing meanwhile are skipped."""
    total = files = 0
    for root, _, names in os.walk(path):
        for name in names:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                continue
            files += 1
    return total, files


@openapi_api("GET", "/v1/openapi.json", open=True, rate=None, summary="This API as OpenAPI 3.1")
async def openapi(call: Call):
    return document(call.state.routes)


def uptime(state: ServerState) -> float:
    return time.time() - state.started


def stats_wire(stats: Any) -> dict[str, Any]:
    if attrs.has(type(stats)):
        return {k: v for k, v in attrs.asdict(stats).items() if not isinstance(v, list | dict)}
    return dict(stats) if isinstance(stats, dict) else {}
