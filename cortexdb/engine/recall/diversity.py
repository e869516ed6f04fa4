"""Diversity across sessions or episodes in ranking, off by default (docs/recall-signals.md,
"Diversity across sessions"; docs/decisions.md, "The question's content"): a question whose
answer is spread over several conversations needs evidence from each of them.  Measured on
LoCoMo it lost at every weight: a recall's best events already span several sessions.

The event candidates are grouped by where they were said: the session their observed actor
names (``observed_actor.session``), or — with ``by="episode"``, or for an event of no session —
the ``ep_`` record among what it derives; an event of neither is a group of its own.  Within a
group, taken best score first (ties by id), the n-th event (n = 0 for the best) loses
``weight * n / (n + 1)`` of its score: the best of every group keeps its score, the second loses
half the weight, further ones approach the whole weight.  As the penalty only grows with the
rank inside a group, this is exactly the greedy "pick the best, then charge its group" re-ranking
(an MMR whose redundancy is "same group"), computed in one pass.  Other layers are left alone.
Only the candidates the recall already holds are looked at: nothing is loaded.
"""

from __future__ import annotations

from typing import Any

from .episodes_context import episode_of


def group_of(candidate: Any, by: str) -> str | None:
    """The group of an event candidate (None: a group of its own)."""
    if by == "session":
        session = (candidate.record.get("observed_actor") or {}).get("session")
        if session:
            return f"s:{session}"
    episode = episode_of(candidate)
    return f"e:{episode}" if episode else None


def spread(candidates: list[Any], weight: float, by: str = "session") -> int:
    """Charge the later events of each group; returns how many candidates were lowered."""
    if weight <= 0:
        return 0
    events = sorted((c for c in candidates if c.layer == "events"), key=lambda c: (-c.score, c.id))
    seen: dict[str, int] = {}
    lowered = 0
    # one record may come as several passages (a long event): count the record once per group
    counted: dict[tuple[str, str], int] = {}
    for candidate in events:
        group = group_of(candidate, by)
        if group is None:
            continue
        key = (group, candidate.record["id"])
        if key in counted:
            n = counted[key]
        else:
            n = counted[key] = seen.get(group, 0)
            seen[group] = n + 1
        if n:
            penalty = weight * n / (n + 1)
            candidate.signals["diversity"] = round(-penalty, 4)
            candidate.score -= penalty
            lowered += 1
    return lowered
