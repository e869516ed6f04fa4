"""Imports (reference §8.11) and exports (§8.12), translated onto ``engine.imports`` and
``engine.exports``.

``POST /v1/export`` takes the reference's JSON request (``{scope, format, layers?, as_of?, view?,
destination?}``) and answers 202 with the export's id.  The caller needs
``export.format.<format>`` and ``scope.read.local`` on the scope (``scope.read.descend`` too for
the default ``view: descend``); the job reads each scope below it as that caller (``guard``), so
an export holds only what its caller may read.  ``GET /v1/export/{id}`` (status; a completed
``inline`` export's ``document``), ``GET /v1/export/{id}/download`` (the file, streamed) and
``POST /v1/export/{id}/cancel`` are checked like reads of everything the export covers: the
format's capability and ``scope.read.local`` on its scope and on every scope it includes.
Cancelling another caller's export takes ``policy.administer.scope`` (the scope's owners).

``POST /v1/import/{mem0,zep,letta,openai,jsonl,mcp}`` takes either the source file as the raw
body, streamed to the engine's spool file as it arrives (``?scope_template=`` and the options as
query parameters), or, without ``?scope_template``, the reference's JSON request with the file in
``source.inline`` (a string, or the JSON document itself).  The caller needs
``import.from.<source>`` and ``scope.write`` on the template's fixed scope; the job checks each
scope it writes below it as that caller (``guard``).  A submission takes one token from the
tenant's importer bucket ``service:importer_<tenant>`` (§18.2 item 6: 10x ``rate_limit.write``
unless the tenant policy sets ``rate_limit.importer``), not from the caller's own.
"""

from __future__ import annotations

from typing import Any

import trio
from quart import Response

from ...engine.jsoncodec import encode
from ...engine.policy import capabilities as cap
from ...errors import InvalidBody, PolicyDenied, RateLimited
from ..call import Blueprint, Call, current_request
from ..declare import array, engine_checked, obj, ref
from ..params import query_args
from ..policy import Principal
from ..ratelimit import parse_rate
from ..responses import json_response
from .blobs import body_chunks

api = Blueprint()

SOURCES = {"mem0": cap.IMPORT_FROM_MEM0, "zep": cap.IMPORT_FROM_ZEP, "letta": cap.IMPORT_FROM_LETTA,
           "openai": cap.IMPORT_FROM_OPENAI, "jsonl": cap.IMPORT_FROM_JSONL, "mcp": cap.IMPORT_FROM_MCP}  # fmt: skip
QUERY = ("scope_template", "format", "ordering", "on_error", "observed_at", "user_id", "branches", "include_hidden",
         "agent_name", "agent_id", "group_id", "graph_id", "thread_id", "extract_facts")  # fmt: skip
IMPORTER_SETTING = "rate_limit.importer"
# the JSON request (without ?scope_template=): the file travels in source.inline
IMPORT = engine_checked(obj({
    "scope_template": {"type": "string", "description": "the scopes to write, e.g. org:acme/user:{user_id}"},
    "source": obj({"format": {"type": "string"},
                   "inline": {"description": "the file: a string, or the JSON document itself"},
                   "url": {"type": "null", "description": "not supported: nothing is fetched"}}),
    "format": {"type": "string", "description": "the source's format (detected when absent)"},
    "options": {"type": "object", "description": "ordering, on_error, observed_at, and the template's variables"},
}, required=("scope_template", "source")))  # fmt: skip


def principal_of(call: Call) -> dict[str, Any]:
    p = call.principal
    return {"actor": p.actor, "tenant": p.tenant, "signed": p.signed, "operator": p.operator,
            "caps": list(p.caps) if p.caps is not None else None,
            "scopes": list(p.scopes) if p.scopes is not None else None}  # fmt: skip


def install_guard(state: Any) -> None:
    """The engine's import jobs check each scope they write, and its export jobs each scope they
    read, as the caller who started them."""

    def guard(principal: dict[str, Any], capability: str, scope: str) -> None:
        who = Principal(principal["actor"], principal["tenant"], signed=principal.get("signed", False),
                        caps=tuple(principal["caps"]) if principal.get("caps") is not None else None,
                        scopes=tuple(principal["scopes"]) if principal.get("scopes") is not None else None,
                        operator=principal.get("operator", False))  # fmt: skip
        decision = state.gate.decide(who, capability, scope)
        if not decision.allowed:
            raise PolicyDenied(decision.reason, details={"capability": capability, "denied_by_tier": decision.tier})

    state.engine.imports.set_guard(guard)
    state.engine.exports.set_guard(guard)


def take_importer_token(call: Call) -> None:
    """§18.2 item 6: the tenant's importer bucket pays for a submission, not the caller's."""
    state, tenant = call.state, call.principal.tenant
    defaults = {**state.policy.preset.defaults, **state.policy.tenant_doc(tenant).defaults}
    rate = defaults.get(IMPORTER_SETTING)
    if rate is None and defaults.get("rate_limit.write") is not None:
        rate = f"{10 * parse_rate(defaults['rate_limit.write'])}/s"
    if rate is None:
        return
    verdict = state.limiter.take(f"service:importer_{tenant}", "importer", str(rate))
    if not verdict.allowed:
        raise RateLimited(f"the tenant's importer rate limit of {rate} is exhausted",
                          details={"retry_after": verdict.retry_after, "limit": str(rate)})  # fmt: skip


async def read_request(call: Call) -> tuple[dict[str, Any], Any]:
    """(the import request, the source's bytes or chunks)."""
    args = query_args()
    req = current_request()
    if "scope_template" in args:
        options = {name: args[name] for name in QUERY[2:] if name in args}
        request = {"scope_template": args["scope_template"], "options": options}
        if args.get("format"):
            request["format"] = args["format"]
        return request, body_chunks(req)
    limit, raw = call.state.settings.max_body_bytes, bytearray()
    async for chunk in body_chunks(req):
        raw += chunk
        if len(raw) > limit:
            raise InvalidBody(f"a JSON import request is limited to {limit} bytes: send the file as the raw body "
                              "with ?scope_template= instead")  # fmt: skip
    call.raw = bytes(raw)
    body = dict(call.json())
    source = body.pop("source", None) or {}
    if not isinstance(source, dict):
        raise InvalidBody("source must be an object", details={"field": "source"})
    if source.get("url") is not None:
        raise InvalidBody("fetching source.url is not supported: send the file as the body (or in source.inline)",
                          details={"field": "source.url"})  # fmt: skip
    inline = source.get("inline")
    if inline is None:
        raise InvalidBody("source.inline is required in a JSON import request", details={"field": "source.inline"})
    if source.get("format") is not None:
        body["format"] = source["format"]
    return body, inline.encode() if isinstance(inline, str) else encode(inline)


def import_route(source: str, capability: str) -> None:
    async def start(call: Call):
        request, data = await read_request(call)
        engine = call.state.engine
        root = engine.imports.root(request)
        call.primary = capability
        call.check(capability, root)
        call.check(cap.SCOPE_WRITE, root)
        take_importer_token(call)
        started = await engine.imports.start(source, data, request, caller=call.principal.actor,
                                             tenant_id=call.principal.tenant, principal=principal_of(call),
                                             max_bytes=call.state.settings.max_import_bytes)  # fmt: skip
        return json_response(started, 202)

    start.__name__ = f"import_{source}"
    api("POST", f"/v1/import/{source}", tier="beta", rate=None, status=202, upload=True, query=QUERY, body=IMPORT,
        summary=f"Import a {source} export (an asynchronous job)")(start)  # fmt: skip


for _source, _capability in SOURCES.items():
    import_route(_source, _capability)


async def import_checked(call: Call, import_id: str) -> dict[str, Any]:
    status = await call.state.engine.imports.status(import_id)
    call.check(SOURCES[status["source"]], status["scope"])
    return status


@api("GET", "/v1/import/{import_id}", tier="beta", summary="Status of an import")
async def import_status(call: Call, import_id: str):
    return await import_checked(call, import_id)


@api("POST", "/v1/import/{import_id}/cancel", tier="beta", rate="write", body=obj({}), body_required=False,
     summary="Cancel an import at its next window (what it wrote stays)")  # fmt: skip
async def import_cancel(call: Call, import_id: str):
    if call.raw.strip():
        call.json()  # it takes no field: any is refused
    status = await import_checked(call, import_id)
    call.primary = SOURCES[status["source"]]
    return await call.state.engine.imports.cancel(import_id)


# -- exports (§8.12) ------------------------------------------------------------------------------
EXPORTS = {"jsonl": cap.EXPORT_FORMAT_JSONL, "mem0": cap.EXPORT_FORMAT_MEM0, "zep": cap.EXPORT_FORMAT_ZEP,
           "letta": cap.EXPORT_FORMAT_LETTA}  # fmt: skip
EXPORT = engine_checked(obj({
    "scope": ref("common", "/$defs/scope_path"), "format": {"enum": list(EXPORTS)},
    "layers": array({"enum": ["events", "facts", "beliefs", "episodes"]}, minItems=1),
    "as_of": {"type": "string", "description": "RFC 3339: the records as known then"},
    "view": {"enum": ["descend", "local"], "description": "default descend"},
    "destination": obj({"kind": {"enum": ["file", "inline"], "description": "default file"}}),
}, required=("scope", "format")))  # fmt: skip
CHUNK = 1 << 20  # bytes of an export file per chunk of a download


@api("POST", "/v1/export", tier="beta", status=202, body=EXPORT,
     summary="Export a scope's records as jsonl, mem0, zep or letta (an asynchronous job)")  # fmt: skip
async def export_start(call: Call):
    engine = call.state.engine
    spec = engine.exports.parse(call.json())
    capability = EXPORTS[spec["format"]]
    call.primary = capability
    call.check(capability, spec["scope"])
    call.check(cap.SCOPE_READ_LOCAL, spec["scope"])
    if spec["view"] != "local":
        call.check(cap.scope_read(spec["view"]), spec["scope"])
    started = await engine.exports.start(call.json(), caller=call.principal.actor, tenant_id=call.principal.tenant,
                                         principal=principal_of(call))  # fmt: skip
    return json_response(started, 202)


async def export_checked(call: Call, export_id: str) -> dict[str, Any]:
    """The export's status, once the caller may read everything it covers."""
    status = await call.state.engine.exports.status(export_id, document=False)
    capability, scope = EXPORTS[status["format"]], status["scope"]
    call.primary = capability
    call.check(capability, scope)
    call.check(cap.SCOPE_READ_LOCAL, scope)
    for inner in status["scopes"]:
        if inner != scope and not call.allows(cap.SCOPE_READ_LOCAL, inner):
            call.check(cap.SCOPE_READ_LOCAL, inner)  # refused: recorded and audited
    return status


@api("GET", "/v1/export/{export_id}", tier="beta",
     summary="Status of an export (a completed inline export's document too)")  # fmt: skip
async def export_status(call: Call, export_id: str):
    await export_checked(call, export_id)
    return await call.state.engine.exports.status(export_id)


@api("GET", "/v1/export/{export_id}/download", tier="beta", response_schema="bytes",
     summary="A completed export's file, streamed")  # fmt: skip
async def export_download(call: Call, export_id: str):
    await export_checked(call, export_id)
    exports = call.state.engine.exports
    status, path = await exports.download(export_id)
    fh = await trio.open_file(path, "rb")  # open now: the file may expire while it streams

    async def chunks():
        async with fh:
            while chunk := await fh.read(CHUNK):
                yield chunk

    response = Response(chunks(), content_type=exports.media_type(status))
    response.timeout = None  # type: ignore[attr-defined]  # a large file to a slow client takes its time
    response.headers.update({
        "Content-Length": str(status["size_bytes"]), "X-Content-Type-Options": "nosniff",
        "Content-Disposition": f'attachment; filename="{export_id}.{status["extension"]}"',
        "Cache-Control": "private, max-age=0",
    })  # fmt: skip
    return response


@api("POST", "/v1/export/{export_id}/cancel", tier="beta", rate="write", body=obj({}), body_required=False,
     summary="Cancel an export (its partial file is removed)")  # fmt: skip
async def export_cancel(call: Call, export_id: str):
    if call.raw.strip():
        call.json()  # it takes no field: any is refused
    status = await export_checked(call, export_id)
    if status["caller"] != call.principal.actor:  # someone else's export: the scope's owners only
        call.check(cap.POLICY_ADMINISTER_SCOPE, status["scope"])
    return await call.state.engine.exports.cancel(export_id)
