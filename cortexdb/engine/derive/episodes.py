"""Episode windowing and description (the segment strategies of DESIGN §6).

A scope's events are cut into episodes — contiguous slices that belong together — by its
*segment strategy* (``policies.segmentation`` of its scope record, else the engine's
``episode_strategy``):

| strategy    | the window closes before an event when                                   |
|-------------|--------------------------------------------------------------------------|
| ``time_gap`` | it is observed more than ``gap`` after the window's last event (default) |
| ``session`` | its ``observed_actor.session`` differs from the window's, or on a time gap |
| ``thread``  | its ``context.thread`` differs from the window's last event's (two events |
|             | without a thread: on a time gap)                                          |
| ``turn_pair`` | it is a user turn and the window's last event is not (a reply came)    |
| ``daily``   | it is observed on another UTC day than the window began                  |

Every strategy also closes a window at ``max_events``.  An idle window is sealed after ``gap``
(``time_gap``, ``session``, ``turn_pair``), once its day is over (``daily``), and never by idling
(``thread``: the next thread's event, or a flush with ``seal``, closes it).  Closing a window
seals (compresses) the episode; its ``causal_chain`` then marks the first event ``trigger``, the
last ``outcome``, decision-like events ``decision`` and the rest ``context``.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import attrs

from ...errors import InvalidScopeRequest

STRATEGIES = ("time_gap", "session", "thread", "turn_pair", "daily")
USER_ROLES = ("user", "human")
MAX_GAP_SECONDS = 366 * 86400.0
_DECISION = re.compile(
    r"\b(decided|decide|agreed|agree|chose|choose|will|going to|signed|approved|committed|plan to|settled on)\b",
    re.I,
)
_FIRST_SENTENCE = re.compile(r"^(.+?[.!?])(?:\s|$)", re.S)
TITLE_WORDS = 8


@attrs.frozen
class Segmentation:
    """How a scope cuts its events into episodes."""

    strategy: str
    gap: dt.timedelta
    max_events: int
    source: str = "engine"  # engine (its config) | scope (the scope's policies.segmentation)

    def wire(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "gap_seconds": self.gap.total_seconds(),
                "max_events": self.max_events, "source": self.source}  # fmt: skip


def check_settings(value: Any, field: str = "policies.segmentation") -> dict[str, Any]:
    """A scope's ``segmentation`` policy: ``{strategy, gap_seconds?}``, checked (422 otherwise)."""
    if not isinstance(value, dict) or set(value) - {"strategy", "gap_seconds"}:
        raise InvalidScopeRequest(f"{field} must be {{strategy, gap_seconds?}}", details={"field": field})
    strategy = value.get("strategy")
    if strategy not in STRATEGIES:
        raise InvalidScopeRequest(f"{field}.strategy must be one of {list(STRATEGIES)}",
                                  details={"field": f"{field}.strategy"})  # fmt: skip
    out: dict[str, Any] = {"strategy": strategy}
    gap = value.get("gap_seconds")
    if gap is not None:
        if isinstance(gap, bool) or not isinstance(gap, int | float) or not 0 < gap <= MAX_GAP_SECONDS:
            raise InvalidScopeRequest(f"{field}.gap_seconds must be a number of seconds in (0, {MAX_GAP_SECONDS:.0f}]",
                                      details={"field": f"{field}.gap_seconds"})  # fmt: skip
        out["gap_seconds"] = float(gap)
    return out


def resolve(policies: dict[str, Any] | None, config: Any) -> Segmentation:
    """The segmentation a scope uses: its policy's, over the engine's configuration."""
    own = (policies or {}).get("segmentation") or {}
    strategy = own.get("strategy") or config.episode_strategy
    gap = own.get("gap_seconds") or config.episode_gap_seconds
    return Segmentation(strategy, dt.timedelta(seconds=gap), config.episode_max_events,
                        "scope" if own.get("strategy") else "engine")  # fmt: skip


def is_user_turn(role: str | None) -> bool:
    return (role or "user").lower() in USER_ROLES


def closes_window(
    *,
    strategy: str,
    gap: dt.timedelta,
    max_events: int,
    episode_events: int,
    episode_started_at: dt.datetime | None = None,
    episode_ended_at: dt.datetime,
    episode_session: str | None,
    observed_at: dt.datetime,
    session: str | None,
    last_role: str | None = None,
    role: str | None = None,
    last_thread: str | None = None,
    thread: str | None = None,
) -> bool:
    """Whether the next event (``observed_at``, ``session``, ``role``, ``thread``) opens a new
    window rather than joining the open one (whose last event had ``last_role``/``last_thread``)."""
    if episode_events >= max_events:
        return True
    if strategy == "daily":
        return observed_at.astimezone(dt.UTC).date() != (episode_started_at or episode_ended_at).astimezone(dt.UTC).date()
    if strategy == "thread" and (thread is not None or last_thread is not None):
        return thread != last_thread  # two events without a thread: cut by the time gap below
    if strategy == "turn_pair":
        return is_user_turn(role) and not is_user_turn(last_role)
    if strategy == "session" and session != episode_session:
        return True
    return abs(observed_at - episode_ended_at) > gap


def idle_seals(segmentation: Segmentation, started_at: dt.datetime, idle: dt.timedelta, now: dt.datetime) -> bool:
    """Whether an open window idle for ``idle`` is sealed now."""
    if segmentation.strategy == "thread":
        return False
    if segmentation.strategy == "daily":
        return now.astimezone(dt.UTC).date() > started_at.astimezone(dt.UTC).date()
    return idle > segmentation.gap


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
