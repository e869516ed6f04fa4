"""Imports (reference §8.11): ``Engine.imports`` starts, reports and cancels import jobs.

``start`` spools the source to ``<transfer dir>/<import id>.src`` as it arrives, names its format
(``sources/<system>.sniff``: 422 ``UNSUPPORTED_FORMAT`` for a version no importer reads) and
submits an ``import`` job on the engine's job runner (``jobs.py``).  Its ``write`` phase parses
the file incrementally, a window at a time, in a thread that reads the next window while the
current one is written, a piece at a time as it shrinks (a window and a piece in memory:
docs/decisions.md), and writes each window through the engine's bulk write path
(``experience_bulk``: validation, limits, policy and derivation apply), one scope and ``bulk_max_items`` items per call.  After each window the job records how many
records it has committed (``state.committed``), with its counts, in one write: a job resumed
after a crash skips those records and re-writes at most one window, whose idempotency keys make
the repeat a replay.  Every record carries a key derived from its source id (and version),
bound to the scope it goes to (``mapping.scoped_key``, unless the importer's keys already hash
the scope: ``KEYS_NAME_SCOPE``; a JSONL envelope's own key is kept as written), and an import's keys do not expire (``durable_keys``: deleted with their event by
forget or erasure, never by ``idempotency_ttl_seconds``), so re-importing a file, a day or a year
later, writes nothing new, and the same file imported into another scope is written there.

``ordering``: ``strict_temporal`` sorts the whole file, within each scope, by ``observed_at`` (then
file order) with an external merge sort, sorted runs on disk merged as they are written
(``sorted_import.py``, ``extsort.py``); ``batch_throughput`` writes in file order.
``on_error``: ``skip`` reports a bad record (its line or record number)
and goes on; ``abort`` ends the job ``failed`` at the first one.
"""

from __future__ import annotations

import functools
import itertools
import os
import re
from collections.abc import AsyncIterable
from typing import Any

import outcome
import trio

from ...errors import (
    CortexError,
    IdempotencyConflict,
    InvalidBody,
    NotFound,
    RateLimited,
)
from ..jobs import JobKind, JobRun, Phase
from ..memtrim import release_free_memory_soon
from ..policy import capabilities as cap
from ..scopes import canonical_scope, is_within
from ..stages import IMPORT_COMPLETE, IMPORT_PHASES, IMPORT_PROGRESS
from ..writes import FAMILY_BULK
from . import collector, extsort, links, sorted_import, spool
from .import_spec import COUNTS, check_declared, parse_request, status_wire
from .mapping import Item, RecordError, scoped_key
from .sources import jsonl, letta, mcp, mem0, openai, zep
from .window import Pacer, prepare, read_window, release

SOURCES: dict[str, Any] = {"jsonl": jsonl, "mem0": mem0, "zep": zep, "letta": letta, "openai": openai,
                           "mcp": mcp}  # fmt: skip
CAPABILITY = {"jsonl": cap.IMPORT_FROM_JSONL, "mem0": cap.IMPORT_FROM_MEM0, "zep": cap.IMPORT_FROM_ZEP,
              "letta": cap.IMPORT_FROM_LETTA, "openai": cap.IMPORT_FROM_OPENAI, "mcp": cap.IMPORT_FROM_MCP}  # fmt: skip
SCOPES_REMEMBERED = 4096  # scopes an import remembers as allowed (a file's records go to few)


class ImportService:
    """``Engine.imports``; its jobs run on the engine's job runner (shared with erasures)."""

    def __init__(self, engine: Any, ctx: Any, jobs: Any, writes: Any) -> None:
        self._engine = engine
        self._ctx = ctx
        self.jobs = jobs
        # the engine's write path (``writes.Writes``), called directly: an import's bulk writes
        # take options the public ``Engine.experience_bulk`` does not offer (``shaped``)
        self._writes = writes
        self._guard: Any = None
        self._guard_set = trio.Event()
        write, settle = IMPORT_PHASES
        jobs.on_open.append(self._sweep)
        # what the strict_temporal write step uses of this service
        self._lent = sorted_import.Service(ctx, functools.partial(self._window, pacer=None, count_read=False),
                                           self._learn, self._failed)  # fmt: skip
        jobs.register(JobKind("import", (Phase(write, self._write, 0.98), Phase(settle, self._settle, 0.02)),
                              IMPORT_PROGRESS, IMPORT_COMPLETE, "import_id", self._finish))  # fmt: skip

    def set_guard(self, guard: Any) -> None:
        """The server's check of each scope a job writes, as the caller who started it:
        ``guard(principal, scope)`` raises ``PolicyDenied`` (a job resumed after a restart waits
        for it before writing)."""
        self._guard = guard
        self._guard_set.set()

    @staticmethod
    def root(request: dict[str, Any]) -> str:
        """The scope an import request writes within (its template's fixed segments); 400 for a
        malformed request."""
        return parse_request(request)[1]

    # -- start ---------------------------------------------------------------------------------
    async def start(self, source: str, data: bytes | AsyncIterable[bytes], request: dict[str, Any], *,
                    caller: str | None = None, tenant_id: str | None = None,
                    principal: dict[str, Any] | None = None, max_bytes: int | None = None) -> dict[str, Any]:  # fmt: skip
        """Spool ``data`` (the source file) and start importing it (202): ``request`` is
        ``{scope_template, format?, options?: {ordering, on_error, observed_at}}``."""
        ctx = self._ctx
        caller, tenant = caller or ctx.config.default_caller, tenant_id or ctx.config.tenant_id
        module = SOURCES.get(source)
        if module is None:
            raise InvalidBody(f"no importer for {source!r}", details={"field": "source", "known": sorted(SOURCES)})
        template, root, options = parse_request(request)
        if hasattr(module, "check_options"):
            module.check_options(options)  # the importer's own options: 400 before anything is spooled
        ctx.policy.check(caller, CAPABILITY[source], root)
        ctx.policy.check(caller, cap.SCOPE_WRITE, root)
        if self.jobs.running("import") >= ctx.config.import_max_running:
            raise RateLimited(f"{ctx.config.import_max_running} imports are running; retry when one ends",
                              details={"retry_after": 1, "limit": ctx.config.import_max_running})  # fmt: skip
        import_id = ctx.ids.new("imp")
        path = os.path.join(spool.transfer_dir(ctx), f"{import_id}.src")
        limit = min(max_bytes or ctx.config.import_max_bytes, ctx.config.import_max_bytes)  # the server's, if smaller
        size, lines = await spool.spool(data, path, limit)
        try:
            fmt = await trio.to_thread.run_sync(module.sniff, path)
            declared = request.get("format") or (request.get("source") or {}).get("format")
            fmt = check_declared(source, module, fmt, declared)
        except BaseException:
            spool.remove(path)
            raise
        params = {"source": source, "format": fmt, "path": path, "size": size, "template": template,
                  "options": options, "principal": principal,
                  "estimated_items": lines + 1 if getattr(module, "LINES", False) or source == "jsonl" else None}  # fmt: skip
        record = self.jobs.new_record("import", import_id, scope=root, params=params,
                                      first={"caller": caller, "tenant_id": tenant, "errors": []})  # fmt: skip
        record["progress"].update(dict.fromkeys(COUNTS, 0))
        await self.jobs.submit(record)
        return {"import_id": import_id, "status": "running", "source": source, "format": fmt, "scope": root,
                "estimated_items": params["estimated_items"], "size_bytes": size,
                "lifecycle_stream": f"/v1/lifecycle/stream?import_id={import_id}"}  # fmt: skip

    async def status(self, import_id: str) -> dict[str, Any]:
        record = await self.jobs.get(import_id) if isinstance(import_id, str) else None
        if record is None or record["kind"] != "import":
            raise NotFound(f"no import {str(import_id)[:80]}", details={"import_id": str(import_id)[:80]})
        return status_wire(record)

    async def cancel(self, import_id: str) -> dict[str, Any]:
        await self.status(import_id)
        record, accepted = await self.jobs.cancel(import_id)
        return {**status_wire(record), "cancel_accepted": accepted}

    async def wait(self, import_id: str) -> dict[str, Any]:
        """The import's status once it has ended (for embedded callers and tests)."""
        async with self._engine.subscribe(job_id=import_id, events=[IMPORT_COMPLETE]) as sub:
            status = await self.status(import_id)
            if status["status"] == "running":
                async for _ in sub:
                    break
        return await self.status(import_id)

    # -- the job -------------------------------------------------------------------------------
    async def _write(self, run: JobRun) -> None:
        params, state = run.params, run.state
        if params.get("principal") is not None and self._guard is None:
            with trio.move_on_after(60):
                await self._guard_set.wait()
            if self._guard is None:
                raise CortexError("this import was started through the server: resume it under the server")
        done = state.get("committed", 0)
        module = SOURCES[params["source"]]
        window = self._ctx.config.bulk_max_items
        trim_every = max(1, self._ctx.config.import_window)
        # an importer whose envelopes' field names are its own constants (``SHAPED``): the write
        # does not walk them for unknown fields (a JSONL file's envelopes are the file's: walked);
        # an option of the internal write path only (``self._writes``), not of the public API
        run.scratch["shaped"] = getattr(module, "SHAPED", False)
        if getattr(module, "SOURCE_IDS", False):  # our JSONL export: preceded_by links to translate
            run.scratch["links"] = links.SourceIds(self._ctx.config.import_link_memory)
        options = {**params["options"], "template": params["template"], "imported_at": run.record["created_at"]}
        if params["options"]["ordering"] == "strict_temporal":  # an external merge sort (sorted_import.py)
            with collector.Thresholds(self._ctx.config.import_gc_thresholds):
                return await sorted_import.write_sorted(self._lent, run, functools.partial(
                    module.read, fmt=params["format"], options=options))  # fmt: skip
        with open(params["path"], "rb") as fh, collector.Thresholds(self._ctx.config.import_gc_thresholds):
            records = module.read(fh, params["format"], options)

            def read_piece(count: int) -> tuple[list[Item], int]:  # in a thread, never two at once
                # scope taken out of each envelope as it is read, off the loop (window.py)
                return [prepare(item, False) for item in itertools.islice(records, count)], fh.tell()

            piece = window
            pacer = Pacer(window + piece)  # this window, and the next up to one piece beyond it
            read = functools.partial(read_window, read_piece, window, piece, pacer)
            seq, ahead = 0, await read()
            while run.record["cancel_requested_at"] is None:
                chunk, position = ahead
                if not chunk:
                    break
                start, seq = seq, seq + len(chunk)
                if seq <= done:  # committed before an interruption
                    await self._learn(run, chunk)
                    pacer.window_done(len(chunk))
                    ahead = await read()
                    continue
                if start < done:
                    await self._learn(run, chunk[: done - start])
                # the next window is parsed and mapped (in a thread) a piece at a time as this one
                # is written: one window and a piece in memory; a source error surfaces once this
                # one is committed
                async with trio.open_nursery() as nursery:
                    box: list[outcome.Outcome] = []
                    nursery.start_soon(_read_ahead, read, box)
                    written = await outcome.acapture(self._window, run, chunk[max(0, done - start):], pacer)
                    pacer.window_done(len(chunk))  # written or not: the reader may go on
                written.unwrap()  # its error as it is, not in an exception group
                chunk = None  # noqa: F841 (not alive while the window after next is read)
                state["committed"] = seq
                await run.tick(position / max(1, params["size"]))
                ahead = box[0].unwrap()
                if seq // trim_every > start // trim_every:
                    await release_free_memory_soon()  # what the window freed, back to the OS

    async def _window(self, run: JobRun, items: list[Item], pacer: Pacer | None, *, count_read: bool = True) -> None:
        """Write ``items`` (mapped, in the order given) a scope and a bulk request at a time;
        ``count_read``: they were not counted as read before (``sorted_import`` counts its own)."""
        progress, root = run.progress, run.record["scope"]
        if count_read:
            progress["read"] += len(items)
        groups: dict[str, list[Item]] = {}
        allowed: dict[str, str] = run.scratch.setdefault("allowed", {})
        for item in items:
            if item.error is not None:
                self._failed(run, item, item.error, item.detail)
                continue
            if item.envelope is None:
                progress["skipped"] += 1
                continue
            raw = item.scope
            scope = allowed.get(raw) if type(raw) is str else None  # seen (and allowed) before
            if scope is None:
                try:
                    scope = self._scope_of(run, raw, root, allowed)
                except RecordError as exc:
                    self._failed(run, item, exc.code, exc.detail)
                    continue
            groups.setdefault(scope, []).append(item)
        limit = self._ctx.config.bulk_max_items
        rebind = not getattr(SOURCES[run.params["source"]], "KEYS_NAME_SCOPE", False)
        for scope, group in groups.items():
            for begin in range(0, len(group), limit):
                part = group[begin : begin + limit]
                for item in part:
                    envelope = item.envelope
                    if rebind and isinstance(envelope.get("idempotency_key"), str):
                        envelope["idempotency_key"] = scoped_key(envelope["idempotency_key"], scope)
                await self._bulk(run, scope, part)
                release(part)  # the window shrinks as it is written
                if pacer is not None:
                    pacer.written(len(part))  # and the next grows

    def _scope_of(self, run: JobRun, raw: Any, root: str, allowed: dict[str, str]) -> str:
        """The record's scope (``raw``: as its envelope wrote it), checked: canonical, within the
        import's, writable by the caller; remembered (``allowed``: as written -> canonical) once
        allowed."""
        try:
            scope = canonical_scope(raw or "")
        except CortexError as exc:
            raise RecordError("invalid_scope", exc.message) from None
        if not is_within(scope, root):
            raise RecordError("scope_outside_import", f"{scope} is not within the import's scope {root}")
        try:
            if self._guard is not None and run.params.get("principal") is not None:
                self._guard(run.params["principal"], cap.SCOPE_WRITE, scope)
            self._ctx.policy.check(run.record["caller"], cap.SCOPE_WRITE, scope)
        except CortexError as exc:
            raise RecordError("scope_denied", exc.message) from None
        if isinstance(raw, str) and len(allowed) < SCOPES_REMEMBERED:
            allowed[raw] = scope
        return scope

    async def _bulk(self, run: JobRun, scope: str, items: list[Item]) -> None:
        """Write ``items`` (one scope); an export's ``preceded_by`` links translated first."""
        ids = run.scratch.get("links")
        if ids is None or all(item.source_id is None for item in items):
            return await self._write_items(run, scope, items)
        for part in links.parts(items) if links.linked(items) else (items,):
            ids.translate(part)
            await self._write_items(run, scope, part)
            await self._learn(run, part)

    async def _learn(self, run: JobRun, items: list[Item]) -> None:
        ids = run.scratch.get("links")
        if ids is None:
            return
        tenant, caller = run.record["tenant_id"], run.record["caller"]

        async def lookup(key: str) -> str | None:
            record = await self._ctx.idempotency.lookup(tenant, caller, FAMILY_BULK, key)
            return record.get("event_id") if record is not None else None

        await ids.learn(items, lookup)

    async def _write_items(self, run: JobRun, scope: str, items: list[Item]) -> None:
        # strict_temporal: the merge of the sorted runs gives the records in order; the bulk
        # write keeps the order given (it need not sort again)
        ordering = "batch_throughput"
        if any(item.replay_by_key for item in items):
            items = await self._unwritten(run, items)
        while items:
            request = {"scope": scope, "ordering": ordering, "items": [item.envelope for item in items]}
            try:
                result = await self._writes.bulk(request, caller=run.record["caller"], tenant=run.record["tenant_id"],
                                                 durable=True, shaped=run.scratch.get("shaped", False))  # fmt: skip
            except CortexError as exc:
                if exc.retriable:
                    raise
                index = _culprit(exc, items)
                if index is None and len(items) > 1:  # not attributable: one at a time
                    for item in items:
                        await self._write_items(run, scope, [item])
                    return
                bad = items.pop(index or 0)
                self._failed(run, bad, exc.error_code.lower(), _detail(exc))
                continue
            run.progress["written"] += result.accepted
            run.progress["replayed"] += result.replayed
            return

    async def _unwritten(self, run: JobRun, items: list[Item]) -> list[Item]:
        """``items`` less the ``replay_by_key`` ones whose key is live (counted as replays): the
        body differs only by the time an earlier import assumed, which must not be a conflict."""
        keep = []
        for item in items:
            key = item.envelope.get("idempotency_key")
            if item.replay_by_key and isinstance(key, str) and await self._ctx.idempotency.lookup(
                    run.record["tenant_id"], run.record["caller"], FAMILY_BULK, key) is not None:  # fmt: skip
                run.progress["replayed"] += 1
            else:
                keep.append(item)
        return keep

    def _failed(self, run: JobRun, item: Item, code: str, detail: str) -> None:
        run.progress["failed"] += 1
        entry = {**item.where(), "error": code, "detail": detail[:500]}
        if run.params["options"]["on_error"] == "abort":
            raise InvalidBody(f"{item.unit} {item.position}: {code}: {detail[:300]}", details=entry)
        if len(run.record["errors"]) < self._ctx.config.import_max_errors:
            run.record["errors"].append(entry)

    async def _sweep(self, running: set[str]) -> None:
        """At open: remove the sorted runs of imports no longer running (a crash between a
        job's end and their removal, or a job record gone)."""
        where = spool.existing_transfer_dir(self._ctx)
        if where is not None:
            await trio.to_thread.run_sync(extsort.sweep, where, running)

    async def _settle(self, run: JobRun) -> None:
        await run.tick(1.0)

    async def _finish(self, run: JobRun, status: str) -> dict[str, Any]:
        spool.remove(run.params.get("path"))
        if run.params["options"]["ordering"] == "strict_temporal":  # its sorted runs, ended or not
            await trio.to_thread.run_sync(sorted_import.runs_of(self._ctx, run).remove)
        return {"summary": {name: run.progress.get(name, 0) for name in COUNTS}}


async def _read_ahead(read: Any, box: list[outcome.Outcome]) -> None:
    box.append(await outcome.acapture(read))


def _culprit(exc: CortexError, items: list[Item]) -> int | None:
    index = exc.details.get("item")
    if isinstance(index, int) and 0 <= index < len(items):
        return index
    if isinstance(exc, IdempotencyConflict):
        wanted = exc.details.get("idempotency_key")
        for position, item in enumerate(items):
            if item.envelope.get("idempotency_key") == wanted:
                return position
    return None


def _detail(exc: CortexError) -> str:
    """The reason, without the bulk request's item index (the record's position names it)."""
    field = exc.details.get("field")
    text = f"{field}: {exc.message}" if field and field not in exc.message else exc.message
    return re.sub(r"items\[\d+\]\.?", "", text)
