"""Episode context in ranking (docs/decisions.md, "Recall quality after the blend"): a turn in
an episode where candidates score well is likelier to be about the question than a lone match.

Each event candidate's episode is the ``ep_`` record among what it derives (the episode windows
of the segment stage).  As passage retrieval interpolates a passage's score with its document's
best passage, each event candidate gets ``weight`` times the best score among the candidates of
its episode (itself included, taken before any is raised) added to its own; an event of no
episode is a document of its own.  Only the candidates the recall already holds are looked at:
nothing is loaded.
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
    best: dict[str, float] = {}  # episode -> the best score among its candidates
    for candidate, episode in zip(candidates, episodes, strict=True):
        if episode is not None and candidate.score > best.get(episode, float("-inf")):
            best[episode] = candidate.score
    raised = 0
    for candidate, episode in zip(candidates, episodes, strict=True):
        if candidate.layer != "events":
            continue
        # an event of no episode is a document of its own: the best of itself
        context = best[episode] if episode is not None else candidate.score
        candidate.signals["episode"] = round(context, 4)
        candidate.score += weight * context
        raised += 1
    return raised
