"""Episode context in ranking (docs/decisions.md, "Recall quality"): a turn in an episode where
other candidates score well is more likely to be about the question than a lone match.

Each event candidate's episode is the ``ep_`` record among what it derives (the episode windows
of the segment stage).  A candidate gets ``weight`` times the best score of the *other*
candidates of its episode, taken before any of them is raised, added to its own.  Only the
candidates the recall already holds are looked at: nothing is loaded.
"""

from __future__ import annotations

from typing import Any


def episode_of(candidate: Any) -> str | None:
    if candidate.layer != "events":
        return None
    return next((d for d in candidate.record.get("derives") or () if d.startswith("ep_")), None)


def lift(candidates: list[Any], weight: float) -> int:
    """Add the episode-context term; returns how many candidates were raised."""
    if weight <= 0:
        return 0
    best: dict[str, list[float]] = {}  # episode -> its two best scores
    for candidate in candidates:
        episode = episode_of(candidate)
        if episode is not None:
            top = best.setdefault(episode, [])
            top.append(candidate.score)
            top.sort(reverse=True)
            del top[2:]
    raised = 0
    for candidate in candidates:
        episode = episode_of(candidate)
        top = best.get(episode) if episode is not None else None
        if not top or len(top) < 2:
            continue
        other = top[1] if candidate.score == top[0] else top[0]
        candidate.signals["episode"] = round(other, 4)
        candidate.score += weight * other
        raised += 1
    return raised
