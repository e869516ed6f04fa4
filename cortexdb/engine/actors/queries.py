"""The reads a ScopeActor serves (as child tasks): one function per query type of
``messages.QUERY_TYPES``, found by ``HANDLERS[type(query)]``.

Reads go to the scope's tables (``storage.Partition``), never to the derivation lane's caches, so
they only ever see committed state (recall candidates also search the lane's indexes).  Lists
page with the tables' opaque, stable cursors (``Table.page``), which name the last row returned.
What a read sees as of a moment is ``derive.visibility``'s (each version of a record judged on
both axes; ``history`` loads the versions); the why-graph is ``derive.why``'s.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from ...errors import CortexError, NotFound, ResourceDeleted
from ..derive import visibility, why
from ..derive.beliefs import calibrated
from ..derive.versions import split_legacy
from ..derive.visibility import Clip
from ..model import Belief, Episode, Event, EventState, Fact, aspects, to_wire
from ..stages import EPISODE_SEALED, LIFECYCLE_STAGES, STAGE_ORDER, Stage
from ..temporal import format_ts, parse_rfc3339
from . import belief_keep, candidates, concept_queries, history, relations
from .messages import (
    QUERY_TYPES,
    Candidates,
    CountRecords,
    LayerCounts,
    Query,
    ReadBelief,
    ReadBeliefs,
    ReadEpisode,
    ReadEpisodes,
    ReadEvent,
    ReadEvents,
    ReadEventState,
    ReadFact,
    ReadFacts,
    ReadFactSupports,
    ReadTimeline,
    ReadWhy,
)


async def serve(actor: Any, query: Query) -> Any:
    """Answer one query for ``actor`` (its ``scope``, ``tables``, ``ctx``; recall its ``lane``)."""
    return await HANDLERS[type(query)](actor, query)


def _limit(actor, query) -> int:
    return query.limit or actor.ctx.config.read_default_limit


def _missing(kind: str, record_id: str, scope: str) -> NotFound:
    return NotFound(f"no {kind} {record_id} in {scope}", details={f"{kind}_id": record_id})


async def _gone(actor, kind: str, record_id: str) -> CortexError:
    """410 for a record a forget deleted (its note), else 404."""
    note = await actor.tables.forgotten.get(record_id)
    if note is not None:
        return ResourceDeleted(f"{kind} {record_id} was forgotten", details={f"{kind}_id": record_id, **note})
    return _missing(kind, record_id, actor.scope)


# -- events -------------------------------------------------------------------------------------
async def _event_wire(tables, event: Event) -> dict[str, Any]:
    wire = to_wire(event)
    state = await tables.event_states.get(event.id)
    wire["derives"] = state.derives if state is not None else []
    wire["excluded_from_recall"] = state is not None and state.cancelled
    return wire


async def read_event(actor, query: ReadEvent) -> dict[str, Any]:
    event = await actor.tables.events.get(query.event_id)
    if event is None:
        raise _missing("event", query.event_id, actor.scope)
    return await _event_wire(actor.tables, event)


def _keep_event(query: ReadEvents) -> Callable[[dict[str, Any]], bool]:
    since, until = query.since, query.until
    rec_since, rec_until = query.recorded_since, query.recorded_until

    def keep(wire: dict[str, Any]) -> bool:
        if wire["excluded_from_recall"] and not query.include_excluded:
            return False
        if query.observed_actor and wire["actor"] != query.observed_actor:
            return False
        if query.modality and wire["modality"] != query.modality:
            return False
        if since or until:
            observed = parse_rfc3339(wire["context"]["observed_at"])
            if (since and observed < since) or (until and observed >= until):
                return False
        if rec_since or rec_until:
            recorded = parse_rfc3339(wire["context"]["recorded_at"])
            if (rec_since and recorded < rec_since) or (rec_until and recorded >= rec_until):
                return False
        if query.aspect and aspects.of_record("events", wire) != query.aspect:
            return False
        return visibility.event_visible(wire, query.as_of) and visibility.temporal_keep(query.temporal, "events", wire)

    return keep


async def read_events(actor, query: ReadEvents) -> dict[str, Any]:
    tables = actor.tables

    async def convert(event_id: str, event: Event) -> dict[str, Any]:
        return await _event_wire(tables, event)

    return await tables.events.page(query.cursor, limit=_limit(actor, query), convert=convert,
                                    keep=_keep_event(query))  # fmt: skip


async def read_event_state(actor, query: ReadEventState) -> dict[str, Any]:
    """§8.9.3: the stages done and pending, what the event derived, its errors and timings."""
    tables, scope, event_id = actor.tables, actor.scope, query.event_id
    if not await tables.events.exists(event_id):
        raise _missing("event", event_id, scope)
    state = await tables.event_states.get(event_id) or EventState(scope=scope)
    cancelled = state.cancelled
    if cancelled and state.stages_cancelled is not None:  # what the cancel answered (control.py)
        completed = [s.value for s in LIFECYCLE_STAGES if s.value not in state.stages_cancelled]
    else:
        completed = [s.value for s in STAGE_ORDER if s in state.done]
        if state.episode_id:
            episode = await tables.episodes.get(state.episode_id)
            if episode is not None and episode.status == EPISODE_SEALED:
                completed.append(Stage.COMPRESSED.value)
    view = {
        "event_id": event_id, "scope": scope, "stages_completed": completed,
        "stages_pending": [] if cancelled else [s.value for s in LIFECYCLE_STAGES if s not in completed],
        "lifecycle_event_ids": state.lce, "derives": state.derives,
        "derives_by_stage": state.stage_derives if state.stage_derives is not None else {},
        "errors": state.errors, "excluded_from_recall": cancelled,
        "elapsed_ms": state.elapsed_ms if state.elapsed_ms is not None else {},
    }  # fmt: skip
    if cancelled:
        view["stages_cancelled"] = state.stages_cancelled or []
    if state.foreign:
        view["consolidated_into"] = state.foreign
    if state.passages:
        view["passages"] = len(state.passages)
    if state.derived_records_limit:
        view["derived_records_limit"] = state.derived_records_limit
    return view


# -- facts --------------------------------------------------------------------------------------
def _clip(actor, query, include_superseded: bool = False) -> Clip:
    return Clip.of(query.temporal, now=actor.ctx.clock.now(), as_of=query.as_of,
                   include_superseded=include_superseded)  # fmt: skip


async def _held(kind: str, record_id: str, versions: list, at: dt.datetime) -> Any:
    """The version held at ``at`` (a direct lookup as of then), or 404."""
    version = visibility.held_at(versions, at)
    if version is None:
        raise NotFound(f"no {kind} {record_id} was recorded as of {format_ts(at)}",
                       details={f"{kind}_id": record_id, "as_of": format_ts(at)})  # fmt: skip
    return version


async def read_fact(actor, query: ReadFact) -> dict[str, Any]:
    fact = await actor.tables.facts.get(query.fact_id)
    if fact is None:
        raise await _gone(actor, "fact", query.fact_id)
    if query.as_of is not None:
        versions = await history.fact_versions(actor.tables, fact, at=query.as_of)
        fact = await _held("fact", query.fact_id, versions, query.as_of)
    return to_wire(fact)


def _keep_fact(query: ReadFacts) -> Callable[[Fact], bool]:
    def keep(fact: Fact) -> bool:
        if fact.excluded_from_recall:
            return False
        if query.predicate and fact.predicate != query.predicate:
            return False
        if query.aspect and aspects.of_predicate(fact.predicate, fact.object.type) != query.aspect:
            return False
        return query.min_confidence is None or fact.confidence >= query.min_confidence

    return keep


async def read_facts(actor, query: ReadFacts) -> dict[str, Any]:
    """§8.7.3: each version of each fact, clipped on both axes (``visibility.Clip``)."""
    tables, limit, keep = actor.tables, _limit(actor, query), _keep_fact(query)
    clip = _clip(actor, query, query.include_superseded)

    async def expand(fact: Fact | None) -> list[dict[str, Any]]:
        if fact is None:
            return []
        versions = await history.fact_versions(tables, fact, clip)
        return [to_wire(v) for v in clip.select("facts", versions) if keep(v)]

    if query.subject_id:  # the index of (subject, predicate): the fact id is the row's last part

        async def indexed(fact_id: str, _: Any) -> list[dict[str, Any]]:
            return await expand(await tables.facts.get(fact_id))

        under = (query.subject_id,) if query.predicate is None else (query.subject_id, query.predicate)
        return await tables.fact_index.page_many(query.cursor, limit=limit, under=under, expand=indexed)

    async def row(_: str, fact: Fact | None) -> list[dict[str, Any]]:
        return await expand(fact)

    return await tables.facts.page_many(query.cursor, limit=limit, expand=row)


def _timeline_entry(fact: Fact) -> dict[str, Any]:
    literal = fact.object.type == "literal"
    return {
        "fact_id": fact.id,
        "value": fact.object.value if literal else {"id": fact.object.id, "name": fact.object.name},
        "polarity": fact.polarity, "valid_from": format_ts(fact.valid_from),
        "valid_to": format_ts(fact.valid_to) if fact.valid_to else None,
        "recorded_from": format_ts(fact.recorded_from),
        "recorded_to": format_ts(fact.recorded_to) if fact.recorded_to else None,
        "supersedes": fact.supersedes, "superseded_by": fact.superseded_by, "status": fact.status,
        "confidence": fact.confidence,
    }  # fmt: skip


async def read_timeline(actor, query: ReadTimeline) -> dict[str, Any]:
    """The supersession chain as known now: each fact's current version (an old data dir's
    superseded fact read as its current version too)."""
    tables = actor.tables
    facts = []
    async for fact_id in tables.fact_index.ids((query.subject_id, query.predicate)):
        fact = await tables.facts.get(fact_id)
        if fact is not None and not fact.excluded_from_recall:
            facts.append(split_legacy(fact)[-1])
    facts.sort(key=lambda f: (f.valid_from, f.id))
    return {
        "subject": {"id": query.subject_id, "name": facts[0].subject.name if facts else None},
        "predicate": query.predicate,
        "timeline": [_timeline_entry(f) for f in facts],
    }


async def read_fact_supports(actor, query: ReadFactSupports) -> dict[str, Any]:
    tables = actor.tables
    fact = await tables.facts.json.get(query.fact_id)  # two fields: not structured
    if fact is None:
        raise _missing("fact", query.fact_id, actor.scope)

    async def event_id(supporting_event: str, _: bool) -> str:
        return supporting_event

    result = await tables.fact_supports.page(query.cursor, limit=_limit(actor, query),
                                             under=query.fact_id, convert=event_id)  # fmt: skip
    return {"fact_id": fact["id"], "supports_total": fact["supports_total"], **result}


# -- beliefs ------------------------------------------------------------------------------------
async def _belief(actor, belief_id: str, as_of: dt.datetime | None = None) -> Belief:
    """A belief (the version held at ``as_of``), or 410 ``RESOURCE_DELETED`` with its deletion
    note, or 404."""
    tables = actor.tables
    belief = await tables.beliefs.get(belief_id)
    if as_of is not None:
        versions = await history.belief_versions(tables, belief_id, belief, at=as_of)
        if versions:
            return await _held("belief", belief_id, versions, as_of)
    if belief is None:
        note = await tables.belief_deletions.get(belief_id)
        if note is not None:
            raise ResourceDeleted(f"belief {belief_id} was deleted", details=note)
        raise await _gone(actor, "belief", belief_id)
    return belief


async def read_belief(actor, query: ReadBelief) -> dict[str, Any]:
    return calibrated(to_wire(await _belief(actor, query.belief_id, query.as_of)))


async def read_beliefs(actor, query: ReadBeliefs) -> dict[str, Any]:
    """§8.7.5: each version of each belief, clipped on both axes; a belief deleted since (below
    the floor, its evidence withdrawn) still answers for the moments it was held."""
    tables, keep = actor.tables, belief_keep.keeper(query)
    clip = _clip(actor, query, query.include_superseded)
    if query.include_deprecated and clip.valid is None:  # closed and contradicted claims too, whenever they held
        clip = attrs.evolve(clip, valid=(None, None))

    async def expand(belief_id: str, belief: Belief | None) -> list[dict[str, Any]]:
        versions = await history.belief_versions(tables, belief_id, belief, clip)
        return [calibrated(to_wire(v)) for v in clip.select("beliefs", versions) if keep(v)]

    past = clip.pinned or clip.include_superseded or clip.recorded is not None
    more = tables.belief_versions.record_ids() if past else None
    return await tables.beliefs.page_many(query.cursor, limit=_limit(actor, query), expand=expand,
                                          more=more)  # fmt: skip


async def read_why(actor, query: ReadWhy) -> dict[str, Any]:
    """§8.7.6, as of a moment when asked: the belief and its facts as they were held then."""
    tables, at = actor.tables, query.as_of
    belief = await _belief(actor, query.belief_id, at)
    facts: dict[str, Fact | None] = {}
    for support in belief.supports:
        fact = await tables.facts.get(support.id)
        if fact is not None and at is not None:
            fact = visibility.held_at(await history.fact_versions(tables, fact, at=at), at)
        facts[support.id] = fact
    events = {e: await tables.events.get(e) for e in why.event_ids(facts)}
    return why.why(belief, facts, events)


# -- episodes -----------------------------------------------------------------------------------
async def read_episode(actor, query: ReadEpisode) -> dict[str, Any]:
    episode = await actor.tables.episodes.get(query.episode_id)
    if episode is None:
        raise await _gone(actor, "episode", query.episode_id)
    if query.as_of is not None:
        versions = await history.episode_versions(actor.tables, episode, at=query.as_of)
        episode = await _held("episode", query.episode_id, versions, query.as_of)
    return to_wire(episode)


def _keep_episode(query: ReadEpisodes) -> Callable[[Episode], bool]:
    def keep(episode: Episode) -> bool:
        if episode.excluded_from_recall:
            return False
        if query.actor and query.actor not in episode.actors_involved:
            return False
        if query.overlapping_from and episode.ended_at < query.overlapping_from:
            return False
        return not (query.overlapping_to and episode.started_at >= query.overlapping_to)

    return keep


async def read_episodes(actor, query: ReadEpisodes) -> dict[str, Any]:
    """§8.7.2: each version of each episode (how far it had grown, whether it was sealed),
    clipped on both axes."""
    tables, keep = actor.tables, _keep_episode(query)
    clip = _clip(actor, query, query.include_superseded)

    async def expand(_: str, episode: Episode | None) -> list[dict[str, Any]]:
        versions = await history.episode_versions(tables, episode, clip)
        wires = []
        for version in clip.select("episodes", versions):
            if keep(version):
                wire = to_wire(version)
                if not query.with_causal_chain:
                    wire.pop("causal_chain", None)
                wires.append(wire)
        return wires

    return await tables.episodes.page_many(query.cursor, limit=_limit(actor, query), expand=expand)


# -- counts and recall --------------------------------------------------------------------------
async def count_records(actor, query: CountRecords) -> int:
    return await actor.tables.events.count()


async def layer_counts(actor, query: LayerCounts) -> dict[str, int]:
    tables = actor.tables
    return {"events": await tables.events.count(), "episodes": await tables.episodes.count(),
            "facts": await tables.facts.count(), "beliefs": await tables.beliefs.count()}  # fmt: skip


async def recall_candidates(actor, query: Candidates) -> list:
    return await candidates.gather(actor, query)  # looked up per call (tests may patch it)


HANDLERS: dict[type, Callable[[Any, Any], Awaitable[Any]]] = {
    ReadEvents: read_events, ReadEvent: read_event, ReadEventState: read_event_state,
    ReadFacts: read_facts, ReadFact: read_fact, ReadTimeline: read_timeline,
    ReadFactSupports: read_fact_supports, ReadBeliefs: read_beliefs, ReadBelief: read_belief,
    ReadWhy: read_why, ReadEpisodes: read_episodes, ReadEpisode: read_episode,
    CountRecords: count_records, LayerCounts: layer_counts, Candidates: recall_candidates,
    **concept_queries.HANDLERS, relations.ReadRelationships: relations.walk,
}  # fmt: skip
assert set(HANDLERS) == set(QUERY_TYPES)  # the query set is closed: one handler each
