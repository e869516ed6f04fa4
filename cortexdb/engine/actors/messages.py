"""The closed set of messages a ScopeActor accepts (frozen attrs records), like tractor's
``msg/types.py``: each set is one list and one union, and every type has exactly one handler.

- ``MESSAGE_TYPES`` / ``Message``: what the mailbox takes — a capture, the typed queries
  (``QUERY_TYPES`` / ``Query``, served by ``queries.HANDLERS``), cancel, foreign work, flush,
  rebuild, ping, scope edits, forget, resegment, synthesize, stop (``ScopeActor.handlers``);
- ``LANE_ITEM_TYPES`` / ``LaneItem``: what the mailbox lane hands the derivation lane
  (``Lane.handlers``).

A request carries its ``reply`` slot; the actor answers it exactly once, with a value or a
``CortexError`` (``concept_messages``: concepts).  Nothing else is ever put in a mailbox.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Set as AbstractSet
from typing import Any

import attrs

from ...errors import CortexError, Internal
from .concept_messages import (
    CommitProposal,
    CommitProposalItem,
    ReadConcept,
    ReadConcepts,
    ReadCoverage,
    ReadRelated,
    Synthesize,
    SynthesizeItem,
)
from .reply import ReplySlot as ReplySlot  # the one-shot reply every request carries


@attrs.frozen
class CaptureItem:
    """One validated experience, ready to become an event."""

    envelope: Any  # envelope.ValidEnvelope
    identities: Any  # envelope.Identities
    tenant_id: str
    idempotency: Any = None  # services.Reservation or None
    batch_id: str | None = None
    wait_for: tuple[str, ...] = ()  # lifecycle stages the requester will wait on


@attrs.frozen
class Capture:
    items: tuple[CaptureItem, ...]
    sync: bool
    reply: ReplySlot


# -- queries: reads a ScopeActor serves as child tasks, each by its one function (queries.py) -----
# ``as_of``, ``since``/``until``: aware datetimes; ``temporal``: a ``retrieve.temporal_filter.TemporalFilter``
# (its valid/recorded windows); ``limit`` None: the configured default; lists page with a ``cursor``.


@attrs.frozen(kw_only=True)
class ReadEvents:
    reply: ReplySlot
    since: dt.datetime | None = None  # observed_at bounds
    until: dt.datetime | None = None
    recorded_since: dt.datetime | None = None
    recorded_until: dt.datetime | None = None
    observed_actor: str | None = None
    modality: str | None = None
    aspect: str | None = None  # model.aspects.ASPECTS
    include_excluded: bool = False
    as_of: dt.datetime | None = None
    temporal: Any = None
    limit: int | None = None
    cursor: str | None = None


@attrs.frozen(kw_only=True)
class ReadEvent:
    reply: ReplySlot
    event_id: str


@attrs.frozen(kw_only=True)
class ReadEventState:
    """The aggregate state of one memory event (§8.9.3)."""

    reply: ReplySlot
    event_id: str


@attrs.frozen(kw_only=True)
class ReadFacts:
    reply: ReplySlot
    subject_id: str | None = None
    predicate: str | None = None
    aspect: str | None = None  # model.aspects.ASPECTS
    min_confidence: float | None = None
    include_superseded: bool = False
    as_of: dt.datetime | None = None
    temporal: Any = None
    limit: int | None = None
    cursor: str | None = None


@attrs.frozen(kw_only=True)
class ReadFact:
    reply: ReplySlot
    fact_id: str
    as_of: dt.datetime | None = None  # the version held then (docs/time.md)


@attrs.frozen(kw_only=True)
class ReadTimeline:
    """The supersession chain of (subject, predicate) (§8.7.4)."""

    reply: ReplySlot
    subject_id: str | None
    predicate: str | None


@attrs.frozen(kw_only=True)
class ReadFactSupports:
    reply: ReplySlot
    fact_id: str
    limit: int | None = None
    cursor: str | None = None


@attrs.frozen(kw_only=True)
class ReadBeliefs:
    reply: ReplySlot
    about: str | None = None  # an entity id: the claim's subject or object
    aspect: str | None = None  # model.aspects.ASPECTS (of the claim's predicate)
    min_confidence: float | None = None
    include_deprecated: bool = False
    include_superseded: bool = False  # closed versions too
    as_of: dt.datetime | None = None
    temporal: Any = None
    limit: int | None = None
    cursor: str | None = None


@attrs.frozen(kw_only=True)
class ReadBelief:
    reply: ReplySlot
    belief_id: str
    as_of: dt.datetime | None = None  # the version held then (docs/time.md)


@attrs.frozen(kw_only=True)
class ReadWhy:
    """Why a belief is held: its support graph and narrative (§8.7.6)."""

    reply: ReplySlot
    belief_id: str
    as_of: dt.datetime | None = None  # the belief and its facts as held then


@attrs.frozen(kw_only=True)
class ReadEpisodes:
    reply: ReplySlot
    actor: str | None = None
    overlapping_from: dt.datetime | None = None
    overlapping_to: dt.datetime | None = None
    with_causal_chain: bool = True
    include_superseded: bool = False  # closed versions too
    as_of: dt.datetime | None = None
    temporal: Any = None
    limit: int | None = None
    cursor: str | None = None


@attrs.frozen(kw_only=True)
class ReadEpisode:
    reply: ReplySlot
    episode_id: str
    as_of: dt.datetime | None = None  # the version held then (docs/time.md)


@attrs.frozen(kw_only=True)
class CountRecords:
    """How many records a scope holds (a denied placeholder's ``item_count``)."""

    reply: ReplySlot


@attrs.frozen(kw_only=True)
class LayerCounts:
    """How many records each layer of a scope holds."""

    reply: ReplySlot


@attrs.frozen(kw_only=True)
class Candidates:
    """Recall candidates from one scope (DESIGN §7): BM25 and vector hits over ``layers``."""

    reply: ReplySlot
    text: str
    vector: Any  # the query's unit embedding (numpy), or None
    layers: AbstractSet[str]
    k: int  # the most hits per layer and source
    temporal: Any  # TemporalFilter
    filters: Any  # the recall filter tree, or None
    reference: dt.datetime  # the time recency counts back from
    mode: str = "hybrid"  # hybrid | bm25 | vector
    limits: dict[str, int] = attrs.field(factory=dict)  # the pack's per-layer limits
    include_superseded: bool = False
    window: Any = None  # the temporal handler's [start, end): its records are also looked for beyond k
    content: Any = None  # speakers.ContentQuery: text and vector are the question less the voices' names


@attrs.frozen(kw_only=True)
class ReadRelationships:
    """The walk from ``starts`` (entity ids), ``depth`` hops (``relations.walk``; docs/relationships.md)."""

    reply: ReplySlot
    starts: tuple[str, ...]
    types: tuple[str, ...] = ()  # predicates the walk may follow; () = any
    direction: str = "both"  # out | in | both
    depth: int = 1
    as_of: dt.datetime | None = None
    min_confidence: float | None = None
    max_edges: int = 200
    max_examined: int = 0  # facts the walk may load at most (0: no cap); recall's budget


QUERY_TYPES = (
    ReadEvents, ReadEvent, ReadEventState, ReadFacts, ReadFact, ReadTimeline, ReadFactSupports,
    ReadBeliefs, ReadBelief, ReadWhy, ReadEpisodes, ReadEpisode, CountRecords, LayerCounts, Candidates,
    ReadConcepts, ReadConcept, ReadRelated, ReadCoverage, ReadRelationships,
)  # fmt: skip
Query = (
    ReadEvents | ReadEvent | ReadEventState | ReadFacts | ReadFact | ReadTimeline | ReadFactSupports
    | ReadBeliefs | ReadBelief | ReadWhy | ReadEpisodes | ReadEpisode | CountRecords | LayerCounts
    | Candidates | ReadConcepts | ReadConcept | ReadRelated | ReadCoverage | ReadRelationships
)  # fmt: skip


@attrs.frozen
class CancelEvent:
    event_id: str
    caller: str
    reply: ReplySlot


@attrs.frozen
class ForeignConsolidate:
    """Facts extracted in ``source_scope`` to be consolidated into this scope (consolidate_into)."""

    source_scope: str
    event_id: str
    payload: dict[str, Any]
    reply: ReplySlot


@attrs.frozen
class ForeignDerived:
    """Records another scope derived from one of this scope's events (derives back-pointers)."""

    event_id: str
    derives: tuple[str, ...]
    scope: str


@attrs.frozen
class Flush:
    """Answer once every queued derivation is done; ``seal`` also seals the open episode."""

    seal: bool
    reply: ReplySlot


@attrs.frozen
class Rebuild:
    reply: ReplySlot


@attrs.frozen
class Ping:
    reply: ReplySlot


@attrs.frozen
class EditScope:
    """Read-modify-write the scope's registration inside its actor (never racing its ``last_write_at``
    updates): ``edit(record or None)`` returns the new record, None (delete it) or raises the reply."""

    edit: Any
    reply: ReplySlot


@attrs.frozen
class Stop:  # without reply: shut down; with one: a release, only if idle (the reply says if it did)
    reply: ReplySlot | None = None


@attrs.frozen
class Forget:
    """Deletion work for the scope's lane (``stages.forget``); the reply is what it did (counts)."""

    work: Any
    reply: ReplySlot


@attrs.frozen
class Resegment:
    """Window the scope's events into episodes again (its segment strategy changed); the reply
    is what it did.  ``progress(done, total)`` is awaited as it goes (``stages.segment``)."""

    progress: Any
    reply: ReplySlot


@attrs.frozen
class ScopeRecords:  # signals, proposals, intake results: the actor awaits ``work(partition)``
    work: Any
    reply: ReplySlot


MESSAGE_TYPES = (
    Capture, *QUERY_TYPES, CancelEvent, ForeignConsolidate, ForeignDerived, Flush, Rebuild, Ping,
    EditScope, Forget, Synthesize, Stop, Resegment, ScopeRecords, CommitProposal,
)  # fmt: skip
Message = (
    Capture | Query | CancelEvent | ForeignConsolidate | ForeignDerived | Flush | Rebuild | Ping
    | EditScope | Forget | Synthesize | Stop | Resegment | ScopeRecords | CommitProposal
)  # fmt: skip


# -- the derivation lane's items ------------------------------------------------------------------
# What the mailbox lane hands the derivation lane (``lane.Lane.submit``) besides captured events;
# the lane runs them between batches, each by its one handler (``Lane.HANDLERS``).


@attrs.frozen
class CancelItem:
    """Cancel a captured event (§8.9.5); the reply is the cancel report."""

    event_id: str
    reply: ReplySlot


@attrs.frozen
class ForeignItem:
    """Consolidation work another scope left in table ``FW`` for one of its events."""

    event_id: str


@attrs.frozen
class DerivedItem:
    """Records another scope derived from one of this scope's events (derives back-pointers)."""

    event_id: str
    derives: tuple[str, ...]


@attrs.frozen
class FlushItem:
    """Reply once the lane is idle; ``seal`` first drains the queue and seals the open episode."""

    seal: bool
    reply: ReplySlot


@attrs.frozen
class RebuildItem:
    """Replay the scope's events into fresh derived layers; reply when done."""

    reply: ReplySlot


@attrs.frozen
class ForgetItem:
    """A ``Forget`` message's work, run between batches; the reply is what it did."""

    work: Any
    reply: ReplySlot


@attrs.frozen
class ResegmentItem:
    """A ``Resegment`` message's work, run once every queued event is derived."""

    progress: Any
    reply: ReplySlot


LANE_ITEM_TYPES = (CancelItem, ForeignItem, DerivedItem, FlushItem, RebuildItem, ForgetItem, ResegmentItem,
                   SynthesizeItem, CommitProposalItem)
LaneItem = (CancelItem | ForeignItem | DerivedItem | FlushItem | RebuildItem | ForgetItem | ResegmentItem
            | SynthesizeItem | CommitProposalItem)


def fail_message(message: Message, error: CortexError | None = None) -> None:
    """Answer a message that will never be handled (actor crashed or engine stopping)."""
    reply = getattr(message, "reply", None)
    if reply is not None:
        reply.fail(error or Internal("the scope actor stopped before handling this request"))
