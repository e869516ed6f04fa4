"""The query planner: a small deterministic classifier that names the plan (the first trail phase).

| plan | when | effect on the score weights |
|---|---|---|
| TEMPORAL_SCAN | time words or a temporal block | recency counts more |
| RELATIONSHIP_EXPAND | "relationship", "between", "with whom", "friends", ... | graph proximity counts more |
| ENTITY_ATTRIBUTE_LOOKUP | "what is X's", "where does", "who is", "how old", ... | lexical match and confidence count more |
| EXPLORATORY_HYBRID | anything else | the default blend |
"""

from __future__ import annotations

import re

# relevance (semantic + lexical) dominates; the other signals order near-ties (measured on LoCoMo,
# docs/benchmarks.md)
DEFAULT_WEIGHTS = {
    "semantic": 0.4,
    "bm25": 0.4,
    "graph": 0.05,
    "recency": 0.05,
    "importance": 0.05,
    "confidence": 0.05,
    "freshness": 0.05,  # EngineConfig.freshness_weight replaces it
}

_TEMPORAL = re.compile(
    r"\b(when|what time|what date|how long|since|before|after|during|last (?:week|month|year)|yesterday|"
    r"today|recently|ago|first time|in (?:19|20)\d\d|january|february|march|april|may|june|july|august|"
    r"september|october|november|december)\b",
    re.I,
)
_RELATION = re.compile(
    r"\b(relationship|related|between|with whom|friends?|partner|married|together|know each other|connected)\b",
    re.I,
)
_LOOKUP = re.compile(
    r"^(what is|what's|what are|where (?:does|do|is|did)|who is|who's|which|how old|how many|what (?:kind|type)|"
    r"what does|what did|does|is|did|do)\b",
    re.I,
)


def classify(query: str, has_temporal_block: bool = False) -> str:
    text = (query or "").strip()
    if not text:
        return "TEMPORAL_SCAN" if has_temporal_block else "EXPLORATORY_HYBRID"
    if has_temporal_block or _TEMPORAL.search(text):
        return "TEMPORAL_SCAN"
    if _RELATION.search(text):
        return "RELATIONSHIP_EXPAND"
    if _LOOKUP.search(text):
        return "ENTITY_ATTRIBUTE_LOOKUP"
    return "EXPLORATORY_HYBRID"


def weights_for(plan: str, freshness: float | None = None) -> dict[str, float]:
    """The plan's signal weights, normalised to 1 (``freshness``: its weight before that)."""
    weights = dict(DEFAULT_WEIGHTS)
    if freshness is not None:
        weights["freshness"] = freshness
    if plan == "TEMPORAL_SCAN":
        weights.update(recency=0.1, semantic=0.375, bm25=0.375)
    elif plan == "RELATIONSHIP_EXPAND":
        weights.update(graph=0.1, semantic=0.375, bm25=0.375)
    elif plan == "ENTITY_ATTRIBUTE_LOOKUP":
        weights.update(bm25=0.425, semantic=0.375, confidence=0.05)
    total = sum(weights.values())
    return {name: round(value / total, 4) for name, value in weights.items()}


def single_signal(mode: str) -> dict[str, float]:
    """Weights of a one-signal arm: ``bm25`` or ``vector`` (semantic) only."""
    signal = {"bm25": "bm25", "vector": "semantic"}[mode]
    return {name: (1.0 if name == signal else 0.0) for name in DEFAULT_WEIGHTS}
