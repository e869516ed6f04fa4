"""``cortexdb export`` (reference §8.12; docs/import-export.md, "Command line"): a scope as a file
another memory system reads, through a running server (the SDK) or from a data directory (the
embedded engine), to ``--out FILE`` (written as ``FILE.part``, renamed once complete) or standard
output; the progress and the summary go to stderr.

The export API (``POST /v1/export``, ``GET /v1/export/{id}``, the file's download;
``Engine.exports``) is built on another branch of issue 14: these functions follow reference
§8.12 and the interface note, and the server path is tested against a stand-in of it
(tests/test_cli_transfer.py).  Exit status as ``cortexdb import``'s (cli_transfer.py).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from .cli_transfer import (
    CHUNK,
    Progress,
    Refused,
    client,
    embedded_engine,
    guarded,
    server_url,
    target_options,
)

EXPORT_FORMATS = ("jsonl", "mem0", "zep", "letta")
EXPORT_LAYERS = ("events", "episodes", "facts", "beliefs")


def add_parsers(commands: Any) -> None:
    """``export`` on the ``cortexdb`` parser's subcommands."""
    exp = commands.add_parser("export", help="export a scope as a file another system reads (§8.12)")
    exp.add_argument("--scope", required=True, help="the scope to export, e.g. org:acme/user:alice")
    exp.add_argument("--format", required=True, choices=EXPORT_FORMATS, help="the file's format")
    exp.add_argument("--layers", metavar="LAYERS",
                     help=f"comma-separated layers to export ({','.join(EXPORT_LAYERS)}); default: the server's")
    exp.add_argument("--as-of", metavar="TIME", help="export the memory as it was at this RFC 3339 time")
    exp.add_argument("--out", metavar="FILE", default="-", help="where the file goes (default: standard output)")
    target_options(exp)
    exp.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: Any) -> int:
    return guarded(args, _export)


def _export(args: Any) -> int:
    request: dict[str, Any] = {"scope": args.scope, "format": args.format}
    if args.layers:
        layers = [layer.strip() for layer in args.layers.split(",") if layer.strip()]
        unknown = [layer for layer in layers if layer not in EXPORT_LAYERS]
        if unknown:
            raise Refused(f"--layers: unknown layer {unknown[0]!r} (known: {', '.join(EXPORT_LAYERS)})")
        request["layers"] = layers
    if args.as_of:
        request["as_of"] = args.as_of
    bar = Progress(enabled=not args.no_progress, percent=True)
    sink = Sink(args.out)
    try:
        if args.data_dir:
            import trio

            status, size = trio.run(_export_embedded, args, request, bar, sink)
        else:
            status, size = _export_through_server(args, request, bar, sink)
    except BaseException:
        sink.abandon()
        raise
    finally:
        bar.close()
    if status.get("status") != "completed":
        sink.abandon()
        error = status.get("error") or {}
        print(f"export {status.get('export_id')}: {status.get('status')}"
              + (f": {error.get('error_code')}: {error.get('message')}" if error else ""), file=sys.stderr)  # fmt: skip
        return 1
    sink.commit()
    print(f"export {status.get('export_id')}: completed, {size:,} bytes of {args.format} "
          f"to {sink.name}", file=sys.stderr)  # fmt: skip
    return 0


def _export_through_server(args: Any, request: dict[str, Any], bar: Progress, sink: Sink) -> tuple[dict, int]:
    with client(args) as sdk:
        started = sdk.export(request["scope"], format=request["format"], layers=request.get("layers"),
                             as_of=request.get("as_of"))  # fmt: skip
        print(f"export {started.export_id} started on {server_url(args)}", file=sys.stderr, flush=True)
        final = sdk.wait_export(started.export_id, on_status=lambda job: bar.show(job.raw), max_poll_interval=1.0)
        if final.status != "completed":
            return final.raw, 0
        return final.raw, sdk.export_download(final, sink.file())


async def _export_embedded(args: Any, request: dict[str, Any], bar: Progress, sink: Sink) -> tuple[dict, int]:
    """``Engine.exports``: start, wait, then copy the completed export's file
    (``exports.download``: its path in the transfer directory)."""
    import shutil

    import trio

    async with embedded_engine(args, creating=False) as engine:
        exports = engine.exports
        started = await exports.start(request, caller=args.actor, tenant_id=os.environ.get("CORTEX_TENANT") or None)
        export_id = started["export_id"]
        print(f"export {export_id} started on {args.data_dir}", file=sys.stderr, flush=True)
        status = await exports.wait(export_id)
        bar.show(status)
        if status.get("status") != "completed":
            return status, 0
        _, path = await exports.download(export_id)

        def copy() -> int:
            with open(path, "rb") as source:
                shutil.copyfileobj(source, sink.file(), CHUNK)
            return os.path.getsize(path)

        return status, await trio.to_thread.run_sync(copy)


class Sink:
    """Where an export goes: standard output, or ``FILE`` written as ``FILE.part`` and renamed
    once complete (a failed export leaves no truncated file)."""

    def __init__(self, out: str) -> None:
        self.out = out
        self.name = "standard output" if out == "-" else out
        self._file: Any = None

    def file(self) -> Any:
        if self._file is None:
            self._file = sys.stdout.buffer if self.out == "-" else open(self.out + ".part", "wb")
        return self._file

    def commit(self) -> None:
        if self._file is None:
            self.file()
        self._file.flush()
        if self.out != "-":
            self._file.close()
            os.replace(self.out + ".part", self.out)

    def abandon(self) -> None:
        if self._file is not None and self.out != "-":
            self._file.close()
            try:
                os.remove(self.out + ".part")
            except FileNotFoundError:
                pass
        self._file = None


__all__ = ["EXPORT_FORMATS", "EXPORT_LAYERS", "Sink", "add_parsers", "run"]
