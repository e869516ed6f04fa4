"""Record shapes of reference §7 (and §8.9, §13) as attrs classes.

Field names are the wire names, except the ``_partial`` triple, which attrs cannot spell as an
init argument: it is ``partial`` / ``partial_reason`` / ``progress`` here and renamed to
``_partial`` / ``_partial_reason`` / ``_progress`` by the converter.  Times are aware UTC
datetimes; the converter writes them as RFC 3339.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import attrs

from ..stages import EPISODE_OPEN

Timestamp = dt.datetime


@attrs.define(kw_only=True)
class Event:
    """A WAL entry (§7.1): immutable once captured, except ``derives`` and the recall exclusion."""

    id: str
    scope: str
    tenant_id: str
    caller: str
    actor: str  # the observed actor's id (who performed the experience)
    observed_actor: dict[str, Any]
    subject: dict[str, Any]
    modality: str
    content: dict[str, Any]
    context: dict[str, Any]  # as submitted, plus server-owned ``recorded_at``
    directives: dict[str, Any] = attrs.field(factory=dict)
    derives: list[str] = attrs.field(factory=list)
    wal_offset: int
    idempotency_key: str | None = None
    batch_id: str | None = None
    excluded_from_recall: bool = False


@attrs.define(kw_only=True)
class TypedRef:
    """A subject reference: an entity or a concept."""

    type: str = "entity"
    id: str
    name: str | None = None


@attrs.define(kw_only=True)
class TypedValue:
    """A fact's object: a literal (``datatype`` + ``value``) or an entity/concept reference."""

    type: str  # literal | entity | concept
    datatype: str | None = None
    value: Any = None
    id: str | None = None
    name: str | None = None
    unit: str | None = None


@attrs.define(kw_only=True)
class Fact:
    id: str
    scope: str
    subject: TypedRef
    predicate: str
    object: TypedValue
    supports: list[str]
    valid_from: Timestamp
    valid_to: Timestamp | None = None
    recorded_from: Timestamp
    recorded_to: Timestamp | None = None
    confidence: float
    extractor: str
    source: str  # human | agent | import | derived (provenance of the assertion)
    superseded_by: str | None = None
    supersedes: str | None = None
    version: int = 1  # which version of the fact this is (stored only from 2: docs/time.md)
    conflicts_with: list[str] = attrs.field(factory=list)
    single_valued: bool = True
    polarity: int = 1
    status: str = "accepted"  # intake status at creation: accepted | conflict_detected
    reinforcements: int = 0
    supports_total: int = 1  # every supporting event; ``supports`` keeps the first and the latest
    evidence_weight: float = 0.0  # summed confidence of every observation asserting it
    excluded_from_recall: bool = False
    # approved from a derivation proposal (docs/proposals.md): {proposal_id, approved_by}
    proposal: dict[str, str] | None = None
    partial: bool = False
    partial_reason: str | None = None
    progress: float | None = None


@attrs.define(kw_only=True)
class ConfidenceInterval:
    lower: float
    upper: float
    method: str
    level: float


@attrs.define(kw_only=True)
class SupportRef:
    type: str  # fact | episode | event
    id: str
    weight: float
    polarity: str  # supports | against


@attrs.define(kw_only=True)
class RevisionPolicy:
    trigger: str = "new_supporting_evidence_or_contradiction"
    min_evidence_delta: float = 0.05
    cooldown: str = "PT0S"
    max_revisions_per_hour: int = 3600
    # beta_posterior: the posterior mean of the evidence; min_input: that, but never above the
    # confidence of the weakest supporting fact (derive/revision.py, docs/extraction.md)
    confidence_rule: str = "beta_posterior"


@attrs.define(kw_only=True)
class Belief:
    id: str
    scope: str
    claim: dict[str, Any]  # {subject: TypedRef wire, predicate, object: TypedValue wire}
    stance: str
    confidence: float
    confidence_interval: ConfidenceInterval
    calibration: dict[str, Any] | None = None
    supports: list[SupportRef] = attrs.field(factory=list)
    contradicts: list[dict[str, Any]] = attrs.field(factory=list)
    revision_policy: RevisionPolicy = attrs.field(factory=RevisionPolicy)
    valid_from: Timestamp
    valid_to: Timestamp | None = None
    recorded_from: Timestamp
    recorded_to: Timestamp | None = None
    last_revised_at: Timestamp
    revision_count: int = 0
    version: int = 1  # which version of the belief this is (stored only from 2: docs/time.md)
    # revisions counted in the current hour window (for max_revisions_per_hour): O(1), where a
    # list of timestamps grew with every revision and was re-serialised each time
    revision_window_start: Timestamp | None = None
    revisions_in_window: int = 0
    # the confidence of the last revision, when evidence has moved ``confidence`` since by less
    # than ``min_evidence_delta`` (derive/revision.py); None: ``confidence`` is that one
    revised_confidence: float | None = None
    source: str = "derived"
    supporting_evidence_redacted: bool = False
    supporting_evidence_redacted_fraction: float = 0.0
    why_url: str
    evidence: dict[str, float] = attrs.field(factory=dict)  # {"for": w, "against": w}
    excluded_from_recall: bool = False
    partial: bool = False
    partial_reason: str | None = None
    progress: float | None = None

    def copy(self) -> Belief:
        """A shallow copy, spelt out: belief revision copies every belief it revises, and
        ``attrs.evolve`` costs about twice as much.  tests/test_revision.py checks that every
        field is copied."""
        return Belief(
            id=self.id, scope=self.scope, claim=self.claim, stance=self.stance,
            confidence=self.confidence, confidence_interval=self.confidence_interval,
            calibration=self.calibration, supports=self.supports, contradicts=self.contradicts,
            revision_policy=self.revision_policy, valid_from=self.valid_from,
            valid_to=self.valid_to, recorded_from=self.recorded_from,
            recorded_to=self.recorded_to, last_revised_at=self.last_revised_at,
            revision_count=self.revision_count, version=self.version,
            revision_window_start=self.revision_window_start, revisions_in_window=self.revisions_in_window,
            revised_confidence=self.revised_confidence, source=self.source,
            supporting_evidence_redacted=self.supporting_evidence_redacted,
            supporting_evidence_redacted_fraction=self.supporting_evidence_redacted_fraction,
            why_url=self.why_url, evidence=self.evidence,
            excluded_from_recall=self.excluded_from_recall, partial=self.partial,
            partial_reason=self.partial_reason, progress=self.progress,
        )  # fmt: skip


@attrs.define(kw_only=True)
class CausalLink:
    event: str
    role: str  # trigger | context | decision | outcome


@attrs.define(kw_only=True)
class Episode:
    id: str
    scope: str
    name: str
    summary: str
    events: list[str]
    supports: list[str]
    started_at: Timestamp
    ended_at: Timestamp
    valid_from: Timestamp
    valid_to: Timestamp | None = None
    recorded_from: Timestamp
    recorded_to: Timestamp | None = None
    version: int = 1  # which version of the episode this is (stored only from 2: docs/time.md)
    actors_involved: list[str] = attrs.field(factory=list)
    centrality_score: float = 0.0
    causal_chain: list[CausalLink] = attrs.field(factory=list)
    strategy: str = "time_gap"
    session: str | None = None
    status: str = EPISODE_OPEN  # open | compressed (stages.EPISODE_SEALED)
    sealed_at: Timestamp | None = None
    causal_predecessor: str | None = None
    informative_events: int = 0  # events that yielded at least one fact (for centrality_score)
    opening: str | None = None  # first statement, for the summary
    closing: str | None = None  # latest statement, for the summary
    excluded_from_recall: bool = False
    partial: bool = True
    partial_reason: str | None = None  # "episode_open" while the window is open
    progress: float | None = None


@attrs.define(kw_only=True)
class Concept:
    id: str
    scope: str
    name: str
    canonical_id: str | None = None
    version: int = 1
    previous_version: str | None = None
    derived_from: list[str] = attrs.field(factory=list)
    summary: str | None = None
    summary_embedding: list[float] | None = None
    synthesis_inputs: dict[str, Any] = attrs.field(factory=dict)
    supported_by: dict[str, Any] = attrs.field(factory=dict)
    supports: list[str] = attrs.field(factory=list)
    edges: list[dict[str, Any]] = attrs.field(factory=list)
    valid_from: Timestamp
    valid_to: Timestamp | None = None
    recorded_from: Timestamp
    recorded_to: Timestamp | None = None
    last_synthesized_at: Timestamp | None = None
    stance: str = "uncertain"
    confidence: float = 0.0
    staleness_score: float = 0.0
    staleness_reason: str | None = None
    support_loss_fraction: float = 0.0
    coverage_score: float = 0.0
    partial: bool = True
    partial_reason: str | None = None
    progress: float | None = None


@attrs.define(kw_only=True)
class Entity:
    """A tenant-scoped resolved entity (``ent_``) with its normalised aliases."""

    id: str
    tenant_id: str
    name: str
    aliases: list[str]
    kind: str = "entity"  # entity | actor
    actor_id: str | None = None
    created_at: Timestamp


@attrs.define(kw_only=True)
class Scope:
    path: str
    tenant_id: str
    members: list[dict[str, str]] = attrs.field(factory=list)
    policies: dict[str, Any] = attrs.field(factory=dict)
    auto_provisioned: bool = True
    registered_at: Timestamp
    created_by: str
    last_write_at: Timestamp | None = None


@attrs.define(kw_only=True)
class LifecycleEvent:
    """One lifecycle row (§8.9.2, §13); ``stage`` is the catalog's event name."""

    lifecycle_id: str
    stage: str
    ts: Timestamp
    scope: str | None
    event_id: str | None = None
    seq: int | None = None  # per-memory-event sequence number (0 = captured)
    batch_id: str | None = None
    job_id: str | None = None
    payload: dict[str, Any] = attrs.field(factory=dict)


@attrs.define(kw_only=True)
class EventState:
    """One event's pipeline state (table ``X``, keyed by event id; docs/formats.md).

    The field names are the stored JSON's.  The first seven are written on capture, stored but
    for their defaults (``derives`` when it is not ``stage_derives`` joined: older data dirs
    store them all); the others are stored once a stage sets them (``None`` = absent), so the
    state of an old data dir reads back unchanged.
    """

    scope: str
    done: list[str] = attrs.field(factory=list)  # the steps run (stages.Stage values), in order
    lce: list[str] = attrs.field(factory=list)  # its lifecycle record ids
    derives: list[str] = attrs.field(factory=list)  # what it derived, here and in other scopes
    errors: list[dict[str, Any]] = attrs.field(factory=list)  # {stage, error, message[, failures]}
    cancelled: bool = False
    batch_id: str | None = None
    passages: list[list[int]] | None = None  # [start, end) character spans of a long text
    stage_derives: dict[str, list[str]] | None = None  # stage (or "foreign") -> records it derived
    intake: list[dict[str, Any]] | None = None  # extraction's per-assertion outcomes
    touched: list[list[str]] | None = None  # the (subject id, predicate) pairs extraction changed
    superseded: list[str] | None = None  # the facts extraction superseded
    derived_records_limit: dict[str, Any] | None = None  # what max_derived_per_event left out
    elapsed_ms: dict[str, float] | None = None  # timing name (stages.STAGE_TIMING) -> ms
    foreign: list[str] | None = None  # the scopes its assertions were consolidated into
    episode_id: str | None = None
    stages_cancelled: list[str] | None = None
    beliefs_deleted_by_cancel: list[str] | None = None

    def set_stage_derives(self, stage: str, ids: list[str]) -> None:
        """What ``stage`` (a plain string: it keys a JSON object) derived."""
        if self.stage_derives is None:
            self.stage_derives = {}
        self.stage_derives[stage] = ids

    def set_elapsed(self, name: str, milliseconds: float) -> None:
        if self.elapsed_ms is None:
            self.elapsed_ms = {}
        self.elapsed_ms[name] = milliseconds


#: the fields of ``EventState`` stored only once set, in the order they are written
EVENT_STATE_OPTIONAL = (
    "passages", "stage_derives", "intake", "touched", "superseded", "derived_records_limit",
    "elapsed_ms", "foreign", "episode_id", "stages_cancelled", "beliefs_deleted_by_cancel",
)  # fmt: skip


@attrs.define(kw_only=True, eq=False)
class Candidate:
    """One recall candidate: a record one scope actor found, with the raw signals the coordinator
    scores (DESIGN §7).  In memory only (an actor's answer to the coordinator), never stored.

    ``record`` is the stored record as a wire dict (an event: one passage of a long text);
    ``links`` its supports/derives neighbours (graph proximity); ``chain`` its citations down to
    events.  The coordinator fills ``signals`` and ``score``."""

    layer: str  # events | episodes | facts | beliefs
    id: str  # the record's id, or an event passage's id
    record: dict[str, Any]
    text: str  # what MMR compares when the record has no vector (model.text)
    time: str  # the RFC 3339 time its recency counts from
    importance: float
    confidence: float
    links: list[str]
    chain: dict[str, list[str]]
    raw_size: int  # bytes of the stored record (a budget counts its rendered text instead)
    scope: str = ""
    bm25: float = 0.0
    semantic: float = 0.0
    recency: float = 0.0
    freshness: float = 0.0  # decay of when memory learned or last revised it (scoring.learned_at)
    vector: Any = None  # its unit embedding (numpy), when the scope's vector index has one
    tokens: set[str] | None = None  # its text's tokens, when it has no vector
    tokens_estimate: int = 0
    signals: dict[str, float] = attrs.field(factory=dict)
    score: float = 0.0
    in_window: bool = False  # found by the temporal handler's windowed retrieval (docs/router.md)
