"""Layer reads (reference §8.7): events, episodes, facts and beliefs — lists (one scope, or a
holistic / descend view over the engine's one traversal) and single records by id."""

from __future__ import annotations

from typing import Any

from ...engine.policy import capabilities as cap
from ..call import Blueprint, Call
from ..params import (
    COMMON_PARAMS,
    LAYER_PARAMS,
    decode_cursor,
    encode_cursor,
    layer_filters,
    page_limit,
    query_args,
    required,
    scope_param,
    view_param,
)

api = Blueprint()
RECORD = ("scope!", "as_of")  # one layer record: its scope, and the version held at as_of


def listing(layer: str) -> tuple[str, ...]:
    """The query parameters of a layer's list."""
    return ("scope!", *COMMON_PARAMS[1:], *LAYER_PARAMS[layer])


def scoped(call: Call, capability: str) -> str:
    """The ``?scope=`` of a single-record read (the only parameter it takes), checked."""
    scope = scope_param(query_args().get("scope"))
    call.check(capability, scope)
    return scope


def record_read(call: Call) -> tuple[str, str | None]:
    """The ``?scope=`` of one layer record, checked, and its ``?as_of=`` (the version held then;
    docs/time.md): the only parameters it takes."""
    args = query_args()
    scope = scope_param(args.get("scope"))
    call.check(cap.SCOPE_READ_LOCAL, scope)
    return scope, args.get("as_of")


async def layer_page(call: Call, layer: str, fetch) -> dict[str, Any]:
    """One page of a layer: ``fetch(scope, limit=, cursor=, **filters)`` on the scope, or on each
    scope of the view in turn (the start scope is checked — a refusal fails the request —, the
    rest is the engine's traversal, which skips the scopes the caller may not read)."""
    args = query_args()
    scope = scope_param(args.pop("scope", None))
    view = args.pop("view", "local")
    limit = page_limit(args.pop("limit", None), 50)
    cursor = args.pop("cursor", None)
    filters = layer_filters(args)
    view_param(view)
    call.check(cap.SCOPE_READ_LOCAL, scope)
    if view != "local":
        call.check(cap.scope_read(view), scope)
    walk = await call.state.engine.traverse(scope, view, caller=call.principal.actor)
    if view == "local":
        return await fetch(scope, limit=limit, cursor=cursor, **filters)
    scopes = list(walk.scopes)
    position = decode_cursor(cursor) if cursor else {"i": 0, "c": None}
    index, inner = int(position.get("i", 0)), position.get("c")
    items: list[dict[str, Any]] = []
    while index < len(scopes) and len(items) < limit:
        page = await fetch(scopes[index], limit=limit - len(items), cursor=inner, **filters)
        for item in page["items"]:
            item.setdefault("scope", scopes[index])
        items.extend(page["items"])
        if page.get("has_more"):
            inner = page.get("next_cursor")
            break
        index, inner = index + 1, None
    more = index < len(scopes)
    traversed = [{"scope": s} for s in scopes] + list(walk.denied)
    return {"items": items, "next_cursor": encode_cursor({"i": index, "c": inner}) if more else None,
            "has_more": more, "view": view, "scopes_traversed": traversed}  # fmt: skip


@api("GET", "/v1/events", summary="List events", response_schema="page:event", query=listing("events"))
async def events(call: Call):
    return await layer_page(call, "events", call.state.engine.events)


@api("GET", "/v1/events/{event_id}", summary="One event", response_schema="event")
async def event(call: Call, event_id: str):
    engine = call.state.engine
    scope = await engine.home_scope(event_id)
    call.check(cap.SCOPE_READ_LOCAL, scope)
    return await engine.get_event(scope, event_id)


@api("GET", "/v1/episodes", summary="List episodes", response_schema="page:episode", query=listing("episodes"))
async def episodes(call: Call):
    return await layer_page(call, "episodes", call.state.engine.episodes)


@api("GET", "/v1/episodes/{episode_id}", summary="One episode", response_schema="episode", query=RECORD)
async def episode(call: Call, episode_id: str):
    scope, as_of = record_read(call)
    return await call.state.engine.get_episode(scope, episode_id, as_of=as_of)


@api("GET", "/v1/facts", summary="List facts", response_schema="page:fact", query=listing("facts"))
async def facts(call: Call):
    engine, tenant = call.state.engine, call.principal.tenant
    return await layer_page(call, "facts", lambda s, **kw: engine.facts(s, tenant_id=tenant, **kw))


@api("GET", "/v1/facts/timeline", summary="The supersession chain of (subject, predicate)",
     query=("scope!", "subject!", "predicate!"))
async def facts_timeline(call: Call):
    args = query_args()
    scope = scope_param(args.get("scope"))
    call.check(cap.SCOPE_READ_LOCAL, scope)
    return await call.state.engine.facts_timeline(scope, subject=required(args, "subject"),
                                                  predicate=required(args, "predicate"),
                                                  tenant_id=call.principal.tenant)  # fmt: skip


@api("GET", "/v1/facts/{fact_id}/supports", summary="Every event supporting a fact (paged)",
     response_schema="page", query=("scope!", "limit", "cursor"))
async def fact_supports(call: Call, fact_id: str):
    args = query_args()
    scope = scope_param(args.get("scope"))
    call.check(cap.SCOPE_READ_LOCAL, scope)
    return await call.state.engine.fact_supports(scope, fact_id, limit=page_limit(args.get("limit")),
                                                 cursor=args.get("cursor"))  # fmt: skip


@api("GET", "/v1/facts/{fact_id}", summary="One fact", response_schema="fact", query=RECORD)
async def fact(call: Call, fact_id: str):
    scope, as_of = record_read(call)
    return await call.state.engine.get_fact(scope, fact_id, as_of=as_of)


@api("GET", "/v1/beliefs", tier="beta", summary="List beliefs", response_schema="page:belief",
     query=listing("beliefs"))
async def beliefs(call: Call):
    engine, tenant = call.state.engine, call.principal.tenant
    return await layer_page(call, "beliefs", lambda s, **kw: engine.beliefs(s, tenant_id=tenant, **kw))


@api("GET", "/v1/beliefs/why", tier="beta", summary="Why a belief is held: its support graph",
     query=("scope", "belief_id!", "as_of"))
async def beliefs_why(call: Call):
    """``?belief_id=`` alone finds the belief's scope (the permalink ``why_url``); the caller must
    be able to read that scope like any other (403 otherwise, whether or not it exists there)."""
    args = query_args()
    engine, belief_id = call.state.engine, required(args, "belief_id")
    scope = scope_param(args["scope"]) if "scope" in args else await engine.home_scope(belief_id)
    call.check(cap.SCOPE_READ_LOCAL, scope)
    return await engine.beliefs_why(scope, belief_id, as_of=args.get("as_of"))


@api("GET", "/v1/beliefs/{belief_id}", tier="beta", summary="One belief", response_schema="belief",
     query=RECORD)
async def belief(call: Call, belief_id: str):
    scope, as_of = record_read(call)
    return await call.state.engine.get_belief(scope, belief_id, as_of=as_of)
