"""Understanding (reference §8.7, beta): concepts, coverage and relations (partial until
synthesis ships)."""

from __future__ import annotations

from ...engine.policy import capabilities as cap
from ..call import Blueprint, Call
from ..params import query_args, scope_param
from .layers import scoped

api = Blueprint()


@api("GET", "/v1/understanding", tier="beta", summary="Concepts (partial until synthesis ships)",
     query=("scope!", "topic", "depth", "limit", "cursor", "view"))
async def understanding(call: Call):
    args = query_args()
    scope = scope_param(args.get("scope"))
    call.check(cap.UNDERSTANDING_READ, scope)
    return await call.state.engine.understanding(scope)


@api("GET", "/v1/understanding/coverage", tier="beta", summary="Concept coverage (partial)", query=("scope!",))
async def coverage(call: Call):
    return await call.state.engine.understanding_coverage(scoped(call, cap.UNDERSTANDING_READ))


@api("GET", "/v1/understanding/{concept_id}", tier="beta", summary="One concept", query=("scope!",))
async def concept(call: Call, concept_id: str):
    return await call.state.engine.get_concept(scoped(call, cap.UNDERSTANDING_READ), concept_id)


@api("GET", "/v1/understanding/{concept_id}/related", tier="beta", summary="Related concepts",
     query=("scope!", "relation", "depth", "limit", "cursor"))
async def related(call: Call, concept_id: str):
    args = query_args()
    scope = scope_param(args.get("scope"))
    call.check(cap.UNDERSTANDING_READ, scope)
    return await call.state.engine.related_concepts(scope, concept_id)
