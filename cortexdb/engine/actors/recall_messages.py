"""Recall's own queries to a ScopeActor beyond ``messages.Candidates`` (in ``messages.QUERY_TYPES``,
served by ``queries.HANDLERS``)."""

from __future__ import annotations

import attrs

from .reply import ReplySlot


@attrs.frozen(kw_only=True)
class ReadVoices:
    """The actor ids that speak in a scope's indexed events (``PartitionState.voices``): what a
    recall's content query leaves out of the question (recall/speakers.py ``content_query``)."""

    reply: ReplySlot
