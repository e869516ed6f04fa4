"""Which beliefs a ``ReadBeliefs`` list keeps (``GET /v1/beliefs``): not excluded from recall,
not deprecated unless asked, about the ``about`` entity, of the ``aspect`` (the aspect of the
claim's predicate, ``model.aspects``), at or above ``min_confidence``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..model import Belief, aspects


def keeper(query: Any) -> Callable[[Belief], bool]:
    def keep(belief: Belief) -> bool:
        if belief.excluded_from_recall:
            return False
        if belief.stance == "deprecated" and not query.include_deprecated:
            return False
        claim = belief.claim
        obj = claim.get("object") or {}
        if query.about and claim["subject"].get("id") != query.about and obj.get("id") != query.about:
            return False
        if query.aspect and aspects.of_predicate(claim.get("predicate", ""), obj.get("type")) != query.aspect:
            return False
        return query.min_confidence is None or belief.confidence >= query.min_confidence

    return keep
