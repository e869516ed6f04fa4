"""A recall candidate's raw signals (``candidates.gather``): BM25, cosine, recency, freshness,
its vector (or tokens) for MMR, and what its rendered text costs."""

from __future__ import annotations

from typing import Any

from ..model import Candidate
from ..retrieve import render
from ..retrieve.scoring import estimate_tokens, learned_at, recency
from ..retrieve.text_index import tokenize
from ..temporal import try_parse_rfc3339
from .messages import Candidates


class Signals:
    """``_signals`` for the candidates of one recall: what is the same for all of them (the
    query's text, vector and moment, the indexes, the freshness half-life) read once."""

    def __init__(self, actor, query: Candidates, bm25: dict[str, float], semantic: dict[str, float],
                 tokens: list[str] | None = None) -> None:  # fmt: skip
        self.scope, self.bm25, self.semantic, self.tokens = actor.scope, bm25, semantic, tokens
        self.text, self.reference = query.text, query.reference
        self.vector = query.vector if query.mode != "bm25" else None
        self.lexical = query.text and query.mode != "vector"  # a BM25 score is asked of the index
        self.text_index = actor.lane.state.text_index
        self._scorer: Any = None  # the BM25 of a candidate no BM25 search found (made on first use)
        self.half_life = actor.ctx.config.freshness_half_life_days

    def __call__(self, candidate: Candidate, stored: Any) -> None:
        record_id = candidate.id  # a long event found without a query: its first passage
        reference = self.reference
        when = try_parse_rfc3339(candidate.time) or reference
        cosine = self.semantic.get(record_id)
        if cosine is None:
            cosine = float(stored @ self.vector) if stored is not None and self.vector is not None else 0.0
        lexical = self.bm25.get(record_id)
        if lexical is None:
            lexical = self._lexical(record_id) if self.lexical else 0.0
        candidate.scope = self.scope
        candidate.bm25 = lexical
        candidate.semantic = cosine
        candidate.recency = recency((reference - when).total_seconds() / 86400.0)
        learned = try_parse_rfc3339(learned_at(candidate.layer, candidate.record) or "") or when
        candidate.freshness = recency((reference - learned).total_seconds() / 86400.0, self.half_life)
        candidate.vector = stored
        candidate.tokens_estimate = estimate_tokens(render.rendered_text(candidate.layer, candidate.record))
        if stored is None:  # MMR falls back to token overlap only without vectors
            candidate.tokens = set(tokenize(candidate.text))

    def _lexical(self, record_id: str) -> float:
        """The BM25 score of a candidate only the vector search found: the index's ``scorer``
        (each query term looked up once a recall: the candidates are scored with no await
        between them, so the index does not change meanwhile)."""
        if self._scorer is None:
            self._scorer = self.text_index.scorer(self.tokens if self.tokens is not None else tokenize(self.text))
        return self._scorer(record_id)

