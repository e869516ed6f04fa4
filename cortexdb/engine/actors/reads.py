"""Layer reads served by a ScopeActor (as child tasks): events, episodes, facts, beliefs.

Reads go to the scope's tables (``storage.Partition``), never to the derivation lane's caches, so
they only ever see committed state.  Lists page with the tables' opaque, stable cursors
(``Table.page``), which name the last row returned.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from ...errors import NotFound, ResourceDeleted
from ..model import Belief, Episode, Event, EventState, Fact, to_wire
from ..model.text import belief_text, fact_claim_text, said_text
from ..stages import EPISODE_SEALED, LIFECYCLE_STAGES, STAGE_ORDER, Stage
from ..temporal import format_ts


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
    tables = actor.tables
    scope = actor.scope
    limit = query.get("limit") or ctx.config.read_default_limit
    now = ctx.clock.now()
    temporal = query.get("temporal")

    async def event_wire(event: Event) -> dict[str, Any]:
        wire = to_wire(event)
        state = await tables.event_states.get(event.id)
        wire["derives"] = state.derives if state is not None else []
        wire["excluded_from_recall"] = state is not None and state.cancelled
        return wire

    if layer == "event":
        event = await tables.events.get(query["event_id"])
        if event is None:
            raise NotFound(
                f"no event {query['event_id']} in {scope}", details={"event_id": query["event_id"]}
            )
        return await event_wire(event)

    if layer == "events":
        since, until = _time(query, "since"), _time(query, "until")
        rec_since, rec_until = _time(query, "recorded_since"), _time(query, "recorded_until")
        actor_filter, modality = query.get("observed_actor"), query.get("modality")
        include_excluded = bool(query.get("include_excluded"))

        async def convert(event_id: str, event: Event) -> dict[str, Any]:
            return await event_wire(event)

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

        cursor = query.get("cursor")
        return await tables.events.page(cursor, limit=limit, convert=convert, keep=keep)

    if layer == "event_state":
        event_id = query["event_id"]
        if not await tables.events.exists(event_id):
            raise NotFound(f"no event {event_id} in {scope}", details={"event_id": event_id})
        state = await tables.event_states.get(event_id) or EventState(scope=scope)
        done = state.done
        completed = [s.value for s in STAGE_ORDER if s in done]
        episode_id = state.episode_id
        if episode_id:
            episode = await tables.episodes.get(episode_id)
            if episode is not None and episode.status == EPISODE_SEALED:
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
            view["stages_cancelled"] = state.stages_cancelled or []
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

        async def load_fact(fact_id: str, _: Any = None) -> Fact | None:
            return await tables.facts.get(fact_id)

        if layer == "fact":
            fact = await load_fact(query["fact_id"])
            if fact is None:
                raise NotFound(
                    f"no fact {query['fact_id']} in {scope}", details={"fact_id": query["fact_id"]}
                )
            return to_wire(fact)

        if layer == "timeline":
            facts = []
            async for fact_id in tables.fact_index.ids((subject_id, predicate)):
                fact = await load_fact(fact_id)
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

        if subject_id:  # the index of (subject, predicate): the fact id is the row's last part
            under = (subject_id,) if predicate is None else (subject_id, predicate)
            result = await tables.fact_index.page(query.get("cursor"), limit=limit, under=under,
                                                  convert=load_fact, keep=keep_fact)  # fmt: skip
        else:
            result = await tables.facts.page(query.get("cursor"), limit=limit, keep=keep_fact)
        result["items"] = [to_wire(f) for f in result["items"]]
        return result

    if layer in ("beliefs", "belief"):
        if layer == "belief":
            belief_id = query["belief_id"]
            return to_wire(await _belief(tables, scope, belief_id))
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

        result = await tables.beliefs.page(query.get("cursor"), limit=limit, keep=keep_belief)
        result["items"] = [to_wire(b) for b in result["items"]]
        return result

    if layer in ("episodes", "episode"):
        if layer == "episode":
            episode = await tables.episodes.get(query["episode_id"])
            if episode is None:
                raise NotFound(
                    f"no episode {query['episode_id']} in {scope}",
                    details={"episode_id": query["episode_id"]},
                )
            return to_wire(episode)
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

        result = await tables.episodes.page(query.get("cursor"), limit=limit, keep=keep_episode)
        wires = []
        for episode in result["items"]:
            wire = to_wire(episode)
            if not with_chain:
                wire.pop("causal_chain", None)
            wires.append(wire)
        result["items"] = wires
        return result

    if layer == "belief_why":
        return await _belief_why(tables, scope, query["belief_id"])

    if layer == "candidates":
        from .candidates import gather

        return await gather(actor, query)

    if layer == "count":
        from .candidates import count_items

        return await count_items(tables)

    if layer == "fact_supports":
        fact = await tables.facts.json.get(query["fact_id"])  # two fields: not structured
        if fact is None:
            raise NotFound(f"no fact {query['fact_id']} in {scope}", details={"fact_id": query["fact_id"]})
        limit = query.get("limit") or actor.ctx.config.read_default_limit

        async def event_id(supporting_event: str, _: bool) -> str:
            return supporting_event

        result = await tables.fact_supports.page(query.get("cursor"), limit=limit, under=query["fact_id"],
                                                 convert=event_id)  # fmt: skip
        return {"fact_id": fact["id"], "supports_total": fact["supports_total"], **result}

    if layer == "layer_counts":
        counts = {}
        for name, table in (("events", tables.events), ("episodes", tables.episodes),
                            ("facts", tables.facts), ("beliefs", tables.beliefs)):  # fmt: skip
            counts[name] = await table.count()
        return counts

    raise NotFound(f"unknown layer {layer!r}")


async def _belief(tables, scope: str, belief_id: str) -> Belief:
    """A belief, or 410 ``RESOURCE_DELETED`` with its deletion note, or 404."""
    belief = await tables.beliefs.get(belief_id)
    if belief is None:
        note = await tables.belief_deletions.get(belief_id)
        if note is not None:
            raise ResourceDeleted(f"belief {belief_id} was deleted", details=note)
        raise NotFound(f"no belief {belief_id} in {scope}", details={"belief_id": belief_id})
    return belief


async def _belief_why(tables, scope: str, belief_id: str) -> dict[str, Any]:
    """The support graph of a belief down to events, and a narrative that cites every id."""
    from ..derive.episodes import first_sentence

    belief = await _belief(tables, scope, belief_id)
    nodes: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    seen: set[str] = set()
    reasons: dict[str, list[str]] = {"supports": [], "against": []}
    for support in belief.supports:
        fact = await tables.facts.get(support.id)
        if fact is None:
            continue
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
            event = await tables.events.get(event_id)
            if event is None:
                nodes.append(
                    {"id": event_id, "type": "event", "summary": "(an event of another scope)"}
                )
                continue
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
