"""The keys under which a forget suppresses what re-derivation would bring back (pure).

A forgotten fact is suppressed per supporting event: the event, re-read by the extractor (a
restart, ``rebuild``, the replay of a pending event), asserts the same claim again, which must not
become a fact.  A forgotten belief is suppressed per claim.  Both keys are hashes of the claim as
it is read — the subject's and an entity object's *names* (normalised like entity aliases), not
their ``ent_`` ids — so the key holds no readable content and does not depend on an entity record
surviving (docs/decisions.md, "Forget").
"""

from __future__ import annotations

import hashlib
from typing import Any

from .entities import normalise_alias
from .facts import object_key


def _name(ref: Any) -> str:
    return normalise_alias(str(ref.name or ref.id))


def _object(obj: Any) -> str:
    if obj.type in ("entity", "concept"):
        return f"{obj.type}:{_name(obj)}"
    return object_key(obj)


def claim_hash(subject: Any, predicate: str, obj: Any) -> str:
    """The key of a claim (subject ``TypedRef``, predicate, object ``TypedValue``)."""
    text = f"{_name(subject)}\x1f{predicate}\x1f{_object(obj)}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def fact_hash(subject: Any, predicate: str, obj: Any, polarity: int) -> str:
    """The key of an assertion: its claim and its polarity."""
    return claim_hash(subject, predicate, obj) + ("+" if polarity > 0 else "-")
