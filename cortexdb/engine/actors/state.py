"""The typed partition state the derivation lane owns (``lane.Lane``).

The lane is the only writer of its scope's derived records, so what it caches of them stays
coherent with the store: every cache below is either loaded on first use from the partition's
tables (``storage.Partition``) or kept up to date by the stage that writes the record.  Facts and
beliefs are bounded (``trim_caches``, ``EngineConfig.derived_cache_records``), and hold only what
derivation still consults at the end of a batch: current facts, open claims' beliefs.  Reads
(``queries``) never look at it — they only ever see committed state — except recall candidates,
which search the text and vector indexes.

| attribute        | what it holds                                                          |
|------------------|------------------------------------------------------------------------|
| ``events``       | queued events (up to ``pipeline_cache_events``; beyond, they reload)    |
| ``facts``        | facts loaded or written, by id (current ones, after a batch)            |
| ``new_supports`` | fact id -> supporting event ids not yet written to ``FS``              |
| ``fact_ids``     | (subject, predicate) -> every fact id of the pair (``FI``; one batch)   |
| ``current``      | (subject, predicate) -> ids of its facts not superseded, not excluded   |
| ``unlisted``     | pair -> new facts not yet stored whose pair had no ``fact_ids`` list    |
| ``predicates``   | subject -> the predicates it has facts under (``FI``)                  |
| ``pairs_used``   | the pairs asked for since the last ``trim_caches`` (kept longest)      |
| ``fact_keys``    | fact id -> its object key, arity, polarity (``pair_keys``)             |
| ``closing``      | fact id -> the version a change in this commit closes (``stages.versioning``) |
| ``beliefs``      | claim key -> its belief (None: none stored; open claims', after a batch) |
| ``stale_pairs``  | pairs an event changed without revising beliefs (next revision: whole)  |
| ``claims``       | subject -> the claims given a belief since the last trim (``BI`` not stored yet) |
| ``belief_by_id`` | the beliefs revised or created, by id                                  |
| ``deferred``     | claim keys whose revision waits on the revision-policy gate            |
| ``subject_beliefs`` | subject -> its claims' belief ids and live beliefs' digests (``subject_beliefs``) |
| ``episode``      | the open episode window (``EO``), once loaded                          |
| ``last_activity``, ``last_sealed`` | when the window last took an event; the last sealed episode |
| ``previous_turn``| the latest turn (``Turn``): the context of the next one's vector |
| ``text_index``, ``vector_index`` | the scope's in-memory indexes (rebuilt on start)      |
| ``given``        | queued events' given vectors (as ``events``: beyond the cache, table ``GV``) |
| ``given_stored`` | whether a queued event's given vector may be in ``GV`` only (None: not looked yet) |
| ``suppressing``  | whether the scope has forget suppressions (``FG``); None: not looked yet |
| ``voices``       | the actor ids of the indexed events (kept on forget: a stale one only    |
|                  | leaves its name out of a recall's content query, recall/speakers.py)     |
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from collections.abc import Iterable
from typing import Any, NamedTuple

import attrs

from ..derive import episodes as episode_rules
from ..derive.revision import claim_key, claim_pair
from ..model import Belief, Episode, Event, Fact
from ..retrieve.layered import LayeredTextIndex, LayeredVectorIndex, scope_folder
from ..retrieve.voices import Voices
from ..storage import Partition
from . import cache_bounds
from .closed import ClosedRecords
from .pair_keys import FactKeys, Keyed
from .subject_beliefs import SubjectBeliefs, Summary

EPISODE_WINDOW = "main"  # the key of the scope's one open episode window (table EO)
Pair = tuple[str, str]  # (subject id, predicate)


class Turn(NamedTuple):
    """An event as the context of the next turn's vector (stages/index.py)."""

    event_id: str
    session: Any  # observed_actor.session
    thread: Any  # context.thread
    observed: dt.datetime | None
    text: str  # the turn's document; a long event's last passage
    embedded_here: bool  # False: a long event, its passages embedded alone
    sums: Any = None  # its token-vector sums once embedded (``embed_sums``), else None

    def with_sums(self, sums: Any) -> Turn:
        return Turn(self.event_id, self.session, self.thread, self.observed, self.text, self.embedded_here, sums)


def new_vector_index(ctx: Any, scope: str | None = None) -> LayeredVectorIndex:
    """A scope's vector index; with a data dir (and ``vector_segments_kept``) its sealed segments
    are kept in ``vector-segments/<scope folder>/`` between runs (retrieve/vector_files.py)."""
    config = ctx.config
    data_dir = getattr(ctx.store, "path", None)  # segment files: LevelDB's data dir
    kept = data_dir and scope is not None and config.vector_segments_kept
    if data_dir and scope is not None and not (kept and config.vector_sealed == "ivf"):
        # segments an earlier run kept, which nothing here reads, rewrites or deletes any more
        # (a forget could not reach the vectors in them): gone before this run uses the scope
        shutil.rmtree(os.path.join(data_dir, "vector-segments", scope_folder(scope)), ignore_errors=True)
    return LayeredVectorIndex(
        ctx.embedder.dimension,
        segment_size=config.vector_segment_size,
        trees=config.vector_trees,
        dtype=config.vector_dtype,
        directory=os.path.join(data_dir, "vector-segments") if data_dir else None,
        chunk_rows=config.vector_delta_chunk,
        run_rows=config.vector_run_rows or None,
        sealed=config.vector_sealed,
        persist=os.path.join(data_dir, "vector-segments", scope_folder(scope)) if kept else None,
    )


def text_kept_folder(ctx: Any, scope: str | None) -> str | None:
    """Where a scope's sealed text segments are kept between runs (``text-segments/<scope
    folder>/``, retrieve/text_files.py): with a data dir and ``text_segments_kept``; else None,
    and what an earlier run kept there is deleted (nothing would rewrite it after a forget)."""
    data_dir = getattr(ctx.store, "path", None)
    if not data_dir or scope is None:
        return None
    folder = os.path.join(data_dir, "text-segments", scope_folder(scope))
    if not ctx.config.text_segments_kept:
        shutil.rmtree(folder, ignore_errors=True)
        return None
    return folder


def is_current(fact: Fact) -> bool:
    """Present knowledge, what a new assertion is resolved against: not superseded (an old data
    dir's superseded fact has ``recorded_to`` set instead), not excluded."""
    return fact.superseded_by is None and fact.recorded_to is None and not fact.excluded_from_recall


@attrs.define(eq=False)
class PartitionState:
    tables: Partition
    text_index: LayeredTextIndex
    vector_index: LayeredVectorIndex
    events: dict[str, Event] = attrs.field(factory=dict)
    facts: dict[str, Fact] = attrs.field(factory=dict)
    new_supports: dict[str, list[str]] = attrs.field(factory=dict)
    fact_ids: dict[Pair, list[str]] = attrs.field(factory=dict)
    current: dict[Pair, set[str]] = attrs.field(factory=dict)
    unlisted: dict[Pair, list[str]] = attrs.field(factory=dict)
    predicates: dict[str, set[str]] = attrs.field(factory=dict)
    claims: dict[str, set[str]] = attrs.field(factory=dict)
    stale_pairs: set[Pair] = attrs.field(factory=set)
    pairs_used: set[Pair] = attrs.field(factory=set)
    closing: dict[str, Fact] = attrs.field(factory=dict)
    beliefs: dict[str, Belief | None] = attrs.field(factory=dict)
    belief_by_id: dict[str, Belief] = attrs.field(factory=dict)
    deferred: set[str] = attrs.field(factory=set)
    episode: Episode | None = None
    episode_loaded: bool = False
    last_activity: dt.datetime | None = None
    last_sealed: str | None = None
    previous_turn: Turn | None = None
    suppressing: bool | None = None
    given: dict[str, Any] = attrs.field(factory=dict)
    given_stored: bool | None = None
    segmentation: Any = None  # derive.episodes.Segmentation, read from the scope record once
    closed: ClosedRecords = attrs.field(factory=ClosedRecords)  # closed.py: what a plain recall skips
    voices: Voices = attrs.field(factory=Voices)  # who speaks in the indexed events, and their names (speakers.py)
    subject_beliefs: SubjectBeliefs = attrs.field(factory=SubjectBeliefs)
    fact_keys: FactKeys = attrs.field(factory=FactKeys)  # current facts' object keys (pair_keys.py)

    @classmethod
    def fresh(cls, ctx: Any, tables: Partition) -> PartitionState:
        data_dir = getattr(ctx.store, "path", None)  # sealed BM25 segments: files of the data dir
        # merges of sealed segments run in the indexer's background job (indexer.py)
        scope = getattr(tables, "scope", None)
        text_index = LayeredTextIndex(os.path.join(data_dir, "text-segments") if data_dir else None, merge_inline=False,
                                      persist=text_kept_folder(ctx, scope),
                                      seal_docs=ctx.config.text_seal_docs, max_segment_docs=ctx.config.text_segment_docs)  # fmt: skip
        state = cls(tables, text_index, new_vector_index(ctx, scope))
        state.closed.most = ctx.config.closed_records_max
        return state

    def reset(self, ctx: Any, *, keep_files: bool = False) -> None:
        """Forget the derived records (a rebuild replays the scope's events into fresh layers);
        ``last_activity`` and ``last_sealed`` stay, as they always did.  The old vector index
        writes no kept segment file any more; unless ``keep_files`` (a release: a reopen maps
        them) the scope's kept segment files are deleted (a drop or a rebuild)."""
        self.vector_index.detach(purge=not keep_files)
        self.text_index.detach(purge=not keep_files)
        fresh = PartitionState.fresh(ctx, self.tables)
        kept = ("tables", "last_activity", "last_sealed")
        for field in attrs.fields(PartitionState):
            if field.name not in kept:
                setattr(self, field.name, getattr(fresh, field.name))
        self.episode_loaded = True  # the rebuilt scope has no open window yet

    async def given_vector(self, event_id: str) -> Any:
        """The vector the writer gave with a queued event, or None (docs/embedding.md)."""
        vector = self.given.pop(event_id, None)
        if vector is not None or self.given_stored is False:
            return vector
        if self.given_stored is None:  # after a start or a rebuild: are there any at all?
            self.given_stored = any([_ async for _ in self.tables.given_vectors.ids(limit=1)])
        return await self.tables.given_vectors.get(event_id) if self.given_stored else None

    # -- facts ---------------------------------------------------------------------------------
    # The id lists (``fact_ids``, ``current``, ``predicates``) outlive the decoded facts, and
    # ``current`` outlives ``fact_ids``: a fact dropped by ``trim_caches`` is read again by id
    # when its pair is asked for, so a pair whose facts pile up (a fact superseded on every turn)
    # costs what it holds now, not every fact it ever had.
    async def facts_for(self, subject_id: str, predicate: str) -> list[Fact]:
        """Every fact of a pair (superseded and excluded ones too)."""
        key = (subject_id, predicate)
        ids = self.fact_ids.get(key)
        if ids is None:
            ids = [fact_id async for fact_id in self.tables.fact_index.ids(key)]
            stored = set(ids)
            ids += [i for i in self.unlisted.get(key, ()) if i not in stored]  # not stored yet
            self.fact_ids[key] = ids
        self.pairs_used.add(key)
        return await self.decoded(ids)

    async def decoded(self, ids: list[str]) -> list[Fact]:
        """The facts named ``ids`` (those that exist), in that order: cached, else read by id."""
        missing = [i for i in ids if i not in self.facts]
        if missing:
            self.facts.update(await self.tables.facts.get_many(missing))
        return [self.facts[i] for i in ids if i in self.facts]

    async def fact(self, fact_id: str) -> Fact | None:
        fact = self.facts.get(fact_id)
        return fact if fact is not None else await self.tables.facts.get(fact_id)

    async def current_facts(self, subject_id: str, predicate: str) -> list[Fact]:
        """The facts of a pair that are not superseded, not excluded."""
        key = (subject_id, predicate)
        ids = self.current.get(key)
        if ids is None:
            facts = await self.facts_for(subject_id, predicate)
            ids = self.current[key] = {f.id for f in facts if is_current(f)}
        self.pairs_used.add(key)
        return await self.decoded(sorted(ids))

    async def current_keyed(self, subject_id: str, predicate: str, okeys: set[str]) -> Keyed:
        """``current_facts`` of the objects ``okeys`` only (``pair_keys``): the others are
        keyed, not decoded, once their keys are known."""
        key = (subject_id, predicate)
        ids = self.current.get(key)
        if ids is None:
            await self.current_facts(subject_id, predicate)
            ids = self.current[key]
        self.pairs_used.add(key)
        unknown = self.fact_keys.unknown(ids)
        if unknown:
            for fact in await self.decoded(unknown):
                self.fact_keys.note(fact)
        wanted, single_valued, others = self.fact_keys.split(ids, okeys)
        return Keyed(await self.decoded(wanted), single_valued, others)

    async def predicates_of(self, subject_id: str) -> list[str]:
        """The predicates the subject has facts under (``FI``), in order; kept by ``add_fact``."""
        found = self.predicates.get(subject_id)
        if found is None:
            found = self.predicates[subject_id] = set(await self.tables.fact_index.parts((subject_id,)))
        return sorted(found)

    async def subject_facts(self, subject_id: str) -> list[Fact]:
        """The current facts of a subject, every predicate, in ``FI`` order (predicate, id)."""
        out: list[Fact] = []
        for predicate in await self.predicates_of(subject_id):
            out += await self.current_facts(subject_id, predicate)
        return out

    def add_fact(self, fact: Fact) -> None:
        """A new fact: cached, listed under its pair (when the pair's list is not loaded, in
        ``unlisted`` until it is stored: a list read from ``FI`` before then adds it), tracked."""
        self.facts[fact.id] = fact
        self.fact_keys.note(fact)
        pair = (fact.subject.id, fact.predicate)
        listed = self.fact_ids.get(pair)
        (listed if listed is not None else self.unlisted.setdefault(pair, [])).append(fact.id)
        predicates = self.predicates.get(fact.subject.id)
        if predicates is not None:
            predicates.add(fact.predicate)
        self.track(fact)

    def track(self, fact: Fact) -> None:
        """Keep the current-fact index of the fact's pair up to date after a change."""
        ids = self.current.get((fact.subject.id, fact.predicate))
        if ids is None:
            return  # not loaded yet: the first current_facts() call computes it
        if is_current(fact):
            ids.add(fact.id)
        else:
            ids.discard(fact.id)

    def derived_facts(self, derives: list[str]) -> list[Fact]:
        """The cached facts among an event's derived records."""
        return [self.facts[f] for f in derives if f.startswith("fact_") and f in self.facts]

    # -- beliefs -------------------------------------------------------------------------------
    async def beliefs_for(self, subject_id: str, claims: Iterable[str]) -> dict[str, Belief | None]:
        """The belief of each of a subject's ``claims`` (None: none): cached, else read by the id
        its subject's summary names (a claim it does not name has none: no read)."""
        summary = await self.subject_summary(subject_id)
        out = {claim: self.beliefs.get(claim) for claim in claims}
        missing = {c: summary.ids[c] for c, b in out.items() if b is None and c in summary.ids}
        if missing:
            stored = await self.tables.beliefs.get_many(list(missing.values()))
            for claim, belief_id in missing.items():
                out[claim] = stored.get(belief_id)
        for claim, belief in out.items():
            if belief is not None and claim not in self.beliefs:  # a claim without one: no entry
                self.keep_belief(claim, belief)
        return out

    async def belief_for(self, claim: str) -> Belief | None:
        return (await self.beliefs_for(claim_pair(claim)[0], [claim]))[claim]

    def keep_belief(self, claim: str, belief: Belief | None) -> None:
        """A claim's belief as read, or as a revision leaves it (None: none, or deleted)."""
        self.beliefs[claim] = belief
        if belief is not None:
            self.belief_by_id[belief.id] = belief
        self.subject_beliefs.note(claim, belief)

    async def subject_summary(self, subject_id: str) -> Summary:
        """The subject's claims with a belief and its live beliefs' digests, loaded on first use
        (``subject_beliefs``)."""
        summary = self.subject_beliefs.get(subject_id)
        if summary is None:
            summary = self.subject_beliefs.load(subject_id, await self.beliefs_by_claim(subject_id))
        return summary

    async def beliefs_of(self, subject_id: str) -> list[Belief | None]:
        """The beliefs of a subject's claims: those ``BI`` lists, in its order (cached, else read
        by id and cached), then any made since it was written (this batch's), in the cache's."""
        return list((await self.beliefs_by_claim(subject_id)).values())

    async def beliefs_by_claim(self, subject_id: str) -> dict[str, Belief | None]:
        """``beliefs_of`` by claim."""
        start = claim_key(subject_id, "", "")[: len(subject_id) + 1]
        by_claim = {c: b async for c, b in self.tables.belief_claims.scan(starting_with=start)}
        missing = [b for c, b in by_claim.items() if c not in self.beliefs]
        stored = await self.tables.beliefs.get_many(missing) if missing else {}
        out: dict[str, Belief | None] = {}
        for claim, belief_id in by_claim.items():
            if claim not in self.beliefs:
                self.keep_belief(claim, stored.get(belief_id))
            out[claim] = self.beliefs[claim]
        made = {c for c in self.claims.get(subject_id, ()) if c not in out and c in self.beliefs}
        if made:  # the cache's order (one pass over it, only then)
            out.update({c: b for c, b in self.beliefs.items() if c in made})
        return out

    def note_claim(self, claim: str) -> None:
        """A claim given its first belief, its ``BI`` row not stored yet: listed under its subject
        until the batch is (``beliefs_of`` reads the stored ones from ``BI``)."""
        self.claims.setdefault(claim_pair(claim)[0], set()).add(claim)

    # -- episodes ------------------------------------------------------------------------------
    async def load_episode(self) -> Episode | None:
        """The open episode window, loaded once."""
        if not self.episode_loaded:
            self.episode_loaded = True
            episode_id = await self.tables.open_episodes.get(EPISODE_WINDOW)
            if episode_id is not None:
                self.episode = await self.tables.episodes.get(episode_id)
        return self.episode

    # -- bounds (cache_bounds.py) -------------------------------------------------------------
    def trim_caches(self, limit: int) -> int:
        """Bound the decoded facts and beliefs to ``limit`` each (``cache_bounds.trim_caches``)."""
        return cache_bounds.trim_caches(self, limit)

    async def segments(self, ctx: Any, scope: str) -> Any:
        """How this scope cuts its events into episodes (its scope record's policy, else the
        engine's); cached until the record changes (``ScopeActor._edit_scope`` clears it)."""
        if self.segmentation is None:
            record = await ctx.tables.scopes.get(scope)
            self.segmentation = episode_rules.resolve(record.policies if record else None, ctx.config)
        return self.segmentation

    async def event(self, event_id: str) -> Event | None:
        event = self.events.get(event_id)
        return event if event is not None else await self.tables.events.get(event_id)
