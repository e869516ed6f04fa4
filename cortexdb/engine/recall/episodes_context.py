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
    for derived in candidate.record.get("derives") or ():
        if derived[:3] == "ep_":
            return derived
    return None


def lift(candidates: list[Any], weight: float) -> int:
    """Add the episode-context term; returns how many candidates were raised."""
    if weight <= 0:
        return 0
    episodes = [episode_of(c) for c in candidates]
    first: dict[str, float] = {}  # episode -> its best score, and its second best
    second: dict[str, float] = {}
    for candidate, episode in zip(candidates, episodes, strict=True):
        if episode is None:
            continue
        score = candidate.score
        best = first.get(episode)
        if best is None:
            first[episode] = score
        elif score > best:
            first[episode], second[episode] = score, best
        elif score > second.get(episode, float("-inf")):
            second[episode] = score
    raised = 0
    for candidate, episode in zip(candidates, episodes, strict=True):
        if episode is None or episode not in second:  # alone in its episode
            continue
        best = first[episode]
        other = second[episode] if candidate.score == best else best
        candidate.signals["episode"] = round(other, 4)
        candidate.score += weight * other
        raised += 1
    return raised
