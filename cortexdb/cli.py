"""``cortexdb`` — the command line.

    cortexdb version
    cortexdb rebuild --data DIR --scope SCOPE [--embedder E]   replay a scope's WAL into fresh
                                                                derived layers, with progress
    cortexdb inspect --data DIR --scope SCOPE [--embedder E]   counts of a scope's records
    cortexdb reembed --data DIR [--embedder hash|minilm|best]  re-embed every stored vector with
                                                                another embedder (EMBEDDER_MISMATCH)

    cortexdb serve [--preset P] [--data DIR] [--backend B] [--dsn DSN] [--bind HOST:PORT] [--issuer-keys DIR]
                   [--jwt-issuer ISS=PEM_OR_JWKS] [--operator ACTOR] [--tenant T]
                   [--tenant-admin ACTOR] [--allow-origin ORIGIN]
                   [--embedder hash|minilm|best] [--http-server cortex|hypercorn]
                   [--token-leeway SECONDS] [--access-log on|off] [--node-id ID] [--advertise URL]
                   [--max-body-bytes N] [--max-head-bytes N] [--head-timeout S]
                   [--max-connections N] [--max-ws-message-bytes N] [--max-blob-bytes N]
                   [--max-import-bytes N] [--scope-memory-budget-mb MB] [--scope-idle-timeout S]
    cortexdb mcp --actor ACTOR [--token TOKEN] [--preset P] [--data DIR] [--backend B] [--dsn DSN] [--tenant T]
                 [--issuer-keys DIR] [--jwt-issuer ISS=PEM_OR_JWKS] [--operator ACTOR]
                 [--tenant-admin ACTOR] [--embedder hash|minilm|best] [--token-leeway SECONDS]
                   the Model Context Protocol over stdio, as ACTOR (docs/mcp.md)
    cortexdb erase --scope SCOPE [--preview] [--url URL] [--actor ACTOR] [--token TOKEN] [--note TEXT]
                   GDPR erasure through a running server: the preview, or the job with a progress bar
    cortexdb import SOURCE FILE --scope TEMPLATE [--server URL | --data-dir DIR] [--ordering O]
                    [--on-error skip|abort] ...   import another system's export (docs/import-export.md)
    cortexdb export --scope SCOPE --format jsonl|mem0|zep|letta [--out FILE] [--server URL | --data-dir DIR]
    cortexdb token keygen --dir DIR [--iss ISS]
    cortexdb token mint --dir DIR --sub ACTOR --tenant T [--caps a,b] [--scopes ...] [--ttl SECONDS]
                        [--max-ttl SECONDS]

``serve`` reads CORTEX_DEPLOYMENT_PRESET, CORTEX_DATA_DIR, CORTEX_BACKEND, CORTEX_BIND,
CORTEX_TENANT, CORTEX_OPERATORS, CORTEX_TENANT_ADMINS, CORTEX_ALLOWED_ORIGINS,
CORTEX_ISSUER_KEYS, CORTEX_EMBEDDER, CORTEX_HTTP_SERVER, CORTEX_TOKEN_LEEWAY,
CORTEX_MAX_BODY_BYTES, CORTEX_MAX_HEAD_BYTES, CORTEX_HEAD_TIMEOUT, CORTEX_MAX_CONNECTIONS,
CORTEX_MAX_WS_MESSAGE_BYTES, CORTEX_MAX_BLOB_BYTES, CORTEX_MAX_IMPORT_BYTES, CORTEX_MAX_IMPORT_SORT_BYTES, CORTEX_MAX_JSON_DEPTH, CORTEX_MAX_EVENT_TEXT_BYTES,
CORTEX_SCOPE_MEMORY_BUDGET_MB, CORTEX_SCOPE_IDLE_TIMEOUT, CORTEX_MEMORY_TRIM_INTERVAL,
CORTEX_LEVELDB_BLOCK_SIZE, CORTEX_LOOP_SLOW_STEP_MS, CORTEX_MAX_DERIVED_PER_EVENT, CORTEX_DERIVATION_WORKERS, CORTEX_ENABLE_EXPERIMENTAL and
CORTEX_ACCESS_LOG; flags win.
``mcp`` reads the same variables (not the HTTP ones) and CORTEX_ACTOR and CORTEX_TOKEN; its
derivation runs in threads unless CORTEX_DERIVATION_WORKERS says otherwise.
``erase`` reads CORTEX_URL (default http://127.0.0.1:8077), CORTEX_ACTOR and CORTEX_TOKEN; it exits
0 when the erasure completed, 1 when it was cancelled or failed.
``import`` and ``export`` exit 0 when the job completed cleanly, 1 when records failed or the job
did not complete, 2 when it could not start (cli_transfer.py, cli_export.py).
``token mint`` refuses (exit 2) capabilities outside the catalog and TTLs the server would refuse.
"""

from __future__ import annotations

import argparse
import os
import sys

import trio

from . import __version__, cli_export, cli_store, cli_transfer
from .errors import CortexError


def _settings(args, **extra):
    """``ServerSettings`` from the environment and the flags ``serve`` and ``mcp`` share."""
    from .server.settings import ServerSettings

    jwt_issuers = []
    for item in args.jwt_issuer or []:
        iss, sep, path = item.rpartition("=")
        if not sep or not iss or not path:
            raise SystemExit("cortexdb: --jwt-issuer takes ISS=PATH (a PEM public key or a JWKS file)")
        jwt_issuers.append((iss, path))
    try:
        settings = ServerSettings.from_env(
            preset=args.preset, data_dir=args.data, backend=args.backend, dsn=args.dsn, tenant=args.tenant,
            issuer_dirs=args.issuer_keys or None, jwt_issuers=jwt_issuers or None,
            operators=tuple(args.operator) if args.operator else None,
            tenant_admins=tuple(args.tenant_admin) if args.tenant_admin else None,
            embedder=args.embedder or os.environ.get("CORTEX_EMBEDDER") or "best",
            token_leeway=args.token_leeway, **extra,
        )  # fmt: skip
        settings.store_location()  # the postgres backend needs a DSN: say so now
    except ValueError as exc:
        raise SystemExit(f"cortexdb: {exc}") from None
    return settings


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"  # what bench/stall.py reads back


def _logging() -> None:
    import logging

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=LOG_FORMAT)


def _serve(args) -> None:
    from .server.serve import run_server

    _logging()
    settings = _settings(
        args, bind=args.bind, node_id=args.node_id, advertise=args.advertise, allowed_origins=tuple(args.allow_origin) if args.allow_origin else None,
        http_server=args.http_server,
        max_body_bytes=args.max_body_bytes, max_head_bytes=args.max_head_bytes, head_timeout=args.head_timeout,
        max_connections=args.max_connections, max_ws_message_bytes=args.max_ws_message_bytes,
        max_blob_bytes=args.max_blob_bytes, max_import_bytes=args.max_import_bytes,
        scope_memory_budget_mb=args.scope_memory_budget_mb, scope_idle_timeout=args.scope_idle_timeout,
        access_log=None if args.access_log is None else args.access_log == "on",
    )  # fmt: skip
    try:
        trio.run(run_server, settings)
    except (OSError, BaseExceptionGroup) as exc:  # noqa: F821 - the address is taken, or not ours
        failure = _bind_failure(exc)
        if failure is None:
            raise
        raise SystemExit(f"cortexdb: cannot serve on {settings.bind}: {failure}; choose another address with "
                         "--bind HOST:PORT or CORTEX_BIND (e.g. 127.0.0.1:8078)") from None  # fmt: skip


def _bind_failure(exc: BaseException) -> str | None:
    """What stops the server binding its address, found inside the HTTP servers' exception groups."""
    import errno

    if isinstance(exc, BaseExceptionGroup):  # noqa: F821
        found = [_bind_failure(inner) for inner in exc.exceptions]
        return next((text for text in found if text), None)
    if not isinstance(exc, OSError):
        return None
    return {errno.EADDRINUSE: "the address is already in use (another server listens there)",
            errno.EACCES: "permission denied (ports below 1024 need privileges)",
            errno.EADDRNOTAVAIL: "no interface of this machine has that address"}.get(
        exc.errno, exc.strerror or str(exc))  # fmt: skip


def _mcp(args) -> None:
    from .server.mcp_api.stdio import run_stdio

    _logging()  # stdout is the protocol's: logs go to stderr
    actor, token = args.actor or os.environ.get("CORTEX_ACTOR"), args.token or os.environ.get("CORTEX_TOKEN")
    if not actor:
        raise SystemExit("cortexdb: mcp needs --actor ACTOR (or CORTEX_ACTOR): the caller the tools run as")
    workers = None if os.environ.get("CORTEX_DERIVATION_WORKERS") else "thread"
    trio.run(run_stdio, _settings(args, derivation_workers=workers), actor, token)


REPLAY_ALL = "lce_0"  # sorts before every lce_ id: the stream replays the job's records so far


def _erase(args) -> int:
    from .client import CortexClient
    from .errors import ConnectionFailed

    try:
        with CortexClient(args.url, actor=args.actor, token=args.token) as client:
            return _erase_through(client, args)
    except ConnectionFailed as exc:
        url = args.url or os.environ.get("CORTEX_URL", "http://127.0.0.1:8077")
        raise SystemExit(f"cortexdb: erase: cannot reach the server at {url}: {exc}") from None


def _erase_through(client, args) -> int:
    if args.preview:
        _print_preview(client.erasures.preview(args.scope, audit_note=args.note).raw)
        return 0
    erasure_id = client.erasures.execute(args.scope, audit_note=args.note).erasure_id
    print(f"erasure {erasure_id} started on {args.scope}", flush=True)
    end = "\r" if sys.stdout.isatty() else "\n"
    for event in client.lifecycle(erasure_id=erasure_id, since_lifecycle_id=REPLAY_ALL):
        if event.event == "erasure_progress":
            print(_progress_bar(event.payload), end=end, flush=True)
        elif event.event == "erasure_complete":
            break
    status = client.erasures.status(erasure_id).raw
    print(_progress_bar({**status["progress"], **status}))
    print(f"erasure {erasure_id}: {status['status']} (scope {status['scope_state']}), audit {status['audit_id']}")
    return 0 if status["status"] == "completed" else 1


def _progress_bar(payload: dict) -> str:
    fraction = float(payload.get("fraction_complete") or 0.0)
    filled = int(round(fraction * 30))
    return (f"[{'#' * filled}{'.' * (30 - filled)}] {fraction * 100:5.1f}% {payload.get('phase', ''):<10} "
            f"deleted {payload.get('deleted_events', 0)} redacted {payload.get('redacted_events', 0)} "
            f"demoted {payload.get('demoted_beliefs', 0)}")


def _print_preview(preview: dict) -> None:
    counts = preview["refcount_breakdown"]
    print(f"preview {preview['preview_id']} of {preview['scope']} (data subjects: "
          f"{', '.join(preview['data_subjects']) or 'none'})")
    print(f"  events to delete {counts['events_to_delete']}, to redact {counts['events_to_redact']}, "
          f"under legal hold {counts['events_under_legal_hold']}")
    print("  records affected: " + ", ".join(f"{k} {v}" for k, v in preview["estimated_affected"].items()))
    for workspace in preview["cross_scope_propagation"]["affected_workspaces"]:
        print(f"  workspace {workspace['scope']}: {workspace['action']}, {workspace['events_referenced']} "
              f"events referenced, co-owners {', '.join(workspace['co_owners']) or 'none'}")
    needs = preview["cross_scope_propagation"]["requires_capability"]
    if needs:
        print(f"  executing needs {needs}")
    print(f"  estimated {preview['estimated_duration_ms']} ms; manifest {preview['manifest_url']} "
          f"(until {preview['expires_at']})")


def _token(args) -> None:
    import json

    from .server import auth

    try:
        if args.token_command == "keygen":
            print(json.dumps(auth.keygen(args.dir, args.iss)))
        else:
            caps = [c for c in args.caps.split(",") if c] if args.caps is not None else None
            print(auth.mint(args.dir, sub=args.sub, tenant=args.tenant, caps=caps,
                            scopes=args.scopes or None, ttl=args.ttl, max_ttl=args.max_ttl))  # fmt: skip
    except (OSError, ValueError, KeyError) as exc:
        raise SystemExit(f"cortexdb: token {args.token_command}: {args.dir}: {exc}") from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cortexdb", description="CortexDB, a memory database for AI agents"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("version", help="print the version")
    openapi = commands.add_parser("openapi", help="print the OpenAPI document (or, --markdown, docs/api.md)")
    openapi.add_argument("--markdown", action="store_true", help="the API reference in Markdown (docs/api.md)")
    cli_store.add_parsers(commands)  # rebuild, inspect, reembed
    cli_transfer.add_parsers(commands)  # import
    cli_export.add_parsers(commands)  # export
    _serve_parser(commands)
    _mcp_parser(commands)
    _erase_parser(commands)
    _token_parser(commands)
    return parser


def _engine_options(command) -> None:
    """The options ``serve`` and ``mcp`` share: the store, the preset, identity and trust."""
    command.add_argument("--preset", help="on_prem_enterprise | cloud_shared_saas | cloud_private | dev_local | a YAML path")
    command.add_argument("--data", help="data directory (default ./data)")
    command.add_argument("--backend", choices=("leveldb", "memory", "postgres"))
    command.add_argument("--dsn", help="the postgres backend's connection string or URI (or CORTEX_PG_DSN)")
    command.add_argument("--tenant", help="the tenant this deployment binds (token aud cortexdb:tenant:T)")
    command.add_argument("--tenant-admin", action="append", metavar="ACTOR",
                         help="a tenant admin: owner of every scope, editor of the tenant policy (repeatable)")
    command.add_argument("--issuer-keys", action="append", metavar="DIR",
                         help="trust a `cortexdb token keygen` directory (repeatable)")
    command.add_argument("--jwt-issuer", action="append", metavar="ISS=PATH",
                         help="trust JWTs from ISS, verified with a PEM key or JWKS file (repeatable)")
    command.add_argument("--operator", action="append", metavar="ACTOR",
                         help="a deployment operator (holds the operator-only capabilities)")
    command.add_argument("--embedder", choices=cli_store.EMBEDDER_CHOICES,
                         help="best (default): all-MiniLM-L6-v2 when installed, else the hash embedder")
    command.add_argument("--token-leeway", metavar="SECONDS",
                         help="clock skew allowed on a token's iat and nbf (default 60, at most 3600)")


def _mcp_parser(commands) -> None:
    mcp = commands.add_parser("mcp", help="serve the Model Context Protocol over stdio (docs/mcp.md)")
    _engine_options(mcp)
    mcp.add_argument("--actor", help="the caller the tools run as, e.g. user:alice (default $CORTEX_ACTOR)")
    mcp.add_argument("--token", help="its bearer token (default $CORTEX_TOKEN); optional only under dev_local")


def _serve_parser(commands) -> None:
    serve = commands.add_parser("serve", help="run the HTTP server (127.0.0.1 by default)")
    _engine_options(serve)
    serve.add_argument("--bind", help="HOST:PORT (default 127.0.0.1:8077)")
    serve.add_argument("--node-id", help="several nodes on one postgres store: this node's id ($CORTEX_NODE_ID; "
                                         "docs/scale-out.md)")
    serve.add_argument("--advertise", metavar="URL", help="the base URL other nodes forward requests to "
                                                          "($CORTEX_ADVERTISE; default http://BIND)")
    serve.add_argument("--allow-origin", action="append", metavar="ORIGIN",
                       help="a browser origin allowed besides loopback ones, e.g. https://app.example (repeatable)")
    serve.add_argument("--http-server", choices=("cortex", "hypercorn"),
                       help="cortex (default): the built-in HTTP/1.1 + WebSocket server; hypercorn: Hypercorn's trio "
                            "worker (a failure on one connection closes that connection only; the head deadline is "
                            "Hypercorn's keep-alive timeout, 5 s at most)")
    serve.add_argument("--access-log", choices=("on", "off"),
                       help="one JSON line per request on stderr (request id, method, path, status, ms; "
                            "never headers, tokens or bodies); default on ($CORTEX_ACCESS_LOG)")
    serve.add_argument("--max-body-bytes", type=int, metavar="N",
                       help="larger request bodies (REST and /mcp) get 413 (default 16 MiB)")
    serve.add_argument("--max-head-bytes", type=int, metavar="N",
                       help="a larger request line + headers gets 431 (default 65536)")
    serve.add_argument("--head-timeout", type=float, metavar="S",
                       help="seconds from a request's first byte to its complete head, else 408 and close (default 10)")
    serve.add_argument("--max-connections", type=int, metavar="N",
                       help="open connections; the ones over it get 503 and are closed (default 1000)")
    serve.add_argument("--max-ws-message-bytes", type=int, metavar="N",
                       help="a larger WebSocket message closes the socket with 1009 (default 1 MiB)")
    serve.add_argument("--max-blob-bytes", type=int, metavar="N",
                       help="a larger blob upload (POST /v1/blobs) gets 413 (default 100 MiB)")
    serve.add_argument("--max-import-bytes", type=int, metavar="N",
                       help="a larger import source (POST /v1/import/*) gets 413 (default 1 GiB)")
    serve.add_argument("--scope-memory-budget-mb", type=float, metavar="MB",
                       help="idle scopes are released, least recently used first, while the open scopes' "
                            "estimated memory exceeds this (default 1024; 0: no budget)")
    serve.add_argument("--scope-idle-timeout", type=float, metavar="S",
                       help="an idle scope is released after this many seconds (default 300)")


def _token_parser(commands) -> None:
    token = commands.add_parser("token", help="the reference PASETO v4.public issuer")
    token_commands = token.add_subparsers(dest="token_command", required=True)
    keygen = token_commands.add_parser("keygen", help="create an Ed25519 issuer key pair")
    keygen.add_argument("--dir", required=True)
    keygen.add_argument("--iss", default="cortexdb-reference-issuer")
    mint = token_commands.add_parser("mint", help="print a signed token")
    mint.add_argument("--dir", required=True)
    mint.add_argument("--sub", required=True, help="actor, e.g. user:alice or service:importer")
    mint.add_argument("--tenant", required=True)
    mint.add_argument("--caps", help="comma-separated capability list that narrows the policy")
    mint.add_argument("--scopes", action="append", help="CAP:SCOPE_PATTERN, e.g. scope.write:org:acme/*")
    mint.add_argument("--ttl", type=int, default=3600, help="seconds (max 24 h; 30 d for service:)")
    mint.add_argument("--max-ttl", type=int, metavar="SECONDS",
                      help="refuse a --ttl above this (a site cap; it cannot exceed the server's maximum)")


def _erase_parser(commands) -> None:
    erase = commands.add_parser("erase", help="GDPR-erase a scope through a running server (§8.6)")
    erase.add_argument("--scope", required=True, help="the scope to erase, e.g. org:acme/user:alice")
    erase.add_argument("--preview", action="store_true", help="only preview: print the plan, change nothing")
    erase.add_argument("--url", help="the server (default $CORTEX_URL or http://127.0.0.1:8077)")
    erase.add_argument("--actor", help="the caller (default $CORTEX_ACTOR)")
    erase.add_argument("--token", help="a bearer token (default $CORTEX_TOKEN)")
    erase.add_argument("--note", help="the audit note, e.g. 'DSR #1234'")


def _openapi(args: argparse.Namespace) -> None:
    import json

    from .server import apidoc, openapi, routes

    if args.markdown:
        sys.stdout.write(apidoc.generate())
    else:
        print(json.dumps(openapi.document(routes.declared()), indent=2, ensure_ascii=False))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "version":
            print(__version__)
        elif args.command == "openapi":
            _openapi(args)
        elif args.command in ("rebuild", "inspect", "reembed"):
            cli_store.run(args)
        elif args.command == "serve":
            _serve(args)
        elif args.command == "mcp":
            _mcp(args)
        elif args.command == "token":
            _token(args)
        elif args.command == "erase":
            return _erase(args)
        elif args.command == "import":
            return cli_transfer.run(args)
        elif args.command == "export":
            return cli_export.run(args)
    except CortexError as error:
        print(f"cortexdb: {error.error_code}: {error.message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
