"""The understanding's messages (``messages`` lists them in its closed sets): the concept reads a
ScopeActor serves (``concept_queries``) and the ``synthesize`` job's work for its lane; and the
commit of an approved derivation proposal (``stages.review``, docs/proposals.md)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import attrs


@attrs.frozen(kw_only=True)
class ReadConcepts:
    reply: Any  # messages.ReplySlot
    topic: str | None = None
    depth: int | None = None
    include_deprecated: bool = False
    as_of: dt.datetime | None = None
    limit: int | None = None
    cursor: str | None = None


@attrs.frozen(kw_only=True)
class ReadConcept:
    reply: Any  # messages.ReplySlot
    concept_id: str
    as_of: dt.datetime | None = None
    follow_alias: bool = True


@attrs.frozen(kw_only=True)
class ReadRelated:
    reply: Any  # messages.ReplySlot
    concept_id: str
    relation: str | None = None
    depth: int = 1
    include_deprecated: bool = False
    limit: int | None = None


@attrs.frozen(kw_only=True)
class ReadCoverage:
    reply: Any  # messages.ReplySlot


@attrs.frozen
class Synthesize:
    """Re-synthesize the scope's concepts (all, or those of ``topics``) and score them; the reply
    is what it did (counts)."""

    tenant: str
    topics: tuple[str, ...]
    force: bool
    reply: Any  # messages.ReplySlot


@attrs.frozen
class SynthesizeItem:
    """A ``Synthesize`` message's work, run between batches; the reply is what it did."""

    message: Synthesize


@attrs.frozen
class CommitProposal:
    """Commit an approved derivation proposal's fact through the derivation path; the reply is
    what it committed (``stages.review.commit``)."""

    proposal: dict
    approver: str
    reply: Any  # messages.ReplySlot


@attrs.frozen
class CommitProposalItem:
    """A ``CommitProposal`` message's work, run between batches."""

    message: CommitProposal
