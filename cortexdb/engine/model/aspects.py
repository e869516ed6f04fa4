"""Statement aspects: what kind of statement a fact or an event is (docs/router.md, "Aspects").

The taxonomy is twelve words.  A fact's aspect comes from its predicate (and, for a relationship,
from its entity object); an event's from its text.  Both are deterministic and computed when a
record is read (the same answer for the same record, for every record ever stored: nothing to
migrate), then filtered on by ``aspect=`` on layer reads and by the ``aspect`` recall filter.
"""

from __future__ import annotations

import re
from typing import Any

from ...errors import InvalidQuery

ASPECTS = ("identity", "knowledge", "belief", "preference", "habit", "goal", "task", "directive",
           "decision", "event", "problem", "relationship")  # fmt: skip

# predicate words -> aspect (a predicate is split on "_"; the first word listed that it holds wins)
_PREDICATE_WORDS: tuple[tuple[str, frozenset[str]], ...] = (
    ("identity", frozenset({"name", "age", "born", "birthday", "nationality", "gender", "pronouns", "is_a",
                            "entity_type", "occupation", "job", "title", "role", "email", "phone", "lives",
                            "live", "home", "location", "from", "citizen", "language"})),
    ("preference", frozenset({"likes", "like", "loves", "love", "prefers", "prefer", "favorite", "favourite",
                              "dislikes", "hates", "enjoys", "enjoy", "preference", "fan"})),
    ("habit", frozenset({"habit", "usually", "routine", "often", "daily", "weekly", "plays", "practices",
                         "exercises", "runs", "hobby", "hobbies"})),
    ("goal", frozenset({"goal", "wants", "want", "plans", "plan", "aims", "hopes", "wishes", "intends",
                        "dream", "aspires"})),
    ("task", frozenset({"task", "todo", "needs", "must", "deadline", "due", "assigned", "reminder"})),
    ("directive", frozenset({"directive", "rule", "instruction", "always", "never", "should", "policy"})),
    ("decision", frozenset({"decided", "decision", "chose", "chosen", "selected", "approved", "agreed"})),
    ("problem", frozenset({"problem", "issue", "bug", "error", "broken", "fails", "allergic", "allergy",
                           "struggles", "pain", "blocked", "symptom"})),
    ("belief", frozenset({"believes", "thinks", "opinion", "feels", "doubts", "trusts", "suspects"})),
    ("event", frozenset({"attended", "visited", "went", "met", "happened", "traveled", "travelled",
                         "moved", "started", "joined", "graduated", "married_on"})),
    ("knowledge", frozenset({"knows", "studied", "skill", "skills", "speaks", "expert", "learned",
                             "understands", "uses", "owns", "has", "works_at", "works", "studies"})),
)  # fmt: skip

# event text cues -> aspect, in the order tried
_TEXT_CUES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("directive", re.compile(r"\b(always|never|make sure|don't ever|do not ever|from now on|please (?:always|never)|"
                             r"you should|remember to|be sure to)\b", re.I)),
    ("decision", re.compile(r"\b(we decided|i decided|decided to|we agreed|the decision|we chose|i chose|"
                            r"we'll go with|going with|settled on|approved)\b", re.I)),
    ("task", re.compile(r"\b(todo|to-do|need to|have to|must|deadline|due (?:on|by)|remind me|task)\b", re.I)),
    ("problem", re.compile(r"\b(problem|issue|bug|error|broken|crash(?:es|ed)?|fail(?:s|ed|ing)?|"
                           r"struggl\w*|stuck|can't|cannot|allergic)\b", re.I)),
    ("goal", re.compile(r"\b(my goal|goal is|i want to|i'd like to|i hope to|i plan to|planning to|"
                        r"aim to|dream (?:is|of)|someday)\b", re.I)),
    ("preference", re.compile(r"\b(i (?:really )?(?:like|love|prefer|enjoy|hate|dislike)|favou?rite|"
                              r"rather have|can't stand)\b", re.I)),
    ("habit", re.compile(r"\b(usually|every (?:day|morning|evening|night|week|weekend)|routine|habit|"
                         r"most (?:days|mornings)|tend to|often)\b", re.I)),
    ("belief", re.compile(r"\b(i (?:think|believe|feel|suspect|doubt)|in my opinion|i'm convinced)\b", re.I)),
    ("relationship", re.compile(r"\b(my (?:wife|husband|partner|friend|sister|brother|mother|father|mom|dad|son|"
                                r"daughter|boss|manager|colleague|coworker|team ?mate)|married to|"
                                r"friends with|works with|dating)\b", re.I)),
    ("identity", re.compile(r"\b(my name is|i am a|i'm a|i was born|i live in|i'm from|i am from|years old)\b",
                            re.I)),
    ("event", re.compile(r"\b(yesterday|last (?:week|month|year|night)|went to|visited|attended|met with|"
                         r"happened|this morning)\b", re.I)),
)  # fmt: skip


def of_predicate(predicate: str, object_type: str | None = None) -> str:
    """A fact's aspect: its predicate's words, else ``relationship`` for an entity object, else
    ``knowledge`` (a plain attribute)."""
    text = (predicate or "").lower()
    words = set(text.split("_")) | {text}
    for aspect, cues in _PREDICATE_WORDS:
        if words & cues:
            return aspect
    return "relationship" if object_type == "entity" else "knowledge"


#: how much of an event's text its aspect is read from: a cue somewhere in a long document says
#: little about it, and reading a megabyte for each recall that meets it would stall the loop
TEXT_CUE_CHARS = 4096


def of_text(text: str) -> str:
    """An event's aspect from (the first ``TEXT_CUE_CHARS`` of) its text: the first cue found,
    else ``event`` (something said)."""
    head = (text or "")[:TEXT_CUE_CHARS]
    for aspect, cue in _TEXT_CUES:
        if cue.search(head):
            return aspect
    return "event"


_CUE_ORDER = {aspect: position for position, (aspect, _) in enumerate(_TEXT_CUES)}


def of_text_in(text: str, wanted: Any) -> bool:
    """``of_text(text) in wanted``, trying the cues only up to the last wanted one: a cue after
    it can only name an aspect not wanted (unless ``event``, the aspect of no cue, is wanted)."""
    if "event" in wanted or any(a not in _CUE_ORDER for a in wanted):
        return of_text(text) in wanted
    last = max((_CUE_ORDER[a] for a in wanted), default=-1)
    head = (text or "")[:TEXT_CUE_CHARS]
    for aspect, cue in _TEXT_CUES[: last + 1]:
        if cue.search(head):
            return aspect in wanted
    return False


def of_record_in(layer: str, record: dict[str, Any], wanted: Any) -> bool:
    """``of_record(layer, record) in wanted``, with an event's text read as ``of_text_in`` does."""
    if layer == "events":
        content = record.get("content") or {}
        if content.get("kind") != "triple":
            return of_text_in(content.get("text") if isinstance(content.get("text"), str) else "", wanted)
    return of_record(layer, record) in wanted


def of_record(layer: str, record: dict[str, Any]) -> str | None:
    """The aspect of a wire record of ``layer`` (None for a layer without aspects)."""
    if layer == "facts":
        return of_predicate(record.get("predicate", ""), (record.get("object") or {}).get("type"))
    if layer == "beliefs":
        claim = record.get("claim") or {}
        return of_predicate(claim.get("predicate", ""), (claim.get("object") or {}).get("type"))
    if layer == "events":
        content = record.get("content") or {}
        if content.get("kind") == "triple":
            return of_predicate(str(content.get("predicate", "")), content.get("datatype"))
        return of_text(content.get("text") if isinstance(content.get("text"), str) else "")
    return None


def check(value: Any, field: str = "aspect") -> str:
    """An ``aspect=`` value: one of ``ASPECTS`` (the caller's error otherwise)."""
    if value not in ASPECTS:
        raise InvalidQuery(f"{field} must be one of {list(ASPECTS)}", details={"field": field})
    return value
