"""The Extractor SPI: turn one event's content into candidate facts and entity mentions.

Extractors are pure (no I/O): the pipeline resolves entities, assigns ids and decides intake.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Protocol

import attrs


@attrs.frozen
class TermRef:
    """A subject or entity object as the extractor saw it: a surface name, or a known actor id."""

    name: str
    actor_id: str | None = None  # set when the term is a CortexDB actor (``user:alice``)


@attrs.frozen
class CandidateFact:
    subject: TermRef
    predicate: str
    object_value: Any  # a literal value, or a TermRef for entity objects
    datatype: str  # string | integer | number | boolean | entity | datetime | json
    confidence: float
    pattern: str  # which rule or mapping produced it (recorded as the fact's extractor detail)
    single_valued: bool = True
    polarity: int = 1  # -1 for negated statements ("I don't like X")
    unit: str | None = None
    valid_from: dt.datetime | None = None  # world-time window the content states (a triple's);
    valid_to: dt.datetime | None = None  # None: from the event's observed_at / open-ended


@attrs.frozen
class ExtractionContext:
    content: dict[str, Any]
    modality: str
    subject_id: str  # the envelope's subject identity (defaults down from the caller)
    observed_actor_id: str
    labels: tuple[str, ...] = ()


@attrs.frozen
class Extraction:
    facts: tuple[CandidateFact, ...] = ()
    entities: tuple[TermRef, ...] = ()  # mentions worth resolving even without a fact
    unread: bool = False  # True when the content kind is not something this extractor reads


class Extractor(Protocol):
    name: str

    def extract(self, context: ExtractionContext) -> Extraction: ...
