"""Recall candidates from one scope actor: BM25 and vector hits over every indexed layer.

Runs as a read (a child task of the actor) against the actor's in-memory indexes and the store.
Each candidate carries its record, the raw signals the coordinator scores (BM25, cosine, time,
importance, confidence), its links for graph proximity and its citation chain down to events.
"""

from __future__ import annotations

import functools
from typing import Any

import attrs

from .. import jsoncodec
from ..derive.beliefs import calibrated
from ..derive.visibility import Clip
from ..model import Belief, Candidate, Episode, Fact, from_wire, to_wire
from ..model.converter import state_derives
from ..model.text import belief_text, content_text, episode_text, fact_claim_text, message_text
from ..retrieve import filters as recall_filters
from ..retrieve import passages
from ..retrieve.feedback import alternate
from ..retrieve.temporal_filter import happened_in
from ..retrieve.text_index import tokenize
from ..storage.episodes import OPEN_MEMBERS
from ..temporal import try_parse_rfc3339
from . import concept_queries, history, requery
from .candidate_signals import Signals
from .episode_cache import decode_episode, episode_header
from .messages import Candidates

LAYER_OF_PREFIX = {"evt": "events", "fact": "facts", "ep": "episodes", "belief": "beliefs",
                   "concept": "understanding"}  # fmt: skip
PREFIX_OF_LAYER = {layer: prefix + "_" for prefix, layer in LAYER_OF_PREFIX.items()}


def layer_of(record_id: str) -> str | None:
    return LAYER_OF_PREFIX.get(record_id.split("_", 1)[0])


async def gather(actor, query: Candidates) -> list[Candidate]:
    """The scope's candidates: its BM25 and vector hits per layer (the most recent records when
    there is no query text or no hit), loaded, filtered, with their raw signals."""
    if query.content is not None:  # the question less this scope's voices' names (recall/speakers.py)
        text, vector = await query.content(actor.lane.state.voices)
        query = attrs.evolve(query, text=text, vector=vector, content=None)
    # top-k per layer and source, sized to what the layer can return (two sources of 2x the limit
    # fill MMR's 4x pool): short fact
    # texts and broad episode summaries must not crowd out the turns, and nobody loads 400 records
    per_layer = {
        PREFIX_OF_LAYER[layer]: min(query.k, max(10, 2 * query.limits.get(layer, 10)))
        for layer in query.layers
    }
    backlog = actor.lane.index.backlog  # derived records waiting for their vectors: embedded first
    if backlog.holds_any(per_layer):
        await actor.lane.index.drain(prefixes=per_layer, skip_held=True)  # not an unwritten group's
    bm25, semantic = _hits(actor.lane.state, query, per_layer)
    ids = list(dict.fromkeys(list(bm25) + list(semantic)))
    if not ids:  # no query text (or no hit): the most recent records of each layer
        ids = await _recent(actor.tables, query.layers, max(per_layer.values(), default=20))
    temporal = query.temporal
    clip = Clip.of(temporal, now=actor.ctx.clock.now(), include_superseded=query.include_superseded)
    closed = actor.lane.state.closed.skipped(clip)  # heads the clip drops: not read (closed.py)
    events: dict[str, list] = {}  # each event read and decoded once per recall
    observers = Observers(actor) if recall_filters.mentions(query.filters, "observed_actor") else None

    admit = Admission(actor, query, clip, closed, events, observers)
    out = await admit(ids)
    if requery.wanted(actor.ctx.config, query, per_layer):  # a second search from the first's best
        query, bm25, semantic, new = requery.reformulate(actor, query, per_layer, bm25, semantic, out)
        out += await admit(new)
        ids += new
    stored = actor.lane.state.vector_index.vectors([c.id for c in out])  # read back in one pass
    tokens = tokenize(query.text) if query.text and query.mode != "vector" else None
    signals = Signals(actor, query, bm25, semantic, tokens)
    for candidate in out:
        signals(candidate, stored.get(candidate.id))
    if query.window is not None and query.text:
        out += await _in_window(actor, query, per_layer, set(ids), out, clip, events, observers)
    return out


class Admission:
    """``gather``'s loading: each id of the layers asked, not closed, loaded (an event without
    ``_load``'s dispatch), clipped and filtered; called with the ids of each search."""

    def __init__(self, actor, query: Candidates, clip: Clip, closed: Any, events: dict[str, list],
                 observers: Observers | None) -> None:  # fmt: skip
        self.actor, self.clip, self.closed, self.events, self.observers = actor, clip, closed, events, observers
        self.tables, self.layers, self.filters, self.temporal = actor.tables, query.layers, query.filters, query.temporal
        # an event is clipped by its recorded time only under as_of or recorded_during (matches)
        self.clips_events = bool(query.temporal.as_of or query.temporal.recorded_during)

    async def __call__(self, record_ids: list[str]) -> list[Candidate]:
        kept: list[Candidate] = []
        tables, actor, events, filters = self.tables, self.actor, self.events, self.filters
        for record_id in record_ids:
            layer = LAYER_OF_PREFIX.get(record_id.split("_", 1)[0])
            if layer is None or layer not in self.layers or record_id in self.closed:
                continue
            if layer == "events":  # the common layer, loaded without _load's dispatch
                candidate = await _event_candidate(tables, record_id, actor, events)
                if candidate is None or (self.clips_events and not self.temporal.matches(layer, candidate.record)):
                    continue
            else:
                candidate = await _load(tables, layer, record_id, self.clip, actor, events)
                if candidate is None:
                    continue
            if filters and not await _kept(filters, layer, candidate.record, self.observers):
                continue
            kept.append(candidate)
        return kept


async def _in_window(actor, query: Candidates, per_layer: dict[str, int], seen: set[str],
                     plain: list[Candidate], clip: Clip, events: dict[str, list],
                     observers: Observers | None) -> list[Candidate]:  # fmt: skip
    """The temporal handler's retrieval (docs/router.md): per layer, records that *happened*
    inside ``query.window`` until the layer holds its plain share of them (none sought when the
    plain pass found that many), taken from the BM25 and vector hits beyond the plain top k (at
    most ``recall_window_examined`` hits per layer and index, best first, the two indexes
    alternating), with every filter of the plain pass applied."""
    indexes = actor.lane.state
    examined = actor.ctx.config.recall_window_examined
    vector = query.vector if query.mode != "bm25" else None
    found: list[Candidate] = []
    closed = indexes.closed.skipped(clip)  # heads the clip drops: not read (closed.py)
    for prefix, share in per_layer.items():
        layer = LAYER_OF_PREFIX[prefix[:-1]]
        kept = sum(1 for c in plain if c.layer == layer and happened_in(layer, c.record, query.window))
        if layer == "understanding" or kept >= share:  # a concept has no time of its own
            continue
        lexical = dict(indexes.text_index.search(query.text, examined, prefix)) if query.mode != "vector" else {}
        near = dict(indexes.vector_index.search(vector, examined, prefix)) if vector is not None else {}
        for record_id in alternate(list(lexical), list(near)):
            if kept >= share:
                break
            if record_id in seen or record_id in closed:
                continue
            seen.add(record_id)
            candidate = await _load(actor.tables, layer, record_id, clip, actor, events)
            if candidate is None or not happened_in(layer, candidate.record, query.window):
                continue
            if layer == "events" and not query.temporal.matches(layer, candidate.record):
                continue
            if query.filters and not await _kept(query.filters, layer, candidate.record, observers):
                continue
            Signals(actor, query, lexical, near)(candidate, indexes.vector_index.vector(candidate.id))
            candidate.in_window = True
            found.append(candidate)
            kept += 1
    return found


async def _kept(filters: Any, layer: str, record: dict[str, Any], observers: Observers | None) -> bool:
    """Whether a record passes the recall filters.  A fact's or a belief's ``observed_actor`` is
    who observed the events it rests on (only looked up when a filter names it)."""
    values = recall_filters.field_values(layer, record)
    if observers is not None and layer in ("facts", "beliefs"):
        values["observed_actor"] = await observers.of(layer, record)
    return recall_filters.matches(filters, values)


class Observers:
    """The observed actors of the events facts and beliefs rest on, each event read once per
    recall: a fact's supporting events (the kept ones, then the full list when none matched is
    not known yet: ``supports_total`` beyond them), a belief's supporting facts' events."""

    def __init__(self, actor) -> None:
        self.actor = actor
        self.events: dict[str, str | None] = {}  # event id -> its observed actor id
        self.facts: dict[str, list[str]] = {}  # fact id -> its observers

    async def of(self, layer: str, record: dict[str, Any]) -> list[str]:
        if layer == "facts":
            return await self._fact(record["id"], record)
        found: list[str] = []
        for support in record.get("supports", ()):
            if support.get("type") == "fact" and support.get("polarity") == "supports":
                found += [a for a in await self._fact(support["id"], None) if a not in found]
        return found

    async def _fact(self, fact_id: str, record: dict[str, Any] | None) -> list[str]:
        if fact_id in self.facts:
            return self.facts[fact_id]
        tables = self.actor.tables
        record = record if record is not None else await tables.facts.json.get(fact_id)
        event_ids = list(record["supports"]) if record else []
        if record and record.get("supports_total", 0) > len(event_ids):  # the rest, paged in the table
            event_ids += [e async for e in tables.fact_supports.ids((fact_id,)) if e not in event_ids]
        found: list[str] = []
        for event_id in event_ids:
            who = await self._event(event_id)
            if who is not None and who not in found:
                found.append(who)
        self.facts[fact_id] = found
        return found

    async def _event(self, event_id: str) -> str | None:
        if event_id not in self.events:
            tables = self.actor.tables
            raw = await tables.events.raw.get(event_id)
            if raw is None:  # an event of another scope (a consolidated fact): its home's table
                state = await self.actor.ctx.tables.event_states.get(event_id)
                if state is not None and state.scope != self.actor.scope:
                    raw = await self.actor.ctx.tables.partition(state.scope).events.raw.get(event_id)
            self.events[event_id] = jsoncodec.decode(raw).get("actor") if raw is not None else None
        return self.events[event_id]


def _hits(indexes, query: Candidates, per_layer: dict[str, int]):
    """(BM25 hits, vector hits): record id -> score, per layer prefix, as the mode allows."""
    bm25: dict[str, float] = {}
    semantic: dict[str, float] = {}
    text, mode = query.text, query.mode
    vector = query.vector if mode != "bm25" else None
    for prefix, k in per_layer.items():
        if text and mode != "vector":
            bm25.update(indexes.text_index.search(text, k, prefix))
        if vector is not None and text:
            semantic.update(indexes.vector_index.search(vector, k, prefix))
    return bm25, semantic


async def _recent(tables, layers: set[str], k: int) -> list[str]:
    ids: list[str] = []
    by_layer = {"events": tables.events, "facts": tables.facts, "episodes": tables.episodes,
                "beliefs": tables.beliefs, "understanding": tables.concepts}  # fmt: skip
    for layer, table in by_layer.items():
        if layer in layers:
            async for record_id in table.ids(reverse=True, limit=k):
                ids.append(record_id)
    return ids


async def _load(
    tables, layer: str, record_id: str, clip: Clip, actor=None,
    events: dict[str, list] | None = None,
) -> Candidate | None:  # fmt: skip
    """A candidate from its stored JSON (decoded, not structured: records stay wire dicts; the
    stored bytes give its size and key the episode cache), as the version the clip keeps (the
    latest of them: a candidate is one per record)."""
    if layer == "events":
        return await _event_candidate(tables, record_id, actor, events)
    if layer == "understanding":
        return await concept_queries.candidate(tables, record_id, clip)
    table = {"facts": tables.facts, "episodes": tables.episodes, "beliefs": tables.beliefs}[layer]
    raw = await table.raw.get(record_id)
    if raw is None:
        return None
    whole = None  # an episode's whole record, decoded only when history needs it (_version)
    if layer == "episodes" and OPEN_MEMBERS in raw:  # an open episode's header: its members' rows
        record = await tables.episodes.json.fill(record_id, jsoncodec.decode(raw))
        if record is None:  # deleted since its row was read (a forget, a rebuild)
            return None
    elif layer == "episodes" and actor is not None:
        # ranked and listed as its header: nothing in a recall reads the two lists it lacks
        whole = functools.partial(decode_episode, actor, record_id, raw)
        header = episode_header(raw)
        record, whole = (header, whole) if header is not None else (whole(), None)
    else:
        record = jsoncodec.decode(raw)
    record = await _version(tables, layer, record, clip, whole)
    if record is None:
        return None
    if layer == "facts":
        return Candidate(layer=layer, id=record_id, record=record, text=fact_claim_text(record),
                         time=record["valid_from"], importance=record["confidence"],
                         confidence=record["confidence"], links=list(record["supports"]),
                         chain={record_id: list(record["supports"])}, raw_size=len(raw))  # fmt: skip
    if layer == "episodes":
        return Candidate(layer=layer, id=record_id, record=record, text=episode_text(record),
                         time=record["ended_at"], importance=record.get("centrality_score", 0.0),
                         confidence=1.0, links=list(record["events"]),
                         chain={record_id: list(record["events"])}, raw_size=len(raw))  # fmt: skip
    calibrated(record)
    support_ids = [support["id"] for support in record.get("supports", [])]
    return Candidate(layer=layer, id=record_id, record=record, text=belief_text(record),
                     time=record["last_revised_at"], importance=record["confidence"],
                     confidence=record["confidence"], links=support_ids,
                     chain=await _belief_chain(tables, record_id, support_ids), raw_size=len(raw))  # fmt: skip


class Times:
    """A wire record's times, parsed, as ``Clip`` reads them."""

    def __init__(self, record: dict[str, Any]) -> None:
        get = record.get
        self.recorded_from, self.recorded_to = _ts(get("recorded_from")), _ts(get("recorded_to"))
        self.valid_from, self.valid_to = _ts(get("valid_from")), _ts(get("valid_to"))
        self.started_at, self.ended_at = _ts(get("started_at")), _ts(get("ended_at"))


def _ts(value: Any) -> Any:
    return try_parse_rfc3339(value) if value is not None else None


RECORDS = {"facts": Fact, "beliefs": Belief, "episodes": Episode}


async def _version(tables, layer: str, record: dict[str, Any], clip: Clip,
                   whole: Any = None) -> dict[str, Any] | None:  # fmt: skip
    """The version of a record (its stored wire form) the clip keeps, or None: the record
    itself when it has one version (the common case, judged without structuring it), else the
    latest version kept of those ``history`` loads (``whole()``: the whole record of a header; an
    episode's head structured without its lists, which history cuts from ``record``'s)."""
    times = Times(record)
    # one version, or only the current one can be kept (history.py's rule: no include_superseded
    # or recorded window, and the current version recorded by the clip's moment — a closed
    # version ended when the current one began, so it is not held then): judged on the wire
    # form, without structuring it (a grown episode's causal chain made that most of a recall)
    only_current = not (clip.include_superseded or clip.recorded is not None or times.recorded_from > clip.at)
    if record.get("recorded_to") is None and (record.get("version", 1) == 1 or only_current):
        kept = clip.keeps(layer, times) and not record.get("excluded_from_recall")
        return record if kept else None
    record = whole() if whole is not None else record  # history structures the whole record
    head = from_wire({**record, **history.NO_LISTS} if layer == "episodes" else record, RECORDS[layer])
    if layer == "facts":
        versions = await history.fact_versions(tables, head, clip)
    elif layer == "beliefs":
        versions = await history.belief_versions(tables, head.id, head, clip)
    else:
        versions = await history.episode_versions(tables, head, clip, later=record)
    kept = [v for v in clip.select(layer, versions) if not v.excluded_from_recall]
    if not kept:
        return None
    return record if kept[-1] is head else to_wire(kept[-1])


async def _belief_chain(tables, belief_id: str, support_ids: list[str]) -> dict[str, list[str]]:
    """A belief's citations down to the events, for the citation DAG."""
    chain: dict[str, list[str]] = {belief_id: support_ids}
    for support_id in support_ids[:20]:
        fact = await tables.facts.json.get(support_id)
        if fact is not None:
            chain[support_id] = list(fact["supports"])
    return chain


def _is_fact(record_id: str) -> bool:
    return record_id.startswith("fact_")


async def _event_candidate(tables, record_id: str, actor, events: dict[str, list] | None) -> Candidate | None:
    """An event's candidate: the event, or one passage of a long text (and it says which)."""
    event_id, index = passages.parse_passage_id(record_id)
    found = events.get(event_id) if events is not None else None
    if found is None:
        # both rows read from the store directly (Table.get's key and codec steps inlined: one
        # event candidate each, two reads, in every recall)
        key = event_id.encode()
        events_table, states_table = tables.events, tables.event_states
        raw = await events_table.store.get(events_table.prefix + key)
        if raw is None:
            return None
        # the state's stored JSON, not structured into an EventState: a candidate reads three of
        # its fields, and structuring the whole state was a seventh of a recall's time
        state_raw = await states_table.store.get(states_table.prefix + key)
        state = (jsoncodec.decode(state_raw) if state_raw is not None else None) or {}
        # [stored bytes, state, decoded record (None: cancelled), its indexed text (lazily)]
        found = [raw, state, None if state.get("cancelled") else jsoncodec.decode(raw), None]
        if found[2] is not None and found[2]["content"].get("kind") == "redacted":
            found[2] = None  # a blanked event (a forget, an erasure) has nothing to recall
        if events is not None:
            events[event_id] = found
    raw, state, stored, _ = found
    if stored is None:
        return None  # cancelled or redacted
    record = dict(stored)
    spans = state.get("passages")
    text = stored["content"].get("text")
    if not spans and actor is not None and isinstance(text, str):  # long, not indexed yet?
        max_chars = actor.ctx.config.passage_max_chars
        if len(text) > max_chars:
            spans = passages.split(text, max_chars)
    size = len(raw)
    if spans:  # a long text: the candidate is one passage, and says so
        index = index or 0
        if index >= len(spans):
            return None  # a passage id of another split (the index is rebuilt on restart)
        record_id = passages.passage_id(event_id, index)
        start, end = spans[index]
        if found[3] is None:
            found[3] = content_text(stored["content"])
        content = {k: v for k, v in stored["content"].items() if k != "data"}
        content["text"] = found[3][start:end]
        record["content"] = content
        record["passage"] = {"index": index, "count": len(spans), "char_start": start, "char_end": end}
        record["content_truncated"] = True  # what the item costs (rendered) is the passage, not the book
    elif index is not None:
        return None
    derives = record["derives"] = state_derives(state)
    record["excluded_from_recall"] = False
    preceded = record["context"].get("preceded_by")
    links = derives + list(preceded) if preceded else list(derives)
    facts = sum(map(_is_fact, derives)) if derives else 0
    return Candidate(layer="events", id=record_id, record=record, text=message_text(record["content"]),
                     time=record["context"]["observed_at"], importance=min(1.0, facts / 2), confidence=1.0,
                     links=links, chain={}, raw_size=size)  # fmt: skip
