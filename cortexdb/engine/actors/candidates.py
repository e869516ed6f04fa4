"""Recall candidates from one scope actor: BM25 and vector hits over every indexed layer.

Runs as a read (a child task of the actor) against the actor's in-memory indexes and the store.
Each candidate carries its record, the raw signals the coordinator scores (BM25, cosine, time,
importance, confidence), its links for graph proximity and its citation chain down to events.
"""

from __future__ import annotations

from typing import Any

from .. import jsoncodec, keys
from ..model import Belief, Episode, Event, Fact, loads, to_wire
from ..retrieve import filters as recall_filters
from ..retrieve.scoring import estimate_tokens, recency
from ..retrieve.text_index import tokenize
from ..temporal import try_parse_rfc3339

LAYER_OF_PREFIX = {"evt": "events", "fact": "facts", "ep": "episodes", "belief": "beliefs"}
PREFIX_OF_LAYER = {layer: prefix + "_" for prefix, layer in LAYER_OF_PREFIX.items()}


def layer_of(record_id: str) -> str | None:
    return LAYER_OF_PREFIX.get(record_id.split("_", 1)[0])


async def gather(actor, query: dict[str, Any]) -> list[dict[str, Any]]:
    pipeline = actor.pipeline
    store = actor.ctx.store
    scope = actor.scope
    layers: set[str] = query["layers"]
    k: int = query["k"]
    temporal = query["temporal"]
    filter_tree = query.get("filters")
    reference = query["reference"]
    include_superseded = query.get("include_superseded", False)

    mode = query.get("mode", "hybrid")
    text = query.get("text")
    # top-k per layer: short fact texts and broad episode summaries must not crowd out the turns
    bm25: dict[str, float] = {}
    semantic: dict[str, float] = {}
    vector = query.get("vector") if mode != "bm25" else None
    for layer in sorted(layers):
        prefixes = (PREFIX_OF_LAYER[layer],)
        if text and mode != "vector":
            bm25.update(pipeline.text_index.search(text, limit=k, prefixes=prefixes))
        if vector is not None and text:
            semantic.update(pipeline.vector_index.search(vector, k, prefixes=prefixes))
    ids = list(dict.fromkeys(list(bm25) + list(semantic)))
    if not ids:  # no query text (or no hit): the most recent records of each layer
        ids = await _recent(store, scope, layers, k)

    out: list[dict[str, Any]] = []
    for record_id in ids:
        layer = layer_of(record_id)
        if layer is None or layer not in layers:
            continue
        # a valid-time window asks about the past: superseded records are current knowledge of it
        historical = include_superseded or bool(temporal.as_of) or temporal.valid_during is not None
        candidate = await _load(store, scope, layer, record_id, historical)
        if candidate is None:
            continue
        record = candidate["record"]
        if not temporal.matches(layer, record):
            continue
        if filter_tree and not recall_filters.matches(
            filter_tree, recall_filters.field_values(layer, record)
        ):
            continue
        when = try_parse_rfc3339(candidate.pop("time")) or reference
        candidate.update(
            scope=scope,
            bm25=bm25.get(record_id, 0.0),
            semantic=semantic.get(record_id, 0.0)
            if semantic
            else _cosine(pipeline, record_id, vector),
            recency=recency((reference - when).total_seconds() / 86400.0),
            vector=pipeline.vector_index.vector(record_id),
            tokens=set(tokenize(candidate["text"])),
            tokens_estimate=estimate_tokens(jsoncodec.encode(record).decode()),
        )
        out.append(candidate)
    return out


def _cosine(pipeline, record_id: str, vector) -> float:
    if vector is None:
        return 0.0
    stored = pipeline.vector_index.vector(record_id)
    return float(stored @ vector) if stored is not None else 0.0


async def _recent(store, scope: str, layers: set[str], k: int) -> list[str]:
    ids: list[str] = []
    prefixes = {"events": keys.events_prefix(scope), "facts": keys.facts_prefix(scope),
                "episodes": keys.episodes_prefix(scope), "beliefs": keys.beliefs_prefix(scope)}  # fmt: skip
    for layer, prefix in prefixes.items():
        if layer in layers:
            async for key, _ in store.scan(prefix=prefix, reverse=True, limit=k):
                ids.append(keys.last_part(key))
    return ids


async def _load(
    store, scope: str, layer: str, record_id: str, historical: bool
) -> dict[str, Any] | None:
    if layer == "events":
        raw = await store.get(keys.event(scope, record_id))
        if raw is None:
            return None
        state_raw = await store.get(keys.event_state(record_id))
        state = jsoncodec.decode(state_raw) if state_raw else {}
        if state.get("cancelled"):
            return None
        event = loads(raw, Event)
        record = to_wire(event)
        record["derives"] = state.get("derives", [])
        text = str(event.content.get("text") or "")
        links = record["derives"] + list(event.context.get("preceded_by") or ())
        return {"layer": layer, "id": record_id, "record": record, "text": text, "time": event.context["observed_at"],
                "importance": min(1.0, sum(1 for d in record["derives"] if d.startswith("fact_")) / 2),
                "confidence": 1.0, "links": links, "chain": {}}  # fmt: skip
    if layer == "facts":
        raw = await store.get(keys.fact(scope, record_id))
        if raw is None:
            return None
        fact = loads(raw, Fact)
        if fact.excluded_from_recall or (fact.recorded_to is not None and not historical):
            return None
        record = to_wire(fact)
        obj = fact.object.name if fact.object.type != "literal" else fact.object.value
        text = f"{fact.subject.name} {fact.predicate.replace('_', ' ')} {obj}"
        return {"layer": layer, "id": record_id, "record": record, "text": text, "time": record["valid_from"],
                "importance": fact.confidence, "confidence": fact.confidence, "links": list(fact.supports),
                "chain": {fact.id: list(fact.supports)}}  # fmt: skip
    if layer == "episodes":
        raw = await store.get(keys.episode(scope, record_id))
        if raw is None:
            return None
        episode = loads(raw, Episode)
        if episode.excluded_from_recall:
            return None
        record = to_wire(episode)
        return {"layer": layer, "id": record_id, "record": record, "text": f"{episode.name}. {episode.summary}",
                "time": record["ended_at"], "importance": episode.centrality_score, "confidence": 1.0,
                "links": list(episode.events), "chain": {episode.id: list(episode.events)}}  # fmt: skip
    if layer == "beliefs":
        raw = await store.get(keys.belief(scope, record_id))
        if raw is None:
            return None
        belief = loads(raw, Belief)
        if belief.excluded_from_recall or (belief.valid_to is not None and not historical):
            return None
        record = to_wire(belief)
        claim = belief.claim
        obj = (
            claim["object"].get("name")
            if claim["object"].get("type") != "literal"
            else claim["object"].get("value")
        )
        text = f"{claim['subject'].get('name')} {claim['predicate'].replace('_', ' ')} {obj}"
        chain: dict[str, list[str]] = {belief.id: [s.id for s in belief.supports]}
        for support in belief.supports:  # down to the events, for the citation DAG
            fact_raw = await store.get(keys.fact(scope, support.id))
            if fact_raw is not None:
                chain[support.id] = list(loads(fact_raw, Fact).supports)
        return {"layer": layer, "id": record_id, "record": record, "text": text, "time": record["last_revised_at"],
                "importance": belief.confidence, "confidence": belief.confidence,
                "links": [s.id for s in belief.supports], "chain": chain}  # fmt: skip
    return None


async def count_items(store, scope: str) -> int:
    count = 0
    async for _ in store.scan(prefix=keys.events_prefix(scope)):
        count += 1
    return count
