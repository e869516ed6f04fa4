"""The derivation lane of a ScopeActor: extract → index → consolidate → compress.

The lane is one Trio task, a child of its actor, so slow derivation never blocks the mailbox.
It exclusively owns the scope's derived state (facts, beliefs, episodes, the text index) and the
per-event pipeline state (``X`` keys) once an event is captured.  It takes events in WAL order,
in batches; each stage writes its results, the events' new state and its lifecycle records in
one atomic batch, then publishes.  An event keeps a ``P`` marker until its last step, so a
restarted actor resumes exactly the unfinished stages.  Control items (cancel, foreign
consolidation, derives back-pointers, flush, rebuild) run between batches.
"""

from __future__ import annotations

import collections
import datetime as dt
import functools
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np
import trio

from .. import jsoncodec, keys
from ..derive import beliefs as belief_math
from ..derive import episodes as episode_rules
from ..derive.facts import noisy_or, object_key, resolve
from ..derive.intake import Selection, select
from ..envelope import provenance_source
from ..model import (
    Belief,
    CausalLink,
    ConfidenceInterval,
    Episode,
    Event,
    Fact,
    LifecycleEvent,
    RevisionPolicy,
    SupportRef,
    TypedRef,
    TypedValue,
    dumps,
    encode_json,
    loads,
    to_wire,
)
from ..retrieve import passages
from ..retrieve.layered import LayeredTextIndex, LayeredVectorIndex
from ..retrieve.text_index import tokenize
from ..spi.extractor import ExtractionContext, TermRef
from ..spi.kv import Delete, Put
from ..temporal import format_ts, parse_duration, parse_rfc3339
from .messages import ReplySlot
from .services import EntityResolver

if TYPE_CHECKING:
    from .scope_actor import ScopeActor

log = logging.getLogger("cortexdb.pipeline")

STEPS = ("captured", "extracted", "indexed", "consolidated", "episode")
FACT_SUPPORTS_KEPT = 64  # supports kept in a fact record: the first and the latest 63
# CPU work on more text than this (characters) runs in a worker (thread or process), not on the
# event loop: about 20 ms of extraction, tokenising or hash-embedding (decisions.md, "Bounded work")
OFF_LOOP_CHARS = 16_384
SLICE_DOCUMENTS = 64  # documents added to the indexes between two checkpoints of a large batch
SLICE_PAIRS = 16  # (subject, predicate) pairs revised between two checkpoints


def speaker_name(actor_id: str) -> str:
    """``user:caroline_smith`` -> ``caroline smith``: how a turn's speaker is named in the index."""
    return actor_id.split(":", 1)[-1].replace("_", " ")


def event_text(event: Event) -> str:
    """What the indexes see of an event: who said it, then what was said.  The speaker is part of
    the memory — questions name people, turns rarely do (on LoCoMo the speaker lifts MiniLM's
    turn recall@10 from 30 to 51, see docs/decisions.md)."""
    return f"{speaker_name(event.actor)}: {content_text(event)}"


def content_text(event: Event) -> str:
    return text_of(event.content)


def text_of(content: dict[str, Any]) -> str:
    """The text an event's content is indexed by (passage offsets index it)."""
    text = content.get("text")
    if isinstance(text, str):
        return text
    kind = content.get("kind")
    if kind == "triple":
        return f"{content.get('subject')} {content.get('predicate')} {content.get('object')}"
    if kind == "json":
        return jsoncodec.encode(content.get("data")).decode()
    return ""


def fact_text(fact: Fact) -> str:
    obj = fact.object
    value = obj.name if obj.type != "literal" else obj.value
    negation = "not " if fact.polarity < 0 else ""
    return f"{fact.subject.name or fact.subject.id} {negation}{fact.predicate.replace('_', ' ')} {value}"


def episode_text(episode: Episode) -> str:
    return f"{episode.name}. {episode.summary}"


def belief_text(belief: Belief) -> str:
    claim = belief.claim
    obj = claim["object"]
    value = obj.get("name") if obj.get("type") != "literal" else obj.get("value")
    subject = claim["subject"].get("name") or claim["subject"].get("id")
    return f"{subject} {claim['predicate'].replace('_', ' ')} {value}"


def passage_documents(event: Event, spans: list) -> dict[str, str]:
    """The index documents of a long event: one per passage, each led by the speaker."""
    text = content_text(event)
    speaker = speaker_name(event.actor)
    return {passages.passage_id(event.id, i): f"{speaker}: {text[start:end]}"
            for i, (start, end) in enumerate(spans)}  # fmt: skip


def clip(text: str, max_chars: int) -> str:
    """``text``, or its first ``max_chars`` characters cut at a word and marked: what an episode
    keeps of a long event (its opening, closing and title need the beginning, not the book)."""
    if len(text) <= max_chars:
        return text
    head = text[:max_chars]
    cut = head.rfind(" ")
    return (head[:cut] if cut > max_chars // 2 else head).rstrip() + " …"


HANDOVER_EVERY = 0.001  # seconds of a worker thread's work between two hand-overs of the GIL
_handover = threading.local()


def handover() -> None:
    """In a worker thread, once a millisecond: sleep 0 s, which hands the GIL to the event loop's
    thread if it waits for it — otherwise the loop waits up to ``sys.getswitchinterval()`` (5 ms)
    each time it wants it back (decisions.md, "Bounded work per request").  Nothing on a main
    thread: the event loop's own (a short text read inline), or a worker process's."""
    if threading.current_thread() is threading.main_thread():
        return
    now = time.perf_counter()
    if now - getattr(_handover, "last", 0.0) >= HANDOVER_EVERY:
        time.sleep(0)
        _handover.last = time.perf_counter()


def lower_priority() -> None:
    """A derivation worker process's start: yield the CPU to the server's own threads (os.nice;
    a process of its own, so no lock is held at the lower priority)."""
    try:
        os.nice(10)
    except (AttributeError, OSError):  # no nice on this platform, or not allowed
        pass


def in_slices(work, items: list, size: int) -> list:
    """``work`` over ``items``, ``size`` at a time (one at a time when 1), handing the GIL over
    between calls: what a worker runs (a module-level function, so a process can run it too)."""
    out = []
    for start in range(0, len(items), size):
        out.append(work(items[start : start + size]) if size > 1 else work(items[start]))
        handover()
    return out


def read_event(
    extractor, event: Event, *, max_chars: int, limit: int
) -> tuple[list | None, Selection, list[str]]:
    """Split a long text into passages, run the extractor (per passage for message and text
    content, whose rules read sentence by sentence) and select what the event derives.  Pure
    CPU work: the pipeline runs it in a worker (thread or process) for a long text."""
    text = content_text(event)
    spans = passages.split(text, max_chars) if len(text) > max_chars else None
    content = event.content
    labels = event.context.get("labels")

    def context(body: dict[str, Any]) -> ExtractionContext:
        return ExtractionContext(content=body, modality=event.modality, subject_id=event.subject["id"],
                                 observed_actor_id=event.actor,
                                 labels=tuple(labels) if isinstance(labels, list) else ())  # fmt: skip

    per_passage = content.get("kind") in ("message", "text") and content.get("text") is text
    if spans is not None and per_passage:
        contexts = (context({**content, "text": text[start:end]}) for start, end in spans)
    else:
        contexts = iter([context(content)])
    errors: list[str] = []

    def extractions():
        for item in contexts:
            try:
                yield extractor.extract(item)
                handover()
            except Exception as exc:  # an extractor bug must not stall the scope
                log.warning("extractor failed on %s: %r", event.id, exc)
                errors.append(repr(exc)[:500])

    directives = event.directives or {}
    wanted = directives.get("extract")
    selection = select(
        extractions(), limit=limit, floor=float(directives.get("confidence_floor") or 0.0),
        want_facts=wanted is None or "facts" in wanted, want_entities=wanted is None or "entities" in wanted,
        alias=EntityResolver.alias_of,
    )  # fmt: skip
    return spans, selection, errors


@attrs.define
class Assertion:
    """An extracted fact with its terms resolved: what fact resolution works on."""

    subject: TypedRef
    predicate: str
    object: TypedValue
    confidence: float
    single_valued: bool
    polarity: int
    extractor: str
    source: str
    valid_from: dt.datetime
    entity_ids: tuple[str, ...] = ()


@attrs.define
class Control:
    kind: str  # cancel | foreign | derived | flush | rebuild
    event_id: str | None = None
    payload: Any = None
    reply: ReplySlot | None = None


class StageBatch:
    """Writes, lifecycle records and entity references accumulated by one stage."""

    def __init__(self) -> None:
        self.ops: list[Put | Delete] = []
        self.records: list[LifecycleEvent] = []
        self.entity_ids: set[str] = set()
        self.committed = False
        self.now = None  # one timestamp for every lifecycle record of the stage


class Pipeline:
    def __init__(self, actor: ScopeActor) -> None:
        self.actor = actor
        ctx = actor.ctx
        self.ctx = ctx
        self.scope = actor.scope
        self.queue: collections.deque[str] = collections.deque()
        self.events: dict[str, Event] = {}
        self.controls: collections.deque[Control] = collections.deque()
        self._wakeup = trio.Event()
        self.stopping = False
        self.busy = False
        self.processed = 0
        # derived-state caches; coherent because this lane is the only writer of the scope's keys
        self._facts: dict[str, Fact] = {}
        self._new_supports: dict[str, list[str]] = {}  # fact id -> supports not yet written (FS)
        # (session, indexed text, event id) of the latest turn: the context of the next one's vector
        self._previous_turn: tuple[str | None, str, str] | None = None
        self._fact_ids: dict[tuple[str, str], list[str]] = {}
        self._beliefs: dict[str, Belief | None] = {}  # claim key -> belief (None = none stored)
        # per (subject, predicate): ids of facts with recorded_to unset (what resolution and
        # belief revision look at); the superseded history of a pair grows without bound
        self._current: dict[tuple[str, str], set[str]] = {}
        self._belief_by_id: dict[str, Belief] = {}
        self._deferred: set[str] = set()  # claim keys whose revision waits on the policy gate
        self._episode: Episode | None = None
        self._episode_loaded = False
        self._last_activity: dt.datetime | None = None
        self._last_sealed: str | None = None
        self._flush_waiters: list[tuple[ReplySlot, bool]] = []
        self.text_index = LayeredTextIndex()
        self.vector_index = self._new_vector_index()
        self._background: trio.Nursery | None = None  # vector seals and merges run here
        self._vector_job = False

    def _new_vector_index(self) -> LayeredVectorIndex:
        config = self.ctx.config
        data_dir = getattr(self.ctx.store, "path", None)  # segment files: LevelDB's data dir
        return LayeredVectorIndex(
            self.ctx.embedder.dimension,
            segment_size=config.vector_segment_size,
            trees=config.vector_trees,
            dtype=config.vector_dtype,
            directory=os.path.join(data_dir, "vector-segments") if data_dir else None,
            chunk_rows=config.vector_delta_chunk,
        )

    async def _embed(self, texts: list[str]) -> np.ndarray:
        """Embed off the event loop when the embedder is a model, or when the texts are many (the
        hash embedder is cheap per text, not per megabyte)."""
        embedder = self.ctx.embedder
        # an inline (hash) embedder: each text costs about 40 characters' worth on top of its length
        inline = getattr(embedder, "inline", False)
        if inline and sum(map(len, texts)) + 40 * len(texts) <= OFF_LOOP_CHARS:
            return embedder.embed(texts)
        if not inline:
            return await trio.to_thread.run_sync(embedder.embed, texts)  # a model releases the GIL
        vectors = await self._off_loop(functools.partial(in_slices, embedder.embed, texts, 2))
        return np.concatenate(vectors) if vectors else embedder.embed([])

    async def _off_loop(self, work):
        """Pure CPU work (a picklable call) off the event loop: in a worker process, or a worker
        thread when processes are off or cannot run it; at most ``derivation_worker_limit`` at
        once in the engine (the rest of the cores serve requests).  Shutdown need not wait."""
        ctx = self.ctx
        if ctx.cpu_workers == "process" and ctx.cpu_processes is not None:
            try:
                return await ctx.cpu_processes.run_sync(
                    work, kill_on_cancel=True, limiter=ctx.cpu_limiter
                )
            except Exception as exc:  # unpicklable extractor, a worker that cannot start, …
                if ctx.cpu_workers == "process":
                    log.warning("derivation runs in worker threads from now on: a worker process "
                                "could not run it (%r)", exc)  # fmt: skip
                    ctx.cpu_workers = "thread"
        return await trio.to_thread.run_sync(work, abandon_on_cancel=True, limiter=ctx.cpu_limiter)

    async def add_texts(self, documents: dict[str, str]) -> None:
        """Add documents to the text index.  A large batch (a long text's passages, a restart) is
        tokenised in a worker thread, a chunk at a time, and added in slices between checkpoints,
        so requests keep being served meanwhile."""
        if sum(len(text) for text in documents.values()) <= OFF_LOOP_CHARS:
            for doc_id, text in documents.items():
                self.text_index.add(doc_id, text)
            return
        chunk: list[tuple[str, str]] = []
        size = 0
        for item in documents.items():
            chunk.append(item)
            size += len(item[1])
            if size >= 16 * OFF_LOOP_CHARS:
                await self._add_chunk(chunk)
                chunk, size = [], 0
        if chunk:
            await self._add_chunk(chunk)

    async def _add_chunk(self, chunk: list[tuple[str, str]]) -> None:
        texts = [text for _, text in chunk]
        tokens = await self._off_loop(functools.partial(in_slices, tokenize, texts, 1))
        index = self.text_index
        for position, ((doc_id, text), terms) in enumerate(zip(chunk, tokens, strict=True), 1):
            index.add(doc_id, text, terms)
            if position % SLICE_DOCUMENTS == 0:
                await trio.lowlevel.checkpoint()

    async def index_documents(
        self, batch: StageBatch | None, documents: dict[str, str], *, embed_known: bool = True,
        embed_texts: dict[str, str] | None = None,
    ) -> None:
        """Add records to the text and vector indexes; vectors are persisted with ``batch``."""
        if not documents:
            return
        await self.add_texts(documents)
        todo = {d: t for d, t in documents.items() if embed_known or d not in self.vector_index}
        if not todo:
            return
        vectors = await self._embed([(embed_texts or {}).get(d, t) for d, t in todo.items()])
        for position, (doc_id, vector) in enumerate(zip(todo, vectors, strict=True), 1):
            if position % SLICE_DOCUMENTS == 0:
                await trio.lowlevel.checkpoint()
            self.vector_index.add(doc_id, vector)
            if batch is not None:
                batch.ops.append(
                    Put(keys.vector(self.scope, doc_id), vector.astype(np.float32).tobytes())
                )
        if self.vector_index.needs_seal:
            if self._background is None:
                await self.vector_index.seal()
            elif not self._vector_job:
                self._start_vector_job()

    def _start_vector_job(self) -> None:
        """Seal and merge vector segments beside derivation, which goes on meanwhile (the index
        takes adds and removes while a segment builds; decisions.md, "Recall at 100k")."""
        index = self.vector_index
        self._vector_job = True

        async def job() -> None:
            try:
                while index.needs_seal or index.needs_merge:
                    if index.needs_seal:
                        await index.seal()
                    else:
                        await index.merge()
            finally:
                self._vector_job = False

        assert self._background is not None
        self._background.start_soon(job)

    def unindex(self, batch: StageBatch | None, doc_id: str) -> None:
        self.text_index.remove(doc_id)
        self.vector_index.remove(doc_id)
        if batch is not None:
            batch.ops.append(Delete(keys.vector(self.scope, doc_id)))

    async def _split(self, event: Event) -> list[list[int]]:
        text = content_text(event)
        max_chars = self.ctx.config.passage_max_chars
        if len(text) > OFF_LOOP_CHARS:
            spans = await self._off_loop(functools.partial(passages.split, text, max_chars))
        else:
            spans = passages.split(text, max_chars)
        return [list(span) for span in spans]

    def unindex_event(self, batch: StageBatch | None, event_id: str, state: dict[str, Any]) -> None:
        """Remove an event from the indexes: its document, or each of its passages."""
        self.unindex(batch, event_id)
        for index in range(len(state.get("passages") or ())):
            self.unindex(batch, passages.passage_id(event_id, index))

    # -- feeding -------------------------------------------------------------------------------
    def enqueue(self, event: Event) -> None:
        if len(self.events) < self.ctx.config.pipeline_cache_events:
            self.events[event.id] = event  # beyond the cache the event reloads from storage
        self.queue.append(event.id)
        self._wakeup.set()

    def control(self, item: Control) -> None:
        self.controls.append(item)
        self._wakeup.set()

    def stop(self) -> None:
        self.stopping = True
        self._wakeup.set()

    @property
    def idle(self) -> bool:
        return not self.queue and not self.controls and not self.busy

    # -- the lane ------------------------------------------------------------------------------
    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as background:
            await self._restore()
            self._background = background
            task_status.started()
            if self.vector_index.needs_merge:
                self._start_vector_job()
            await self._lane()
            background.cancel_scope.cancel()

    async def _lane(self) -> None:
        while not self.stopping:
            if not self.queue and not self.controls:
                self._answer_flushes()
                self._wakeup = trio.Event()
                with trio.move_on_after(self.ctx.config.episode_idle_check):
                    await self._wakeup.wait()
                if not self.queue and not self.controls and not self.stopping:
                    await self._seal_if_idle()
                continue
            self.busy = True
            try:
                while self.controls and not self.stopping:
                    await self._handle_control(self.controls.popleft())
                if self.queue and not self.stopping:
                    await self._defer_to_captures()
                    while self.controls and not self.stopping:  # e.g. a cancel sent meanwhile
                        await self._handle_control(self.controls.popleft())
                    size = self.ctx.config.pipeline_batch
                    batch = [self.queue.popleft() for _ in range(min(size, len(self.queue)))]
                    if batch:
                        await self._process(batch)
            finally:
                self.busy = False
            await trio.lowlevel.checkpoint()

    async def _defer_to_captures(self) -> None:
        """Capture latency must not depend on derivation (DESIGN §3): while captures keep
        arriving, derivation waits until they pause for ``derivation_defer`` seconds — unless
        ``derivation_backlog_soft`` events are already queued, in which case it runs anyway."""
        config = self.ctx.config
        window = config.derivation_defer
        while len(self.queue) < config.derivation_backlog_soft and not self.stopping:
            quiet_for = trio.current_time() - self.actor.last_capture
            if quiet_for >= window and not self.actor.captures_waiting():
                return
            await trio.sleep(max(window - quiet_for, window / 4))

    def _answer_flushes(self) -> None:
        waiters, self._flush_waiters = self._flush_waiters, []
        for reply, _ in waiters:
            reply.set(True)

    async def _restore(self) -> None:
        """Rebuild the text and vector indexes and requeue unfinished events after a (re)start."""
        store = self.ctx.store
        pending: list[str] = []
        async for key, _ in store.scan(prefix=keys.pending_prefix(self.scope)):
            pending.append(keys.last_part(key))
        pending_set = set(pending)
        documents: dict[str, str] = {}
        async for _, raw in store.scan(prefix=keys.events_prefix(self.scope)):
            event = loads(raw, Event)
            if event.id in pending_set:
                continue
            state = await self.read_state(event.id) or {}
            if state.get("cancelled"):
                continue
            session = event.observed_actor.get("session")
            spans = state.get("passages")
            if spans is None and len(content_text(event)) > self.ctx.config.passage_max_chars:
                spans = await self._split(event)  # indexed before passages: split now
                if state:
                    state["passages"] = spans
                    await store.write([self.state_op(event.id, state)])
            if spans:
                parts = passage_documents(event, spans)
                documents.update(parts)
                self._previous_turn = (session, parts[next(reversed(parts))], event.id)
            else:
                documents[event.id] = event_text(event)
                self._previous_turn = (session, documents[event.id], event.id)
        async for _, raw in store.scan(prefix=keys.facts_prefix(self.scope)):
            fact = loads(raw, Fact)
            if not fact.excluded_from_recall:
                documents[fact.id] = fact_text(fact)
        async for _, raw in store.scan(prefix=keys.episodes_prefix(self.scope)):
            episode = loads(raw, Episode)
            documents[episode.id] = episode_text(episode)
        async for _, raw in store.scan(prefix=keys.beliefs_prefix(self.scope)):
            belief = loads(raw, Belief)
            documents[belief.id] = belief_text(belief)
        dimension = self.ctx.embedder.dimension
        async for key, raw in store.scan(prefix=keys.vectors_prefix(self.scope)):
            doc_id = keys.last_part(key)
            if doc_id in documents and len(raw) == dimension * 4:
                self.vector_index.add(doc_id, np.frombuffer(raw, dtype=np.float32))
                if self.vector_index.needs_seal:  # segments merge after start, in the background
                    await self.vector_index.seal(merge=False)
        await self.add_texts(documents)
        missing = [(d, t) for d, t in documents.items() if d not in self.vector_index]
        for start in range(0, len(missing), 512):  # e.g. after switching embedders (reembed)
            batch = StageBatch()
            await self.index_documents(batch, dict(missing[start : start + 512]))
            await store.write(batch.ops)
        for event_id in pending:
            raw = await store.get(keys.event(self.scope, event_id))
            if raw is not None:
                self.enqueue(loads(raw, Event))
        async for key, raw in store.scan(prefix=keys.foreign_work_prefix(self.scope)):
            work = jsoncodec.decode(raw)
            self.control(Control("foreign", event_id=keys.last_part(key), payload=work))

    # -- state ---------------------------------------------------------------------------------
    async def read_state(self, event_id: str) -> dict[str, Any] | None:
        raw = await self.ctx.store.get(keys.event_state(event_id))
        return jsoncodec.decode(raw) if raw else None

    @staticmethod
    def state_op(event_id: str, state: dict[str, Any]) -> Put:
        return Put(keys.event_state(event_id), encode_json(state))

    async def _commit(self, batch: StageBatch) -> None:
        ctx = self.ctx
        ops = batch.ops + ctx.entities.pending_ops(batch.entity_ids)
        batch.committed = True
        ops += [ctx.bus.put_op(record) for record in batch.records]
        try:
            await ctx.store.write(ops)
        except BaseException:
            ctx.bus.abort(batch.records)
            raise
        ctx.bus.commit(batch.records)
        ctx.entities.mark_persisted(batch.entity_ids)

    # -- one batch -----------------------------------------------------------------------------
    async def _process(self, batch_ids: list[str]) -> None:
        events: list[Event] = []
        states: dict[str, dict[str, Any]] = {}
        for event_id in batch_ids:
            event = self.events.pop(event_id, None)
            if event is None:
                raw = await self.ctx.store.get(keys.event(self.scope, event_id))
                event = loads(raw, Event) if raw else None
            state = await self.read_state(event_id)
            if event is None or state is None:
                continue
            events.append(event)
            states[event_id] = state
        work = [e for e in events if not states[e.id].get("cancelled")]
        for stage, runner in (
            ("extracted", self._extract),
            ("indexed", self._index),
            ("consolidated", self._consolidate),
            ("episode", self._compress),
        ):
            await self._cancels_first(states)
            todo = [
                e
                for e in work
                if stage not in states[e.id]["done"] and not states[e.id].get("cancelled")
            ]
            if todo:
                started = trio.current_time()
                batch = StageBatch()
                try:
                    await runner(todo, states, started, batch)
                except BaseException:
                    self.ctx.bus.abort(batch.records)  # never leave the bus waiting on us
                    raise
        self.processed += len(events)

    async def _cancels_first(self, states: dict[str, dict[str, Any]]) -> None:
        """A cancel of an event in the batch being derived runs before the batch's next stage
        (the stages await the store and worker threads, so one may arrive meanwhile)."""
        for item in [c for c in self.controls if c.kind == "cancel" and c.event_id in states]:
            self.controls.remove(item)
            await self._handle_control(item)
            states[item.event_id] = await self.read_state(item.event_id) or states[item.event_id]

    def _finish_stage(self, batch: StageBatch, event: Event, state: dict, stage: str, started: float,
                      payload: dict[str, Any] | None) -> None:  # fmt: skip
        state["done"].append(stage)
        state.setdefault("elapsed_ms", {})[_ELAPSED_NAME[stage]] = round(
            (trio.current_time() - started) * 1000, 3
        )
        if payload is not None:
            if batch.now is None:
                batch.now = self.ctx.clock.now()
            record = self.ctx.bus.reserve(stage, scope=self.scope, event_id=event.id, payload=payload,
                                          batch_id=event.batch_id, ts=batch.now)  # fmt: skip
            state["lce"].append(record.lifecycle_id)
            batch.records.append(record)

    # -- extract -------------------------------------------------------------------------------
    async def _extract(
        self, events: list[Event], states: dict, started: float, batch: StageBatch
    ) -> None:
        touched_facts: dict[str, Fact] = {}
        config = self.ctx.config
        limit = config.max_derived_per_event
        extractor_name = getattr(self.ctx.extractor, "name", type(self.ctx.extractor).__name__)
        for event in events:
            state = states[event.id]
            read = functools.partial(read_event, self.ctx.extractor, event,
                                     max_chars=config.passage_max_chars, limit=limit)  # fmt: skip
            if len(content_text(event)) > OFF_LOOP_CHARS:
                spans, selection, errors = await self._off_loop(read)
            else:
                spans, selection, errors = read()
            for message in errors[:5]:
                state["errors"].append(
                    {"stage": "extracted", "error": "EXTRACTOR_FAILED", "message": message}
                )
            if len(errors) > 5:
                state["errors"][-1]["failures"] = len(errors)
            if spans is not None:
                state["passages"] = [list(span) for span in spans]
            intake: list[dict[str, Any]] = []
            entity_ids: set[str] = set()
            source = provenance_source(event.modality, event.actor)
            valid_from = parse_rfc3339(event.context["observed_at"])
            for position, (step, item) in enumerate(selection.steps, 1):
                if position % SLICE_DOCUMENTS == 0:
                    await trio.lowlevel.checkpoint()  # up to max_derived_per_event assertions
                if step == "intake":
                    intake.append(item)
                    continue
                assertion = await self._assertion(event, item, extractor_name, source, valid_from)
                entity_ids.update(assertion.entity_ids)
                outcome = await self.apply_assertion(assertion, event.id, touched_facts)
                intake.append(outcome)
            for term in selection.entities:
                entity = await self.ctx.entities.resolve(event.tenant_id, term)
                entity_ids.add(entity.id)
            intake += selection.summary(limit)
            batch.entity_ids.update(entity_ids)
            fact_ids = [item["fact_id"] for item in intake if "fact_id" in item]
            for fact_id in fact_ids:
                if fact_id not in state["derives"]:
                    state["derives"].append(fact_id)
            state.setdefault("stage_derives", {})["extracted"] = sorted(set(fact_ids))
            state["intake"] = intake
            state["touched"] = sorted(
                {(touched_facts[f].subject.id, touched_facts[f].predicate) for f in fact_ids}
            )
            state["superseded"] = sorted({s for item in intake for s in item.get("superseded", ())})
            payload = {
                "event_id": event.id,
                "derived": {
                    "facts": len(set(fact_ids)),
                    "entities": len(entity_ids),
                    "beliefs": 0,
                    "episodes": 0,
                },
                "intake": intake,
            }
            if selection.facts_over or selection.entities_over:
                state["derived_records_limit"] = payload["derived_records_limit"] = {
                    "limit": limit, "facts_not_derived": selection.facts_over,
                    "entities_not_derived": selection.entities_over,
                }  # fmt: skip
            if spans is not None:
                payload["passages"] = len(spans)
            if selection.unread:
                payload["unread"] = (
                    f"content kind {event.content.get('kind')!r} is not read by {extractor_name}"
                )
            self._finish_stage(batch, event, state, "extracted", started, payload)
        self._fact_ops(batch, touched_facts)
        batch.ops += [self.state_op(e.id, states[e.id]) for e in events]
        await self._commit(batch)

    async def _assertion(self, event: Event, candidate, extractor_name: str, source: str,
                         valid_from: dt.datetime) -> Assertion:  # fmt: skip
        subject_entity = await self.ctx.entities.resolve(event.tenant_id, candidate.subject)
        entity_ids = [subject_entity.id]
        if isinstance(candidate.object_value, TermRef):
            obj_entity = await self.ctx.entities.resolve(event.tenant_id, candidate.object_value)
            entity_ids.append(obj_entity.id)
            obj = TypedValue(type="entity", id=obj_entity.id, name=obj_entity.name)
        else:
            obj = TypedValue(type="literal", datatype=candidate.datatype, value=candidate.object_value,
                             unit=candidate.unit)  # fmt: skip
        return Assertion(
            subject=TypedRef(type="entity", id=subject_entity.id, name=subject_entity.name),
            predicate=candidate.predicate,
            object=obj,
            confidence=candidate.confidence,
            single_valued=candidate.single_valued,
            polarity=candidate.polarity,
            extractor=f"{extractor_name}/{candidate.pattern}",
            source=source,
            valid_from=valid_from,
            entity_ids=tuple(entity_ids),
        )

    async def current_facts(self, subject_id: str, predicate: str) -> list[Fact]:
        """The facts of a pair that are not superseded (recorded_to unset), not excluded."""
        key = (subject_id, predicate)
        ids = self._current.get(key)
        if ids is None:
            facts = await self.facts_for(subject_id, predicate)
            ids = self._current[key] = {
                f.id for f in facts if f.recorded_to is None and not f.excluded_from_recall
            }
        return [self._facts[i] for i in sorted(ids) if i in self._facts]

    def _track(self, fact: Fact) -> None:
        ids = self._current.get((fact.subject.id, fact.predicate))
        if ids is None:
            return  # not loaded yet: the first current_facts() call computes it
        if fact.recorded_to is None and not fact.excluded_from_recall:
            ids.add(fact.id)
        else:
            ids.discard(fact.id)

    async def facts_for(self, subject_id: str, predicate: str) -> list[Fact]:
        key = (subject_id, predicate)
        ids = self._fact_ids.get(key)
        if ids is None:
            ids = []
            prefix = keys.fact_index_prefix(self.scope, subject_id, predicate)
            async for index_key, _ in self.ctx.store.scan(prefix=prefix):
                ids.append(keys.last_part(index_key))
            self._fact_ids[key] = ids
        out = []
        for fact_id in ids:
            fact = self._facts.get(fact_id)
            if fact is None:
                raw = await self.ctx.store.get(keys.fact(self.scope, fact_id))
                if raw is None:
                    continue
                fact = self._facts[fact_id] = loads(raw, Fact)
            out.append(fact)
        return out

    async def apply_assertion(
        self, assertion: Assertion, event_id: str, touched: dict[str, Fact]
    ) -> dict[str, Any]:
        """Resolve one assertion against the scope's facts (DESIGN §6); never drops anything."""
        current = await self.current_facts(assertion.subject.id, assertion.predicate)
        key = object_key(assertion.object)
        decision = resolve(object_key_=key, polarity=assertion.polarity, single_valued=assertion.single_valued,
                           valid_from=assertion.valid_from, current=current)  # fmt: skip
        now = self.ctx.clock.now()
        if decision.reinforce is not None:
            fact = self._facts[decision.reinforce]
            if not await self._supported_by(fact, event_id):  # replayed evidence counts once
                self._add_support(fact, event_id)
                fact.confidence = noisy_or(fact.confidence, assertion.confidence)
                fact.evidence_weight = round(fact.evidence_weight + assertion.confidence, 4)
                fact.reinforcements += 1
                if assertion.valid_from < fact.valid_from:
                    fact.valid_from = assertion.valid_from
            touched[fact.id] = fact
            return {"fact_id": fact.id, "status": "reinforced"}
        fact = Fact(
            id=self.ctx.ids.new("fact"),
            scope=self.scope,
            subject=assertion.subject,
            predicate=assertion.predicate,
            object=assertion.object,
            supports=[event_id],
            valid_from=assertion.valid_from,
            valid_to=decision.valid_to,
            recorded_from=now,
            confidence=round(assertion.confidence, 4),
            evidence_weight=round(assertion.confidence, 4),
            extractor=assertion.extractor,
            source=assertion.source,
            single_valued=assertion.single_valued,
            polarity=assertion.polarity,
            status=decision.status,
            conflicts_with=list(decision.conflicts_with),
        )
        self._new_supports.setdefault(fact.id, []).append(event_id)
        for old_id in decision.supersede:
            old = self._facts[old_id]
            old.valid_to = assertion.valid_from
            old.recorded_to = now
            old.superseded_by = fact.id
            fact.supersedes = fact.supersedes or old_id
            self._track(old)
            touched[old.id] = old
        for other_id in decision.conflicts_with:
            other = self._facts[other_id]
            if fact.id not in other.conflicts_with:
                other.conflicts_with.append(fact.id)
            touched[other.id] = other
        self._facts[fact.id] = fact
        self._fact_ids.setdefault((fact.subject.id, fact.predicate), []).append(fact.id)
        self._track(fact)
        touched[fact.id] = fact
        outcome: dict[str, Any] = {"fact_id": fact.id, "status": decision.status}
        if decision.supersede:
            outcome["superseded"] = list(decision.supersede)
        if decision.conflicts_with:
            outcome["conflicts_with"] = list(decision.conflicts_with)
        return outcome

    async def _supported_by(self, fact: Fact, event_id: str) -> bool:
        if event_id in fact.supports or event_id in self._new_supports.get(fact.id, ()):
            return True
        if fact.supports_total <= len(fact.supports):
            return False  # the record holds every support
        return await self.ctx.store.get(keys.fact_support(self.scope, fact.id, event_id)) is not None

    def _add_support(self, fact: Fact, event_id: str) -> None:
        """Every support goes to the ``FS`` table; the record keeps the first and the latest
        ``FACT_SUPPORTS_KEPT - 1`` (a statement repeated 10,000 times must not make its fact a
        400 KB record that recall decodes; the API says ``supports_total`` and pages the rest)."""
        fact.supports.append(event_id)
        fact.supports_total += 1
        if len(fact.supports) > FACT_SUPPORTS_KEPT:
            del fact.supports[1 : len(fact.supports) - FACT_SUPPORTS_KEPT + 1]
        self._new_supports.setdefault(fact.id, []).append(event_id)

    def _fact_ops(self, batch: StageBatch, touched: dict[str, Fact]) -> None:
        for fact in touched.values():
            for event_id in self._new_supports.pop(fact.id, ()):
                batch.ops.append(Put(keys.fact_support(self.scope, fact.id, event_id), b""))
            batch.ops.append(Put(keys.fact(self.scope, fact.id), dumps(fact)))
            batch.ops.append(
                Put(keys.fact_index(self.scope, fact.subject.id, fact.predicate, fact.id), b"")
            )

    # -- index ---------------------------------------------------------------------------------
    async def _index(
        self, events: list[Event], states: dict, started: float, batch: StageBatch
    ) -> None:
        documents: dict[str, str] = {}
        # an event is embedded with the turn before it in the same session (BM25 sees the turn
        # alone): a reply is about what it answers (LoCoMo hybrid recall@10 61.9 -> 64.9)
        embed_texts: dict[str, str] = {}
        max_chars = self.ctx.config.passage_max_chars
        for event in events:
            state = states[event.id]
            session = event.observed_actor.get("session")
            spans = state.get("passages")
            if spans is None and len(content_text(event)) > max_chars:  # extracted before passages
                spans = state["passages"] = await self._split(event)
            if spans:  # a long text: its passages are the documents, each embedded alone
                parts = passage_documents(event, spans)
                documents.update(parts)
                self._previous_turn = (session, parts[next(reversed(parts))], event.id)
            else:
                documents[event.id] = event_text(event)
                previous = self._previous_turn
                if previous is not None and previous[0] == session and session is not None:
                    embed_texts[event.id] = f"{previous[1]}\n{documents[event.id]}"
                self._previous_turn = (session, documents[event.id], event.id)
            layers = ["events"]
            facts = [
                self._facts[f]
                for f in state["derives"]
                if f.startswith("fact_") and f in self._facts
            ]
            for fact in facts:
                documents[fact.id] = fact_text(fact)
            if facts:
                layers.append("facts")
            payload = {
                "event_id": event.id,
                "layers_indexed": layers,
                "indexes": ["text", "vector"],
            }
            if spans:
                payload["passages"] = len(spans)
            self._finish_stage(batch, event, state, "indexed", started, payload)
        # a reinforced fact keeps its text, so its vector is not recomputed
        await self.index_documents(batch, documents, embed_known=False, embed_texts=embed_texts)
        batch.ops += [self.state_op(e.id, states[e.id]) for e in events]
        await self._commit(batch)

    # -- consolidate ---------------------------------------------------------------------------
    async def _consolidate(
        self, events: list[Event], states: dict, started: float, batch: StageBatch
    ) -> None:
        created_beliefs: dict[str, str] = {}  # embedded once per batch, not once per event
        for event in events:
            state = states[event.id]
            directives = event.directives or {}
            wanted = directives.get("extract")
            summary = {"created": [], "revised": [], "deleted": [], "deferred": []}
            if wanted is None or "beliefs" in wanted:
                touched = [tuple(pair) for pair in state.get("touched", ())]
                closed = tuple(state.get("superseded", ()))
                await self.revise_beliefs(batch, touched, event.id, summary, closed)
            for belief_id in summary["created"] + summary["revised"]:
                if belief_id not in state["derives"]:
                    state["derives"].append(belief_id)
            state.setdefault("stage_derives", {})["consolidated"] = (
                summary["created"] + summary["revised"]
            )
            created_beliefs.update(
                {b: belief_text(self._belief_by_id[b]) for b in summary["created"]}
            )
            for belief_id in summary["deleted"]:
                created_beliefs.pop(belief_id, None)
                self.unindex(batch, belief_id)
            intake = state.get("intake", ())
            payload: dict[str, Any] = {
                "event_id": event.id,
                "beliefs_updated": len(summary["created"]) + len(summary["revised"]),
                "beliefs_created": len(summary["created"]),
                "beliefs_deleted": len(summary["deleted"]),
                "beliefs_deferred": len(summary["deferred"]),
                "conflicts_resolved": sum(1 for item in intake if item.get("superseded")),
                "conflicts_detected": sum(
                    1 for item in intake if item["status"] == "conflict_detected"
                ),
                "superseded_facts": state.get("superseded", []),
                "intake": intake,
            }
            target = directives.get("consolidate_into")
            if target and target != self.scope:
                payload["consolidate_into"] = {"scope": target, "status": "queued"}
            # reserve our record first: the target's record is then published after it
            self._finish_stage(batch, event, state, "consolidated", started, payload)
            if target and target != self.scope:
                await self._hand_off(event, state, target)
        await self.index_documents(batch, created_beliefs)
        batch.ops += [self.state_op(e.id, states[e.id]) for e in events]
        await self._commit(batch)

    async def _hand_off(self, event: Event, state: dict, target: str) -> None:
        """Durably queue this event's assertions for consolidation into another scope."""
        facts = [
            self._facts[f] for f in state["derives"] if f.startswith("fact_") and f in self._facts
        ]
        payload = {
            "source_scope": self.scope,
            "tenant_id": event.tenant_id,
            "want_beliefs": (event.directives.get("extract") is None or "beliefs" in event.directives["extract"]),
            "assertions": [
                {
                    "subject": to_wire(f.subject), "predicate": f.predicate, "object": to_wire(f.object),
                    "confidence": f.confidence, "single_valued": f.single_valued, "polarity": f.polarity,
                    "extractor": f.extractor, "source": f.source, "valid_from": format_ts(f.valid_from),
                }
                for f in facts
                if event.id in f.supports
            ],
        }  # fmt: skip
        await self.actor.ctx.supervisor.consolidate_foreign(target, self.scope, event.id, payload)
        state.setdefault("foreign", [])
        if target not in state["foreign"]:
            state["foreign"].append(target)

    async def revise_beliefs(
        self, batch: StageBatch, touched, event_id: str, summary: dict, closed: tuple[str, ...] = ()
    ) -> None:
        """Revise the beliefs of the touched pairs from their current facts, plus ``closed``: the
        facts this event superseded or excluded, whose claims need one last revision."""
        pairs = set(touched)
        for claim in list(self._deferred):
            subject_id, predicate, _ = claim.split("\x1f")
            pairs.add((subject_id, predicate))
        extra: dict[tuple[str, str], list[Fact]] = {}
        for fact_id in closed:
            fact = self._facts.get(fact_id)
            if fact is not None:
                extra.setdefault((fact.subject.id, fact.predicate), []).append(fact)
                pairs.add((fact.subject.id, fact.predicate))
        for position, (subject_id, predicate) in enumerate(sorted(pairs), 1):
            if position % SLICE_PAIRS == 0:
                await trio.lowlevel.checkpoint()  # the store's reads do not yield
            facts = await self.current_facts(subject_id, predicate)
            seen = {f.id for f in facts}
            facts += [f for f in extra.get((subject_id, predicate), ()) if f.id not in seen]
            await self._revise_pair(batch, subject_id, predicate, facts, summary)

    async def _belief_for(self, claim: str) -> Belief | None:
        if claim in self._beliefs:
            return self._beliefs[claim]
        belief = None
        raw_id = await self.ctx.store.get(keys.belief_claim(self.scope, claim))
        if raw_id is not None:
            raw = await self.ctx.store.get(keys.belief(self.scope, raw_id.decode()))
            belief = loads(raw, Belief) if raw else None
        self._beliefs[claim] = belief
        return belief

    async def _revise_pair(self, batch: StageBatch, subject_id: str, predicate: str, facts: list[Fact],
                           summary: dict) -> None:  # fmt: skip
        before: dict[str, tuple] = {}  # what each existing belief looked like before revision
        now = self.ctx.clock.now()
        floor = self.ctx.config.confidence_floor
        live = [
            f
            for f in facts
            if f.recorded_to is None and f.valid_to is None and not f.excluded_from_recall
        ]
        # the latest positive assertion represents a claim; excluded ones still name their claim,
        # so a belief that rested only on them is revisited (and deleted for lack of evidence)
        claims: dict[str, Fact] = {}
        for fact in sorted(facts, key=lambda f: (not f.excluded_from_recall, f.recorded_from)):
            if fact.polarity > 0:
                claims[object_key(fact.object)] = fact
        results: dict[str, Belief] = {}
        live_keyed = [(object_key(f.object), f) for f in live]
        positive_single = [(k, f) for k, f in live_keyed if f.polarity > 0 and f.single_valued]
        for okey, representative in claims.items():
            claim = f"{subject_id}\x1f{predicate}\x1f{okey}"
            supporting = [f for k, f in live_keyed if k == okey and f.polarity > 0]
            belief = await self._belief_for(claim)
            if belief is not None and belief.id not in before:
                before[belief.id] = _signature(belief)
            if not supporting and (belief is None or belief.valid_to is not None):
                continue  # no live evidence: nothing to create, or history already closed
            against = [f for k, f in live_keyed if k == okey and f.polarity < 0]
            against += [f for k, f in positive_single if k != okey]
            weight_for = sum(_weight(f) for f in supporting)
            weight_against = sum(_weight(f) for f in against)
            mean, lower, upper = belief_math.posterior(weight_for, weight_against)
            stance = belief_math.stance(mean, weight_against)
            total = (weight_for + weight_against) or 1.0
            supports = [SupportRef(type="fact", id=f.id, weight=round(_weight(f) / total, 4), polarity="supports")
                        for f in supporting]  # fmt: skip
            supports += [SupportRef(type="fact", id=f.id, weight=round(_weight(f) / total, 4), polarity="against")
                         for f in against]  # fmt: skip
            if belief_math.should_delete(mean, stance, floor, weight_for, weight_against):
                if belief is not None:
                    self._delete_belief(
                        batch,
                        claim,
                        belief,
                        now,
                        "below_confidence_floor"
                        if weight_for or weight_against
                        else "no_remaining_evidence",
                    )
                    summary["deleted"].append(belief.id)
                self._deferred.discard(claim)
                continue
            interval = ConfidenceInterval(lower=round(lower, 4), upper=round(upper, 4), method="beta_posterior",
                                          level=belief_math.LEVEL)  # fmt: skip
            valid_from = min((f.valid_from for f in supporting), default=None)
            evidence = {"for": round(weight_for, 4), "against": round(weight_against, 4)}
            if belief is None:
                belief_id = self.ctx.ids.new("belief")
                belief = Belief(
                    id=belief_id, scope=self.scope,
                    claim={"subject": to_wire(representative.subject), "predicate": predicate,
                           "object": to_wire(representative.object)},
                    stance=stance, confidence=round(mean, 4), confidence_interval=interval,
                    supports=supports, valid_from=valid_from, recorded_from=now, last_revised_at=now,
                    why_url=f"/v1/beliefs/why?belief_id={belief_id}", evidence=evidence,
                    revision_policy=self._default_policy(),
                )  # fmt: skip
                summary["created"].append(belief.id)
                batch.ops.append(Put(keys.belief_claim(self.scope, claim), belief.id.encode()))
            else:
                belief.supports = supports
                belief.evidence = evidence
                if valid_from is not None:
                    belief.valid_from = valid_from
                    belief.valid_to = None  # new live evidence reopens a closed claim
                else:
                    # every supporting fact was superseded: the claim held until the last of them ended
                    ended = [
                        f.valid_to
                        for f in facts
                        if object_key(f.object) == okey and f.valid_to is not None
                    ]
                    belief.valid_to = max(ended) if ended else now
                policy = belief.revision_policy
                changed = (
                    abs(mean - belief.confidence) >= policy.min_evidence_delta
                    or stance != belief.stance
                )
                if changed:
                    if self._gated(belief, now):
                        belief.partial, belief.partial_reason = True, "revision_in_progress"
                        self._deferred.add(claim)
                        summary["deferred"].append(belief.id)
                    else:
                        belief.confidence = round(mean, 4)
                        belief.confidence_interval = interval
                        belief.stance = stance
                        belief.revision_count += 1
                        belief.last_revised_at = now
                        start = belief.revision_window_start
                        if start is None or now - start >= dt.timedelta(hours=1):
                            belief.revision_window_start, belief.revisions_in_window = now, 0
                        belief.revisions_in_window += 1
                        belief.partial, belief.partial_reason = False, None
                        self._deferred.discard(claim)
                        summary["revised"].append(belief.id)
            self._beliefs[claim] = belief
            self._belief_by_id[belief.id] = belief
            results[okey] = belief
        # rival claims of a single-valued predicate are in tension with each other
        by_claim: dict[str, list[Fact]] = {}
        for fact in facts:
            by_claim.setdefault(object_key(fact.object), []).append(fact)
        ids = {okey: {f.id for f in group} for okey, group in by_claim.items()}
        successors = {
            okey: {f.superseded_by for f in group if f.superseded_by}
            for okey, group in by_claim.items()
        }
        rivals = {
            okey: {c for f in group for c in f.conflicts_with} for okey, group in by_claim.items()
        }
        for okey, belief in results.items():
            contradicts = []
            if claims[okey].single_valued:
                for other_key, other in results.items():
                    if other_key == okey:
                        continue
                    if successors[okey] & ids[other_key] or successors[other_key] & ids[okey]:
                        resolution = "newer_wins"
                    elif rivals[okey] & ids[other_key]:
                        resolution = "unresolved"
                    else:
                        resolution = "higher_confidence_wins"
                    contradicts.append({"belief_id": other.id, "tension": belief_math.tension(belief.confidence, other.confidence),
                                        "resolution": resolution})  # fmt: skip
            belief.contradicts = contradicts
            if before.get(belief.id) != _signature(belief):  # unchanged beliefs are not rewritten
                batch.ops.append(Put(keys.belief(self.scope, belief.id), dumps(belief)))

    def _default_policy(self) -> RevisionPolicy:
        config = self.ctx.config
        return RevisionPolicy(
            min_evidence_delta=config.belief_min_evidence_delta,
            cooldown=config.belief_cooldown,
            max_revisions_per_hour=config.belief_max_revisions_per_hour,
        )

    def _gated(self, belief: Belief, now: dt.datetime) -> bool:
        policy: RevisionPolicy = belief.revision_policy
        cooldown = parse_duration(policy.cooldown)
        if cooldown and now - belief.last_revised_at < cooldown:
            return True
        start = belief.revision_window_start
        if start is None or now - start >= dt.timedelta(hours=1):
            return False  # a new hour window begins with this revision
        return belief.revisions_in_window >= policy.max_revisions_per_hour

    def _delete_belief(
        self, batch: StageBatch, claim: str, belief: Belief, now: dt.datetime, reason: str
    ) -> None:
        batch.ops.append(Delete(keys.belief(self.scope, belief.id)))
        batch.ops.append(Delete(keys.belief_claim(self.scope, claim)))
        note = {
            "belief_id": belief.id,
            "deleted_at": format_ts(now),
            "reason": reason,
            "confidence": belief.confidence,
        }
        batch.ops.append(Put(keys.belief_deleted(self.scope, belief.id), jsoncodec.encode(note)))
        self._beliefs[claim] = None

    # -- compress (episodes) --------------------------------------------------------------------
    async def _load_episode(self) -> None:
        if self._episode_loaded:
            return
        self._episode_loaded = True
        raw_id = await self.ctx.store.get(keys.open_episode(self.scope, "main"))
        if raw_id is not None:
            raw = await self.ctx.store.get(keys.episode(self.scope, raw_id.decode()))
            self._episode = loads(raw, Episode) if raw else None

    async def _compress(
        self, events: list[Event], states: dict, started: float, batch: StageBatch
    ) -> None:
        await self._load_episode()
        config = self.ctx.config
        gap = dt.timedelta(seconds=config.episode_gap_seconds)
        dirty: dict[str, Episode] = {}
        now = self.ctx.clock.now()
        for event in events:
            state = states[event.id]
            observed = parse_rfc3339(event.context["observed_at"])
            session = event.observed_actor.get("session")
            episode = self._episode
            if episode is not None and episode_rules.closes_window(
                strategy=config.episode_strategy, gap=gap, max_events=config.episode_max_events,
                episode_events=len(episode.events), episode_ended_at=episode.ended_at,
                episode_session=episode.session, observed_at=observed, session=session,
            ):  # fmt: skip
                self._seal(batch, episode, now)
                dirty[episode.id] = episode
                predecessor = episode.id
                episode = None
            else:
                predecessor = episode.causal_predecessor if episode else None
            text = clip(content_text(event), config.passage_max_chars)
            if episode is None:
                episode = Episode(
                    id=self.ctx.ids.new("ep"), scope=self.scope,
                    name=episode_rules.title(text, event.context.get("intent"), f"{event.modality} episode"),
                    summary="", events=[], supports=[], started_at=observed, ended_at=observed,
                    valid_from=observed, recorded_from=now, strategy=config.episode_strategy,
                    session=session, causal_predecessor=predecessor or self._last_sealed,
                    opening=text or None, partial=True, partial_reason="episode_open",
                )  # fmt: skip
                batch.ops.append(Put(keys.open_episode(self.scope, "main"), episode.id.encode()))
            self._episode = episode
            episode.events.append(event.id)
            episode.supports.append(event.id)
            episode.started_at = min(episode.started_at, observed)
            episode.valid_from = episode.started_at
            episode.ended_at = max(episode.ended_at, observed)
            if event.actor not in episode.actors_involved:
                episode.actors_involved.append(event.actor)
            if any(d.startswith("fact_") for d in state["derives"]):
                episode.informative_events += 1
            if text:
                episode.closing = text
            role = episode_rules.role_of(
                text, len(episode.events) - 1, len(episode.events), sealed=False
            )
            episode.causal_chain.append(CausalLink(event=event.id, role=role))
            self._describe(episode)
            dirty[episode.id] = episode
            state["episode_id"] = episode.id
            state.setdefault("stage_derives", {})["episode"] = [episode.id]
            if episode.id not in state["derives"]:
                state["derives"].append(episode.id)
            self._finish_stage(batch, event, state, "episode", started, None)
            batch.ops.append(Delete(keys.pending(self.scope, event.id)))
        self._last_activity = now
        for episode in dirty.values():
            batch.ops.append(Put(keys.episode(self.scope, episode.id), dumps(episode)))
        await self.index_documents(batch, {e.id: episode_text(e) for e in dirty.values()})
        batch.ops += [self.state_op(e.id, states[e.id]) for e in events]
        await self._commit(batch)

    @staticmethod
    def _describe(episode: Episode) -> None:
        count = len(episode.events)
        episode.centrality_score = round(episode.informative_events / count, 4) if count else 0.0
        episode.summary = episode_rules.summary(
            count, episode.opening, episode.closing, episode.actors_involved,
            format_ts(episode.started_at), format_ts(episode.ended_at),
        )  # fmt: skip

    def _seal(self, batch: StageBatch, episode: Episode, now: dt.datetime) -> None:
        episode.status = "compressed"
        episode.sealed_at = now
        episode.partial, episode.partial_reason = False, None
        if len(episode.causal_chain) > 1:
            episode.causal_chain[-1].role = "outcome"
        self._describe(episode)
        batch.ops.append(Delete(keys.open_episode(self.scope, "main")))
        last_event = episode.events[-1]
        record = self.ctx.bus.reserve(
            "compressed", scope=self.scope, event_id=last_event,
            payload={"episode_id": episode.id, "understanding_ids": [], "event_count": len(episode.events)},
        )  # fmt: skip
        batch.records.append(record)
        self._last_sealed = episode.id
        if self._episode is episode:
            self._episode = None

    async def seal_open_episode(self) -> str | None:
        await self._load_episode()
        episode = self._episode
        if episode is None:
            return None
        batch = StageBatch()
        self._seal(batch, episode, self.ctx.clock.now())
        batch.ops.append(Put(keys.episode(self.scope, episode.id), dumps(episode)))
        await self._commit(batch)
        return episode.id

    async def _seal_if_idle(self) -> None:
        if self._episode is None or self._last_activity is None:
            return
        idle = self.ctx.clock.now() - self._last_activity
        if idle > dt.timedelta(seconds=self.ctx.config.episode_gap_seconds):
            await self.seal_open_episode()

    # -- control items -------------------------------------------------------------------------
    async def _handle_control(self, item: Control) -> None:
        handler = getattr(self, f"_control_{item.kind}")
        try:
            result = await handler(item)
        except Exception as exc:
            if item.reply is not None:
                item.reply.fail(exc)
                return
            raise
        if item.reply is not None and item.kind not in ("flush", "rebuild"):
            item.reply.set(result)

    async def _control_flush(self, item: Control) -> None:
        """Answered once the lane is idle; with ``payload`` (seal) the open episode is sealed
        after every queued event has been through the pipeline."""
        if item.payload:
            await self._drain_queue()
            await self.seal_open_episode()
        self._flush_waiters.append((item.reply, bool(item.payload)))

    async def _drain_queue(self) -> None:
        while self.queue and not self.stopping:
            size = self.ctx.config.pipeline_batch
            await self._process([self.queue.popleft() for _ in range(min(size, len(self.queue)))])

    async def _control_cancel(self, item: Control) -> dict[str, Any]:
        """§8.9.5: the event's queued stages are dropped and nothing derived shows it any more —
        its index documents (passages too) go, the facts it alone supports are excluded (not
        deleted) and their beliefs revised, it leaves its episode, and the scopes it was
        consolidated into are told to do the same."""
        event_id = item.event_id
        state = await self.read_state(event_id)
        if state is None:
            raise KeyError(event_id)
        order = ("extracted", "indexed", "consolidated", "compressed")
        done = state["done"]
        completed = ["captured"] + [
            s for s in order if s in done or (s == "compressed" and "episode" in done)
        ]
        cancelled = [s for s in order if s not in completed]
        batch = StageBatch()
        if not state.get("cancelled"):
            state["cancelled"] = True
            state["stages_cancelled"] = cancelled
            self.unindex_event(batch, event_id, state)
            if self._previous_turn is not None and self._previous_turn[2] == event_id:
                self._previous_turn = None  # the next turn's vector must not carry its text
            self.events.pop(event_id, None)
            try:
                self.queue.remove(event_id)
            except ValueError:
                pass
            # records this event already produced are excluded too (not deleted, §8.9.5)
            facts = []
            for record_id in state["derives"]:
                if record_id.startswith("fact_"):
                    fact = self._facts.get(record_id)
                    if fact is None:
                        raw = await self.ctx.store.get(keys.fact(self.scope, record_id))
                        fact = loads(raw, Fact) if raw else None
                    if fact is not None:
                        facts.append(fact)
            deleted = await self._exclude_sole_support(batch, facts, event_id)
            if deleted:
                state["beliefs_deleted_by_cancel"] = deleted
            await self._leave_episode(batch, state, event_id)
            batch.ops.append(Delete(keys.pending(self.scope, event_id)))
            batch.ops.append(self.state_op(event_id, state))
            await self._commit(batch)
            self.ctx.bus.release_event(event_id)
            pairs = sorted({(f.subject.id, f.predicate) for f in facts if event_id in f.supports})
            for target in state.get("foreign", ()):
                work = {"cancel": True, "pairs": [list(p) for p in pairs]}
                supervisor = self.actor.ctx.supervisor
                await supervisor.consolidate_foreign(target, self.scope, event_id, work)
        return {
            "event_id": event_id,
            "stages_cancelled": state.get("stages_cancelled", cancelled),
            "stages_already_completed": completed,
            "excluded_from_recall": True,
        }

    async def _exclude_sole_support(
        self, batch: StageBatch, facts: list[Fact], event_id: str
    ) -> list[str]:
        """Exclude the facts whose only support is ``event_id``; revise their beliefs.  Returns
        the ids of the beliefs deleted for want of evidence."""
        touched: dict[str, Fact] = {}
        for fact in facts:
            if fact.supports == [event_id] and not fact.excluded_from_recall:
                fact.excluded_from_recall = True
                self._facts[fact.id] = fact
                self._track(fact)
                self.unindex(batch, fact.id)
                touched[fact.id] = fact
        self._fact_ops(batch, touched)
        if not touched:
            return []
        summary = {"created": [], "revised": [], "deleted": [], "deferred": []}
        pairs = sorted({(f.subject.id, f.predicate) for f in touched.values()})
        await self.revise_beliefs(batch, pairs, event_id, summary, tuple(touched))
        for belief_id in summary["deleted"]:
            self.unindex(batch, belief_id)
        await self.index_documents(
            batch, {b: belief_text(self._belief_by_id[b]) for b in summary["created"]}
        )
        return summary["deleted"]

    async def _leave_episode(self, batch: StageBatch, state: dict[str, Any], event_id: str) -> None:
        """Take a cancelled event out of its episode and describe the episode again from the
        events that remain; an episode left without events is excluded from recall."""
        episode_id = state.get("episode_id")
        if not episode_id:
            return
        await self._load_episode()
        episode = self._episode
        if episode is None or episode.id != episode_id:
            raw = await self.ctx.store.get(keys.episode(self.scope, episode_id))
            if raw is None:
                return
            episode = loads(raw, Episode)
        if event_id not in episode.events:
            return
        episode.events = [e for e in episode.events if e != event_id]
        episode.supports = [e for e in episode.supports if e != event_id]
        members: list[Event] = []
        informative = 0
        for member_id in episode.events:
            event = self.events.get(member_id)
            if event is None:
                raw = await self.ctx.store.get(keys.event(self.scope, member_id))
                if raw is None:
                    continue
                event = loads(raw, Event)
            members.append(event)
            member_state = await self.read_state(member_id) or {}
            informative += any(d.startswith("fact_") for d in member_state.get("derives", ()))
        if not members:
            episode.excluded_from_recall = True
            episode.opening = episode.closing = None
            episode.actors_involved, episode.causal_chain = [], []
            episode.informative_events = 0
            episode.summary = ""
            if self._episode is episode:  # the next event opens a new episode
                self._episode = None
                episode.status, episode.sealed_at = "compressed", self.ctx.clock.now()
                episode.partial, episode.partial_reason = False, None
                batch.ops.append(Delete(keys.open_episode(self.scope, "main")))
            self.unindex(batch, episode.id)
        else:
            max_chars = self.ctx.config.passage_max_chars
            texts = [clip(content_text(e), max_chars) for e in members]
            first = members[0]
            episode.name = episode_rules.title(
                texts[0], first.context.get("intent"), f"{first.modality} episode"
            )
            observed = [parse_rfc3339(e.context["observed_at"]) for e in members]
            episode.started_at = episode.valid_from = min(observed)
            episode.ended_at = max(observed)
            episode.actors_involved = list(dict.fromkeys(e.actor for e in members))
            episode.informative_events = informative
            episode.opening = texts[0] or None
            episode.closing = next((t for t in reversed(texts) if t), None)
            count = len(members)
            roles = [
                episode_rules.role_of(text, i, count, sealed=False) for i, text in enumerate(texts)
            ]
            episode.causal_chain = [
                CausalLink(event=e.id, role=role) for e, role in zip(members, roles, strict=True)
            ]
            if episode.status == "compressed" and count > 1:
                episode.causal_chain[-1].role = "outcome"
            self._describe(episode)
            await self.index_documents(batch, {episode.id: episode_text(episode)})
        batch.ops.append(Put(keys.episode(self.scope, episode.id), dumps(episode)))

    async def _control_derived(self, item: Control) -> None:
        state = await self.read_state(item.event_id)
        if state is None:
            return
        added = [d for d in item.payload if d not in state["derives"]]
        if added:
            state["derives"].extend(added)
            foreign = state.setdefault("stage_derives", {}).setdefault("foreign", [])
            foreign.extend(d for d in added if d not in foreign)
            await self.ctx.store.write([self.state_op(item.event_id, state)])

    async def _control_foreign(self, item: Control) -> None:
        """Consolidate another scope's assertions about one of its events into this scope, or
        take them back when that event was cancelled.  The stored work item decides: a cancel
        overwrites a consolidation not run yet, so it never runs."""
        event_id = item.event_id
        raw = await self.ctx.store.get(keys.foreign_work(self.scope, event_id))
        if raw is None:
            return  # done already
        work = jsoncodec.decode(raw)
        batch = StageBatch()
        if work.get("cancel"):
            facts = []
            for subject_id, predicate in work.get("pairs", ()):
                facts += await self.facts_for(subject_id, predicate)
            await self._exclude_sole_support(batch, facts, event_id)
            batch.ops.append(Delete(keys.foreign_work(self.scope, event_id)))
            await self._commit(batch)
            return
        touched: dict[str, Fact] = {}
        intake = []
        for raw in work["assertions"]:
            subject = TypedRef(**raw["subject"])
            obj = TypedValue(**raw["object"])
            assertion = Assertion(
                subject=subject, predicate=raw["predicate"], object=obj, confidence=raw["confidence"],
                single_valued=raw["single_valued"], polarity=raw["polarity"], extractor=raw["extractor"],
                source=raw["source"], valid_from=parse_rfc3339(raw["valid_from"]),
            )  # fmt: skip
            intake.append(await self.apply_assertion(assertion, event_id, touched))
        self._fact_ops(batch, touched)
        facts = {i["fact_id"]: fact_text(self._facts[i["fact_id"]]) for i in intake}
        await self.index_documents(batch, facts, embed_known=False)
        summary = {"created": [], "revised": [], "deleted": [], "deferred": []}
        if work.get("want_beliefs", True):
            pairs = {
                (self._facts[i["fact_id"]].subject.id, self._facts[i["fact_id"]].predicate)
                for i in intake
            }
            closed = tuple(s for i in intake for s in i.get("superseded", ()))
            await self.revise_beliefs(batch, sorted(pairs), event_id, summary, closed)
        await self.index_documents(
            batch, {b: belief_text(self._belief_by_id[b]) for b in summary["created"]}
        )
        derives = sorted(
            {i["fact_id"] for i in intake} | set(summary["created"]) | set(summary["revised"])
        )
        record = self.ctx.bus.reserve(
            "consolidated", scope=self.scope, event_id=event_id,
            payload={"event_id": event_id, "foreign": True, "source_scope": work["source_scope"],
                     "beliefs_updated": len(summary["created"]) + len(summary["revised"]),
                     "beliefs_created": len(summary["created"]), "beliefs_deleted": len(summary["deleted"]),
                     "conflicts_resolved": sum(1 for i in intake if i.get("superseded")),
                     "conflicts_detected": sum(1 for i in intake if i["status"] == "conflict_detected"),
                     "superseded_facts": sorted({s for i in intake for s in i.get("superseded", ())}),
                     "intake": intake, "derives": derives},
        )  # fmt: skip
        batch.records.append(record)
        batch.ops.append(Delete(keys.foreign_work(self.scope, event_id)))
        await self._commit(batch)
        if derives:
            await self.actor.ctx.supervisor.notify_derived(
                work["source_scope"], event_id, derives, self.scope
            )

    async def _control_rebuild(self, item: Control) -> None:
        """Replay this scope's events into fresh derived layers."""
        store = self.ctx.store
        for prefix in keys.derived_prefixes(self.scope):
            doomed = [Delete(key) async for key, _ in store.scan(prefix=prefix)]
            for start in range(0, len(doomed), 10_000):
                await store.write(doomed[start : start + 10_000])
        self._facts.clear()
        self._new_supports.clear()
        self._previous_turn = None
        self._fact_ids.clear()
        self._current.clear()
        self._beliefs.clear()
        self._deferred.clear()
        self._episode, self._episode_loaded = None, True
        self.text_index = LayeredTextIndex()
        self.vector_index = self._new_vector_index()
        self._belief_by_id.clear()
        self.queue.clear()
        self.events.clear()
        ops: list[Put] = []
        async for _, raw in store.scan(prefix=keys.events_prefix(self.scope)):
            event = loads(raw, Event)
            state = await self.read_state(event.id) or {}
            if state.get("cancelled"):
                continue
            fresh = {"scope": self.scope, "done": ["captured"], "lce": state.get("lce", [])[:1],
                     "derives": [], "errors": [], "cancelled": False, "batch_id": event.batch_id}  # fmt: skip
            ops.append(self.state_op(event.id, fresh))
            ops.append(Put(keys.pending(self.scope, event.id), b""))
            self.enqueue(event)
            if len(ops) >= 10_000:
                await store.write(ops)
                ops = []
        if ops:
            await store.write(ops)
        await self._drain_queue()
        await self.seal_open_episode()
        item.reply.set(True)


def _signature(belief: Belief) -> tuple:
    """Everything revision may change, cheap to compare (cheaper than serialising the belief)."""
    return (
        belief.confidence, belief.stance, belief.valid_from, belief.valid_to, belief.partial,
        belief.revision_count, tuple(sorted(belief.evidence.items())),
        tuple((s.id, s.weight, s.polarity) for s in belief.supports),
        tuple((c["belief_id"], c["tension"], c["resolution"]) for c in belief.contradicts),
    )  # fmt: skip


def _weight(fact: Fact) -> float:
    """A fact's evidence for a belief: every observation asserting it counts."""
    return fact.evidence_weight or fact.confidence


_ELAPSED_NAME = {
    "extracted": "extract",
    "indexed": "index",
    "consolidated": "consolidate",
    "episode": "compress",
}
