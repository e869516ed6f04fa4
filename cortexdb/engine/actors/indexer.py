"""Feeding a scope's text and vector indexes (``PartitionState.text_index``/``vector_index``).

Every stage that derives a record indexes it here; vectors are persisted (table ``V``) in the
stage's atomic batch.  Large inputs are tokenised and embedded off the event loop
(``workers``) and added in slices between checkpoints, so requests keep being served.
"""

from __future__ import annotations

import functools
from collections.abc import Collection
from typing import Any

import numpy as np
import trio

from ..model import Event, EventState
from ..model.text import content_text, media_text, turn_text
from ..retrieve import passages
from ..retrieve.tokens import tokenize, tokenize_lines
from ..storage import Op
from .state import PartitionState
from .vector_backlog import EVENT_PREFIX, VectorBacklog, defers, embed_text
from .workers import OFF_LOOP_CHARS, in_slices, off_loop

CONCEPT_PREFIX = "concept_"
SLICE_DOCUMENTS = 64  # documents added to the indexes between two checkpoints of a large batch
# merge rounds (one plan a layer each) after a chunk of a restore: the seals a chunk makes and the
# merges they bring due take a few; the bound only keeps a stuck plan from looping
RESTORE_MERGES_MAX = 64


def passage_documents(event: Event, spans: list) -> dict[str, str]:
    """The index documents of a long event: one per passage, each led by the speaker (the
    first one followed by the event's blobs, ``media_text``)."""
    text, media = content_text(event.content), media_text(event.content)
    return {passages.passage_id(event.id, i): turn_text(event.actor, text[start:end] + (f" {media}" if media and not i else ""))
            for i, (start, end) in enumerate(spans)}  # fmt: skip


def document_tokens(item: tuple[str, str]) -> list[str]:
    """The text index's tokens of a document (``(id, text)``): a concept's summary, whose lines
    mostly recur from one version to the next, a line at a time (``tokenize_lines``: the same
    tokens as ``tokenize``)."""
    doc_id, text = item
    return tokenize_lines(text) if doc_id.startswith(CONCEPT_PREFIX) else tokenize(text)


class Indexer:
    def __init__(self, ctx: Any, state: PartitionState) -> None:
        self.ctx = ctx
        self.state = state
        self.vectors_table = state.tables.vectors
        self.background: trio.Nursery | None = None  # vector seals and merges run here
        self._vector_job = False
        self._vector_done = trio.Event()  # set while no vector job runs
        self._vector_done.set()
        self.backlog = VectorBacklog(self.embed)  # derived records waiting for their vectors
        self.deferring = defers(ctx.config, ctx.embedder)
        # ``V`` rows as the index keeps them: float16 rows when its delta is float16 (a restart
        # indexes the same values; half of float32's bytes written and compacted)
        self.half = ctx.config.vector_dtype == "float16"

    async def embed(self, texts: list[str], lines: list[bool] | None = None) -> np.ndarray:
        """Embed off the event loop when the embedder is a model, or when the texts are many (the
        hash embedder is cheap per text, not per megabyte).  ``lines``: which texts are concept
        summaries, embedded a line at a time by an embedder that can (``embed_lines``: the same
        vectors, the lines' features cached)."""
        embedder = self.ctx.embedder
        # an inline (hash) embedder: each text costs about 40 characters' worth on top of its length
        inline = getattr(embedder, "inline", False)
        if inline and sum(map(len, texts)) + 40 * len(texts) <= OFF_LOOP_CHARS:
            by_lines = getattr(embedder, "embed_lines", None)
            if by_lines is not None and lines is not None and any(lines):
                return by_lines(texts, lines)
            return embedder.embed(texts)
        if not inline:
            return await trio.to_thread.run_sync(embedder.embed, texts)  # a model releases the GIL
        vectors = await off_loop(self.ctx, functools.partial(in_slices, embedder.embed, texts, 2))
        return np.concatenate(vectors) if vectors else embedder.embed([])

    async def embed_sums(self, texts: list[str]) -> np.ndarray:
        """The embedder's unnormalised token-vector sums (``embed_sums``), off the loop like
        ``embed``."""
        embedder = self.ctx.embedder
        if getattr(embedder, "inline", False) and sum(map(len, texts)) + 40 * len(texts) <= OFF_LOOP_CHARS:
            return embedder.embed_sums(texts)
        return await trio.to_thread.run_sync(embedder.embed_sums, texts)

    async def add_texts(self, documents: dict[str, str]) -> None:
        """Add documents to the text index.  A large batch (a long text's passages, a restart) is
        tokenised in a worker thread, a chunk at a time, and added in slices between checkpoints,
        so requests keep being served meanwhile.  Sealed text segments due to merge are merged by
        the background job (a worker thread)."""
        await self._add_texts(documents)
        await self._settle_without_job()
        self._text_merges()

    async def _settle_without_job(self) -> None:
        """With no background job yet (a lane restoring its indexes), map the segments sealed in
        memory and merge those due here, a worker thread each, as the adds go: a restore would
        otherwise hold every sealed segment of the scope in memory until the job starts."""
        index = self.state.text_index
        for _ in range(RESTORE_MERGES_MAX):
            if self.background is not None or not index.needs_merge:
                return
            await index.merge()

    def _text_merges(self) -> None:
        """Start the background job when text segments are due to merge, or to be written to
        their files (a seal or a compaction builds them in memory: text_postings.py)."""
        if self.background is not None and not self._vector_job and self.state.text_index.needs_merge:
            self.start_vector_job()

    async def _add_texts(self, documents: dict[str, str]) -> None:
        if sum(len(text) for text in documents.values()) <= OFF_LOOP_CHARS:
            for item in documents.items():
                self.state.text_index.add(*item, document_tokens(item))
            return
        chunk: list[tuple[str, str]] = []
        size = 0
        for item in documents.items():
            chunk.append(item)
            size += len(item[1])
            if size >= 16 * OFF_LOOP_CHARS:
                await self._add_chunk(chunk)
                await self._settle_without_job()
                chunk, size = [], 0
        if chunk:
            await self._add_chunk(chunk)

    async def _add_chunk(self, chunk: list[tuple[str, str]]) -> None:
        tokens = await off_loop(self.ctx, functools.partial(in_slices, document_tokens, chunk, 1))
        index = self.state.text_index
        for position, ((doc_id, text), terms) in enumerate(zip(chunk, tokens, strict=True), 1):
            index.add(doc_id, text, terms)
            if position % SLICE_DOCUMENTS == 0:
                await trio.lowlevel.checkpoint()

    async def index_documents(
        self, ops: list[Op] | None, documents: dict[str, str], *, embed_known: bool = True,
        embed_texts: dict[str, str] | None = None, vectors: dict[str, np.ndarray] | None = None,
        stored: Collection[str] = (),
    ) -> None:  # fmt: skip
        """Add records to the text and vector indexes; vectors are persisted with ``ops``.
        ``embed_texts``: what to embed instead of a document's text; ``vectors``: documents'
        vectors computed already (stages/index.py: turns with their context); ``stored``: those
        of them kept already (a writer's given vector, in ``GV``): indexed, no ``V`` row."""
        if not documents:
            return
        await self.add_texts(documents)
        vector_index, backlog = self.state.vector_index, self.backlog
        given = vectors or {}
        texts = embed_texts or {}
        todo = {d: embed_text(d, texts.get(d, t)) for d, t in documents.items()
                if d not in given and (embed_known or (d not in vector_index and d not in backlog))}  # fmt: skip
        if self.deferring:  # derived records wait (vector_backlog.py)
            for doc_id in [d for d in todo if not d.startswith(EVENT_PREFIX)]:
                backlog.put(doc_id, todo.pop(doc_id), held=ops is not None)  # until its batch is written
        lines = [doc_id.startswith(CONCEPT_PREFIX) for doc_id in todo]
        computed = await self.embed(list(todo.values()), lines) if todo else []
        await self.add_vectors(ops, [*given.items(), *zip(todo, computed, strict=True)], stored)
        if len(backlog) >= self.ctx.config.derived_vectors_backlog:
            await self.drain(ops)

    async def drain(self, ops: list[Op] | None = None, prefixes=None, *, skip_held: bool = False) -> None:
        """Embed the derived records waiting for their vectors (of ``prefixes`` only, when
        given; with ``skip_held``, not those of a batch not written yet: a recall's) and index
        them; their vectors go into ``ops`` (a stage's batch) or are written now."""
        pairs = await self.backlog.take(prefixes, skip_held=skip_held)
        if not pairs:
            return
        own: list[Op] = [] if ops is None else ops
        await self.add_vectors(own, pairs)
        if ops is None:
            await self.state.tables.write(own)

    async def add_vectors(self, ops: list[Op] | None, pairs: list[tuple[str, np.ndarray]],
                          stored: Collection[str] = ()) -> None:  # fmt: skip
        """Index (id, vector) pairs and persist them with ``ops`` (but those ``stored`` already:
        a given vector's one copy is its ``GV`` row); seal what is due."""
        if not pairs:
            return
        vector_index = self.state.vector_index
        for position, (doc_id, vector) in enumerate(pairs, 1):
            if position % SLICE_DOCUMENTS == 0:
                await trio.lowlevel.checkpoint()
            vector_index.add(doc_id, vector)
            if ops is not None and doc_id not in stored:
                row = np.asarray(vector).astype(np.float16) if self.half else vector  # as the delta casts
                ops.append(self.vectors_table.put_op(doc_id, row))
        if vector_index.needs_seal:
            if self.background is None:
                await vector_index.seal()
            elif not self._vector_job:
                self.start_vector_job()

    @property
    def vector_job_running(self) -> bool:
        return self._vector_job

    async def vector_job_finished(self) -> None:
        await self._vector_done.wait()

    def start_vector_job(self) -> None:
        """Seal and merge vector segments, and merge sealed text segments, beside derivation, which
        goes on meanwhile (the indexes take adds and removes while a segment builds; decisions.md,
        "Recall at 100k" and "BM25 in sealed segments")."""
        index, text = self.state.vector_index, self.state.text_index
        self._vector_job = True
        self._vector_done = trio.Event()

        async def job() -> None:
            try:
                while index.needs_seal or index.needs_merge or text.needs_merge:
                    if index.needs_seal:
                        await index.seal()
                    elif index.needs_merge:
                        await index.merge()
                    else:  # sealed text segments (text_postings.py), also in a worker thread
                        await text.merge()
            finally:
                self._vector_job = False
                self._vector_done.set()

        assert self.background is not None
        self.background.start_soon(job)

    def unindex(self, ops: list[Op] | None, doc_id: str) -> None:
        self.backlog.drop(doc_id)
        self.state.closed.discard(doc_id)  # a deleted fact or belief
        self.state.text_index.remove(doc_id)
        self.state.vector_index.remove(doc_id)
        self._text_merges()  # a removal may have compacted a text layer (in memory)
        if ops is not None:
            ops.append(self.vectors_table.delete_op(doc_id))

    def unindex_event(self, ops: list[Op] | None, event_id: str, state: EventState) -> None:
        """Remove an event from the indexes: its document, or each of its passages; and the
        vector its writer gave, if any (a cancel, redaction or deletion: it goes for good)."""
        self.unindex(ops, event_id)
        self.state.given.pop(event_id, None)
        if ops is not None:
            ops.append(self.state.tables.given_vectors.delete_op(event_id))
        for index in range(len(state.passages or ())):
            self.unindex(ops, passages.passage_id(event_id, index))

    async def split(self, event: Event) -> list[list[int]]:
        """The passages of a long event's text (off the loop when very long)."""
        text = content_text(event.content)
        max_chars = self.ctx.config.passage_max_chars
        if len(text) > OFF_LOOP_CHARS:
            spans = await off_loop(self.ctx, functools.partial(passages.split, text, max_chars))
        else:
            spans = passages.split(text, max_chars)
        return [list(span) for span in spans]
