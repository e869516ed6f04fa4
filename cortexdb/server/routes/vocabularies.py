"""Vocabularies (reference §7.3.1, §8.14, beta): tenant-wide predicate and relation terms, so only
its admins write them; every member of the tenant reads them (docs/understanding.md)."""

from __future__ import annotations

from ...engine.policy import capabilities as cap
from ..call import Blueprint, Call
from ..declare import STRING, array, obj
from ..responses import json_response

api = Blueprint()
TERM = obj({"id": STRING, "aliases": array(STRING), "description": STRING,
            "datatype": {"enum": ["string", "integer", "number", "boolean", "entity", "timestamp"]},
            "values": {"type": "array"}}, required=("id",))  # fmt: skip
BODY = obj({"name": STRING, "kind": {"enum": ["predicate", "relation"]}, "description": STRING,
            "predicates": array(TERM), "relations": array(TERM), "scopes": array(STRING)})  # fmt: skip
WHY = "a vocabulary applies to the whole tenant's extraction and understanding: only its admins write it"


@api("POST", "/v1/vocabularies", tier="beta", rate="write", status=201, access="tenant",
     summary="Register a predicate or relation vocabulary", body=BODY)  # fmt: skip
async def vocabulary_add(call: Call):
    body = call.json()
    call.check(cap.VOCABULARY_WRITE)
    call.require_admin(cap.VOCABULARY_WRITE, WHY)
    return json_response(await call.state.engine.vocabularies.create(call.principal.tenant, body), 201)


@api("GET", "/v1/vocabularies/{name}", tier="beta", access="tenant", summary="One vocabulary")
async def vocabulary_get(call: Call, name: str):
    call.check(cap.VOCABULARY_READ)
    return await call.state.engine.vocabularies.get(call.principal.tenant, name)


@api("PUT", "/v1/vocabularies/{name}", tier="beta", rate="write", access="tenant",
     summary="Replace a vocabulary (its version goes up)", body=BODY)  # fmt: skip
async def vocabulary_put(call: Call, name: str):
    body = call.json()
    call.check(cap.VOCABULARY_WRITE)
    call.require_admin(cap.VOCABULARY_WRITE, WHY)
    return await call.state.engine.vocabularies.replace(call.principal.tenant, name, body)
