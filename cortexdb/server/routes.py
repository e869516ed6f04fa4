"""The HTTP endpoints (reference §8): thin translations onto the engine, the registry, the
policy engine and the audit log.  Every capability check goes through ``call.check`` so it is
attributed (403 body, ``X-Cortex-Policy``) and audited."""

from __future__ import annotations

from typing import Any

from .. import __version__
from ..engine import cursor as cursors
from ..engine.policy import capabilities as cap
from ..engine.scopes import canonical_scope
from ..engine.stages import Stage
from ..engine.temporal import parse_rfc3339
from ..errors import InvalidBody, InvalidQuery, MissingRequiredField, NotFound, NotImplementedYet
from .app import Call, ServerState, current_request, json_response, scope_param
from .gate import CLAIM

TEMPORAL_PARAMS = ("as_of", "valid_during", "recorded_during", "natural", "reference_date")
COMMON_PARAMS = ("scope", "view", "limit", "cursor")
LAYER_PARAMS: dict[str, tuple[str, ...]] = {
    "events": ("since", "until", "recorded_since", "recorded_until", "observed_actor", "modality",
               "include_excluded", *TEMPORAL_PARAMS),
    "episodes": ("actor", "overlapping", "with_causal_chain", *TEMPORAL_PARAMS),
    "facts": ("subject", "predicate", "min_confidence", "include_superseded", *TEMPORAL_PARAMS),
    "beliefs": ("about", "min_confidence", "include_deprecated", *TEMPORAL_PARAMS),
}  # fmt: skip
BOOL_PARAMS = ("include_excluded", "include_superseded", "include_deprecated", "with_causal_chain")





def query_args(allowed: tuple[str, ...]) -> dict[str, str]:
    args = {}
    request = current_request()
    for name in request.args:
        if name not in allowed:
            raise InvalidQuery(f"unknown query parameter {name!r}",
                                    details={"field": name, "allowed": sorted(allowed)})  # fmt: skip
        values = request.args.getlist(name)
        if len(values) > 1:
            raise InvalidQuery(f"query parameter {name!r} given more than once", details={"field": name})
        args[name] = values[0]
    return args


def required(args: dict[str, Any], name: str) -> str:
    value = args.get(name)
    if value in (None, ""):
        raise MissingRequiredField(f"{name} is required", details={"field": name})
    return value


def to_int(value: str | None, name: str, default: int | None = None) -> int | None:
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise InvalidQuery(f"{name} must be an integer", details={"field": name}) from None


def page_limit(value: str | None, default: int = 50) -> int:
    """A list endpoint's ``limit`` (§6.4): default 50 (100 for logs), at most 1000."""
    limit = to_int(value, "limit", default)
    if not 1 <= limit <= 1000:
        raise InvalidQuery("limit must be between 1 and 1000", details={"field": "limit"})
    return limit


def to_bool(value: str, name: str) -> bool:
    if value.lower() in ("true", "1"):
        return True
    if value.lower() in ("false", "0"):
        return False
    raise InvalidQuery(f"{name} must be true or false", details={"field": name})


def to_float(value: str, name: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise InvalidQuery(f"{name} must be a number", details={"field": name}) from None


def encode_cursor(data: dict[str, Any]) -> str:
    return cursors.encode(data)


CURSOR_FIELDS = {"i": lambda v: type(v) is int and v >= 0, "c": lambda v: v is None or isinstance(v, str),
                 "after": lambda v: isinstance(v, str)}  # fmt: skip


def decode_cursor(text: str) -> dict[str, Any]:
    """A cursor of a multi-scope view or of a server listing (``{"i", "c"}`` / ``{"after"}``)."""
    data = cursors.decode(text, max_depth=2)
    if not isinstance(data, dict) or not all(k in CURSOR_FIELDS and CURSOR_FIELDS[k](v) for k, v in data.items()):
        raise InvalidQuery("cursor is not one this server issued", details={"field": "cursor"})
    return data


def require_admin(call: Call, capability: str, reason: str) -> None:
    """Tenant-wide administration: the tenant's admins and the deployment's operators only."""
    if not call.state.gate.is_admin(call.principal):
        call.deny(capability, "tenant", reason)


def scoped(call: Call, capability: str) -> str:
    """The ``?scope=`` of a single-record read (the only parameter it takes), checked."""
    scope = scope_param(query_args(("scope",)).get("scope"))
    call.check(capability, scope)
    return scope


def install(api, state: ServerState) -> None:  # noqa: C901 - one place lists every route
    engine = state.engine

    async def traversal(call: Call, scope: str, view: str):
        """The start scope is checked (a refusal fails the request); the rest of the view is the
        engine's one traversal, which skips the scopes the caller may not read."""
        if view not in ("local", "holistic", "descend"):
            raise InvalidQuery("view must be local, holistic or descend", details={"field": "view"})
        call.check(cap.SCOPE_READ_LOCAL, scope)
        if view != "local":
            call.check(cap.scope_read(view), scope)
        return await engine.traverse(scope, view, caller=call.principal.actor)

    async def layer_page(call: Call, layer: str, fetch) -> dict[str, Any]:
        args = query_args(COMMON_PARAMS + LAYER_PARAMS[layer])
        scope = scope_param(args.pop("scope", None))
        view = args.pop("view", "local")
        limit = page_limit(args.pop("limit", None), 50)
        cursor = args.pop("cursor", None)
        filters: dict[str, Any] = {}
        for name, value in args.items():
            if name in BOOL_PARAMS:
                filters[name] = to_bool(value, name)
            elif name == "min_confidence":
                filters[name] = to_float(value, name)
            elif name == "overlapping":
                start, sep, end = value.partition("..")
                if not sep:
                    raise InvalidQuery("overlapping must be FROM..TO", details={"field": name})
                filters["overlapping_from"] = start or None
                filters["overlapping_to"] = end or None
            else:
                filters[name] = value
        walk = await traversal(call, scope, view)
        scopes = list(walk.scopes)
        if view == "local":
            page = await fetch(scope, limit=limit, cursor=cursor, **filters)
            return page
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

    # -- experience (§8.1, §8.2) -----------------------------------------------------------------
    @api("POST", "/v1/experience", rate="write", status=202, summary="Capture one experience",
         request_schema="experience_envelope", response_schema="experience_result")
    async def experience(call: Call):
        body = call.json()
        header_key = current_request().headers.get("X-Cortex-Idempotency-Key")
        if header_key and "idempotency_key" not in body:
            body = {**body, "idempotency_key": header_key}
        wait = query_args(("wait",)).get("wait")
        scope = body.get("scope")
        if isinstance(scope, str):
            scope = canonical_scope(scope)
            call.primary = cap.SCOPE_WRITE
            call.check(cap.SCOPE_WRITE, scope)
            governing = state.registry.write_capability(call.principal, scope)
            if governing == cap.SCOPE_WRITE_ELEVATED:
                call.primary = governing
                call.check(governing, scope)
        result = await engine.experience(body, caller=call.principal.actor, tenant_id=call.principal.tenant,
                                         wait=wait)  # fmt: skip
        call.event_id = result.event_id
        await state.registry.note_write(result.scope)
        if result.replay:
            call.headers["X-Cortex-Replay"] = "true"
        return json_response(result.to_wire(), 200 if wait in (Stage.INDEXED, Stage.CONSOLIDATED) else 202)

    @api("POST", "/v1/experience/bulk", rate="write", status=202, summary="Capture up to 1000 experiences")
    async def experience_bulk(call: Call):
        body = call.json()
        scope = body.get("scope")
        if isinstance(scope, str):
            scope = canonical_scope(scope)
            call.primary = cap.SCOPE_WRITE
            call.check(cap.SCOPE_WRITE, scope)
            governing = state.registry.write_capability(call.principal, scope)
            if governing == cap.SCOPE_WRITE_ELEVATED:
                call.primary = governing
                call.check(governing, scope)
        result = await engine.experience_bulk(body, caller=call.principal.actor,
                                              tenant_id=call.principal.tenant)  # fmt: skip
        await state.registry.note_write(result.scope)
        if result.accepted == 0 and result.replayed:
            call.headers["X-Cortex-Replay"] = "true"
        return json_response(result.to_wire(), 202)

    @api("GET", "/v1/experience/by-idempotency-key/{key}", summary="Find a write by its idempotency key")
    async def by_key(call: Call, key: str):
        found = await engine.experience_by_idempotency_key(key, caller=call.principal.actor,
                                                           tenant_id=call.principal.tenant)  # fmt: skip
        call.check(cap.SCOPE_READ_LOCAL, found["scope"])
        return found

    # -- recall (§8.3) ---------------------------------------------------------------------------
    @api("POST", "/v1/recall", summary="Recall a stratified pack (stream=true for SSE)",
         response_schema="stratified_pack")
    async def recall(call: Call):
        from .streams import sse_response

        body = call.json()
        diagnostics = body.get("diagnostics")
        scope = body.get("scope")
        if isinstance(scope, str):
            scope = canonical_scope(scope)
            call.primary = cap.SCOPE_READ_LOCAL
            view = body.get("view") or "holistic"
            traversal_mode = body.get("traversal") or (view if view in ("local", "holistic", "descend") else "holistic")
            call.check(cap.SCOPE_READ_LOCAL, scope)
            if traversal_mode in ("holistic", "descend"):
                call.check(cap.scope_read(traversal_mode), scope)
            if diagnostics in (None, "summary", "full") and not call.allows(cap.DIAGNOSTICS_READ, scope):
                # diagnostics are stripped, not refused, for callers without diagnostics.read
                # (§5.2); an explicit request is told so
                if diagnostics is not None:
                    call.headers["X-Cortex-Warning"] = "diagnostics_stripped"
                body = {**body, "diagnostics": "none"}
        caller, tenant = call.principal.actor, call.principal.tenant
        if body.get("stream") is True:
            stream = engine.recall_stream(body, caller=caller, tenant_id=tenant)
            first = await stream.__anext__()  # validation errors surface as an envelope, not mid-stream

            async def frames():
                yield first
                async for item in stream:
                    yield item

            return sse_response(state, ((None, name, data) async for name, data in frames()))
        return await engine.recall(body, caller=caller, tenant_id=tenant)

    # -- layer reads (§8.7) ----------------------------------------------------------------------
    @api("GET", "/v1/events", summary="List events", response_schema="page:event")
    async def events(call: Call):
        return await layer_page(call, "events", engine.events)

    @api("GET", "/v1/events/{event_id}", summary="One event", response_schema="event")
    async def event(call: Call, event_id: str):
        scope = await _home(event_id)
        call.check(cap.SCOPE_READ_LOCAL, scope)
        return await engine.get_event(scope, event_id)

    async def _home(event_id: str) -> str:
        return await engine.home_scope(event_id)

    @api("GET", "/v1/episodes", summary="List episodes", response_schema="page:episode")
    async def episodes(call: Call):
        return await layer_page(call, "episodes", engine.episodes)

    @api("GET", "/v1/episodes/{episode_id}", summary="One episode", response_schema="episode")
    async def episode(call: Call, episode_id: str):
        scope = scoped(call, cap.SCOPE_READ_LOCAL)
        return await engine.get_episode(scope, episode_id)

    @api("GET", "/v1/facts", summary="List facts", response_schema="page:fact")
    async def facts(call: Call):
        return await layer_page(call, "facts", lambda s, **kw: engine.facts(s, tenant_id=call.principal.tenant, **kw))

    @api("GET", "/v1/facts/timeline", summary="The supersession chain of (subject, predicate)")
    async def facts_timeline(call: Call):
        args = query_args(("scope", "subject", "predicate"))
        scope = scope_param(args.get("scope"))
        call.check(cap.SCOPE_READ_LOCAL, scope)
        return await engine.facts_timeline(scope, subject=required(args, "subject"),
                                           predicate=required(args, "predicate"),
                                           tenant_id=call.principal.tenant)  # fmt: skip

    @api("GET", "/v1/facts/{fact_id}/supports", summary="Every event supporting a fact (paged)",
         response_schema="page")
    async def fact_supports(call: Call, fact_id: str):
        args = query_args(("scope", "limit", "cursor"))
        scope = scope_param(args.get("scope"))
        call.check(cap.SCOPE_READ_LOCAL, scope)
        return await engine.fact_supports(scope, fact_id, limit=page_limit(args.get("limit")),
                                          cursor=args.get("cursor"))  # fmt: skip

    @api("GET", "/v1/facts/{fact_id}", summary="One fact", response_schema="fact")
    async def fact(call: Call, fact_id: str):
        scope = scoped(call, cap.SCOPE_READ_LOCAL)
        return await engine.get_fact(scope, fact_id)

    @api("GET", "/v1/beliefs", tier="beta", summary="List beliefs", response_schema="page:belief")
    async def beliefs(call: Call):
        return await layer_page(call, "beliefs", lambda s, **kw: engine.beliefs(s, tenant_id=call.principal.tenant, **kw))

    @api("GET", "/v1/beliefs/why", tier="beta", summary="Why a belief is held: its support graph")
    async def beliefs_why(call: Call):
        args = query_args(("scope", "belief_id"))
        scope = scope_param(args.get("scope"))
        call.check(cap.SCOPE_READ_LOCAL, scope)
        return await engine.beliefs_why(scope, required(args, "belief_id"))

    @api("GET", "/v1/beliefs/{belief_id}", tier="beta", summary="One belief", response_schema="belief")
    async def belief(call: Call, belief_id: str):
        scope = scoped(call, cap.SCOPE_READ_LOCAL)
        return await engine.get_belief(scope, belief_id)

    @api("GET", "/v1/understanding", tier="beta", summary="Concepts (partial until synthesis ships)")
    async def understanding(call: Call):
        args = query_args(("scope", "topic", "depth", "limit", "cursor", "view"))
        scope = scope_param(args.get("scope"))
        call.check(cap.UNDERSTANDING_READ, scope)
        return await engine.understanding(scope)

    @api("GET", "/v1/understanding/coverage", tier="beta", summary="Concept coverage (partial)")
    async def coverage(call: Call):
        scope = scoped(call, cap.UNDERSTANDING_READ)
        return await engine.understanding_coverage(scope)

    @api("GET", "/v1/understanding/{concept_id}", tier="beta", summary="One concept")
    async def concept(call: Call, concept_id: str):
        scope = scoped(call, cap.UNDERSTANDING_READ)
        return await engine.get_concept(scope, concept_id)

    @api("GET", "/v1/understanding/{concept_id}/related", tier="beta", summary="Related concepts")
    async def related(call: Call, concept_id: str):
        args = query_args(("scope", "relation", "depth", "limit", "cursor"))
        scope = scope_param(args.get("scope"))
        call.check(cap.UNDERSTANDING_READ, scope)
        return await engine.related_concepts(scope, concept_id)

    # -- temporal phrases (§8.17) ----------------------------------------------------------------
    @api("POST", "/v1/temporal/phrases", tier="beta", rate="write", status=201, access="tenant",
         summary="Register a custom temporal phrase")
    async def phrase_add(call: Call):
        body = call.json()
        call.check(cap.TEMPORAL_PHRASES_WRITE)
        require_admin(call, cap.TEMPORAL_PHRASES_WRITE, "custom phrases apply to the whole tenant: "
                      "only its admins register them (§8.17.1)")
        for field in ("name", "pattern", "resolves_to"):
            if field not in body:
                raise MissingRequiredField(f"{field} is required", details={"field": field})
        return json_response(await engine.register_temporal_phrase(
            body["name"], body["pattern"], body["resolves_to"], tenant_id=call.principal.tenant), 201)

    @api("GET", "/v1/temporal/phrases", tier="beta", access="tenant", summary="List custom temporal phrases")
    async def phrase_list(call: Call):
        call.check(cap.TEMPORAL_PHRASES_READ)
        return {"items": await engine.temporal_phrases(tenant_id=call.principal.tenant)}

    @api("DELETE", "/v1/temporal/phrases/{name}", tier="beta", rate="write", access="tenant",
         summary="Delete a custom temporal phrase")
    async def phrase_delete(call: Call, name: str):
        call.check(cap.TEMPORAL_PHRASES_WRITE)
        require_admin(call, cap.TEMPORAL_PHRASES_WRITE, "custom phrases apply to the whole tenant: "
                      "only its admins delete them (§8.17.3)")
        await engine.delete_temporal_phrase(name, tenant_id=call.principal.tenant)
        return json_response({"name": name, "deleted": True})

    # -- scopes (§8.8) ---------------------------------------------------------------------------
    @api("POST", "/v1/scopes", rate="write", status=201, summary="Register a scope",
         response_schema="scope")
    async def scope_register(call: Call):
        body = call.json()
        path = scope_param(body.get("path"), "path")
        call.primary = cap.POLICY_ADMINISTER_SCOPE
        call.check(cap.POLICY_ADMINISTER_SCOPE, path, access=CLAIM)  # a claimant may register it
        record = await state.registry.register(call.principal, body, engine.clock.now(), call.check)
        return json_response(record, 201)

    @api("GET", "/v1/scopes", summary="Look up a scope by ?path= or list by ?prefix=", access="filtered")
    async def scope_get(call: Call):
        args = query_args(("path", "prefix", "auto_provisioned", "limit", "cursor"))
        if "path" in args:
            path = scope_param(args["path"], "path")
            call.check(cap.SCOPE_READ_LOCAL, path)
            record = await state.registry.get(path)
            if record is None:
                raise NotFound(f"scope {path} has never been written to or registered", details={"path": path})
            from ..engine.model import to_wire

            wire = to_wire(record)
            wire["natural_level_of_caller"] = state.registry.natural_level(call.principal.actor)
            return wire
        prefix = args.get("prefix", "")
        limit = page_limit(args.get("limit"), 50)
        auto = to_bool(args["auto_provisioned"], "auto_provisioned") if "auto_provisioned" in args else None
        after = decode_cursor(args["cursor"]).get("after") if "cursor" in args else None
        call.check(cap.SCOPE_READ_LOCAL)  # the listing itself; each item is filtered by its own path
        items, more = await state.registry.list(prefix=prefix, auto_provisioned=auto, after=after, limit=limit,
                                                keep=lambda path: call.allows(cap.SCOPE_READ_LOCAL, path))  # fmt: skip
        return {"items": items, "has_more": more,
                "next_cursor": encode_cursor({"after": items[-1]["path"]}) if more and items else None}  # fmt: skip

    @api("PUT", "/v1/scopes/members", rate="write", summary="Replace a scope's member list (atomic diff)")
    async def scope_members(call: Call):
        path = scope_param(query_args(("path",)).get("path"), "path")
        call.check(cap.POLICY_ADMINISTER_SCOPE, path)  # owners only (the gate's membership rule)
        return await state.registry.set_members(call.principal, path, call.json())

    @api("DELETE", "/v1/scopes", rate="write", summary="Delete a scope registration (?records=keep)")
    async def scope_delete(call: Call):
        args = query_args(("path", "records"))
        path = scope_param(args.get("path"), "path")
        call.check(cap.POLICY_ADMINISTER_SCOPE, path)  # owners only
        return await state.registry.delete(path, args.get("records", "keep"), call.check)

    @api("POST", "/v1/scopes/prune", tier="experimental", rate="write", access="tenant",
         summary="Remove idle auto-provisioned scopes (dry_run first)")
    async def scope_prune(call: Call):
        body = call.json()
        call.check(cap.POLICY_ADMINISTER_TENANT)
        require_admin(call, cap.POLICY_ADMINISTER_TENANT, "only the tenant's admins may prune its scopes")
        dry_run = body.get("dry_run", True)
        if not isinstance(dry_run, bool):
            raise InvalidBody("dry_run must be true or false", details={"field": "dry_run"})
        if not isinstance(body.get("prefix", ""), str):
            raise InvalidBody("prefix must be a string", details={"field": "prefix"})
        return await state.registry.prune(older_than=body.get("older_than", "P90D"), dry_run=dry_run,
                                          now=engine.clock.now(), prefix=body.get("prefix", ""))  # fmt: skip

    # -- lifecycle (§8.9) ------------------------------------------------------------------------
    @api("GET", "/v1/lifecycle/event/{lce_id}", summary="One lifecycle event")
    async def lifecycle_event(call: Call, lce_id: str):
        record = await engine.lifecycle_event(lce_id)
        scope = record.get("scope")
        if scope is None:  # node-level records (none are persisted today): admins only
            require_admin(call, cap.LIFECYCLE_SUBSCRIBE, "this lifecycle record belongs to no scope")
        call.check(cap.LIFECYCLE_SUBSCRIBE, scope)
        call.check(cap.SCOPE_READ_LOCAL, scope)
        return record

    @api("GET", "/v1/lifecycle/memory-event/{event_id}", summary="Aggregated stages of one memory event")
    async def memory_event(call: Call, event_id: str):
        scope = await _home(event_id)
        call.check(cap.SCOPE_READ_LOCAL, scope)
        view = await engine.memory_event(event_id, scope=scope)
        return {k: v for k, v in view.items() if k not in ("derives_by_stage", "elapsed_ms")}

    @api("POST", "/v1/lifecycle/memory-event/{event_id}/cancel", rate="write",
         summary="Cancel the queued stages of a captured event")
    async def cancel(call: Call, event_id: str):
        body = call.json() if call.raw.strip() else {}
        note = body.get("audit_note")
        if note is not None and not isinstance(note, str):
            raise InvalidBody("audit_note must be a string", details={"field": "audit_note"})
        call.primary = cap.SCOPE_WRITE
        result = dict(await engine.cancel(event_id, caller=call.principal.actor))
        call.event_id = event_id
        if note:
            result["audit_note"] = note[:500]
        result["audit_id"] = call.audit_id  # the row this call writes (§8.9.5)
        return result

    @api("GET", "/v1/lifecycle", summary="Catch-up list of lifecycle events (lce order)", access="filtered")
    async def lifecycle_list(call: Call):
        args = query_args(("scope", "since_lifecycle_id", "event_id", "batch_id", "job_id", "events",
                           "limit", "cursor"))  # fmt: skip
        scope = scope_param(args["scope"]) if args.get("scope") else None
        call.check(cap.LIFECYCLE_SUBSCRIBE, scope)
        if scope:
            call.check(cap.SCOPE_READ_LOCAL, scope)
        limit = page_limit(args.get("limit"), 100)
        after = decode_cursor(args["cursor"]).get("after") if args.get("cursor") else args.get("since_lifecycle_id")
        filters = {k: args[k] for k in ("event_id", "batch_id", "job_id", "events") if args.get(k)}
        rows = await engine.lifecycle(since_lifecycle_id=after, limit=limit + 1, scope=scope, **filters)
        more = len(rows) > limit
        rows = [r for r in rows[:limit]]
        admin = state.gate.is_admin(call.principal)
        visible = [r for r in rows
                   if (call.allows(cap.SCOPE_READ_LOCAL, r["scope"]) if r.get("scope") else admin)]
        return {"items": visible, "has_more": more,
                "next_cursor": encode_cursor({"after": rows[-1]["lifecycle_id"]}) if more else None}  # fmt: skip

    # -- auth (§8.16) ----------------------------------------------------------------------------
    @api("POST", "/v1/auth/revoke", rate="write", status=204, access="tenant", summary="Revoke a token by jti")
    async def revoke(call: Call):
        body = call.json()
        jti = body.get("jti")
        if not isinstance(jti, str) or not jti:
            raise MissingRequiredField("jti is required", details={"field": "jti"})
        call.check(cap.AUTH_REVOKE)
        own = call.principal.jti == jti
        if not own and not call.principal.operator:
            from ..errors import PolicyDenied

            raise PolicyDenied("only an operator may revoke another caller's token",
                               details={"capability": cap.AUTH_REVOKE, "denied_by_tier": "deployment"})  # fmt: skip
        from .auth import MAX_SERVICE_TTL, is_numeric_date

        latest = state.now_unix() + MAX_SERVICE_TTL + state.settings.token_leeway  # no token outlives it
        exp = body.get("exp")
        if exp is not None and not (is_numeric_date(exp) and exp <= latest):
            raise InvalidBody("exp must be a finite Unix time no later than the longest token lifetime from now",
                              details={"field": "exp", "max": int(latest)})  # fmt: skip
        if own:
            exp = call.principal.claims["exp"]
        if exp is None:
            exp = latest  # unknown expiry: keep it as long as a token can live
        await state.revocations.revoke(jti, int(exp), body.get("reason"))
        from quart import Response

        return Response(b"", status=204)

    @api("GET", "/v1/auth/whoami", access="tenant", summary="The caller's identity and effective capabilities")
    async def whoami(call: Call):
        p = call.principal
        effective = state.policy.effective(p, None)
        return {"caller": p.actor, "tenant_id": p.tenant, "deployment_preset": state.policy.preset.name,
                "signed": p.signed, "operator": p.operator,
                "token": ({k: p.claims[k] for k in ("jti", "iss", "exp")} if p.signed else None),
                "effective_capabilities": effective["allowed"],
                "natural_level": state.registry.natural_level(p.actor)}  # fmt: skip

    # -- policy (§5.5): each tier has owners ------------------------------------------------------
    @api("GET", "/v1/policy/effective", summary="Effective capabilities after stacking the tiers",
         response_schema="capability_set", access="tenant")
    async def policy_effective(call: Call):
        args = query_args(("actor", "scope"))
        scope = scope_param(args["scope"]) if args.get("scope") else None
        principal = call.principal
        actor = args.get("actor") or principal.actor
        if actor != principal.actor:  # someone else's capabilities: those who may edit them
            authorise_actor_policy(call, actor, scope)
            from .policy import Principal

            principal = Principal(actor=actor, tenant=principal.tenant, operator=actor in state.policy.operators)
        result = state.policy.effective(principal, scope)
        return {"actor": actor, "scope": scope, "deployment_preset": state.policy.preset.name, **result,
                "natural_level": state.registry.natural_level(actor),
                "rate_limits": state.policy.rate_limits(principal.tenant)}  # fmt: skip

    @api("GET", "/v1/policy/deployment", summary="The deployment policy (preset)", access="tenant")
    async def policy_deployment(call: Call):
        return state.policy.document("deployment", state.policy.preset.name)

    @api("PUT", "/v1/policy/deployment", tier="experimental", rate="write", access="tenant",
         summary="Change the deployment policy (keys given replace the current ones)")
    async def policy_deployment_put(call: Call):
        call.check(cap.POLICY_ADMINISTER_DEPLOYMENT)
        return await state.policy.put("deployment", state.policy.preset.name, call.json(),
                                      principal=call.principal)  # fmt: skip

    def authorise_actor_policy(call: Call, actor: str, scope: str | None) -> None:
        """The actor tier's owners (§5.1): the actor itself, the tenant's admins, and — for the
        actor's policy within one scope (``?scope=``) — that scope's owners."""
        call.check(cap.POLICY_ADMINISTER_ACTOR, scope)
        if actor == call.principal.actor or state.gate.is_admin(call.principal):
            return
        if scope is None:
            call.deny(cap.POLICY_ADMINISTER_ACTOR, "actor",
                      f"only {actor} itself or a tenant admin may administer its policy; an owner "
                      "of a scope may administer it within that scope (?scope=)")  # fmt: skip
        call.check(cap.POLICY_ADMINISTER_SCOPE, scope)  # owners of that scope only

    def tier_routes(tier: str, param: str, converter: Any) -> None:
        capability = cap.policy_administer(tier)
        params = ("scope",) if tier == "actor" else ()

        def target_of(call: Call, kw: dict[str, Any]) -> tuple[str, str | None]:
            target = converter(kw[param])
            args = query_args(params)
            scope = scope_param(args["scope"]) if args.get("scope") else None
            if tier == "tenant":
                call.check(capability)
                require_admin(call, capability, f"only the admins of tenant {target} may administer its policy")
                if target != call.principal.tenant and not call.principal.operator:
                    raise NotFound(f"no tenant {target} on this deployment", details={"tenant_id": target})
            elif tier == "scope":
                call.check(capability, target)  # the gate: owners of the scope only
            else:
                authorise_actor_policy(call, target, scope)
            return target, scope

        async def get_doc(call: Call, **kw: Any):
            target, scope = target_of(call, kw)
            return state.policy.document(tier, target, scope=scope)

        async def put_doc(call: Call, **kw: Any):
            target, scope = target_of(call, kw)
            return await state.policy.put(tier, target, call.json(), principal=call.principal, scope=scope)

        get_doc.__name__ = f"policy_{tier}_get"
        put_doc.__name__ = f"policy_{tier}_put"
        path = f"/v1/policy/{tier}/{{{param}{':path' if tier == 'scope' else ''}}}"
        access = "scope" if tier == "scope" else "tenant"
        api("GET", path, summary=f"Read the {tier} policy", access=access)(get_doc)
        api("PUT", path, tier="experimental", rate="write", summary=f"Replace the {tier} policy",
            access=access)(put_doc)  # fmt: skip

    tier_routes("tenant", "tenant_id", str)
    tier_routes("scope", "scope_path", canonical_scope)
    tier_routes("actor", "actor_id", str)

    # -- audit (§8.10) ---------------------------------------------------------------------------
    @api("GET", "/v1/audit", summary="Query the audit log", access="tenant", response_schema="page:audit_row")
    async def audit_query(call: Call):
        args = query_args(("scope", "actor", "capability", "decision", "since", "limit", "cursor"))
        call.check(cap.AUDIT_READ)
        actor = args.get("actor")
        if actor != call.principal.actor:
            if actor is None and not call.allows(cap.AUDIT_READ_CROSS_ACTOR):
                actor = call.principal.actor  # no cross-actor right: one's own rows
            else:
                call.check(cap.AUDIT_READ_CROSS_ACTOR)
        limit = page_limit(args.get("limit"), 100)
        if args.get("decision") not in (None, "allow", "deny"):
            raise InvalidQuery("decision must be allow or deny", details={"field": "decision"})
        since = parse_rfc3339(args["since"], field="since") if args.get("since") else None
        after = decode_cursor(args["cursor"]).get("after") if args.get("cursor") else None
        rows, more = await state.audit.query(
            tenant=call.principal.tenant, actor=actor, scope=args.get("scope"),
            capability=args.get("capability"), decision=args.get("decision"), since=since,
            after=after, limit=limit)  # fmt: skip
        return {"items": rows, "has_more": more,
                "next_cursor": encode_cursor({"after": rows[-1]["id"]}) if more else None}  # fmt: skip

    async def _audit_row(call: Call, audit_id: str) -> dict[str, Any]:
        call.check(cap.AUDIT_READ)
        row = await state.audit.get(audit_id)
        if row is None or row["tenant_id"] != call.principal.tenant:
            raise NotFound(f"no audit row {audit_id}", details={"audit_id": audit_id})
        if row["actor"] != call.principal.actor:
            call.check(cap.AUDIT_READ_CROSS_ACTOR)
        return row

    @api("GET", "/v1/audit/{audit_id}", summary="One audit row", access="tenant", response_schema="audit_row")
    async def audit_get(call: Call, audit_id: str):
        return await _audit_row(call, audit_id)

    @api("POST", "/v1/audit/verify", access="tenant", summary="Check a request body against an audit row's hash")
    async def audit_verify(call: Call):
        body = call.json()
        audit_id, raw = body.get("audit_id"), body.get("body")
        if not isinstance(audit_id, str):
            raise MissingRequiredField("audit_id is required", details={"field": "audit_id"})
        if not isinstance(raw, str):
            raise MissingRequiredField("body (the raw request body as a string) is required",
                                       details={"field": "body"})  # fmt: skip
        row = await _audit_row(call, audit_id)
        return await state.audit.verify(row, raw.encode())

    # -- admin (§8.15) ---------------------------------------------------------------------------
    @api("GET", "/v1/admin/version", open=True, rate=None, summary="Build information")
    async def version(call: Call):
        return {"name": "cortexdb", "version": __version__, "api": "v1",
                "deployment_preset": state.policy.preset.name}  # fmt: skip

    @api("GET", "/v1/admin/health", access="tenant", summary="Liveness and diagnostics")
    async def health(call: Call):
        call.check(cap.ADMIN_HEALTH)
        stats = engine.statistics()
        return {"status": "ok", "uptime_s": round(_uptime(state), 1), "wal_offset": engine.wal_offset,
                "deployment_preset": state.policy.preset.name, "open_streams": state.open_streams,
                "engine": _stats_wire(stats)}  # fmt: skip

    @api("GET", "/v1/admin/metrics", access="tenant", summary="Prometheus metrics")
    async def metrics(call: Call):
        from quart import Response

        call.check(cap.ADMIN_HEALTH)
        lines = ["# HELP cortexdb_requests_total HTTP requests by route and status",
                 "# TYPE cortexdb_requests_total counter"]  # fmt: skip
        for key, value in sorted(state.counters.items()):
            method, path, status = key.split(" ")
            lines.append(f'cortexdb_requests_total{{method="{method}",route="{path}",status="{status}"}} {value}')
        lines += ["# HELP cortexdb_wal_offset Last WAL offset", "# TYPE cortexdb_wal_offset gauge",
                  f"cortexdb_wal_offset {engine.wal_offset}",
                  "# HELP cortexdb_open_streams Open lifecycle streams", "# TYPE cortexdb_open_streams gauge",
                  f"cortexdb_open_streams {state.open_streams}",
                  "# HELP cortexdb_uptime_seconds Seconds since start", "# TYPE cortexdb_uptime_seconds gauge",
                  f"cortexdb_uptime_seconds {_uptime(state):.1f}"]  # fmt: skip
        stats = _stats_wire(engine.statistics())
        for name, value in stats.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                lines += [f"# TYPE cortexdb_engine_{name} gauge", f"cortexdb_engine_{name} {value}"]
        return Response("\n".join(lines) + "\n", content_type="text/plain; version=0.0.4; charset=utf-8")

    @api("POST", "/v1/admin/flush-views", tier="experimental", rate="write", access="tenant",
         summary="Wait for queued derivations (seal=true also seals open episodes)")
    async def flush_views(call: Call):
        call.check(cap.ADMIN_FLUSH)
        body = call.json() if call.raw.strip() else {}
        scope = scope_param(body["scope"]) if body.get("scope") else None
        await engine.flush(scope, seal=bool(body.get("seal", False)))
        return {"flushed": True, "scope": scope, "wal_offset": engine.wal_offset}

    @api("POST", "/v1/admin/compact", tier="experimental", rate="write", access="tenant", summary="Compact the store")
    async def compact(call: Call):
        call.check(cap.ADMIN_COMPACT)
        if not await engine.compact():
            return {"compacted": False, "reason": "this backend has nothing to compact"}
        return {"compacted": True}

    # -- surfaces this server does not implement yet: a truthful 501 --------------------------
    for method, path, tier in (("POST", "/v1/answer", "stable"), ("POST", "/v1/forget", "stable"),
                               ("POST", "/v1/blobs", "stable"), ("GET", "/v1/blobs/{blob_id}", "stable"),
                               ("POST", "/v1/erasures", "experimental"),
                               ("POST", "/v1/erasures/preview", "experimental"),
                               ("POST", "/v1/understanding/synthesize", "experimental"),
                               ("POST", "/v1/export", "beta"), ("POST", "/v1/import/{source}", "beta"),
                               ("POST", "/v1/vocabularies", "beta")):  # fmt: skip
        async def unbuilt(call: Call, _m=method, _p=path, **_: Any):
            raise NotImplementedYet(f"{_m} {_p} is part of the reference but not implemented by this server yet",
                                    details={"endpoint": f"{_m} {_p}"})  # fmt: skip

        unbuilt.__name__ = "unbuilt_" + path.strip("/").replace("/", "_").replace("{", "").replace("}", "")
        api(method, path, tier=tier, summary="Not implemented yet (501)", access="tenant")(unbuilt)


def _uptime(state: ServerState) -> float:
    import time

    return time.time() - state.started


def _stats_wire(stats: Any) -> dict[str, Any]:
    import attrs

    if attrs.has(type(stats)):
        return {k: v for k, v in attrs.asdict(stats).items() if not isinstance(v, list | dict)}
    return dict(stats) if isinstance(stats, dict) else {}
