"""How a lane's partition state (``state.PartitionState``) bounds what it caches.

Derivation caches decoded facts and beliefs and the pairs' id lists; at a point where everything
cached is committed (the end of a batch or an item) ``trim_caches`` drops what derivation no longer
consults and bounds the rest by ``EngineConfig.derived_cache_records`` (docs/decisions.md, "What
the derivation caches keep").  The functions take the state as their first argument.
"""

from __future__ import annotations

from typing import Any

PAIR_IDS_PER_RECORD = 16  # the fact ids the pair lists may hold together, per derived_cache_records


def trim_caches(state: Any, limit: int) -> int:
    """Bound the decoded facts and beliefs to ``limit`` each (``derived_cache_records``), at
    a point where everything cached is committed (the end of a batch or an item): first what
    derivation no longer consults goes, whatever the count (``_drop_closed``); then, over the
    bound, the oldest, down to three quarters of the limit.  Facts with supports not yet
    written or a version being closed, and the beliefs of deferred claims, stay.  A dropped
    fact leaves its pair's id lists (they read it again by id); those are bounded apart
    (``_trim_pairs``).  Returns how many records were dropped."""
    dropped = _drop_closed(state)
    if len(state.facts) > limit:
        pinned = state.new_supports.keys() | state.closing.keys()
        excess = len(state.facts) - limit * 3 // 4
        for fact_id in [f for f in state.facts if f not in pinned][:excess]:
            del state.facts[fact_id]
            dropped += 1
    if len(state.beliefs) > limit:
        excess = len(state.beliefs) - limit * 3 // 4
        for claim in [c for c in state.beliefs if c not in state.deferred][:excess]:
            belief = state.beliefs.pop(claim)
            if belief is not None:
                state.belief_by_id.pop(belief.id, None)
            dropped += 1
    if len(state.belief_by_id) > limit:  # revised beliefs whose claim was never looked up
        held = {b.id for b in state.beliefs.values() if b is not None}  # those stay: one copy
        excess = len(state.belief_by_id) - limit * 3 // 4
        for belief_id in [b for b in state.belief_by_id if b not in held][:excess]:
            del state.belief_by_id[belief_id]
            dropped += 1
    _trim_pairs(state, limit)
    state.subject_beliefs.trim(limit)
    return dropped


def _drop_closed(state: Any) -> int:
    """Drop the decoded facts that are no longer current (superseded, excluded, an old data
    dir's closed record) and the beliefs whose claim has closed (``valid_to`` set: no live fact
    supports it) or that are gone (None), at every trim.  Revision resolves an assertion
    against its pair's current facts and revises the claims of those (plus the facts a batch
    closes, still cached until its end), so these are read again only when a closed claim is
    asserted anew (its belief, by the id its subject's summary holds) or by a forget or a
    cancel.  Kept, they filled the cache to its bound over the soak's first ~10,000 writes,
    nearly all of them superseded (docs/decisions.md, "What the derivation caches keep")."""
    pinned = state.new_supports.keys() | state.closing.keys()
    # ``not is_current``, spelt out: this walks the whole cache at every batch's end (about
    # 0.1 ms of CPU for 1,024 facts)
    facts = [f for f, x in state.facts.items()
             if (x.superseded_by is not None or x.recorded_to is not None or x.excluded_from_recall)
             and f not in pinned]  # fmt: skip
    for fact_id in facts:
        del state.facts[fact_id]
    claims = [c for c, b in state.beliefs.items()
              if c not in state.deferred and (b is None or b.valid_to is not None or b.recorded_to is not None)]
    for claim in claims:
        belief = state.beliefs.pop(claim)
        if belief is not None:
            state.belief_by_id.pop(belief.id, None)
    held = {b.id for c in state.deferred if (b := state.beliefs.get(c)) is not None}
    ids = [i for i, b in state.belief_by_id.items()
           if i not in held and (b.valid_to is not None or b.recorded_to is not None)]
    for belief_id in ids:
        del state.belief_by_id[belief_id]
    return len(facts) + len(claims) + len(ids)


def _trim_pairs(state: Any, limit: int) -> None:
    """Bound the pair lists: the full ones (``fact_ids``: every fact a pair ever had, which
    only a forget or a cancel reads) go at every trim; the current ones (``current``) are
    bounded to ``limit`` pairs holding at most ``PAIR_IDS_PER_RECORD × limit`` ids, and as
    many subjects' predicates (the claims made are stored by now: dropped), the least recently
    listed first (pairs used since the last trim last), down to three quarters of the bound.
    A list dropped is read again from storage."""
    budget = PAIR_IDS_PER_RECORD * limit
    state.fact_ids.clear()  # stored by now: ``FI`` lists them (``unlisted`` is cleared too)
    for index in (state.current,):
        held = sum(map(len, index.values()))
        if len(index) > limit or held > budget:
            pairs = sorted(index, key=lambda pair: pair in state.pairs_used)  # stable: oldest first
            for pair in pairs:
                if len(index) <= limit * 3 // 4 and held <= budget * 3 // 4:
                    break
                held -= len(index.pop(pair))
    state.fact_keys.keep_only(state.current.values(), limit)
    state.unlisted.clear()  # stored by now: ``FI`` lists them
    state.claims.clear()  # stored by now: ``BI`` lists them
    if len(state.predicates) > limit:  # by subject, oldest listed first
        for subject in list(state.predicates)[: len(state.predicates) - limit * 3 // 4]:
            del state.predicates[subject]
    state.pairs_used.clear()
