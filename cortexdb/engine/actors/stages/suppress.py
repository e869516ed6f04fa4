"""What derivation skips because a forget removed it (table ``FG``, keys ``derive.suppression``).

| row key                         | written when a forget deletes | skipped when                     |
|---------------------------------|-------------------------------|----------------------------------|
| ("fact", evt_id, fact hash)     | a fact: one row per supporting event | that event asserts that claim (same polarity) again |
| ("claim", claim hash)           | a belief                      | a belief of the claim would be created from evidence captured before the forget (``upto``: the WAL offset then) |
| ("episode", evt_id)             | an episode: one row per member | that event would join an episode |

A scope without rows never reads the table again after one look (``PartitionState.suppressing``),
so derivation in scopes that never forgot anything costs nothing more.
"""

from __future__ import annotations

from typing import Any

from ...derive.facts import object_key
from ...derive.suppression import claim_hash, fact_hash
from ...model import Fact
from .common import Assertion, StageContext


async def active(work: StageContext) -> bool:
    state = work.state
    if state.suppressing is None:
        state.suppressing = False
        async for _ in work.tables.suppressions.ids(limit=1):
            state.suppressing = True
    return state.suppressing


async def fact_suppressed(work: StageContext, event_id: str, assertion: Assertion) -> bool:
    if not await active(work):
        return False
    key = fact_hash(assertion.subject, assertion.predicate, assertion.object, assertion.polarity)
    return await work.tables.suppressions.exists(("fact", event_id, key))


async def episode_suppressed(work: StageContext, event_id: str) -> bool:
    return await active(work) and await work.tables.suppressions.exists(("episode", event_id))


async def suppressed_claims(work: StageContext, claims: dict[str, Fact], facts: list[Fact],
                            beliefs: dict[str, Any]) -> set[str]:  # fmt: skip
    """The claims (``revision.claims_of``) without a belief whose belief a forget removed, and
    for which no evidence was captured since: no belief is created for them."""
    if not await active(work):
        return set()
    out = set()
    for claim, representative in claims.items():
        if beliefs.get(claim) is not None:
            continue
        key = claim_hash(representative.subject, representative.predicate, representative.object)
        row = await work.tables.suppressions.get(("claim", key))
        if row is not None and not await _evidence_since(work, representative, facts, row["upto"]):
            out.add(claim)
    return out


async def _evidence_since(work: StageContext, representative: Fact, facts: list[Fact],
                          upto: int) -> bool:  # fmt: skip
    """Does a live fact of the claim rest on an event captured after WAL offset ``upto``?"""
    okey = object_key(representative.object)
    for fact in facts:
        if fact.polarity <= 0 or fact.excluded_from_recall or object_key(fact.object) != okey:
            continue
        latest = await work.state.event(fact.supports[-1]) if fact.supports else None
        if latest is not None and latest.wal_offset > upto:
            return True
    return False
