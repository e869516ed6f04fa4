"""A second search from the first one's best hits (retrieve/feedback.py; docs/decisions.md,
"Candidates beyond the question's words"), run by ``candidates.gather`` between loading the
first-stage candidates and scoring them.

The feedback is the ``recall_feedback_docs`` best event hits (the raw layer: derived records
summarise it).  The query vector moves toward their mean (``recall_feedback_vector``, Rocchio's
beta) and the BM25 query gains the ``recall_feedback_terms`` terms that weigh most in them; every
layer is searched again with the reformulated query, and at most ``recall_feedback_new`` hits of
each layer that the first stage did not have become candidates too.  Every candidate — first
stage or second — is then scored against the reformulated query, so the signals stay comparable.
"""

from __future__ import annotations

from typing import Any

import attrs

from ..retrieve import feedback

EVENTS = "evt_"


def wanted(config: Any, query: Any, per_layer: dict[str, int]) -> bool:
    return (config.recall_feedback_docs > 0 and query.mode == "hybrid" and bool(query.text)
            and query.vector is not None and EVENTS in per_layer
            and (config.recall_feedback_vector > 0 or config.recall_feedback_terms > 0))  # fmt: skip


def reformulate(actor, query: Any, per_layer: dict[str, int], bm25: dict[str, float],
                semantic: dict[str, float], loaded: list[Any]) -> tuple[Any, dict, dict, list[str]]:  # fmt: skip
    """(the reformulated query, its BM25 hits, its vector hits, the ids new to the candidates)."""
    config = actor.ctx.config
    indexes = actor.lane.state
    by_id = {c.id: c for c in loaded}
    docs = [i for i in feedback.feedback_docs(bm25, semantic, EVENTS, config.recall_feedback_docs) if i in by_id]
    if not docs:
        return query, bm25, semantic, []
    stored = indexes.vector_index.vectors(docs)
    vector = feedback.rocchio(query.vector, [stored[i] for i in docs if i in stored], config.recall_feedback_vector)
    terms = feedback.expansion_terms(query.text, (by_id[i].text for i in docs), (c.text for c in loaded),
                                     config.recall_feedback_terms)  # fmt: skip
    text = " ".join([query.text, *terms])
    query = attrs.evolve(query, vector=vector, text=text)
    lexical: dict[str, float] = {}
    near: dict[str, float] = {}
    new: list[str] = []
    seen = set(bm25) | set(semantic)
    for prefix, k in per_layer.items():
        found_lexical = indexes.text_index.search(text, k, prefix)
        found_near = indexes.vector_index.search(vector, k, prefix)
        lexical.update(found_lexical)
        near.update(found_near)
        fresh = 0
        for record_id in feedback.alternate([i for i, _ in found_lexical], [i for i, _ in found_near]):
            if fresh >= config.recall_feedback_new:
                break
            if record_id not in seen:
                seen.add(record_id)
                new.append(record_id)
                fresh += 1
    return query, lexical, near, new

