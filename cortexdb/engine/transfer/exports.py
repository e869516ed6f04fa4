"""Exports (reference §8.12, §15): ``Engine.exports`` starts, reports and cancels export jobs.

``start`` checks the request ``{scope, format: jsonl|mem0|zep|letta, layers?, as_of?, view?,
destination?: {kind: inline|file|url}}``, resolves the scopes it covers (``view``: ``descend``, the
default — the scope and every scope below it the caller may read, through the engine's one
traversal — or ``local``) and submits an ``export`` job on the engine's job runner (``jobs.py``).

The job's ``write`` phase streams the records to ``<transfer dir>/<export id>.<ext>``: the
format's exporter (``sources/<system>.export``, the module of ``imports.SOURCES`` named by the
request's ``format``, writing its first ``EXPORT_FORMATS`` entry) runs in a worker thread and
pulls the records from an iterator that reads one page at a time from the engine's layer reads
(``trio.from_thread``), so memory stays flat whatever the export's size.  The records are, layer
by layer: every event (scope by scope, each in WAL order), then facts (every version, superseded
ones included), beliefs (closed and deprecated ones included), episodes — each ``{"record":
"event" | "fact" | "belief" | "episode", **wire}`` with ``wire`` exactly as the reads return it.
What an export never holds: a scope the caller may not read (checked again as the caller before
each scope is read), a record a forget or an erasure deleted (gone from the layers), a redacted
event (its content blanked: counted ``withheld``), an event its writer cancelled (excluded from
the reads, like from recall).  ``as_of`` applies each layer's read rule (§12.3).

Delivery: ``file`` (default) — ``GET /v1/export/{id}/download`` streams the file; ``inline`` — the
document is in the status once completed (``document``, the file's text), bounded by
``export_inline_max_bytes`` (413 at the start when the estimate exceeds it, and the job fails
with 413 if the file outgrows it); ``url`` — 400: this server delivers to no object store.  A
finished export's file is kept ``export_retention_seconds`` (then 410).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
from typing import Any

import orjson
import trio

from ...errors import (
    CortexError,
    ExportNotReady,
    NotFound,
    PayloadTooLarge,
    PolicyDenied,
    RateLimited,
    ResourceDeleted,
    UnsupportedFormat,
)
from ..jobs import COMPLETED, RUNNING, JobKind, JobRun, Phase
from ..policy import capabilities as cap
from ..recall.traversal import verdict
from ..stages import EXPORT_COMPLETE, EXPORT_PHASES, EXPORT_PROGRESS
from ..temporal import parse_rfc3339
from . import imports, spool
from .export_spec import CAPABILITY, LAYERS, Sink, TooLarge, parse_request, status_wire, zero

RECORD = {"events": "event", "facts": "fact", "beliefs": "belief", "episodes": "episode"}
EXTENSIONS = {"jsonl": "jsonl", "mem0": "json", "zep": "json", "letta": "af"}
MEDIA_TYPES = {"jsonl": "application/x-ndjson", "json": "application/json", "af": "application/json"}
FOREVER = "9999-12-31T23:59:59Z"  # "every version": the read rules clip nothing before it
SAMPLE = 20  # records per layer read to estimate an export's size


def exporter(target: str) -> Any:
    """The module writing ``target`` (422 ``UNSUPPORTED_FORMAT`` naming it when there is none)."""
    module = imports.SOURCES.get(target) if target in CAPABILITY else None
    if module is None or not callable(getattr(module, "export", None)) or not getattr(module, "EXPORT_FORMATS", ()):
        known = sorted(t for t in CAPABILITY if callable(getattr(imports.SOURCES.get(t), "export", None)))
        raise UnsupportedFormat(f"this server has no exporter for the format {str(target)[:80]!r}",
                                details={"format": str(target)[:80], "known": known})  # fmt: skip
    return module


class _Stopped(Exception):
    """Raised into the exporter's thread when a cancel is asked for: the file is abandoned."""


class _Walk:
    """Where the records iterator is: layer, scope, the layer read's cursor, and how many records
    a page of the layer holds — as many as make about ``export_page_bytes`` (records differ in
    size by orders of magnitude: an episode lists up to 500 events), measured on each page read."""

    def __init__(self, record_bytes: dict[str, int], page_bytes: int, most: int) -> None:
        self.layer = 0
        self.scope = 0
        self.cursor: str | None = None
        self.seen = 0
        self.page_bytes, self.most = page_bytes, most
        self.limits = {layer: self.fit(each) for layer, each in record_bytes.items()}

    def fit(self, record_bytes: float) -> int:
        return max(1, min(self.most, int(self.page_bytes / max(1.0, record_bytes))))

    def measured(self, layer: str, items: list[dict[str, Any]]) -> None:
        if items:
            self.limits[layer] = self.fit(len(orjson.dumps(items)) / len(items))


class ExportService:
    """``Engine.exports``; its jobs run on the engine's job runner (shared with imports, erasures)."""

    def __init__(self, engine: Any, ctx: Any, jobs: Any) -> None:
        self._engine = engine
        self._ctx = ctx
        self.jobs = jobs
        self._guard: Any = None
        self._guard_set = trio.Event()
        self._dir: str | None = None
        write, deliver = EXPORT_PHASES
        jobs.register(JobKind("export", (Phase(write, self._write, 0.98), Phase(deliver, self._deliver, 0.02)),
                              EXPORT_PROGRESS, EXPORT_COMPLETE, "export_id", self._finish))  # fmt: skip

    def set_guard(self, guard: Any) -> None:
        """The server's check of each scope a job reads, as the caller who started it:
        ``guard(principal, capability, scope)`` raises ``PolicyDenied``."""
        self._guard = guard
        self._guard_set.set()

    def directory(self) -> str:
        if self._dir is None:
            self._dir = spool.transfer_dir(self._ctx)
        return self._dir

    @staticmethod
    def parse(request: Any) -> dict[str, Any]:
        """The request checked (400/422 before anything is read): scope, target, layers, ..."""
        return parse_request(request)

    # -- start ---------------------------------------------------------------------------------
    async def start(self, request: dict[str, Any], *, caller: str | None = None, tenant_id: str | None = None,
                    principal: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
        """Start exporting (202): the export's id, its estimated size and its lifecycle stream."""
        ctx = self._ctx
        caller, tenant = caller or ctx.config.default_caller, tenant_id or ctx.config.tenant_id
        spec = parse_request(request)
        module = exporter(spec["format"])
        scope = spec["scope"]
        ctx.policy.check(caller, CAPABILITY[spec["format"]], scope)
        ctx.policy.check(caller, cap.SCOPE_READ_LOCAL, scope)
        if spec["view"] != "local":
            ctx.policy.check(caller, cap.scope_read(spec["view"]), scope)
        if self.jobs.running("export") >= ctx.config.export_max_running:
            raise RateLimited(f"{ctx.config.export_max_running} exports are running; retry when one ends",
                              details={"retry_after": 1, "limit": ctx.config.export_max_running})  # fmt: skip
        await self._sweep()
        walk = await self._engine.traverse(scope, spec["view"], caller=caller)
        records, size, averages = await self._estimate(walk.scopes, spec)
        kind = spec["destination"]
        if kind == "inline" and size > ctx.config.export_inline_max_bytes:
            raise PayloadTooLarge("destination.kind", ctx.config.export_inline_max_bytes, size,
                                  message=f"this export is estimated at {size} bytes, over the inline limit of "
                                          f"{ctx.config.export_inline_max_bytes}: ask for destination.kind \"file\" "
                                          "and download it", estimated=True, use="file")  # fmt: skip
        export_id = ctx.ids.new("exp")
        ext = getattr(module, "EXPORT_EXTENSION", None) or EXTENSIONS[spec["format"]]
        params = {**spec, "format_version": module.EXPORT_FORMATS[0], "scopes": list(walk.scopes),
                  "path": os.path.join(self.directory(), f"{export_id}.{ext}"), "extension": ext,
                  "estimated_records": records, "estimated_size_bytes": size, "record_bytes": averages,
                  "principal": principal}  # fmt: skip
        record = self.jobs.new_record("export", export_id, scope=scope, params=params,
                                      first={"caller": caller, "tenant_id": tenant,
                                             "scopes_skipped": [d["scope"] for d in walk.denied]})  # fmt: skip
        record["progress"].update(zero())
        await self.jobs.submit(record)
        return {"export_id": export_id, "status": RUNNING, "format": spec["format"],
                "format_version": params["format_version"], "scope": scope, "scopes": params["scopes"],
                "layers": list(spec["layers"]), "as_of": spec["as_of"], "destination": {"kind": kind},
                "estimated_records": records, "estimated_size_bytes": size,
                "lifecycle_stream": f"/v1/lifecycle/stream?export_id={export_id}"}  # fmt: skip

    async def _estimate(self, scopes: tuple[str, ...], spec: dict[str, Any]) -> tuple[int, int, dict[str, int]]:
        """(records, bytes, bytes per record of each layer): the layers' record counts, and their
        size from a sample of each layer's first records as the reads return them (an estimate:
        formats write more or less)."""
        counts = dict.fromkeys(spec["layers"], 0)
        for scope in scopes:
            found = await self._engine.layer_counts(scope)
            for layer in counts:
                counts[layer] += found.get(layer, 0)
        size, limit, averages = 0, self._ctx.config.read_max_limit, dict.fromkeys(spec["layers"], 512)
        for layer, count in counts.items():
            if not count:
                continue
            sample: list[dict[str, Any]] = []
            for scope in scopes:
                sample = (await self._read(layer, scope, None, spec["as_of"], min(SAMPLE, limit)))["items"]
                if sample:
                    break
            each = sum(len(orjson.dumps(item)) + 24 for item in sample) / len(sample) if sample else 512
            averages[layer] = int(each)
            size += int(each * count)
        return sum(counts.values()), size, averages

    # -- status --------------------------------------------------------------------------------
    async def record(self, export_id: str) -> dict[str, Any]:
        record = await self.jobs.get(export_id) if isinstance(export_id, str) else None
        if record is None or record["kind"] != "export":
            raise NotFound(f"no export {str(export_id)[:80]}", details={"export_id": str(export_id)[:80]})
        return record

    async def status(self, export_id: str, *, document: bool = True) -> dict[str, Any]:
        """The export's status; a completed inline export's ``document`` too (unless asked not to)."""
        record = await self.record(export_id)
        wire = status_wire(record, self._expires(record), self._ctx.clock.now())
        if wire["expired"]:
            spool.remove(record["params"]["path"])
        elif document and wire["status"] == COMPLETED and record["params"]["destination"] == "inline":
            with contextlib.suppress(FileNotFoundError):
                wire["document"] = (await trio.Path(record["params"]["path"]).read_bytes()).decode()
        return wire

    async def cancel(self, export_id: str) -> dict[str, Any]:
        await self.record(export_id)
        record, accepted = await self.jobs.cancel(export_id)
        return {**status_wire(record, self._expires(record), self._ctx.clock.now()), "cancel_accepted": accepted}

    async def wait(self, export_id: str) -> dict[str, Any]:
        """The export's status once it has ended (for embedded callers and tests)."""
        async with self._engine.subscribe(job_id=export_id, events=[EXPORT_COMPLETE]) as sub:
            status = await self.status(export_id, document=False)
            if status["status"] == RUNNING:
                async for _ in sub:
                    break
        return await self.status(export_id)

    async def download(self, export_id: str) -> tuple[dict[str, Any], str]:
        """(status, the file's path) of a completed export: 409 ``EXPORT_NOT_READY`` before it
        completes (or when it ended otherwise), 410 once its file has expired."""
        status = await self.status(export_id, document=False)
        if status["status"] != COMPLETED:
            raise ExportNotReady(f"export {export_id} is {status['status']}: it has no file"
                                 + (" yet" if status["status"] == RUNNING else ""),
                                 details={"export_id": export_id, "status": status["status"]},
                                 retriable=status["status"] == RUNNING)  # fmt: skip
        path = (await self.record(export_id))["params"]["path"]
        if status["expired"] or not os.path.exists(path):
            raise ResourceDeleted(f"the file of export {export_id} has expired (kept "
                                  f"{self._ctx.config.export_retention_seconds:g} s after the export ended)",
                                  details={"export_id": export_id, "reason": "expired"})  # fmt: skip
        return status, path

    def media_type(self, status: dict[str, Any]) -> str:
        return MEDIA_TYPES.get(status["extension"], "application/octet-stream")

    def _expires(self, record: dict[str, Any]) -> dt.datetime | None:
        if record["finished_at"] is None:
            return None
        return parse_rfc3339(record["finished_at"]) + dt.timedelta(seconds=self._ctx.config.export_retention_seconds)

    async def _sweep(self) -> None:
        """Remove the files of exports past their retention (each start looks)."""
        directory, now = self.directory(), self._ctx.clock.now()
        for name in os.listdir(directory):
            if not name.startswith("exp_"):
                continue
            record = await self.jobs.get(name.split(".", 1)[0])
            expires = self._expires(record) if record is not None else None
            if record is not None and record["status"] != RUNNING and (expires is None or expires <= now):
                spool.remove(os.path.join(directory, name))

    # -- the job -------------------------------------------------------------------------------
    async def _write(self, run: JobRun) -> None:
        params = run.params
        if params.get("principal") is not None and self._guard is None:
            with trio.move_on_after(60):
                await self._guard_set.wait()
            if self._guard is None:
                raise CortexError("this export was started through the server: resume it under the server")
        module = exporter(params["format"])
        run.progress.update(zero())
        run.scratch["allowed"] = {}
        config = self._ctx.config
        walk = _Walk(params.get("record_bytes") or {}, config.export_page_bytes, config.read_max_limit)
        inline = params["destination"] == "inline"
        limit = config.export_inline_max_bytes if inline else config.export_max_bytes
        options = {"scope": params["scope"], "scopes": params["scopes"], "layers": list(params["layers"]),
                   "as_of": params["as_of"], "view": params["view"]}  # fmt: skip
        path = params["path"]

        def records():
            while True:
                page = trio.from_thread.run(self._page, run, walk)
                if page is None:
                    return
                yield from page

        def write() -> tuple[dict[str, Any], int]:
            with open(path, "wb") as fh:
                sink = Sink(fh, limit)
                counts = module.export(records(), sink, params["format_version"], options)
                fh.flush()
                os.fsync(fh.fileno())
            return counts or {}, sink.size

        try:
            counts, size = await trio.to_thread.run_sync(write)
        except _Stopped:
            spool.remove(path)
            return
        except TooLarge as exc:
            spool.remove(path)
            if inline:
                raise PayloadTooLarge("destination.kind", exc.limit, exc.limit + 1, use="file",
                                      message=f"the export outgrew the inline limit of {exc.limit} bytes: ask for "
                                              "destination.kind \"file\" and download it") from None  # fmt: skip
            raise PayloadTooLarge("export", exc.limit, exc.limit + 1,
                                  message=f"the export outgrew the limit of {exc.limit} bytes (export_max_bytes): "
                                          "export a narrower scope or fewer layers") from None  # fmt: skip
        except BaseException:
            with trio.CancelScope(shield=True):
                spool.remove(path)
            raise
        await run.tick(1.0, written=int(counts.get("written", 0)), skipped=int(counts.get("skipped", 0)),
                       size_bytes=size)  # fmt: skip

    async def _page(self, run: JobRun, walk: _Walk) -> list[dict[str, Any]] | None:
        """The next page of records for the exporter (None at the end); runs in Trio."""
        params, progress = run.params, run.progress
        layers, scopes = params["layers"], params["scopes"]
        while True:
            if run.record["cancel_requested_at"] is not None:
                raise _Stopped
            if walk.layer >= len(layers):
                return None
            if walk.scope >= len(scopes):
                walk.layer, walk.scope, walk.cursor = walk.layer + 1, 0, None
                continue
            layer, scope = layers[walk.layer], scopes[walk.scope]
            if not self._may_read(run, scope):
                walk.scope, walk.cursor = walk.scope + 1, None
                continue
            page = await self._read(layer, scope, walk.cursor, params["as_of"], walk.limits.get(layer, 100))
            walk.measured(layer, page["items"])
            if page.get("has_more"):
                walk.cursor = page["next_cursor"]
            else:
                walk.scope, walk.cursor = walk.scope + 1, None
            kind, items = RECORD[layer], []
            for wire in page["items"]:
                if layer == "events" and (wire["content"].get("kind") == "redacted" or wire.get("excluded_from_recall")):
                    progress["withheld"] += 1
                    continue
                items.append({"record": kind, **wire})
            progress[layer] += len(items)
            walk.seen += len(page["items"])
            total = max(1, params["estimated_records"] or 0)
            await run.tick(min(0.99, walk.seen / total))
            if items:
                return items

    async def _read(self, layer: str, scope: str, cursor: str | None, as_of: str | None, limit: int) -> dict[str, Any]:
        engine = self._engine
        if layer == "events":
            return await engine.events(scope, as_of=as_of, limit=limit, cursor=cursor)
        # every version as recorded at ``as_of`` (else now), whatever its valid time (docs/time.md)
        every = {"include_superseded": True, "valid_during": "..", "as_of": as_of, "limit": limit, "cursor": cursor}
        if layer == "facts":
            return await engine.facts(scope, **every)
        if layer == "beliefs":
            return await engine.beliefs(scope, include_deprecated=True, **every)
        return await engine.episodes(scope, **every)

    def _may_read(self, run: JobRun, scope: str) -> bool:
        """Whether the caller who started the export may read ``scope`` now (once per scope)."""
        allowed: dict[str, bool] = run.scratch["allowed"]
        if scope not in allowed:
            ok = True
            principal = run.params.get("principal")
            if principal is not None and self._guard is not None:
                try:
                    self._guard(principal, cap.SCOPE_READ_LOCAL, scope)
                except PolicyDenied:
                    ok = False
            ok = ok and verdict(self._ctx.policy, run.record["caller"], cap.SCOPE_READ_LOCAL, scope).allowed
            allowed[scope] = ok
            if not ok and scope not in run.record["scopes_skipped"]:
                run.record["scopes_skipped"].append(scope)
        return allowed[scope]

    async def _deliver(self, run: JobRun) -> None:
        await run.tick(1.0)

    async def _finish(self, run: JobRun, status: str) -> dict[str, Any]:
        if status != COMPLETED:
            spool.remove(run.params.get("path"))
        progress = run.progress
        return {"url": f"/v1/export/{run.id}/download" if status == COMPLETED else None,
                "size_bytes": progress.get("size_bytes", 0),
                "summary": {**{layer: progress.get(layer, 0) for layer in LAYERS},
                            **{name: progress.get(name, 0) for name in ("withheld", "written", "skipped")}}}  # fmt: skip
