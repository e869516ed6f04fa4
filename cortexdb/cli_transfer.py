"""The CLI's transfer commands: ``cortexdb import`` here, ``cortexdb export`` in ``cli_export``
(reference §8.11, §8.12; docs/import-export.md, "Command line"), and what both share: the
target options, the SDK client or the embedded engine, one-line errors and the progress bar.

    cortexdb import SOURCE FILE --scope TEMPLATE [--server URL | --data-dir DIR]
                    [--ordering strict_temporal|batch_throughput] [--on-error skip|abort]
                    [--source-format NAME] [--observed-at TIME] [--token T] [--actor A]
                    [--embedder E] [--no-wait] [--no-progress]
    cortexdb export --scope SCOPE --format jsonl|mem0|zep|letta [--layers events,facts,...]
                    [--as-of TIME] [--out FILE] [--server URL | --data-dir DIR] [--token T] [--actor A]

Against a running server (``--server``, else ``$CORTEX_URL``, else http://127.0.0.1:8077) they
go through the SDK (``cortexdb.client``): the file is streamed as the request body and the job
is polled.  With ``--data-dir`` they open the embedded engine on that LevelDB directory (no
server may hold it) and run the same job in this process; an import interrupted there (Ctrl-C,
a crash) resumes the next time the directory is opened.

A progress bar (tqdm, on a terminal) shows the records done; the summary gives the counts
(read, written, replayed, skipped, failed) and the first errors with their line or record.
Exit status: 0 when the job completed with no failed record; 1 when it completed with failed
records, failed, or was cancelled; 2 when it could not start (a missing file, an unreachable
server, a format the importer does not read, a refusal); 130 after Ctrl-C.
"""

from __future__ import annotations

import os
import sys
from typing import Any

IMPORT_SOURCES = ("mem0", "zep", "letta", "openai", "jsonl", "mcp")
ORDERINGS = ("strict_temporal", "batch_throughput")
ON_ERROR = ("skip", "abort")
DEFAULT_URL = "http://127.0.0.1:8077"
CHUNK = 1 << 20  # bytes of the source read at a time (embedded import)
PROGRESS_EVERY = 0.25  # seconds between two progress reads of an embedded job
SETTLED = ("written", "replayed", "skipped", "failed")  # the records an import is done with
SHOWN_COUNTS = ("written", "replayed", "failed")  # beside the bar
SHOWN_ERRORS = 5  # errors the summary prints (the status keeps import_max_errors)
#: keywords for the SDK client the commands make (a test seam: e.g. ``sleep``)
CLIENT_OPTIONS: dict[str, Any] = {}


class Refused(Exception):
    """A one-line reason the command cannot run (exit status 2)."""


# -- the parsers ---------------------------------------------------------------------------------
def add_parsers(commands: Any) -> None:
    """``import`` on the ``cortexdb`` parser's subcommands."""
    imp = commands.add_parser("import", help="import a file exported by another memory system (§8.11)",
                              description="Import FILE, exported by SOURCE, as an asynchronous import job.")  # fmt: skip
    imp.add_argument("source", metavar="SOURCE", choices=IMPORT_SOURCES,
                     help=f"the system that wrote FILE: {', '.join(IMPORT_SOURCES)}")  # fmt: skip
    imp.add_argument("file", metavar="FILE", help="the exported file")
    imp.add_argument("--scope", required=True, metavar="TEMPLATE",
                     help="where the records go: a scope, or a template such as org:acme/user:{user_id}")  # fmt: skip
    target_options(imp)
    imp.add_argument("--ordering", choices=ORDERINGS,
                     help="strict_temporal (default: each window sorted by observed_at) or batch_throughput "
                          "(file order)")  # fmt: skip
    imp.add_argument("--on-error", choices=ON_ERROR,
                     help="skip (default: report a bad record and go on) or abort (fail at the first)")
    imp.add_argument("--source-format", metavar="NAME",
                     help="the format version, e.g. mem0_results (default: recognised from the file)")
    imp.add_argument("--observed-at", metavar="TIME", help="RFC 3339 time for records that carry none")
    imp.add_argument("--no-wait", action="store_true",
                     help="with a server: print the import id and return while the job runs")
    imp.add_argument("--no-progress", action="store_true", help="no progress bar")


def target_options(command: Any) -> None:
    where = command.add_mutually_exclusive_group()
    where.add_argument("--server", metavar="URL", help=f"a running server (default $CORTEX_URL or {DEFAULT_URL})")
    where.add_argument("--data-dir", "--data", dest="data_dir", metavar="DIR",
                       help="a LevelDB data directory, opened here with the embedded engine (no server on it); "
                            "--data is the same")
    command.add_argument("--token", help="a bearer token for the server (default $CORTEX_TOKEN)")
    command.add_argument("--actor", help="the caller (default $CORTEX_ACTOR; with --data-dir user:local)")
    command.add_argument("--embedder", choices=("hash", "minilm", "best"),
                         help="with --data-dir: the embedder (default: the one the directory records, else "
                              "$CORTEX_EMBEDDER, else best, as `cortexdb serve`)")  # fmt: skip


def run(args: Any) -> int:
    """Run ``import``; every failure is one line on stderr and an exit status."""
    return guarded(args, _import)


def guarded(args: Any, command: Any) -> int:
    """``command(args)``, with every failure one line on stderr and an exit status."""
    from .errors import ConnectionFailed, CortexError

    name = args.command
    try:
        return command(args)
    except Refused as exc:
        return _fail(name, str(exc))
    except ConnectionFailed:
        return _fail(name, f"cannot reach the server at {server_url(args)} (is `cortexdb serve` running "
                           "there? --server URL or $CORTEX_URL names another)")  # fmt: skip
    except CortexError as error:
        return _fail(name, f"{error.error_code}: {error.message}")
    except KeyboardInterrupt:
        print(f"\ncortexdb: {name}: interrupted", file=sys.stderr)
        return 130


def _fail(command: str, message: str) -> int:
    print(f"cortexdb: {command}: {message}", file=sys.stderr)
    return 2


def server_url(args: Any) -> str:
    return args.server or os.environ.get("CORTEX_URL") or DEFAULT_URL


# -- import --------------------------------------------------------------------------------------
def _import(args: Any) -> int:
    _check_source_file(args.file)
    options = {"ordering": args.ordering, "on_error": args.on_error, "observed_at": args.observed_at}
    options = {name: value for name, value in options.items() if value is not None}
    request: dict[str, Any] = {"scope_template": args.scope, "options": options}
    if args.source_format:
        request["format"] = args.source_format
    bar = Progress(enabled=not args.no_progress)
    try:
        if args.data_dir:
            if args.no_wait:
                raise Refused("--no-wait needs a server: with --data-dir the job runs in this process")
            import trio

            status = trio.run(_import_embedded, args, request, bar)
        else:
            status = _import_through_server(args, request, bar)
    finally:
        bar.close()
    if status is None:
        return 0
    print_import_summary(status)
    return import_exit_status(status)


def _check_source_file(path: str) -> None:
    if not os.path.exists(path):
        raise Refused(f"{path}: no such file")
    if not os.path.isfile(path):
        raise Refused(f"{path}: not a file")
    if not os.access(path, os.R_OK):
        raise Refused(f"{path}: not readable")


def client(args: Any) -> Any:
    from .client import CortexClient

    return CortexClient(server_url(args), token=args.token, actor=args.actor, **CLIENT_OPTIONS)


def _import_through_server(args: Any, request: dict[str, Any], bar: Progress) -> dict[str, Any] | None:
    options = request["options"]
    with client(args) as sdk:
        started = sdk.import_file(args.source, args.file, scope_template=request["scope_template"],
                                  ordering=options.get("ordering"), on_error=options.get("on_error"),
                                  format=request.get("format"), observed_at=options.get("observed_at"))  # fmt: skip
        _print_started(started.raw, where=server_url(args))
        if args.no_wait:
            print(f"follow it with GET /v1/import/{started.import_id} (or {started.lifecycle_stream})")
            return None
        try:
            final = sdk.wait_import(started.import_id, on_status=lambda job: bar.show(job.raw), max_poll_interval=1.0)
        except KeyboardInterrupt:
            print(f"\nthe import goes on in the server: GET /v1/import/{started.import_id} follows it, "
                  f"POST /v1/import/{started.import_id}/cancel stops it", file=sys.stderr)  # fmt: skip
            raise
    bar.show(final.raw)
    return final.raw


async def _import_embedded(args: Any, request: dict[str, Any], bar: Progress) -> dict[str, Any]:
    import trio

    from .engine.transfer import imports

    # the checks the engine makes first, made before the data dir is opened (or created)
    imports.parse_request(request)
    module = imports.SOURCES.get(args.source)
    if module is None:
        raise Refused(f"this build has no {args.source} importer (it reads {', '.join(sorted(imports.SOURCES))})")
    found = await trio.to_thread.run_sync(module.sniff, args.file)
    imports.check_declared(args.source, module, found, request.get("format"))
    async with embedded_engine(args, creating=True) as engine:
        started = await engine.imports.start(args.source, _file_chunks(args.file), request, caller=args.actor,
                                             tenant_id=os.environ.get("CORTEX_TENANT") or None)  # fmt: skip
        import_id = started["import_id"]
        _print_started(started, where=args.data_dir)
        try:
            while True:  # the job runs in this engine's nursery: follow its status until it ends
                status = await engine.imports.status(import_id)
                bar.show(status)
                if status["status"] != "running":
                    return status
                await trio.sleep(PROGRESS_EVERY)
        except KeyboardInterrupt:
            print(f"\nimport {import_id} stopped; it resumes where it was the next time {args.data_dir} is "
                  "opened (`cortexdb serve --data` or `cortexdb import --data-dir`)", file=sys.stderr)  # fmt: skip
            raise


async def _file_chunks(path: str):
    import trio

    async with await trio.open_file(path, "rb") as source:
        while chunk := await source.read(CHUNK):
            yield chunk


def _print_started(started: dict[str, Any], where: str) -> None:
    estimate = started.get("estimated_items")
    print(f"import {started['import_id']} started on {where}: {started.get('source')} "
          f"({started.get('format')}) into {started.get('scope')}, {started.get('size_bytes', 0):,} bytes"
          + (f", about {estimate:,} records" if estimate else ""), flush=True)  # fmt: skip


def print_import_summary(status: dict[str, Any], out: Any = None) -> None:
    """The end of an import: its outcome, counts, time and first errors."""
    out = out or sys.stdout
    items = status.get("items") or {}
    seconds = (status.get("elapsed_ms") or 0) / 1000
    rate = f" ({items.get('read', 0) / seconds:,.0f} records/s)" if seconds > 0 else ""
    print(f"import {status['import_id']}: {status['status']} in {seconds:.{1 if seconds >= 1 else 2}f} s{rate}",
          file=out)  # fmt: skip
    print("  " + "  ".join(f"{name} {items.get(name, 0):,}" for name in
                           ("read", "written", "replayed", "skipped", "failed")), file=out)  # fmt: skip
    if status.get("interruptions"):
        print(f"  resumed after {len(status['interruptions'])} interruption(s)", file=out)
    errors = status.get("errors") or []
    if errors:
        shown = errors[:SHOWN_ERRORS]
        print(f"  first errors ({len(shown)} of {items.get('failed', len(errors)):,}):", file=out)
        for entry in shown:
            where = f"line {entry['line']}" if "line" in entry else f"record {entry.get('record')}"
            print(f"    {where}: {entry.get('error')}: {str(entry.get('detail', ''))[:200]}", file=out)
    error = status.get("error")
    if error:
        print(f"  error: {error.get('error_code')}: {error.get('message')}", file=out)
    if status["status"] == "cancelled":
        print("  cancelled: what was written before the cancel stays", file=out)


def import_exit_status(status: dict[str, Any]) -> int:
    failed = (status.get("items") or {}).get("failed", 0)
    return 0 if status["status"] == "completed" and not failed else 1


# -- the embedded engine ------------------------------------------------------------------------
def embedded_engine(args: Any, *, creating: bool) -> Any:
    """The engine on ``--data-dir`` (a context manager); a directory that is not a data dir, or
    one a server holds, is refused in one line."""
    from contextlib import asynccontextmanager

    path = args.data_dir
    exists = os.path.isdir(path) and bool(os.listdir(path))
    if os.path.exists(path) and not os.path.isdir(path):
        raise Refused(f"--data-dir {path} is not a directory")
    if exists and not os.path.isfile(os.path.join(path, "CURRENT")):
        raise Refused(f"--data-dir {path} is not a CortexDB data directory (it is not empty and has no LevelDB "
                      "CURRENT file)")  # fmt: skip
    if not exists and not creating:
        raise Refused(f"--data-dir {path} does not exist (nothing was created)")

    @asynccontextmanager
    async def opened():
        from . import open_engine
        from .backends import open_store
        from .engine.config import EngineConfig
        from .engine.storage import NodeTables
        from .errors import DataDirLocked

        try:
            store = await open_store("leveldb", path)
        except DataDirLocked:
            raise Refused(f"--data-dir {path} is in use by another process (a server? then go through it with "
                          "--server URL)") from None  # fmt: skip
        except OSError as exc:
            raise Refused(f"--data-dir {path}: {exc}") from None
        try:
            if not exists:
                print(f"created the data directory {path}", file=sys.stderr)
            recorded = await NodeTables(store).meta.get("embedder")  # what its vectors were made with
            name = args.embedder or (recorded or {}).get("name") or os.environ.get("CORTEX_EMBEDDER") or "best"
            async with open_engine(store=store, config=EngineConfig(embedder=name)) as engine:
                yield engine
        finally:
            await store.close()

    return opened()


# -- progress ------------------------------------------------------------------------------------
class Progress:
    """A tqdm bar on stderr, when stderr is a terminal: the records done (written, replayed,
    skipped or failed) of the estimate, or the percent done when the source has no estimate
    (a JSON document) or for an export; the counts beside it."""

    def __init__(self, *, enabled: bool = True, percent: bool = False) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.percent = percent
        self.bar: Any = None

    def show(self, status: dict[str, Any]) -> None:
        if not self.enabled or not status:
            return
        items = status.get("items") or {}
        by_records = not self.percent and bool(status.get("total"))
        if by_records:  # ``read`` counts a window before it is written: count the records settled
            total, count = status["total"], sum(items.get(name, 0) for name in SETTLED)
            if status.get("status") not in (None, "running"):
                total = count  # the estimate (the file's lines) was an upper bound
        else:
            total, count = 100, round(100 * float(status.get("fraction_complete") or 0.0))
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit=" records" if by_records else "%", file=sys.stderr,
                            dynamic_ncols=True, leave=True)  # fmt: skip
        self.bar.total = max(total, count)
        self.bar.n = count
        if items:
            self.bar.set_postfix_str(", ".join(f"{name} {items.get(name, 0):,}" for name in SHOWN_COUNTS),
                                     refresh=False)  # fmt: skip
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


__all__ = ["CHUNK", "CLIENT_OPTIONS", "Progress", "Refused", "add_parsers", "client", "embedded_engine", "guarded",
           "import_exit_status", "print_import_summary", "run", "server_url", "target_options"]  # fmt: skip
