"""Understanding's job and the vocabularies (reference §8.7.11, §8.14; docs/understanding.md).

``client.understanding.synthesize(scope)`` starts re-synthesis (an asynchronous job) and
``wait_synthesis(job_id)`` polls the lifecycle list for the job's end (its ``synthesis_complete``
record), pausing ``poll_interval`` seconds at first, doubling up to ``max_poll_interval``.
``client.vocabularies`` creates, reads and replaces the tenant's predicate and relation
vocabularies (writes are for tenant admins).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
import httpx

from ._ops import Namespace, record, segment
from ._ops import Understanding as Reads
from ._records import Record
from ._transfer import TERMINAL, pauses
from ._transport import Call

COMPLETE = "synthesis_complete"  # the job's last lifecycle record


@attrs.frozen(kw_only=True)
class SynthesisJob(Record):
    """A synthesize job: as accepted (``status`` running, the ``scopes`` it will visit,
    ``lifecycle_stream``) or as it ended (``status`` completed, cancelled or failed; ``summary``
    counts subjects, concepts, concepts_versioned, deprecated, stale).  ``done`` once ended."""

    job_id: str | None = None
    status: str | None = None
    scope: str | None = None
    scopes: list[str] = attrs.field(factory=list)
    topics: list[str] = attrs.field(factory=list)
    force: bool | None = None
    phase: str | None = None
    summary: dict[str, Any] = attrs.field(factory=dict)
    error: dict[str, Any] | None = None
    lifecycle_stream: str | None = None

    @property
    def done(self) -> bool:
        return self.status in TERMINAL


@attrs.frozen(kw_only=True)
class Vocabulary(Record):
    """A tenant vocabulary: ``kind`` predicate (``predicates``, applied in ``scopes``) or
    relation (``relations``); ``version`` goes up with every replacement."""

    name: str | None = None
    kind: str | None = None
    version: int | None = None
    description: str | None = None
    scopes: list[str] = attrs.field(factory=list)
    predicates: list[dict[str, Any]] = attrs.field(factory=list)
    relations: list[dict[str, Any]] = attrs.field(factory=list)


def _ended(job_id: str) -> Callable[[httpx.Response], SynthesisJob | None]:
    """The job as its end record says (None while it has none)."""

    def parse(response: httpx.Response) -> SynthesisJob | None:
        items = response.json().get("items") or []
        if not items:
            return None
        end = items[-1]
        return SynthesisJob.from_wire({"job_id": job_id, "scope": end.get("scope"), **(end.get("payload") or {})})

    return parse


def _ended_yet(job: SynthesisJob | None) -> bool:
    return job is not None


class Understanding(Reads):
    """Concept reads (``list``, ``get``, ``related``, ``coverage``) and the synthesize job."""

    def synthesize(self, scope: str | None = None, *, topics: list[str] | None = None, force: bool = False,
                   view: str | None = None) -> Any:  # fmt: skip
        """Start re-synthesizing and scoring the concepts of ``scope`` (``view="descend"``: and
        of the scopes below it); ``topics`` narrows it to concepts naming one, ``force`` writes
        a new version of every concept.  Returns the accepted ``SynthesisJob``."""
        body: dict[str, Any] = {"scope": self.resolve_scope(scope), "force": force}
        if topics is not None:
            body["topics"] = list(topics)
        if view is not None:
            body["view"] = view
        return self.run(Call("POST", "/v1/understanding/synthesize", json=body, parse=record(SynthesisJob)))

    def wait_synthesis(self, job: str | SynthesisJob, *, scope: str | None = None, timeout: float | None = None,
                       poll_interval: float = 0.2, max_poll_interval: float = 2.0) -> Any:  # fmt: skip
        """The job once it has ended, as its ``synthesis_complete`` record says; ``job`` is its
        id or the accepted ``SynthesisJob`` (whose scope is then the one read).
        ``TimeoutError`` after ``timeout`` seconds."""
        if isinstance(job, SynthesisJob):
            scope, job = scope or job.scope, job.job_id
        params = {"scope": self.resolve_scope(scope), "job_id": job, "events": COMPLETE}
        call = Call("GET", "/v1/lifecycle", params=params, parse=_ended(str(job)))
        return self.transport.poll(call, _ended_yet, pauses(poll_interval, max_poll_interval), None, timeout)


class Vocabularies(Namespace):
    """The tenant's vocabularies (§8.14): everyone in the tenant reads them, its admins write."""

    def create(self, name: str, *, kind: str = "predicate", predicates: list[Mapping[str, Any]] | None = None,
               relations: list[Mapping[str, Any]] | None = None, scopes: list[str] | None = None,
               description: str | None = None) -> Any:  # fmt: skip
        """Register vocabulary ``name`` (``kind`` predicate: ``predicates`` as ``{"id",
        "datatype"?, "aliases"?}``, applied in ``scopes`` or the whole tenant; ``kind``
        relation: ``relations`` as ``{"id", "aliases"?}``).  A second create of a name is
        ``VocabularyExists``."""
        body = _body(kind, predicates, relations, scopes, description)
        return self.run(Call("POST", "/v1/vocabularies", json={"name": name, **body}, parse=record(Vocabulary)))

    def get(self, name: str) -> Any:
        return self.run(Call("GET", f"/v1/vocabularies/{segment(name)}", parse=record(Vocabulary)))

    def update(self, name: str, *, kind: str = "predicate", predicates: list[Mapping[str, Any]] | None = None,
               relations: list[Mapping[str, Any]] | None = None, scopes: list[str] | None = None,
               description: str | None = None) -> Any:  # fmt: skip
        """Replace vocabulary ``name`` whole (its ``version`` goes up)."""
        body = _body(kind, predicates, relations, scopes, description)
        return self.run(Call("PUT", f"/v1/vocabularies/{segment(name)}", json=body, parse=record(Vocabulary)))


def _body(kind: str, predicates: Any, relations: Any, scopes: Any, description: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": kind, **({"description": description} if description is not None else {})}
    for field, value in (("predicates", predicates), ("relations", relations), ("scopes", scopes)):
        if value is not None:
            body[field] = [dict(v) if isinstance(v, Mapping) else v for v in value]
    return body


__all__ = ["SynthesisJob", "Understanding", "Vocabularies", "Vocabulary"]
