"""Understanding (reference §8.7.7-§8.7.11, beta): concepts, their relations and coverage, and the
admin re-synthesis job (docs/understanding.md)."""

from __future__ import annotations

from ...engine.policy import capabilities as cap
from ..call import Blueprint, Call
from ..declare import BOOLEAN, STRING, array, engine_checked, obj
from ..params import page_limit, query_args, scope_param, to_bool, to_int
from ..responses import json_response

api = Blueprint()


def _read(call: Call) -> tuple[str, dict]:
    args = query_args()
    scope = scope_param(args.pop("scope", None))
    call.check(cap.UNDERSTANDING_READ, scope)
    call.check(cap.SCOPE_READ_LOCAL, scope)
    return scope, args


@api("GET", "/v1/understanding", tier="beta", summary="Concepts synthesized in a scope",
     query=("scope!", "topic", "depth", "limit", "cursor", "as_of", "include_deprecated"))
async def understanding(call: Call):
    scope, args = _read(call)
    filters = {"topic": args.get("topic"), "depth": to_int(args.get("depth"), "depth"),
               "limit": page_limit(args.get("limit"), 50), "cursor": args.get("cursor"),
               "as_of": args.get("as_of")}  # fmt: skip
    if "include_deprecated" in args:
        filters["include_deprecated"] = to_bool(args["include_deprecated"], "include_deprecated")
    return await call.state.engine.understanding(scope, **filters)


@api("GET", "/v1/understanding/coverage", tier="beta", summary="How much of a scope its concepts cover",
     query=("scope!",))
async def coverage(call: Call):
    scope, _ = _read(call)
    return await call.state.engine.understanding_coverage(scope)


@api("GET", "/v1/understanding/{concept_id}", tier="beta", summary="One concept (as of a moment)",
     query=("scope!", "as_of"))
async def concept(call: Call, concept_id: str):
    scope, args = _read(call)
    return await call.state.engine.get_concept(scope, concept_id, as_of=args.get("as_of"))


@api("GET", "/v1/understanding/{concept_id}/related", tier="beta", summary="Concepts related by edges",
     query=("scope!", "relation", "depth", "limit", "include_deprecated"))
async def related(call: Call, concept_id: str):
    scope, args = _read(call)
    filters = {"relation": args.get("relation"), "depth": to_int(args.get("depth"), "depth"),
               "limit": page_limit(args.get("limit"), 50)}  # fmt: skip
    if "include_deprecated" in args:
        filters["include_deprecated"] = to_bool(args["include_deprecated"], "include_deprecated")
    return await call.state.engine.related_concepts(scope, concept_id, **filters)


@api("POST", "/v1/understanding/synthesize", tier="experimental", status=202, rate="write",
     summary="Re-synthesize and score a scope's concepts (an asynchronous job)",
     body=engine_checked(obj({"scope": STRING, "topics": array(STRING, maxItems=50), "force": BOOLEAN,
                              "view": {"enum": ["local", "descend"]}}, required=("scope",))))  # fmt: skip
async def synthesize(call: Call):
    engine = call.state.engine
    spec = engine.concepts.parse(call.json())
    call.primary = cap.UNDERSTANDING_SYNTHESIZE
    call.check(cap.UNDERSTANDING_SYNTHESIZE, spec["scope"])
    call.check(cap.SCOPE_WRITE, spec["scope"])
    started = await engine.concepts.start(call.json(), caller=call.principal.actor, tenant_id=call.principal.tenant)
    return json_response(started, 202)
