"""The query router: every recall is one of six query types, each with its own handler
(docs/router.md).

| type | what the question asks | handler (``recall/graph.py``, ``recall/coordinator.py``) |
|---|---|---|
| ``relationship`` | how entities are connected | the relationship walk (depth 2) from the entities named; edges into the pack |
| ``entity_lookup`` | an attribute of, or everything about, one named entity | the entity's own relationships (depth 1); its records boosted |
| ``temporal`` | when something happened, or what happened in a window | recency weighted; the window named in the question resolved and reported |
| ``temporal_facets`` | an overview of a window (topics, people, kinds of fact) | aggregated facets over the window |
| ``aspect_query`` | a kind of statement: preferences, goals, habits, decisions... | candidates of those aspects kept first |
| ``exploratory`` | anything else | the default hybrid blend |

The classifier is a handful of general cue families (question forms, time expressions, relation
and aspect vocabularies, named-entity spans), applied in a fixed precedence; it never looks at
stored data.  Its accuracy is measured on tests/data/router/ (bench/router.py).
"""

from __future__ import annotations

import re
from typing import Any

import attrs

TYPES = ("aspect_query", "entity_lookup", "temporal", "temporal_facets", "exploratory", "relationship")

_MONTH = r"(?:january|february|march|april|may|june|july|august|september|october|november|december)"
_WEEKDAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
# a time expression inside a question (the window the question names)
_WINDOW = re.compile(
    rf"\b((?:last|past|previous|this|next) (?:\d+ |few |couple of |two |three |four |several )?(?:day|week|weekend|month|year|quarter|summer|"
    rf"winter|spring|autumn|fall)s?|yesterday|today|tonight|this morning|last night|recently|lately|"
    rf"(?:in|during|since|before|after|until) {_MONTH}(?: \d{{4}})?|(?:in|during|since|before|after) (?:19|20)\d\d|"
    rf"(?:on|last) {_WEEKDAY}|\d+ (?:days|weeks|months|years) ago|a (?:week|month|year) ago|"
    rf"over the (?:last|past) \w+(?: \w+)?|{_MONTH} \d{{1,2}}(?:st|nd|rd|th)?)\b",
    re.I,
)
# the question asks for a time
_WHEN = re.compile(r"^\s*(?:when|what (?:time|date|day|year|month)|how long (?:ago|has|have|did|since)|"
                   r"since when|how recently|at what point|which (?:day|year|month|date))\b|"
                   r"\b(?:first time|last time|how long ago|what year)\b", re.I)  # fmt: skip
# an overview of a window
_FACETS = re.compile(r"\b(?:summar(?:y|ise|ize)|overview|recap|digest|highlights?|main (?:topics|themes|things)|"
                     r"what (?:topics|themes|subjects)|what (?:happened|went on|was going on|came up|did (?:we|i|you) "
                     r"(?:talk|discuss|chat|cover|do))|what have (?:we|i) (?:discussed|talked about|been (?:up to|doing|"
                     r"working on))|who (?:did (?:i|we) (?:talk|speak|meet)|came up)|which people|"
                     r"what was discussed|topics? (?:of|from|in)|breakdown|catch me up|key (?:points|events))\b", re.I)  # fmt: skip
_RELATION = re.compile(
    r"\b(?:relationship|related(?: to)?|relation|between|connected|connection|know each other|how (?:do|does|did) "
    r"\w+(?: \w+)? know|friends?|friendship|partner|spouse|married|husband|wife|girlfriend|boyfriend|sibling|"
    r"sister|brother|mother|father|mom|dad|parents?|son|daughter|cousin|aunt|uncle|boss|manager|reports? to|"
    r"colleague|coworker|co-worker|team ?mates?|works? with|worked with|work for|mentor|mentee|neighbou?r|"
    r"roommate|family|dating|who (?:is|are) \w+(?:'s)? (?:friends?|family|colleagues|team))\b",
    re.I,
)
_ASPECT_CUES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("preference", re.compile(r"\b(?:prefer\w*|favou?rite|likes?|dislikes?|loves?|hates?|enjoys?|taste in|"
                              r"into|fan of)\b", re.I)),
    ("goal", re.compile(r"\b(?:goals?|aims?|aspirations?|plans? (?:to|for)|wants? to|hoping to|hopes? to|"
                        r"ambitions?|dreams?|trying to achieve|resolutions?)\b", re.I)),
    ("habit", re.compile(r"\b(?:habits?|routines?|usually|typically|normally|every (?:day|morning|evening|night|"
                         r"week)|how often|tends? to|regularly)\b", re.I)),
    ("task", re.compile(r"\b(?:tasks?|to-?dos?|action items?|open items|need(?:s)? to do|pending|deadlines?|"
                        r"assigned|follow[- ]ups?|chores)\b", re.I)),
    ("directive", re.compile(r"\b(?:rules?|instructions?|directives?|guidelines?|told you to|asked you (?:to|not to)|"
                             r"should you always|never do|always do|standing orders?|constraints?)\b", re.I)),
    ("decision", re.compile(r"\b(?:decisions?|decid\w*|agreed|settled on|choices? (?:did|we|i)|chose|conclusions?|"
                            r"what did we pick)\b", re.I)),
    ("problem", re.compile(r"\b(?:problems?|issues?|bugs?|errors?|struggl\w+|difficult\w*|challenges?|"
                           r"blockers?|complain\w*|pain points?|worries|worried|concerns?)\b", re.I)),
    ("belief", re.compile(r"\b(?:believes?|beliefs?|opinions?|views? on|thinks? (?:about|of)|feel about|stance|"
                          r"convictions?|position on)\b", re.I)),
    ("knowledge", re.compile(r"\b(?:skills?|expertise|know how to|knowledge of|languages? does|good at|"
                             r"qualified|certifications?|experienced? (?:in|with))\b", re.I)),
    ("identity", re.compile(r"\b(?:background|identity|pronouns|nationality|where (?:is|are) \w+ from|"
                            r"how old|age of|born)\b", re.I)),
)  # fmt: skip
# the question asks about one named thing
_LOOKUP = re.compile(
    r"^\s*(?:who (?:is|was|are)|what (?:is|was|are|does|did)|what's|what \w+(?: \w+)? (?:is|are|was|does|do|did)|where (?:does|do|is|did|was)|which|"
    r"how (?:old|tall|many|much)|tell me (?:about|everything)|do you know|describe|give me (?:info|details)|"
    r"info on|details (?:on|about)|what do (?:you|we) know about|is|does|did|has|can)\b",
    re.I,
)
# capitalised words that are not names when they open a question or stand alone
_NOT_NAMES = frozenset(
    """what who whom whose where when why how which is are was were do does did can could would should will
    tell give show list find the a an and or but i i'm i've i'd me my we our you your it its this that these
    those there here please any some all in on at of for with about from to by between remind summarize
    summarise recap describe explain has have had any anything everything something nothing since before
    after during last next yesterday today tomorrow monday tuesday wednesday thursday friday saturday
    sunday january february march april may june july august september october november december
    okay ok hey hi hello so also then if""".split()
)
_NAME = re.compile(r"\b([A-Z][\w'’.-]*(?:\s+(?:[A-Z][\w'’.-]*|of|de|van|von|da)\s*)*)")
_POSSESSIVE = re.compile(r"['’]s$")


@attrs.frozen
class Route:
    type: str
    entity_hints: tuple[str, ...]  # names as the question spells them (resolved by the handler)
    window: str | None  # the time expression the question names, if any
    aspects: tuple[str, ...]
    cues: tuple[str, ...]  # which cue families fired (for the trail and the confusion report)

    def wire(self) -> dict[str, Any]:
        return {"type": self.type, "entity_hints": list(self.entity_hints), "window": self.window,
                "aspects": list(self.aspects), "cues": list(self.cues)}  # fmt: skip


def entity_hints(query: str) -> tuple[str, ...]:
    """Capitalised spans that are not question words: the names a question mentions."""
    out: list[str] = []
    for match in _NAME.finditer(query or ""):
        words = [_POSSESSIVE.sub("", w).strip(".") for w in match.group(1).split()]
        while words and words[0].lower() in _NOT_NAMES:
            words.pop(0)
        while words and words[-1].lower() in _NOT_NAMES | {"of", "de", "van", "von", "da"}:
            words.pop()
        name = " ".join(words)
        if name and name.lower() not in _NOT_NAMES and name not in out:
            out.append(name)
    return tuple(out)


def aspects_of(query: str) -> tuple[str, ...]:
    return tuple(aspect for aspect, cue in _ASPECT_CUES if cue.search(query or ""))


def route(query: str, has_temporal_block: bool = False) -> Route:
    """Classify one question (``has_temporal_block``: the request carried a temporal block)."""
    text = " ".join((query or "").split())
    hints = entity_hints(text)
    window_match = _WINDOW.search(text)
    window = window_match.group(1) if window_match else None
    aspects = aspects_of(text)
    cues = []
    windowed = bool(window) or has_temporal_block
    facets, when, relation = bool(_FACETS.search(text)), bool(_WHEN.search(text)), bool(_RELATION.search(text))
    lookup = bool(_LOOKUP.search(text))
    for name, fired in (("window", windowed), ("facets", facets), ("when", when), ("relation", relation),
                        ("aspect", bool(aspects)), ("lookup", lookup), ("entity", bool(hints))):  # fmt: skip
        if fired:
            cues.append(name)
    if facets and (windowed or not hints):
        kind = "temporal_facets"
    elif when:
        kind = "temporal"
    elif relation and (len(hints) >= 2 or re.search(r"\bbetween\b|\beach other\b|\brelationship\b", text, re.I)
                       or hints):  # fmt: skip
        kind = "relationship"
    elif windowed:
        kind = "temporal"
    elif aspects and not (hints and lookup and set(aspects) <= {"identity", "knowledge"}):
        kind = "aspect_query"  # (an identity or a skill of a named entity is that entity's attribute)
    elif hints and lookup:
        kind = "entity_lookup"
    elif relation and re.search(r"\bbetween\b|\beach other\b|\brelationship\b|\bmy\b", text, re.I):
        kind = "relationship"
    else:
        kind = "exploratory"
    return Route(kind, hints, window, aspects, tuple(cues))
