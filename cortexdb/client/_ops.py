"""The operations: each endpoint of reference §8 written once, as a ``Call`` the client's
transport runs — so ``CortexClient`` returns results and ``AsyncCortexClient`` awaitables of
the same results, from the same code.  Writes, recall and the layer reads live here; the
administrative families in ``_admin_ops``.

Adding an endpoint is a method that builds its ``Call`` (docs/sdk.md, "Adding an endpoint"),
as ``answer`` does; ``self.transport.chunks(Call(..., headers=SSE_HEADERS, safe=True))`` for a
stream, as ``answer_stream`` does.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

import httpx

from ._models import (
    Answer,
    Belief,
    BulkReceipt,
    Cancelled,
    Concept,
    Episode,
    Event,
    ExperienceReceipt,
    Fact,
    LifecycleEvent,
    MemoryEvent,
    Pack,
    Timeline,
    Why,
)
from ._records import Page, Record
from ._transport import Call, Resume

MESSAGE_MODALITY = "conversation"
SSE_HEADERS = {"Accept": "text/event-stream", "Cache-Control": "no-store"}
SEARCHABLE = "indexed"  # the ``wait=`` stage after which recall finds a write (§8.1)


def _context_block(response: httpx.Response) -> str:
    return response.json()["context_block"]


def record(kind: type[Record]) -> Callable[[httpx.Response], Any]:
    """Read the answer as a ``kind`` record (``replay`` from ``X-Cortex-Replay`` where it has one)."""

    def parse(response: httpx.Response) -> Any:
        local = {"replay": response.headers.get("X-Cortex-Replay") == "true"} if "replay" in kind.LOCAL else {}
        return kind.from_wire(response.json(), **local)

    return parse


def page(kind: type[Record]) -> Callable[[httpx.Response], Page]:
    return lambda response: Page.of(response.json(), kind)


def segment(value: str) -> str:
    """An id as one URL path segment."""
    return quote(value, safe=":@")


def new_key() -> str:
    return f"sdk-{uuid.uuid4().hex}"


def rfc3339(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def envelope(text: str | None, content: Mapping[str, Any] | None, modality: str,
             context: Mapping[str, Any] | None, extra: Mapping[str, Any], now: dt.datetime) -> dict[str, Any]:  # fmt: skip
    """An experience envelope (§3.5): ``text`` as a user message unless ``content`` is given;
    ``context.observed_at`` defaults to now (Appendix E's ``happened_at`` is taken as it: the
    server refuses fields §3.5.3 does not name); an idempotency key unless one is given."""
    if content is None:
        if text is None:
            raise ValueError("give text= or content=")
        content = {"kind": "message", "role": "user", "text": text}
    given = dict(context or {})
    if "happened_at" in given and "observed_at" not in given:
        given["observed_at"] = given.pop("happened_at")
    body = {"modality": modality, "content": dict(content), "context": {"observed_at": rfc3339(now), **given},
            **extra}  # fmt: skip
    if not body.get("idempotency_key"):
        body["idempotency_key"] = new_key()
    if hasattr(body.get("vector"), "tolist"):  # a numpy array: JSON numbers (docs/embedding.md)
        body["vector"] = body["vector"].tolist()
    return body


class Namespace:
    """A family of endpoints (``client.facts``, ``client.erasures``, ...) on the client's transport."""

    def __init__(self, transport: Any) -> None:
        self.transport = transport

    def resolve_scope(self, scope: str | None) -> str:
        scope = scope or self.transport.settings.default_scope()
        if not scope:
            raise ValueError("no scope: pass scope=, or set a default (CortexClient(scope=...) or CORTEX_SCOPE)")
        return scope

    def run(self, call: Call) -> Any:
        return self.transport.execute(call)


class Layer(Namespace):
    """One layer's reads (§8.7): ``client.facts(...)`` is a page, ``.iter(...)`` every record
    (following the cursors), ``.get(id)`` one record."""

    path = ""
    kind: type[Record] = Record

    def list(self, scope: str | None = None, *, view: str | None = None, limit: int | None = None,
             cursor: str | None = None, **filters: Any) -> Page:  # fmt: skip
        """One page; ``filters`` are the layer's query parameters (``since``, ``subject``,
        ``predicate``, ``as_of``, ``min_confidence``, ``include_superseded``, ...)."""
        return self.run(self._list_call(scope, view, limit, cursor, filters))

    __call__ = list

    def iter(self, scope: str | None = None, *, view: str | None = None, limit: int | None = None,
             **filters: Any) -> Any:  # fmt: skip
        """Every record, page after page (an async iterator on the async client)."""
        return self.transport.paginate(self._list_call(scope, view, limit, None, filters))

    def _list_call(self, scope: str | None, view: str | None, limit: int | None, cursor: str | None,
                   filters: Mapping[str, Any]) -> Call:  # fmt: skip
        params = {"scope": self.resolve_scope(scope), "view": view, "limit": limit, "cursor": cursor, **filters}
        return Call("GET", self.path, params=params, parse=page(self.kind))

    def get(self, record_id: str, *, scope: str | None = None) -> Any:
        return self.run(Call("GET", f"{self.path}/{segment(record_id)}", params={"scope": self.resolve_scope(scope)},
                              parse=record(self.kind)))  # fmt: skip


class Events(Layer):
    path, kind = "/v1/events", Event

    def get(self, event_id: str, *, scope: str | None = None) -> Any:
        """One event by id (its scope is found by the server)."""
        return self.run(Call("GET", f"/v1/events/{segment(event_id)}", parse=record(Event)))


class Episodes(Layer):
    path, kind = "/v1/episodes", Episode


class Facts(Layer):
    path, kind = "/v1/facts", Fact

    def timeline(self, subject: str, predicate: str, *, scope: str | None = None) -> Any:
        """The supersession chain of (subject, predicate) (§8.7.4)."""
        params = {"scope": self.resolve_scope(scope), "subject": subject, "predicate": predicate}
        return self.run(Call("GET", "/v1/facts/timeline", params=params, parse=record(Timeline)))

    def supports(self, fact_id: str, *, scope: str | None = None, limit: int | None = None,
                 cursor: str | None = None) -> Any:  # fmt: skip
        """One page of the events supporting a fact."""
        params = {"scope": self.resolve_scope(scope), "limit": limit, "cursor": cursor}
        return self.run(Call("GET", f"/v1/facts/{segment(fact_id)}/supports", params=params, parse=page(Record)))


class Beliefs(Layer):
    path, kind = "/v1/beliefs", Belief

    def why(self, belief_id: str | Record, *, scope: str | None = None) -> Any:
        """Why the belief is held: its support graph down to events, and a narrative (§8.7.6).
        ``belief_id`` may be the ``Belief`` itself (its scope is then the one asked)."""
        if isinstance(belief_id, Record):
            scope, belief_id = scope or belief_id.get("scope"), belief_id.get("id")
        params = {"scope": self.resolve_scope(scope), "belief_id": belief_id}
        return self.run(Call("GET", "/v1/beliefs/why", params=params, parse=record(Why)))


class Understanding(Layer):
    path, kind = "/v1/understanding", Concept

    def coverage(self, scope: str | None = None) -> Any:
        return self.run(Call("GET", "/v1/understanding/coverage", params={"scope": self.resolve_scope(scope)},
                              parse=record(Record)))  # fmt: skip

    def related(self, concept_id: str, *, scope: str | None = None, relation: str | None = None,
                depth: int | None = None, limit: int | None = None) -> Any:  # fmt: skip
        params = {"scope": self.resolve_scope(scope), "relation": relation, "depth": depth, "limit": limit}
        return self.run(Call("GET", f"/v1/understanding/{segment(concept_id)}/related", params=params,
                              parse=record(Record)))  # fmt: skip


class Lifecycle(Namespace):
    """The lifecycle (§8.9): ``client.lifecycle(...)`` follows the live feed (SSE), resuming
    after a dropped connection from the last delivered ``lce_`` id (``Last-Event-ID``);
    ``list``/``iter`` read the catch-up log; ``get``, ``memory_event``, ``cancel``."""

    def stream(self, scope: str | None = None, *, since_lifecycle_id: str | None = None,
               event_id: str | None = None, batch_id: str | None = None, job_id: str | None = None,
               erasure_id: str | None = None, events: str | list[str] | None = None,
               reconnects: int | None = None, **filters: Any) -> Any:  # fmt: skip
        """Live lifecycle events (an iterator; async on the async client).  Filters: ``scope``,
        one memory event, a batch, a job (``erasure_id``...), event names (``events=``).  The
        default scope does not apply: without ``scope`` it is every scope the caller may read."""
        params = {"scope": scope, "event_id": event_id, "batch_id": batch_id, "job_id": job_id,
                  "erasure_id": erasure_id, "events": events, **filters}  # fmt: skip
        limit = self.transport.settings.stream_reconnects if reconnects is None else reconnects
        return self.transport.lifecycle(Call("GET", "/v1/lifecycle/stream", params=params),
                                         Resume(since_lifecycle_id, limit))  # fmt: skip

    __call__ = stream

    def list(self, scope: str | None = None, *, since_lifecycle_id: str | None = None, limit: int | None = None,
             cursor: str | None = None, **filters: Any) -> Any:  # fmt: skip
        """One page of the catch-up log, in ``lce_`` order (filters: ``event_id``, ``batch_id``,
        ``job_id``, ``events``)."""
        return self.run(self._list_call(scope, since_lifecycle_id, limit, cursor, filters))

    def iter(self, scope: str | None = None, *, since_lifecycle_id: str | None = None, limit: int | None = None,
             **filters: Any) -> Any:  # fmt: skip
        return self.transport.paginate(self._list_call(scope, since_lifecycle_id, limit, None, filters))

    def _list_call(self, scope: str | None, since: str | None, limit: int | None, cursor: str | None,
                   filters: Mapping[str, Any]) -> Call:  # fmt: skip
        params = {"scope": scope, "since_lifecycle_id": since, "limit": limit, "cursor": cursor, **filters}
        return Call("GET", "/v1/lifecycle", params=params, parse=page(LifecycleEvent))

    def get(self, lifecycle_id: str) -> Any:
        return self.run(Call("GET", f"/v1/lifecycle/event/{segment(lifecycle_id)}", parse=record(LifecycleEvent)))

    def memory_event(self, event_id: str) -> Any:
        """One write's stages: completed, pending, what it derived (§8.9.3)."""
        return self.run(Call("GET", f"/v1/lifecycle/memory-event/{segment(event_id)}", parse=record(MemoryEvent)))

    def cancel(self, event_id: str, *, audit_note: str | None = None) -> Any:
        """Cancel the queued stages of a captured event (§8.9.5); repeating it changes nothing."""
        body = {"audit_note": audit_note} if audit_note else {}
        return self.run(Call("POST", f"/v1/lifecycle/memory-event/{segment(event_id)}/cancel", json=body,
                              parse=record(Cancelled), safe=True))  # fmt: skip


class Writes(Namespace):
    """Capture and recall, on the client itself."""

    def experience(self, text: str | None = None, *, scope: str | None = None, content: Mapping[str, Any] | None = None,
                   modality: str = MESSAGE_MODALITY, context: Mapping[str, Any] | None = None,
                   wait: str | None = None, idempotency_key: str | None = None, **fields: Any) -> Any:  # fmt: skip
        """Write one experience (§8.1): ``text`` (a user message) or a ``content`` object.
        ``wait`` = ``captured`` | ``indexed`` | ``consolidated`` returns when that stage is done.
        ``fields``: the envelope's other fields (``observed_actor``, ``subject``, ``directives``).
        An idempotency key is generated unless given, so a retried write is never a duplicate."""
        extra = {"idempotency_key": idempotency_key, **fields}
        body = {"scope": self.resolve_scope(scope), **envelope(text, content, modality, context, extra,
                                                               self.transport.now())}  # fmt: skip
        return self.run(Call("POST", "/v1/experience", params={"wait": wait}, json=body,
                              parse=record(ExperienceReceipt)))  # fmt: skip

    def add(self, text: str, *, scope: str | None = None, wait: str | None = SEARCHABLE, **kw: Any) -> Any:
        """Remember ``text``; by default returns once it is searchable (``wait="indexed"``)."""
        return self.experience(text, scope=scope, wait=wait, **kw)

    def experience_bulk(self, items: list[Any], *, scope: str | None = None, ordering: str = "strict_temporal",
                        **fields: Any) -> Any:  # fmt: skip
        """Up to 1000 experiences in one atomic write (§8.2): each item a text or an envelope
        without ``scope``.  Each item gets an idempotency key unless it has one."""
        now = self.transport.now()
        envelopes = [envelope(item, None, MESSAGE_MODALITY, None, {}, now) if isinstance(item, str)
                     else envelope(item.get("text"), item.get("content"), item.get("modality", MESSAGE_MODALITY),
                                   item.get("context"), {k: v for k, v in item.items()
                                                         if k not in ("text", "content", "modality", "context")}, now)
                     for item in items]  # fmt: skip
        body = {"scope": self.resolve_scope(scope), "items": envelopes, "ordering": ordering, **fields}
        return self.run(Call("POST", "/v1/experience/bulk", json=body, parse=record(BulkReceipt), safe=True))

    def find_experience(self, idempotency_key: str) -> Any:
        """The write that used this idempotency key (within its 24 h)."""
        return self.run(Call("GET", f"/v1/experience/by-idempotency-key/{segment(idempotency_key)}",
                              parse=record(Record)))  # fmt: skip

    def _recall_body(self, query: str, scope: str | None, request: dict[str, Any]) -> dict[str, Any]:
        if "layers" in request:  # the reference's older name for ``include``
            request["include"] = request.pop("layers")
        return {"scope": self.resolve_scope(scope), "query": query,
                **{k: v for k, v in request.items() if v is not None}}  # fmt: skip

    def recall(self, query: str = "", *, scope: str | None = None, **request: Any) -> Any:
        """A stratified pack (§8.3): ``view``, ``include`` (or ``layers``), ``temporal``,
        ``filters``, ``budgets``, ``citation_mode``, ``diagnostics``, ``exclude_content``..."""
        body = self._recall_body(query, scope, request)
        return self.run(Call("POST", "/v1/recall", json=body, parse=record(Pack), safe=True))

    def context_document(self, query: str = "", *, scope: str | None = None, **request: Any) -> Any:
        """The recall as a ``<cortex-context>`` XML document (``format: "xml"``), as a string:
        reminders, active context, signals, relationships and conflicts, each element with its
        citation id, under ``budgets.max_tokens`` like the context block.  ``recall(...,
        format="xml")`` gives the whole pack (its ``context_block`` is the document)."""
        body = {**self._recall_body(query, scope, request), "format": "xml"}
        return self.run(Call("POST", "/v1/recall", json=body, parse=_context_block, safe=True))

    def search(self, query: str, *, scope: str | None = None, **request: Any) -> Any:
        """``recall(query)``: what memory holds about ``query``; ``str(pack)`` is its context block."""
        return self.recall(query, scope=scope, **request)

    def answer(self, question: str, *, scope: str | None = None, **request: Any) -> Any:
        """An ``Answer`` from memory (§8.4): ``answer_model``, ``use_pack_id`` (a pack of the last
        60 s), ``citation_mode``, and the recall's fields (``view``, ``temporal``, ...)."""
        body = {"scope": self.resolve_scope(scope), "question": question, **request}
        return self.run(Call("POST", "/v1/answer", json=body, parse=record(Answer), safe=True))

    def answer_stream(self, question: str, *, scope: str | None = None, **request: Any) -> Any:
        """The answer as it is written (§10.2): ``StreamChunk``s — ``token`` (``chunk.text``),
        ``citations``, ``diagnostics``, ``done``."""
        body = {"scope": self.resolve_scope(scope), "question": question, **request, "stream": True}
        return self.transport.chunks(Call("POST", "/v1/answer", json=body, headers=SSE_HEADERS, safe=True))

    def recall_stream(self, query: str = "", *, scope: str | None = None, **request: Any) -> Any:
        """The recall as it is assembled (§10.1): ``StreamChunk``s — ``plan``, one ``layer``
        each, ``relationships``, ``signals`` (``facets``), ``context_block``, ``provenance``,
        ``diagnostics``, ``done``."""
        body = {**self._recall_body(query, scope, request), "stream": True}
        return self.transport.chunks(Call("POST", "/v1/recall", json=body, headers=SSE_HEADERS, safe=True))
