"""Layer reads served by a ScopeActor (as child tasks): events, episodes, facts, beliefs.

Reads go to the store, never to the derivation lane's caches, so they only ever see committed
state.  Lists page with opaque, stable base64url cursors that name the last key returned.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Callable
from typing import Any

from ...errors import InvalidCursor, NotFound, ResourceDeleted
from .. import jsoncodec, keys
from ..model import Belief, Episode, Event, EventState, Fact, loads, to_wire
from ..model.text import belief_text, fact_claim_text, said_text
from ..stages import EPISODE_SEALED, LIFECYCLE_STAGES, STAGE_ORDER, Stage
from ..temporal import format_ts


def encode_cursor(key: bytes) -> str:
    raw = json.dumps({"after": key.hex()}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str | None, prefix: bytes) -> bytes | None:
    if not cursor:
        return None
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        key = bytes.fromhex(json.loads(base64.urlsafe_b64decode(padded))["after"])
    except Exception:
        raise InvalidCursor(
            "the cursor is not one this server issued", details={"cursor": cursor[:128]}
        ) from None
    if not key.startswith(prefix):
        raise InvalidCursor(
            "the cursor belongs to a different listing", details={"cursor": cursor[:128]}
        )
    return key


def structured(cls):
    """A ``page`` converter that decodes a stored record into ``cls``."""

    async def convert(key, raw):
        return loads(raw, cls)

    return convert


async def page(store, prefix: bytes, query: dict, convert: Callable[[bytes, bytes], Any],
               keep: Callable[[Any], bool] | None = None, *, limit: int) -> dict[str, Any]:  # fmt: skip
    after = decode_cursor(query.get("cursor"), prefix)
    start = after + b"\x00" if after is not None else None
    items: list[tuple[bytes, Any]] = []
    async for key, raw in store.scan(prefix=prefix, start=start):
        record = await convert(key, raw)
        if record is None or (keep is not None and not keep(record)):
            continue
        items.append((key, record))
        if len(items) > limit:
            break
    has_more = len(items) > limit
    items = items[:limit]
    return {
        "items": [record for _, record in items],
        "next_cursor": encode_cursor(items[-1][0]) if has_more else None,
        "has_more": has_more,
    }


def _time(query: dict, name: str) -> dt.datetime | None:
    return query.get(name)


# -- facts --------------------------------------------------------------------------------------
def fact_visible(fact: Fact, at: dt.datetime, include_superseded: bool) -> bool:
    """§12.3 and §18.2 item 1: ``as_of`` clips both axes; ``include_superseded`` lifts the
    "still current at T" upper bounds so superseded versions recorded by T come back too.

    A supersession writes ``valid_to`` and ``recorded_to`` together, so when T precedes
    ``recorded_to`` the system did not yet know that ``valid_to``: the fact is judged as it was
    recorded then (open-ended).  A ``valid_to`` known from the start (late-arriving history)
    has no ``recorded_to`` and always applies.
    """
    if fact.recorded_from > at or fact.valid_from > at:
        return False
    if include_superseded:
        return True
    if fact.recorded_to is not None:
        if fact.recorded_to <= at:
            return False
        return True  # current at T; its valid_to was learnt later
    return fact.valid_to is None or fact.valid_to > at


def _temporal_keep(temporal, layer: str, record) -> bool:
    """The ``valid_during`` / ``recorded_during`` / ``natural`` part of a layer read's temporal
    block (``as_of`` is applied by each layer's own visibility rule)."""
    if temporal is None or not (temporal.valid_during or temporal.recorded_during):
        return True
    wire = record if isinstance(record, dict) else to_wire(record)
    return temporal.matches(layer, wire)


async def serve(actor, layer: str, query: dict[str, Any]) -> Any:
    ctx = actor.ctx
    store = ctx.store
    scope = actor.scope
    limit = query.get("limit") or ctx.config.read_default_limit
    now = ctx.clock.now()
    temporal = query.get("temporal")

    async def state_of(event_id: str) -> EventState | None:
        raw = await store.get(keys.event_state(event_id))
        return loads(raw, EventState) if raw else None

    async def event_wire(raw: bytes) -> dict[str, Any]:
        event = loads(raw, Event)
        wire = to_wire(event)
        state = await state_of(event.id)
        wire["derives"] = state.derives if state is not None else []
        wire["excluded_from_recall"] = state is not None and state.cancelled
        return wire

    if layer == "event":
        raw = await store.get(keys.event(scope, query["event_id"]))
        if raw is None:
            raise NotFound(
                f"no event {query['event_id']} in {scope}", details={"event_id": query["event_id"]}
            )
        return await event_wire(raw)

    if layer == "events":
        since, until = _time(query, "since"), _time(query, "until")
        rec_since, rec_until = _time(query, "recorded_since"), _time(query, "recorded_until")
        actor_filter, modality = query.get("observed_actor"), query.get("modality")
        include_excluded = bool(query.get("include_excluded"))

        async def convert(key, raw):
            return await event_wire(raw)

        def keep(wire):
            from ..temporal import parse_rfc3339

            if wire["excluded_from_recall"] and not include_excluded:
                return False
            if actor_filter and wire["actor"] != actor_filter:
                return False
            if modality and wire["modality"] != modality:
                return False
            if since or until:
                observed = parse_rfc3339(wire["context"]["observed_at"])
                if (since and observed < since) or (until and observed >= until):
                    return False
            if rec_since or rec_until:
                recorded = parse_rfc3339(wire["context"]["recorded_at"])
                if (rec_since and recorded < rec_since) or (rec_until and recorded >= rec_until):
                    return False
            if (
                query.get("as_of")
                and parse_rfc3339(wire["context"]["recorded_at"]) > query["as_of"]
            ):
                return False  # events: as_of applies to recorded_at only (§18.2 item 17)
            return _temporal_keep(temporal, "events", wire)

        return await page(store, keys.events_prefix(scope), query, convert, keep, limit=limit)

    if layer == "event_state":
        event_id = query["event_id"]
        if await store.get(keys.event(scope, event_id)) is None:
            raise NotFound(f"no event {event_id} in {scope}", details={"event_id": event_id})
        state = await state_of(event_id) or EventState(scope=scope)
        done = state.done
        completed = [s.value for s in STAGE_ORDER if s in done]
        episode_id = state.episode_id
        if episode_id:
            raw = await store.get(keys.episode(scope, episode_id))
            if raw is not None and loads(raw, Episode).status == EPISODE_SEALED:
                completed.append(Stage.COMPRESSED.value)
        cancelled = state.cancelled
        pending = [] if cancelled else [s.value for s in LIFECYCLE_STAGES if s not in completed]
        view = {
            "event_id": event_id,
            "scope": scope,
            "stages_completed": completed,
            "stages_pending": pending,
            "lifecycle_event_ids": state.lce,
            "derives": state.derives,
            "derives_by_stage": state.stage_derives if state.stage_derives is not None else {},
            "errors": state.errors,
            "excluded_from_recall": cancelled,
            "elapsed_ms": state.elapsed_ms if state.elapsed_ms is not None else {},
        }
        if cancelled:
            view["stages_cancelled"] = state.stages_cancelled if state.stages_cancelled is not None else []
        if state.foreign:
            view["consolidated_into"] = state.foreign
        if state.passages:
            view["passages"] = len(state.passages)
        if state.derived_records_limit:
            view["derived_records_limit"] = state.derived_records_limit
        return view

    if layer in ("facts", "fact", "timeline"):
        at = query.get("as_of") or now
        include_superseded = bool(query.get("include_superseded"))
        min_confidence = query.get("min_confidence")
        predicate = query.get("predicate")
        subject_id = query.get("subject_id")

        async def load_fact(fact_id: str) -> Fact | None:
            raw = await store.get(keys.fact(scope, fact_id))
            return loads(raw, Fact) if raw else None

        if layer == "fact":
            fact = await load_fact(query["fact_id"])
            if fact is None:
                raise NotFound(
                    f"no fact {query['fact_id']} in {scope}", details={"fact_id": query["fact_id"]}
                )
            return to_wire(fact)

        if layer == "timeline":
            facts = []
            async for key, _ in store.scan(
                prefix=keys.fact_index_prefix(scope, subject_id, predicate)
            ):
                fact = await load_fact(keys.last_part(key))
                if fact is not None and not fact.excluded_from_recall:
                    facts.append(fact)
            facts.sort(key=lambda f: (f.valid_from, f.recorded_from, f.id))
            return {
                "subject": {"id": subject_id, "name": facts[0].subject.name if facts else None},
                "predicate": predicate,
                "timeline": [
                    {
                        "fact_id": f.id,
                        "value": f.object.value
                        if f.object.type == "literal"
                        else {"id": f.object.id, "name": f.object.name},
                        "polarity": f.polarity,
                        "valid_from": format_ts(f.valid_from),
                        "valid_to": format_ts(f.valid_to) if f.valid_to else None,
                        "recorded_from": format_ts(f.recorded_from),
                        "recorded_to": format_ts(f.recorded_to) if f.recorded_to else None,
                        "supersedes": f.supersedes,
                        "superseded_by": f.superseded_by,
                        "status": f.status,
                        "confidence": f.confidence,
                    }
                    for f in facts
                ],
            }

        window = (
            temporal is not None and temporal.valid_during is not None and not query.get("as_of")
        )

        def keep_fact(fact: Fact) -> bool:
            if fact.excluded_from_recall:
                return False
            # a valid-time window asks about the past: superseded facts are current knowledge of it
            if not fact_visible(fact, at, include_superseded or window):
                return False
            if predicate and fact.predicate != predicate:
                return False
            if min_confidence is not None and fact.confidence < min_confidence:
                return False
            return _temporal_keep(temporal, "facts", fact)

        if subject_id:
            prefix = keys.fact_index_prefix(scope, subject_id, predicate)

            async def convert(key, raw):  # index keys: the fact id is the last part
                return await load_fact(keys.last_part(key))
        else:
            prefix = keys.facts_prefix(scope)
            convert = structured(Fact)

        result = await page(store, prefix, query, convert, keep_fact, limit=limit)
        result["items"] = [to_wire(f) for f in result["items"]]
        return result

    if layer in ("beliefs", "belief"):
        if layer == "belief":
            belief_id = query["belief_id"]
            raw = await store.get(keys.belief(scope, belief_id))
            if raw is None:
                note = await store.get(keys.belief_deleted(scope, belief_id))
                if note is not None:
                    raise ResourceDeleted(
                        f"belief {belief_id} was deleted", details=jsoncodec.decode(note)
                    )
                raise NotFound(
                    f"no belief {belief_id} in {scope}", details={"belief_id": belief_id}
                )
            return to_wire(loads(raw, Belief))
        at = query.get("as_of") or now
        about, min_confidence = query.get("about"), query.get("min_confidence")
        include_deprecated = bool(query.get("include_deprecated"))
        include_closed = bool(query.get("include_superseded"))

        def keep_belief(belief: Belief) -> bool:
            if belief.excluded_from_recall or (
                belief.stance == "deprecated" and not include_deprecated
            ):
                return False
            if belief.recorded_from > at or belief.valid_from > at:
                return False
            if belief.recorded_to is not None and belief.recorded_to <= at:
                return False
            window = temporal is not None and temporal.valid_during is not None
            if (
                not (include_closed or window)
                and belief.valid_to is not None
                and belief.valid_to <= at
            ):
                return False  # a claim whose every supporting fact was superseded (history)
            if about:
                obj = belief.claim.get("object", {})
                if belief.claim["subject"].get("id") != about and obj.get("id") != about:
                    return False
            if min_confidence is not None and belief.confidence < min_confidence:
                return False
            return _temporal_keep(temporal, "beliefs", belief)

        result = await page(
            store, keys.beliefs_prefix(scope), query, structured(Belief), keep_belief, limit=limit
        )
        result["items"] = [to_wire(b) for b in result["items"]]
        return result

    if layer in ("episodes", "episode"):
        if layer == "episode":
            raw = await store.get(keys.episode(scope, query["episode_id"]))
            if raw is None:
                raise NotFound(
                    f"no episode {query['episode_id']} in {scope}",
                    details={"episode_id": query["episode_id"]},
                )
            return to_wire(loads(raw, Episode))
        overlap_from, overlap_to = query.get("overlapping_from"), query.get("overlapping_to")
        actor_filter = query.get("actor")
        with_chain = query.get("with_causal_chain", True)

        def keep_episode(episode: Episode) -> bool:
            if episode.excluded_from_recall:
                return False
            if actor_filter and actor_filter not in episode.actors_involved:
                return False
            if overlap_from and episode.ended_at < overlap_from:
                return False
            if overlap_to and episode.started_at >= overlap_to:
                return False
            at = query.get("as_of")
            if at and (episode.recorded_from > at or episode.started_at > at):
                return False
            return _temporal_keep(temporal, "episodes", episode)

        result = await page(
            store,
            keys.episodes_prefix(scope),
            query,
            structured(Episode),
            keep_episode,
            limit=limit,
        )
        wires = []
        for episode in result["items"]:
            wire = to_wire(episode)
            if not with_chain:
                wire.pop("causal_chain", None)
            wires.append(wire)
        result["items"] = wires
        return result

    if layer == "belief_why":
        return await _belief_why(store, scope, query["belief_id"])

    if layer == "candidates":
        from .candidates import gather

        return await gather(actor, query)

    if layer == "count":
        from .candidates import count_items

        return await count_items(store, scope)

    if layer == "fact_supports":
        fact_raw = await store.get(keys.fact(scope, query["fact_id"]))
        if fact_raw is None:
            raise NotFound(f"no fact {query['fact_id']} in {scope}", details={"fact_id": query["fact_id"]})
        prefix = keys.fact_supports_prefix(scope, query["fact_id"])
        fact = jsoncodec.decode(fact_raw)
        limit = query.get("limit") or actor.ctx.config.read_default_limit

        async def event_id(key, raw):
            return keys.last_part(key)

        result = await page(store, prefix, query, event_id, limit=limit)
        return {"fact_id": fact["id"], "supports_total": fact["supports_total"], **result}

    if layer == "layer_counts":
        counts = {}
        for name, prefix in (("events", keys.events_prefix(scope)), ("episodes", keys.episodes_prefix(scope)),
                             ("facts", keys.facts_prefix(scope)), ("beliefs", keys.beliefs_prefix(scope))):  # fmt: skip
            counts[name] = sum([1 async for _ in store.scan(prefix=prefix)])
        return counts

    raise NotFound(f"unknown layer {layer!r}")


async def _belief_why(store, scope: str, belief_id: str) -> dict[str, Any]:
    """The support graph of a belief down to events, and a narrative that cites every id."""
    from ..derive.episodes import first_sentence

    raw = await store.get(keys.belief(scope, belief_id))
    if raw is None:
        note = await store.get(keys.belief_deleted(scope, belief_id))
        if note is not None:
            raise ResourceDeleted(f"belief {belief_id} was deleted", details=jsoncodec.decode(note))
        raise NotFound(f"no belief {belief_id} in {scope}", details={"belief_id": belief_id})
    belief = loads(raw, Belief)
    nodes: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    seen: set[str] = set()
    reasons: dict[str, list[str]] = {"supports": [], "against": []}
    for support in belief.supports:
        fact_raw = await store.get(keys.fact(scope, support.id))
        if fact_raw is None:
            continue
        fact = loads(fact_raw, Fact)
        summary = fact_claim_text(fact)
        nodes.append(
            {
                "id": fact.id,
                "type": "fact",
                "weight": support.weight,
                "polarity": support.polarity,
                "summary": summary,
            }
        )
        relation = "supported_by" if support.polarity == "supports" else "contradicted_by"
        edges.append({"from": belief.id, "to": fact.id, "relation": relation})
        cited = []
        for event_id in fact.supports:
            edges.append({"from": fact.id, "to": event_id, "relation": "extracted_from"})
            cited.append(event_id)
            if event_id in seen:
                continue
            seen.add(event_id)
            event_raw = await store.get(keys.event(scope, event_id))
            if event_raw is None:
                nodes.append(
                    {"id": event_id, "type": "event", "summary": "(an event of another scope)"}
                )
                continue
            event = loads(event_raw, Event)
            text = said_text(event.content)
            nodes.append(
                {
                    "id": event_id,
                    "type": "event",
                    "observed_at": event.context["observed_at"],
                    "summary": f"{event.actor}: {first_sentence(text)}",
                }
            )
        when = fact.valid_from.date().isoformat()
        reasons[support.polarity].append(
            f"{summary} since {when} ({fact.id}, from {', '.join(cited)})"
        )
    statement = belief_text(belief)
    interval = belief.confidence_interval
    narrative = (
        f'The claim "{statement}" is {belief.stance} with confidence {belief.confidence:.2f} '
        f"(90% interval [{interval.lower:.2f}, {interval.upper:.2f}], {interval.method})."
    )
    if reasons["supports"]:
        narrative += " Evidence for it: " + "; ".join(reasons["supports"]) + "."
    if reasons["against"]:
        narrative += " Evidence against it: " + "; ".join(reasons["against"]) + "."
    if not reasons["supports"] and not reasons["against"]:
        narrative += " No evidence remains for or against it."
    return {
        "belief": to_wire(belief),
        "support_graph": {"nodes": nodes, "edges": edges},
        "narrative": narrative,
        "narrative_model": "deterministic_template_v1",
    }
