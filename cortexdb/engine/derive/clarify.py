"""Intake responses beyond accepted/reinforced (docs/intake.md).  Pure: no I/O.

| status                | when                                                            | entry carries |
|-----------------------|-----------------------------------------------------------------|---------------|
| ``conflict_detected`` | a fact contradicts one already held (fact resolution)           | ``surfacing_hint`` (``conflict_hint``) |
| ``needs_clarification`` | ``unresolved_pronoun``: a sentence asserts something of *he*, *she*, *they* or *it* (the rules never guess who) | ``questions``, ``candidates`` (names the text mentioned before it), ``surfacing_hint`` |
| ``needs_clarification`` | ``ambiguous_entity``: a one-word name of a fact names what two or more of the tenant's entities start with (*Alex*: *Alex Smith*, *Alex Jones*) | ``questions``, ``candidates``, ``surfacing_hint`` |
| ``rejected``          | ``not_assertion_worthy``: a read text yielded no assertion, entity or question (noise) | — |

Questions and hints are English sentences an agent may say as they are or rephrase.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Iterable
from typing import Any

PRONOUNS = ("he", "she", "they", "it")
_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")
_ASSERTING = re.compile(
    r"^(?P<pronoun>he|she|they|it)\s+(?P<rest>(?:now\s+)?(?:lives?|works?|moved|is|was|are|were|likes?|loves?|"
    r"hates?|prefers?|has|have|owns?|joined|left|manages?|reports?)\b.*)$",
    re.I,
)  # fmt: skip
_NAME = re.compile(r"\b([A-Z][a-z]+(?: [A-Z][a-z]+)*)\b")
_NOT_NAMES = {"I", "He", "She", "They", "It", "We", "You", "The", "A", "An", "My", "Our", "This", "That", "Yesterday",
              "Today", "Tomorrow", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"}  # fmt: skip
MAX_QUESTIONS = 10  # pronoun questions one event lists by default (EngineConfig.intake_max_questions)
MAX_CANDIDATES = 20  # names a pronoun question offers, the nearest before it (EngineConfig.intake_name_candidates)
#: the fields of an intake entry that quote the event's text (a redaction strips them)
QUOTING = ("predicate", "surfacing_hint", "sentence", "questions", "candidates", "name", "pronoun")


def _either(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def pronoun_questions(text: str, limit: int = MAX_QUESTIONS, candidates: int = MAX_CANDIDATES) -> list[dict[str, Any]]:
    """``needs_clarification`` entries for the sentences whose subject is a bare pronoun: at most
    ``limit`` listed, the rest counted in one entry.  Each names as candidates the last
    ``candidates`` distinct names mentioned before it (nearest last), in the order first mentioned.
    Linear in the text: a long document costs one pass (the names stop being tracked once
    ``limit`` questions are listed)."""
    out: list[dict[str, Any]] = []
    seen: dict[str, None] = {}  # names in order of first mention
    skipped = 0
    for sentence in (s.strip() for s in _SENTENCES.split(text or "")):
        match = _ASSERTING.match(sentence)
        if match:
            if len(out) >= limit:
                skipped += 1
                continue
            nearest = list(itertools.islice(reversed(seen), candidates))[::-1]
            out.append(_pronoun_entry(sentence, match.group("pronoun"), match.group("rest"), nearest))
        if len(out) >= limit:
            continue  # no later question will name candidates
        for name in _NAME.findall(sentence):
            first = name.split(" ")[0]
            if name not in seen and first not in _NOT_NAMES and not (match and sentence.startswith(name)):
                seen[name] = None
    if skipped:
        out.append({"status": "needs_clarification", "reason": "unresolved_pronoun", "count": skipped})
    return out


def _pronoun_entry(sentence: str, pronoun: str, rest: str, candidates: list[str]) -> dict[str, Any]:
    claim = rest.rstrip(".!?")
    if candidates:
        question = f'Does "{pronoun}" in "{sentence}" mean {_either(candidates)}?'
        hint = f"You said {pronoun.lower()} {claim}: did you mean {_either(candidates)}?"
    else:
        question = f'Who does "{pronoun}" refer to in "{sentence}"?'
        hint = f"You mentioned that someone {claim}; who was that?"
    return {"status": "needs_clarification", "reason": "unresolved_pronoun", "sentence": sentence,
            "pronoun": pronoun, "candidates": candidates, "questions": [question], "surfacing_hint": hint}  # fmt: skip


def ambiguous_entity(name: str, candidates: Iterable[str], fact_id: str | None) -> dict[str, Any] | None:
    """A ``needs_clarification`` entry when a one-word ``name`` may mean two or more entities."""
    names = sorted(set(candidates))
    if len(names) < 2:
        return None
    return {"status": "needs_clarification", "reason": "ambiguous_entity", "name": name, "fact_id": fact_id,
            "candidates": names, "questions": [f"Which {name} do you mean: {_either(names)}?"],
            "surfacing_hint": f"When you mentioned {name}, did you mean {_either(names)}?"}  # fmt: skip


def conflict_hint(new_claim: str, old_claims: list[str]) -> str:
    """How an agent might raise a conflict: what was held, what was said now."""
    if not old_claims:
        return f'This contradicts something already known: "{new_claim}". Which is right?'
    return f'Earlier: "{"; ".join(old_claims)}". Now: "{new_claim}". Which is right, or did it change?'


def noise(intake: list[dict[str, Any]], read: bool, derived_anything: bool) -> dict[str, Any] | None:
    """The ``rejected`` entry of a read text that yielded nothing at all."""
    if not read or derived_anything or intake:
        return None
    return {"status": "rejected", "reason": "not_assertion_worthy"}


#: an entry's fields that name records (new ids after a rebuild) or when it was queued: not part
#: of what the entry *says*
_NOT_SAID = frozenset({"id", "scope", "event_id", "caller", "created_at", "fact_id", "conflicts_with", "superseded", "proposal_id",
                       "acknowledged_at", "acknowledged_by"})  # fmt: skip


def fingerprint(entry: dict[str, Any]) -> str:
    """What an intake result says, independent of record ids: its acknowledgement is keyed by this
    (with its event), so the same result derived again — a rebuild — stays acknowledged."""
    said = {key: value for key, value in entry.items() if key not in _NOT_SAID}
    return hashlib.sha256(json.dumps(said, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()[:32]
