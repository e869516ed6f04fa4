"""The records of the API (reference §7, §8, §9): each declares the fields most callers read;
whatever else the server sends is kept and still reads as an attribute (``_records.Record``)."""

from __future__ import annotations

import json
from typing import Any

import attrs

from ._records import Record, nested, wire


# -- writes (§8.1, §8.2) ---------------------------------------------------------------------
@attrs.frozen(kw_only=True)
class ExperienceReceipt(Record):
    """``POST /v1/experience``: the event's id, how far it got (``status``, and with ``wait=``
    the ``stages_completed`` and ``derives``), and ``replay`` when the idempotency key was seen."""

    LOCAL = ("replay",)
    event_id: str | None = None
    status: str | None = None
    wal_offset: int | None = None
    lifecycle_stream: str | None = None
    stages_completed: list[str] = attrs.field(factory=list)
    derives: list[str] = attrs.field(factory=list)
    elapsed_ms: dict[str, float] = attrs.field(factory=dict)
    replay: bool = False  # the response's X-Cortex-Replay


@attrs.frozen(kw_only=True)
class BulkReceipt(Record):
    """``POST /v1/experience/bulk``: the batch (its events arrive on the lifecycle stream)."""

    batch_id: str | None = None
    accepted: int = 0
    replayed: int = 0
    ordering: str | None = None
    lifecycle_stream: str | None = None


# -- the layers (§7) ----------------------------------------------------------------------------
@attrs.frozen(kw_only=True)
class LayerRecord(Record):
    """Fields every layer record has; ``score`` and ``ranked_position`` are set in a pack."""

    id: str | None = None
    scope: str | None = None
    valid_from: str | None = None
    valid_to: str | None = None
    recorded_from: str | None = None
    recorded_to: str | None = None
    score: float | None = None
    ranked_position: int | None = None
    partial: bool | None = wire("_partial")


@attrs.frozen(kw_only=True)
class Event(LayerRecord):
    actor: str | None = None
    caller: str | None = None
    modality: str | None = None
    content: dict[str, Any] = attrs.field(factory=dict)
    context: dict[str, Any] = attrs.field(factory=dict)
    derives: list[str] = attrs.field(factory=list)
    wal_offset: int | None = None
    idempotency_key: str | None = None
    excluded_from_recall: bool | None = None

    @property
    def text(self) -> str | None:
        """``content.text`` (a message's words), if the content has any."""
        return self.content.get("text") if isinstance(self.content, dict) else None


@attrs.frozen(kw_only=True)
class Episode(LayerRecord):
    name: str | None = None
    summary: str | None = None
    events: list[str] = attrs.field(factory=list)
    started_at: str | None = None
    ended_at: str | None = None
    actors_involved: list[Any] = attrs.field(factory=list)
    status: str | None = None


@attrs.frozen(kw_only=True)
class Fact(LayerRecord):
    subject: Any = None
    predicate: str | None = None
    object: Any = None
    confidence: float | None = None
    supports: list[str] = attrs.field(factory=list)
    status: str | None = None
    superseded_by: str | None = None
    supersedes: Any = None


@attrs.frozen(kw_only=True)
class Belief(LayerRecord):
    claim: Any = None
    stance: str | None = None
    confidence: float | None = None
    confidence_interval: Any = None
    supports: list[Any] = attrs.field(factory=list)
    contradicts: list[Any] = attrs.field(factory=list)
    revision_count: int | None = None
    last_revised_at: str | None = None
    why_url: str | None = None


@attrs.frozen(kw_only=True)
class Concept(LayerRecord):
    name: str | None = None
    summary: str | None = None
    version: int | None = None
    confidence: float | None = None
    edges: list[Any] = attrs.field(factory=list)


# -- recall (§8.3, §9, §10.1) ---------------------------------------------------------------------
@attrs.frozen(kw_only=True)
class Layers(Record):
    events: list[Event] = nested(Event, many=True)
    episodes: list[Episode] = nested(Episode, many=True)
    facts: list[Fact] = nested(Fact, many=True)
    beliefs: list[Belief] = nested(Belief, many=True)
    understanding: list[Concept] = nested(Concept, many=True)


@attrs.frozen(kw_only=True)
class Pack(Record):
    """The stratified pack: ``context_block`` (ready for a prompt; also ``str(pack)``), the
    ranked ``layers``, ``provenance`` (trail and citation map) and ``diagnostics``."""

    pack_id: str | None = None
    request_id: str | None = None
    scope: str | None = None
    view: str | None = None
    traversal: str | None = None
    context_block: str = ""  # format xml: the <cortex-context> document
    format: str | None = None  # "xml" when the recall asked for the context document
    layers: Layers = attrs.field(factory=Layers, metadata={"record": Layers, "many": False, "wire": None})
    provenance: dict[str, Any] = attrs.field(factory=dict)
    diagnostics: dict[str, Any] | None = None
    partial: bool | None = wire("_partial")

    def __str__(self) -> str:
        return self.context_block


@attrs.frozen(kw_only=True)
class Answer(Record):
    """An answer from memory (§8.4): ``answer`` (every sentence cites its records), ``supported``
    (False: nothing in memory answers it), ``citations``, the recall's ``pack_id`` and
    ``provenance``; ``str(answer)`` is its text."""

    pack_id: str | None = None
    answer: str = ""
    supported: bool | None = None
    citations: list[Any] = attrs.field(factory=list)
    provenance: dict[str, Any] = attrs.field(factory=dict)
    diagnostics: dict[str, Any] | None = None
    as_of: str | None = None
    replayed: bool | None = None

    def __str__(self) -> str:
        return self.answer


@attrs.frozen(kw_only=True)
class StreamChunk(Record):
    """One Server-Sent Event of a streamed recall (or answer): ``event`` is its name (``plan``,
    ``layer``, ``relationships``, ``signals``, ``facets``, ``context_block``, ``provenance``,
    ``diagnostics``, ``done``; ``token`` and ``citations`` for narrative streams) and ``data``
    its payload.  ``text`` is the words it carries (a ``token``'s or the ``context_block``'s),
    else ``""``."""

    LOCAL = ("event", "data")
    event: str = "message"
    data: Any = None

    @classmethod
    def from_sse(cls, event: str, data: str) -> StreamChunk:
        payload = json.loads(data) if data else None
        return cls.from_wire(payload if isinstance(payload, dict) else {}, event=event, data=payload)

    @property
    def text(self) -> str:
        found = self.data.get("text") if isinstance(self.data, dict) else None
        return found if isinstance(found, str) else ""

    @property
    def items(self) -> list[Any]:
        """A ``layer`` event's records, typed (``[]`` for other events)."""
        if self.event != "layer" or not isinstance(self.data, dict):
            return []
        kind = LAYER_RECORDS.get(self.data.get("layer", ""), Record)
        return [kind.from_wire(item) for item in self.data.get("items") or () if isinstance(item, dict)]


LAYER_RECORDS: dict[str, type[Record]] = {"events": Event, "episodes": Episode, "facts": Fact,
                                          "beliefs": Belief, "understanding": Concept}  # fmt: skip


# -- why (§8.7.6), timeline (§8.7.4) ---------------------------------------------------------------
@attrs.frozen(kw_only=True)
class GraphNode(Record):
    id: str | None = None
    type: str | None = None
    weight: float | None = None
    summary: str | None = None


@attrs.frozen(kw_only=True)
class GraphEdge(Record):
    source: str | None = wire("from")
    target: str | None = wire("to")
    relation: str | None = None


@attrs.frozen(kw_only=True)
class SupportGraph(Record):
    nodes: list[GraphNode] = nested(GraphNode, many=True)
    edges: list[GraphEdge] = nested(GraphEdge, many=True)


@attrs.frozen(kw_only=True)
class Why(Record):
    """``GET /v1/beliefs/why``: the belief, its support graph down to events, a narrative."""

    belief: Belief | None = nested(Belief)
    support_graph: SupportGraph | None = nested(SupportGraph)
    narrative: str = ""
    narrative_model: str | None = None


@attrs.frozen(kw_only=True)
class Timeline(Record):
    """``GET /v1/facts/timeline``: the supersession chain of (subject, predicate)."""

    subject: Any = None
    predicate: str | None = None
    timeline: list[Record] = nested(Record, many=True)


# -- lifecycle (§8.9, §13) ---------------------------------------------------------------------------
@attrs.frozen(kw_only=True)
class LifecycleEvent(Record):
    """A lifecycle record: from the SSE stream (``event`` is the frame's name: a stage such as
    ``captured``, or ``erasure_progress``, ``policy_changed``...), or from the catch-up list."""

    LOCAL = ("event",)
    event: str | None = None
    lifecycle_id: str | None = None
    stage: str | None = None
    event_id: str | None = None
    scope: str | None = None
    ts: str | None = None
    batch_id: str | None = None
    job_id: str | None = None
    payload: dict[str, Any] = attrs.field(factory=dict)

    @property
    def data(self) -> dict[str, Any]:
        """The frame's JSON (``raw``)."""
        return self.raw


@attrs.frozen(kw_only=True)
class MemoryEvent(Record):
    """``GET /v1/lifecycle/memory-event/{id}``: one write's stages, done and pending."""

    event_id: str | None = None
    stages_completed: list[str] = attrs.field(factory=list)
    stages_pending: list[str] = attrs.field(factory=list)
    lifecycle_event_ids: list[str] = attrs.field(factory=list)
    derives: list[str] = attrs.field(factory=list)
    errors: list[Any] = attrs.field(factory=list)


@attrs.frozen(kw_only=True)
class Cancelled(Record):
    """``POST /v1/lifecycle/memory-event/{id}/cancel``."""

    event_id: str | None = None
    stages_cancelled: list[str] = attrs.field(factory=list)
    stages_already_completed: list[str] = attrs.field(factory=list)
    excluded_from_recall: bool | None = None
    audit_id: str | None = None
