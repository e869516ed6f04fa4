"""Imports (reference §8.11) and exports (§8.12), on the client itself.

``import_file`` sends the source file as the raw request body, streamed from disk (never read
whole), with the scope template and options as query parameters; the server spools it and starts
an asynchronous job.  ``wait_import`` polls its status with a growing pause (``poll_interval``
doubling up to ``max_poll_interval``) until it ends.  The export calls follow §8.12 the same way;
``export_download`` streams the finished file to a path or a binary file.
"""

from __future__ import annotations

import inspect
import itertools
import os
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

import attrs

from ._ops import Namespace, record, segment
from ._records import Record
from ._transport import Call

IMPORT_SOURCES = ("mem0", "zep", "letta", "openai", "jsonl", "mcp")
ORDERINGS = ("strict_temporal", "batch_throughput")
ON_ERROR = ("skip", "abort")
EXPORT_FORMATS = ("jsonl", "mem0", "zep", "letta")
TERMINAL = ("completed", "cancelled", "failed")


@attrs.frozen(kw_only=True)
class ImportJob(Record):
    """An import job: as accepted by ``import_file`` (``estimated_items``, ``size_bytes``,
    ``lifecycle_stream``) or as ``import_status`` reads it (``phase``, ``fraction_complete``,
    ``processed`` of ``total``, the counts in ``items`` — ``read``, ``written``, ``replayed``,
    ``skipped``, ``failed`` — the first ``errors`` with their ``line`` or ``record``, and
    ``error`` when it failed).  ``done`` once it completed, was cancelled or failed."""

    import_id: str | None = None
    status: str | None = None
    source: str | None = None
    format: str | None = None
    scope: str | None = None
    phase: str | None = None
    fraction_complete: float | None = None
    processed: int | None = None
    total: int | None = None
    estimated_items: int | None = None
    size_bytes: int | None = None
    items: dict[str, int] = attrs.field(factory=dict)
    errors: list[dict[str, Any]] = attrs.field(factory=list)
    error: dict[str, Any] | None = None
    interruptions: list[dict[str, Any]] = attrs.field(factory=list)
    created_at: str | None = None
    finished_at: str | None = None
    lifecycle_stream: str | None = None
    cancel_accepted: bool | None = None

    @property
    def done(self) -> bool:
        return self.status in TERMINAL


@attrs.frozen(kw_only=True)
class ExportJob(Record):
    """An export job (§8.12): as accepted by ``export`` (``estimated_size_bytes``,
    ``lifecycle_stream``) or as ``export_status`` reads it; ``done`` once it ended."""

    export_id: str | None = None
    status: str | None = None
    scope: str | None = None
    format: str | None = None
    layers: list[str] = attrs.field(factory=list)
    as_of: str | None = None
    phase: str | None = None
    fraction_complete: float | None = None
    estimated_size_bytes: int | None = None
    size_bytes: int | None = None
    download: str | None = None  # the file's path on the server once completed (and not expired)
    error: dict[str, Any] | None = None
    lifecycle_stream: str | None = None

    @property
    def done(self) -> bool:
        return self.status in TERMINAL


def pauses(first: float, largest: float) -> Iterator[float]:
    """``first``, then doubling, up to ``largest``: the pauses between two status polls."""
    return itertools.chain((min(largest, first * 2**n) for n in range(32)), itertools.repeat(largest))


def _opened(path_or_file: str | os.PathLike[str] | BinaryIO, mode: str) -> tuple[Any, bool]:
    """(a binary file, whether we opened it and must close it)."""
    if isinstance(path_or_file, str | os.PathLike):
        return open(path_or_file, mode), True
    if not hasattr(path_or_file, "read" if mode == "rb" else "write"):
        raise TypeError(f"expected a path or a binary file, got {type(path_or_file).__name__}")
    return path_or_file, False


def _closing(run: Callable[[], Any], file: Any, owned: bool) -> Any:
    """``run()``, closing ``file`` (when ``owned``) once its result is there: at once on the
    blocking client, after the awaitable on the async one."""
    if not owned:
        return run()
    try:
        result = run()
    except BaseException:
        file.close()
        raise
    if not inspect.isawaitable(result):
        file.close()
        return result

    async def awaited() -> Any:
        try:
            return await result
        finally:
            file.close()

    return awaited()


class Transfers(Namespace):
    """Import and export jobs, on the client itself."""

    # -- imports (§8.11) -------------------------------------------------------------------------
    def import_file(self, source: str, path_or_fileobj: str | os.PathLike[str] | BinaryIO, *,
                    scope_template: str | None = None, ordering: str | None = None,
                    on_error: str | None = None, format: str | None = None,
                    observed_at: str | None = None) -> Any:  # fmt: skip
        """Start importing a file exported by ``source`` (``mem0``, ``zep``, ``letta``,
        ``openai``, ``jsonl``, ``mcp``): a path or a seekable binary file, streamed as the
        request body.  ``scope_template`` (default: the client's default scope) names where the
        records go, e.g. ``org:acme/user:{user_id}``; ``ordering`` ``strict_temporal`` (the
        server's default) or ``batch_throughput``; ``on_error`` ``skip`` (default) or ``abort``;
        ``format`` a version the importer reads (else sniffed); ``observed_at`` the time of
        records that carry none.  Returns the accepted ``ImportJob`` (202).

        Safe to retry: every imported record carries an idempotency key made from its source
        id, so a repeated upload writes nothing twice."""
        if source not in IMPORT_SOURCES:
            raise ValueError(f"source must be one of {IMPORT_SOURCES}")
        _check(ordering, ORDERINGS, "ordering")
        _check(on_error, ON_ERROR, "on_error")
        params = {"scope_template": scope_template or self.resolve_scope(None), "ordering": ordering,
                  "on_error": on_error, "format": format, "observed_at": observed_at}  # fmt: skip
        file, owned = _opened(path_or_fileobj, "rb")
        call = Call("POST", f"/v1/import/{source}", params=params, body=file,
                    headers={"Content-Type": "application/octet-stream"}, parse=record(ImportJob), safe=True)  # fmt: skip
        return _closing(lambda: self.run(call), file, owned)

    def import_status(self, import_id: str) -> Any:
        """``GET /v1/import/{id}``: the job's ``ImportJob``."""
        return self.run(self._import_status_call(import_id))

    def import_cancel(self, import_id: str) -> Any:
        """Stop the import after its current window (what it wrote stays); ``cancel_accepted``
        is False when it had ended already."""
        return self.run(Call("POST", f"/v1/import/{segment(import_id)}/cancel", json={},
                             parse=record(ImportJob), safe=True))  # fmt: skip

    def wait_import(self, import_id: str, *, timeout: float | None = None,
                    on_status: Callable[[Any], None] | None = None, poll_interval: float = 0.2,
                    max_poll_interval: float = 2.0) -> Any:  # fmt: skip
        """The import's status once it has ended (completed, cancelled or failed), polling it
        ``poll_interval`` seconds apart at first, doubling up to ``max_poll_interval``;
        ``on_status`` sees each status read (a progress bar); ``TimeoutError`` after
        ``timeout`` seconds."""
        return self.transport.poll(self._import_status_call(import_id), _done,
                                   pauses(poll_interval, max_poll_interval), on_status, timeout)  # fmt: skip

    @staticmethod
    def _import_status_call(import_id: str) -> Call:
        return Call("GET", f"/v1/import/{segment(import_id)}", parse=record(ImportJob))

    # -- exports (§8.12) -------------------------------------------------------------------------
    def export(self, scope: str | None = None, *, format: str = "jsonl", layers: list[str] | None = None,
               as_of: str | None = None) -> Any:  # fmt: skip
        """Start exporting ``scope`` as ``format`` (``jsonl``, ``mem0``, ``zep``, ``letta``);
        ``layers`` (e.g. ``["events", "facts", "beliefs"]``) and ``as_of`` narrow it.  Returns
        the accepted ``ExportJob``; ``wait_export`` and ``export_download`` follow."""
        if format not in EXPORT_FORMATS:
            raise ValueError(f"format must be one of {EXPORT_FORMATS}")
        body: dict[str, Any] = {"scope": self.resolve_scope(scope), "format": format}
        if layers is not None:
            body["layers"] = list(layers)
        if as_of is not None:
            body["as_of"] = as_of
        return self.run(Call("POST", "/v1/export", json=body, parse=record(ExportJob)))

    def export_status(self, export_id: str) -> Any:
        """``GET /v1/export/{id}``: the job's ``ExportJob``."""
        return self.run(self._export_status_call(export_id))

    def wait_export(self, export_id: str, *, timeout: float | None = None,
                    on_status: Callable[[Any], None] | None = None, poll_interval: float = 0.2,
                    max_poll_interval: float = 2.0) -> Any:  # fmt: skip
        """The export's status once it has ended (as ``wait_import``)."""
        return self.transport.poll(self._export_status_call(export_id), _done,
                                   pauses(poll_interval, max_poll_interval), on_status, timeout)  # fmt: skip

    def export_download(self, export: str | ExportJob, out: str | os.PathLike[str] | BinaryIO) -> Any:
        """Stream a finished export's file to ``out`` (a path, or a binary file): the bytes
        written.  ``export`` is its id, or its ``ExportJob`` (whose ``download`` path is used when
        the server gave one)."""
        url = export.download if isinstance(export, ExportJob) else None
        export_id = export.export_id if isinstance(export, ExportJob) else export
        call = Call("GET", url or f"/v1/export/{segment(str(export_id))}/download")
        file, owned = _opened(out, "wb")
        return _closing(lambda: self.transport.download(call, file), file, owned)

    @staticmethod
    def _export_status_call(export_id: str) -> Call:
        return Call("GET", f"/v1/export/{segment(export_id)}", parse=record(ExportJob))


def _done(job: Any) -> bool:
    return job.done


def _check(value: str | None, allowed: tuple[str, ...], name: str) -> None:
    if value is not None and value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}")


__all__ = ["ExportJob", "ImportJob", "Transfers"]
