"""Stage ``indexed``: put each event (or its passages) and the facts it derived into the text and
vector indexes; and, when a lane starts, rebuild the indexes from the stored records."""

from __future__ import annotations

from typing import Any

from ...model import Event, EventState
from ...model.text import (
    belief_text,
    concept_text,
    content_text,
    episode_text,
    event_text,
    fact_text,
)
from ...stages import Stage
from ..indexer import passage_documents
from .common import StageBatch, StageContext

RESTORE_EMBED_CHUNK = 512  # records embedded (and their vectors written) at a time on start


async def run(work: StageContext, events: list[Event], states: dict[str, EventState],
              started: float, batch: StageBatch) -> None:  # fmt: skip
    documents: dict[str, str] = {}
    # an event is embedded with the turn before it in the same session (BM25 sees the turn
    # alone): a reply is about what it answers (LoCoMo hybrid recall@10 61.9 -> 64.9)
    embed_texts: dict[str, str] = {}
    given: dict = {}  # events whose writer gave their vector: indexed with it, not embedded
    max_chars = work.config.passage_max_chars
    for event in events:
        state = states[event.id]
        spans = state.passages
        if spans is None and len(content_text(event.content)) > max_chars:  # extracted earlier
            spans = state.passages = await work.index.split(event)
        _event_documents(work, event, spans, documents, embed_texts)
        vector = await work.state.given_vector(event.id)
        if vector is not None and not spans and len(vector) == work.ctx.embedder.dimension:
            given[event.id] = vector
            embed_texts.pop(event.id, None)
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
    # a reinforced fact keeps its text, so its vector is not recomputed
    await work.index.index_documents(batch.ops, documents, embed_known=False, embed_texts=embed_texts,
                                     given=given)  # fmt: skip
    work.state_ops(batch, events, states)
    await work.commit(batch)


def _event_documents(work: StageContext, event: Event, spans, documents: dict[str, str],
                     embed_texts: dict[str, str]) -> None:  # fmt: skip
    """An event's documents: its passages (each embedded alone) or its one turn, embedded with
    the previous turn of its session."""
    session = event.observed_actor.get("session")
    state = work.state
    if spans:
        parts = passage_documents(event, spans)
        documents.update(parts)
        state.previous_turn = (session, parts[next(reversed(parts))], event.id)
        return
    documents[event.id] = event_text(event)
    previous = state.previous_turn
    if previous is not None and previous[0] == session and session is not None:
        embed_texts[event.id] = f"{previous[1]}\n{documents[event.id]}"
    state.previous_turn = (session, documents[event.id], event.id)


async def restore(work: StageContext, pending: set[str]) -> None:
    """Rebuild the text and vector indexes after a (re)start: every derived event (not pending,
    not cancelled), fact, episode and belief; stored vectors are reused, missing ones embedded."""
    documents = await _event_documents_on_start(work, pending)
    tables = work.tables
    async for _, fact in tables.facts.scan():
        if not fact.excluded_from_recall:
            documents[fact.id] = fact_text(fact)
    async for _, episode in tables.episodes.scan():
        documents[episode.id] = episode_text(episode)
    async for _, belief in tables.beliefs.scan():
        documents[belief.id] = belief_text(belief)
    async for _, concept in tables.concepts.scan():
        if concept.stance != "deprecated":
            documents[concept.id] = concept_text(concept)
    vector_index = work.state.vector_index
    dimension = work.ctx.embedder.dimension
    async for doc_id, vector in tables.vectors.scan():
        if doc_id in documents and vector is not None and len(vector) == dimension:
            vector_index.add(doc_id, vector)
            if vector_index.needs_seal:  # segments merge after start, in the background
                await vector_index.seal(merge=False)
    await work.index.add_texts(documents)
    await _restore_given(work, documents, bool(pending))
    missing = [(d, t) for d, t in documents.items() if d not in vector_index]
    for start in range(0, len(missing), RESTORE_EMBED_CHUNK):  # e.g. after switching embedders
        ops: list = []
        await work.index.index_documents(ops, dict(missing[start : start + RESTORE_EMBED_CHUNK]))
        await tables.write(ops)


async def _restore_given(work: StageContext, documents: dict[str, str], pending: bool) -> None:
    """Events whose writer gave their vector and whose indexed vector is gone (a re-embed drops
    every ``V`` row): indexed with the given vector again, never re-embedded.  One of another
    dimension than the embedder's (a re-embed to another dimension) is left stored, unused."""
    tables, vector_index = work.tables, work.state.vector_index
    dimension = work.ctx.embedder.dimension
    ops: list = []
    found = False
    async for doc_id in tables.given_vectors.ids():  # values read only where needed
        found = True
        if doc_id not in documents or doc_id in vector_index:
            continue
        vector = await tables.given_vectors.get(doc_id)
        if vector is not None and len(vector) == dimension:
            vector_index.add(doc_id, vector)
            ops.append(tables.vectors.put_op(doc_id, vector))
            if vector_index.needs_seal:
                await vector_index.seal(merge=False)
            if len(ops) >= RESTORE_EMBED_CHUNK:
                await tables.write(ops)
                ops = []
    if ops:
        await tables.write(ops)
    work.state.given_stored = found and pending  # pending events read theirs from GV


async def _event_documents_on_start(work: StageContext, pending: set[str]) -> dict[str, str]:
    tables = work.tables
    documents: dict[str, str] = {}
    long_text = work.config.passage_max_chars
    async for _, event in tables.events.scan():
        if event.id in pending:
            continue
        state = await work.read_state(event.id)
        if state is not None and state.cancelled:
            continue
        session = event.observed_actor.get("session")
        spans = state.passages if state is not None else None
        if spans is None and len(content_text(event.content)) > long_text:
            spans = await work.index.split(event)  # indexed before passages: split now
            if state is not None:
                state.passages = spans
                await tables.write([work.state_op(event.id, state)])
        if spans:
            parts = passage_documents(event, spans)
            documents.update(parts)
            work.state.previous_turn = (session, parts[next(reversed(parts))], event.id)
        else:
            documents[event.id] = event_text(event)
            work.state.previous_turn = (session, documents[event.id], event.id)
    return documents
