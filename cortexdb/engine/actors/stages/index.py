"""Stage ``indexed``: put each event (or its passages) and the facts it derived into the text and
vector indexes; and, when a lane starts, rebuild the indexes from the stored records."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import numpy as np

from ...model import Event, EventState
from ...model.text import (
    belief_text,
    concept_text,
    content_text,
    episode_text,
    event_text,
    fact_text,
)
from ...retrieve.text_reopen import TextReopen
from ...retrieve.vector_reopen import Reopen
from ...stages import Stage
from ...temporal import try_parse_rfc3339
from ..indexer import passage_documents
from ..state import Turn
from .common import StageBatch, StageContext

RESTORE_EMBED_CHUNK = 512  # records embedded (and their vectors written) at a time on start


async def run(work: StageContext, events: list[Event], states: dict[str, EventState],
              started: float, batch: StageBatch) -> None:  # fmt: skip
    documents: dict[str, str] = {}
    turns: list[Turn] = []  # in event order
    given: dict[str, np.ndarray] = {}  # events whose writer gave their vector: indexed with it, not embedded
    max_chars = work.config.passage_max_chars
    for event in events:
        state = states[event.id]
        spans = state.passages
        if spans is None and len(content_text(event.content)) > max_chars:  # extracted earlier
            spans = state.passages = await work.index.split(event)
        vector = await work.state.given_vector(event.id)
        if vector is not None and not spans and len(vector) == work.ctx.embedder.dimension:
            given[event.id] = vector
        _event_documents(event, spans, documents, turns, embedded_here=event.id not in given)
        work.state.voices.add(event.actor)
        layers = ["events"]
        facts = work.state.derived_facts(state.derives)
        for fact in facts:
            documents[fact.id] = fact_text(fact)
        if facts:
            layers.append("facts")
        payload: dict[str, Any] = {"event_id": event.id, "layers_indexed": layers,
                                   "indexes": ["text", "vector"]}  # fmt: skip
        if spans:
            payload["passages"] = len(spans)
        work.finish_stage(batch, event, state, Stage.INDEXED, started, payload)
    vectors, embed_texts = await turn_vectors(work, turns)
    # a reinforced fact keeps its text, so its vector is not recomputed
    await work.index.index_documents(batch.ops, documents, embed_known=False,
                                     embed_texts=embed_texts, vectors={**vectors, **given},
                                     stored=given.keys())  # a given vector's one copy: GV  # fmt: skip
    work.state_ops(batch, events, states)
    await work.commit(batch)


def _event_documents(event: Event, spans, documents: dict[str, str], turns: list[Turn],
                     embedded_here: bool = True) -> None:  # fmt: skip
    """An event's documents: its passages (each embedded alone; the last one is the next
    turn's context) or its one turn (embedded with the previous turn of its conversation,
    unless its writer gave its vector: ``embedded_here`` False, it is only the next turn's context)."""
    if spans:
        parts = passage_documents(event, spans)
        documents.update(parts)
        turns.append(as_turn(event, parts[next(reversed(parts))], False))
        return
    documents[event.id] = event_text(event)
    turns.append(as_turn(event, documents[event.id], embedded_here))


def as_turn(event: Event, text: str, embedded_here: bool) -> Turn:
    observed = event.context.get("observed_at")
    return Turn(event.id, event.observed_actor.get("session"), event.context.get("thread"),
                try_parse_rfc3339(observed) if isinstance(observed, str) else None, text, embedded_here)  # fmt: skip


async def turn_vectors(work: StageContext, turns: list[Turn]) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Each turn's vector: the turn with the previous turn of its conversation as context, so a
    reply is about what it answers (LoCoMo hybrid recall@10 61.9 -> 64.9, decisions.md).

    ``turn_context="pooled"`` with an embedder that has ``embed_sums`` (both shipped ones):
    each text is encoded once and the turn's token vectors are pooled with its predecessor's,
    kept from when that one was indexed (decisions.md, "Turn context by pooling").  ``joint``
    (or an embedder without ``embed_sums``): the two texts are embedded together.  Returns
    (vectors, texts to embed instead of the document), by event id."""
    state, mode = work.state, work.config.turn_context
    gap = dt.timedelta(seconds=work.config.episode_gap_seconds)
    sums_of = getattr(work.ctx.embedder, "embed_sums", None)
    if sums_of is None or mode != "pooled":
        embed_texts: dict[str, str] = {}
        for turn in turns:
            previous = state.previous_turn
            if turn.embedded_here and mode != "none" and continues(previous, turn, gap):
                embed_texts[turn.event_id] = f"{previous.text}\n{turn.text}"
            state.previous_turn = turn
        return {}, embed_texts
    # which texts need their sums: every turn's, and a predecessor's not kept (a long event's
    # last passage, or the latest turn before a restart)
    wanted: dict[str, str] = {}
    weight = work.config.turn_context_weight  # 0: the turn alone, no predecessor embedded for it
    previous, here = state.previous_turn, {t.event_id for t in turns if t.embedded_here}
    for turn in turns:
        if turn.embedded_here:
            wanted[turn.event_id] = turn.text
            if weight and continues(previous, turn, gap) and previous.sums is None and previous.event_id not in here:
                wanted[previous.event_id + "#context"] = previous.text
        previous = turn
    sums = dict(zip(wanted, await work.index.embed_sums(list(wanted.values())), strict=True)) if wanted else {}
    vectors: dict[str, np.ndarray] = {}
    for turn in turns:
        previous = state.previous_turn
        own = sums.get(turn.event_id) if turn.embedded_here else None
        if own is not None:
            total = own
            if weight and continues(previous, turn, gap):
                context = previous.sums
                if context is None:
                    context = sums.get(previous.event_id + "#context")
                if context is not None:
                    total = weight * context + own
            norm = float(np.linalg.norm(total))
            vectors[turn.event_id] = (total / norm if norm else total).astype(np.float32)
        state.previous_turn = turn.with_sums(own)
    return vectors, {}


def continues(previous: Turn | None, turn: Turn, gap: dt.timedelta) -> bool:
    """Whether ``turn`` continues ``previous``'s conversation: the same session when either names
    one, else the same thread when either names one, else observed within ``gap`` of it (the
    episode windows' time gap): a caller need not name sessions for turns to carry context."""
    if previous is None:
        return False
    if turn.session is not None or previous.session is not None:
        return turn.session == previous.session
    if turn.thread is not None or previous.thread is not None:
        return turn.thread == previous.thread
    return turn.observed is not None and previous.observed is not None and abs(turn.observed - previous.observed) <= gap


async def restore(work: StageContext, pending: set[str]) -> None:
    """Rebuild the text and vector indexes after a (re)start: every derived event (not pending,
    not cancelled), fact, episode and belief; stored vectors are reused, missing ones embedded."""
    documents = await _event_documents_on_start(work, pending)
    tables, closed, now = work.tables, work.state.closed, work.ctx.clock.now()
    async for _, fact in tables.facts.scan():
        closed.note(fact, now)  # closed.py: the heads a plain recall skips
        if not fact.excluded_from_recall:
            documents[fact.id] = fact_text(fact)
    async for _, episode in tables.episodes.scan():
        documents[episode.id] = episode_text(episode)
    async for _, belief in tables.beliefs.scan():
        closed.note(belief, now)
        documents[belief.id] = belief_text(belief)
    async for _, concept in tables.concepts.scan():
        if concept.stance != "deprecated":
            documents[concept.id] = concept_text(concept)
    vector_index = work.state.vector_index
    dimension = work.ctx.embedder.dimension
    given_found = False
    kept = Reopen(vector_index)  # sealed segments kept under the data dir, mapped, not rebuilt
    await kept.load()
    last = None  # the id last indexed: its given vector, next in the scan, is not wanted then
    async for doc_id, vector, given in _stored_vectors(tables):
        given_found = given_found or given
        if doc_id not in documents or doc_id == last:
            continue
        if vector is not None and len(vector) == dimension:
            last = doc_id
            if not kept.offer(doc_id, vector):
                vector_index.add(doc_id, vector)
            elif kept.full:
                kept.check()  # the rows confirmed; a vector changed since goes to the delta
            if vector_index.needs_seal:  # segments merge after start, in the background
                await vector_index.seal(merge=False)
    await kept.finish()
    vector_index.reopened = kept.counts  # what the restore mapped, revived, refused (benches, tests)
    texts = TextReopen(work.state.text_index)  # sealed text segments kept: mapped, not re-tokenised
    await texts.load()
    await work.index.add_texts(await texts.confirm(documents))
    await texts.finish()
    work.state.text_index.reopened = texts.counts
    work.state.given_stored = given_found and bool(pending)  # pending events read theirs from GV
    missing = [(d, t) for d, t in documents.items() if d not in vector_index]
    for start in range(0, len(missing), RESTORE_EMBED_CHUNK):  # e.g. after switching embedders
        ops: list = []
        await work.index.index_documents(ops, dict(missing[start : start + RESTORE_EMBED_CHUNK]))
        await tables.write(ops)
        work.index.backlog.release()  # what it deferred is written: a recall's drain may take it


async def _stored_vectors(tables) -> AsyncIterator[tuple[str, Any, bool]]:
    """The stored vectors, in the order of their ids: the ``V`` rows ``(id, vector, False)``
    and, merged in, the vectors writers gave (``GV``) ``(id, vector, True)``, which have no
    ``V`` row (one scan of each table, no read per given vector) (an event's given vector is kept once; a data dir written before may
    hold both: the ``V`` row comes first).  One order whatever the table, so the vector index
    is built as it was when every vector had a ``V`` row.  A given vector of another dimension
    than the embedder's (a re-embed to another dimension) is left stored, unused; a re-embed
    drops every ``V`` row, never a given vector: it is indexed again, never re-embedded."""
    given = aiter(tables.given_vectors.scan())
    next_given = await anext(given, None)
    async for doc_id, vector in tables.vectors.scan():
        while next_given is not None and next_given[0] < doc_id:
            yield next_given[0], next_given[1], True
            next_given = await anext(given, None)
        yield doc_id, vector, False
    while next_given is not None:
        yield next_given[0], next_given[1], True
        next_given = await anext(given, None)


async def _event_documents_on_start(work: StageContext, pending: set[str]) -> dict[str, str]:
    tables = work.tables
    documents: dict[str, str] = {}
    long_text = work.config.passage_max_chars
    async for _, event in tables.events.scan():
        if event.id in pending:
            continue
        if event.content.get("kind") == "redacted":  # unindexed by its redaction (forget_events.py)
            continue
        state = await work.read_state(event.id)
        if state is not None and state.cancelled:
            continue
        spans = state.passages if state is not None else None
        work.state.voices.add(event.actor)
        if spans is None and len(content_text(event.content)) > long_text:
            spans = await work.index.split(event)  # indexed before passages: split now
            if state is not None:
                state.passages = spans
                await tables.write([work.state_op(event.id, state)])
        if spans:
            parts = passage_documents(event, spans)
            documents.update(parts)
            work.state.previous_turn = as_turn(event, parts[next(reversed(parts))], False)
        else:
            documents[event.id] = event_text(event)
            work.state.previous_turn = as_turn(event, documents[event.id], True)
    return documents
