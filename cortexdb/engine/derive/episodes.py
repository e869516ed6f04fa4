"""Episode windowing and description (the segment strategies of DESIGN §6).

``time_gap`` (default) closes a window when the next event is observed more than ``gap`` after
the window's last event; ``session`` closes it when ``observed_actor.session`` changes (and on a
time gap).  A window also closes at ``max_events``.  Closing a window seals (compresses) the
episode; its ``causal_chain`` then marks the first event ``trigger``, the last ``outcome``,
decision-like events ``decision`` and the rest ``context``.
"""

from __future__ import annotations

import datetime as dt
import re

STRATEGIES = ("time_gap", "session")
_DECISION = re.compile(
    r"\b(decided|decide|agreed|agree|chose|choose|will|going to|signed|approved|committed|plan to|settled on)\b",
    re.I,
)
_FIRST_SENTENCE = re.compile(r"^(.+?[.!?])(?:\s|$)", re.S)
TITLE_WORDS = 8


def closes_window(
    *,
    strategy: str,
    gap: dt.timedelta,
    max_events: int,
    episode_events: int,
    episode_ended_at: dt.datetime,
    episode_session: str | None,
    observed_at: dt.datetime,
    session: str | None,
) -> bool:
    if episode_events >= max_events:
        return True
    if strategy == "session" and session != episode_session:
        return True
    return abs(observed_at - episode_ended_at) > gap


def role_of(text: str | None, position: int, count: int, sealed: bool) -> str:
    if position == 0:
        return "trigger"
    if sealed and position == count - 1:
        return "outcome"
    if text and _DECISION.search(text):
        return "decision"
    return "context"


def first_sentence(text: str) -> str:
    text = " ".join(text.split())
    match = _FIRST_SENTENCE.match(text)
    return match.group(1) if match else text


def title(text: str | None, intent: str | None, fallback: str) -> str:
    if intent:
        return intent.replace("_", " ")
    if not text:
        return fallback
    words = first_sentence(text).split()
    if len(words) <= TITLE_WORDS:
        return " ".join(words)
    return " ".join(words[:TITLE_WORDS]) + " …"


def summary(
    count: int,
    opening: str | None,
    closing: str | None,
    actors: list[str],
    started: str,
    ended: str,
) -> str:
    """An extractive summary: how many events, who, when, and the opening and closing statements."""
    who = ", ".join(actors) if actors else "unknown actors"
    head = f"{count} event{'s' if count != 1 else ''} from {started} to {ended} involving {who}."
    if not opening:
        return head
    if count == 1 or not closing:
        return f"{head} {first_sentence(opening)}"
    return f"{head} Began: {first_sentence(opening)} Ended: {first_sentence(closing)}"
