"""A length prior for events (docs/decisions.md, "Recall quality after the blend"): a turn that
says more is likelier to hold what a question asks than a short acknowledgement that happens to
share its names ("Thanks, Caroline!").

Each event candidate gets ``weight`` times ``min(1, words / saturation)`` of its text (a long
event's passage counts its own words) added to its score.  BM25's length normalisation works the
other way inside one signal; this is a document prior beside it, as in classic retrieval's
length priors, and saturates so that a long turn is not preferred to a medium one.

``asks`` is the question prior beside it: the words a turn spends asking are not an answer.
"""

from __future__ import annotations

import re
from typing import Any


def lift(candidates: list[Any], weight: float, saturation: int) -> int:
    """Add the prior to the event candidates; returns how many were raised."""
    if weight <= 0:
        return 0
    raised = 0
    for candidate in candidates:
        if candidate.layer != "events":
            continue
        # words beyond the saturation are not counted (a long passage is not split whole)
        prior = min(1.0, len(candidate.text.split(maxsplit=saturation)) / saturation)
        if prior:
            candidate.signals["length"] = round(prior, 4)
            candidate.score += weight * prior
            raised += 1
    return raised


_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")


def asked_share(text: str) -> float:
    """The share of a text's words in sentences that end with a question mark."""
    words = asked = 0
    for sentence in _SENTENCE.findall(text):
        count = len(sentence.split())
        words += count
        if sentence.rstrip().endswith("?"):
            asked += count
    return asked / words if words else 0.0


def asks(candidates: list[Any], weight: float) -> int:
    """A question prior for events: a turn that asks ("What's your best camping memory?") shares
    the topic of the question it is recalled for but holds no answer; each event candidate loses
    ``weight`` times the share of its words in sentences ending with ``?``.  Returns how many
    were lowered."""
    if weight <= 0:
        return 0
    lowered = 0
    for candidate in candidates:
        if candidate.layer != "events" or "?" not in candidate.text:
            continue
        share = asked_share(candidate.text)
        if share:
            candidate.signals["asks"] = round(share, 4)
            candidate.score -= weight * share
            lowered += 1
    return lowered
