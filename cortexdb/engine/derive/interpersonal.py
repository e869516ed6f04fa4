"""Interpersonal relations between two named people (docs/extraction.md, "Relations between
people"): a text rule family of the default extractor (``rules.py``).

| form | fact |
|---|---|
| ``X <verb phrase> Y`` ("Alice works with Priya", "Tom reports to Dana", "I'm married to Sam") | (X, the phrase's predicate, Y) |
| ``X is Y's <relation noun>`` ("Priya is Tom's sister", "Dana is my manager") | (Y, the noun, X), as ``my sister is Priya`` reads |
| ``X and Y are <plural noun / married>`` ("Alice and Bob are colleagues") | (X, the noun's predicate, Y) |

X and Y are capitalised names of at most four words (``I`` and ``me`` are the speaker when the
text is first-person); anything else — a company, a pronoun, a lowercase phrase — is left to the
other rules.  The vocabularies below are the whole of what this family reads.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ..spi.extractor import TermRef

# verb phrase -> (predicate, single-valued)
VERBS: dict[str, tuple[str, bool]] = {
    "works with": ("works_with", False), "work with": ("works_with", False),
    "worked with": ("works_with", False), "is working with": ("works_with", False),
    "am working with": ("works_with", False), "'m working with": ("works_with", False),
    "collaborates with": ("works_with", False), "collaborate with": ("works_with", False),
    "reports to": ("reports_to", True), "report to": ("reports_to", True), "reported to": ("reports_to", True),
    "manages": ("manages", False), "manage": ("manages", False), "supervises": ("manages", False),
    "mentors": ("mentors", False), "mentor": ("mentors", False),
    "is married to": ("married_to", True), "am married to": ("married_to", True),
    "'m married to": ("married_to", True), "married": ("married_to", True),
    "is engaged to": ("engaged_to", True), "am engaged to": ("engaged_to", True), "'m engaged to": ("engaged_to", True),
    "is dating": ("dating", True), "am dating": ("dating", True), "'m dating": ("dating", True),
    "is friends with": ("friend_of", False), "am friends with": ("friend_of", False),
    "'m friends with": ("friend_of", False), "is a friend of": ("friend_of", False),
    "is best friends with": ("best_friend_of", False), "am best friends with": ("best_friend_of", False),
    "lives with": ("lives_with", False), "live with": ("lives_with", False),
}  # fmt: skip
# a relation noun in "X is Y's <noun>": the fact is (Y, noun, X)
NOUNS = (
    "sister", "brother", "mother", "father", "mom", "dad", "son", "daughter", "wife", "husband",
    "partner", "spouse", "girlfriend", "boyfriend", "fiance", "fiancee",
    "cousin", "aunt", "uncle", "niece", "nephew", "grandmother", "grandfather", "grandson",
    "granddaughter", "best friend", "friend", "colleague", "coworker", "co-worker", "manager",
    "boss", "mentor", "mentee", "roommate", "flatmate", "neighbor", "neighbour", "teammate",
    "assistant", "sibling", "stepmother", "stepfather", "stepson", "stepdaughter",
)  # fmt: skip
# "X and Y are <word>": (X, predicate, Y)
PLURALS: dict[str, str] = {
    "friends": "friend_of", "best friends": "best_friend_of", "colleagues": "works_with",
    "coworkers": "works_with", "co-workers": "works_with", "teammates": "works_with",
    "married": "married_to", "engaged": "engaged_to", "siblings": "sibling_of", "cousins": "cousin_of",
    "neighbors": "neighbor_of", "neighbours": "neighbor_of", "roommates": "roommate_of",
    "flatmates": "roommate_of",
}  # fmt: skip

_NAME = r"(?:[A-Z][\w'’.-]*(?: [A-Z][\w'’.-]*){0,3})"
_WHO = rf"(?:{_NAME}|I)"
_ALT = lambda words: "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))  # noqa: E731
_VERB = re.compile(rf"(?<![\w'])(?P<x>{_WHO})(?: (?:also|still|now|directly|closely|often))? ?(?P<verb>{_ALT(VERBS)}) "
                   rf"(?P<y>{_NAME}|me)\b(?P<more>(?:, {_NAME})*,? and {_NAME}\b)?")  # fmt: skip
_POSSESSIVE = re.compile(rf"(?<![\w'])(?P<x>{_NAME}) (?:is|was) (?P<y>{_NAME}['’]s|my|our) "
                         rf"(?:new |old |former |current |younger |older |little |big |twin )?"
                         rf"(?P<noun>{_ALT(NOUNS)})\b")  # fmt: skip
_PLURAL = re.compile(rf"(?<![\w'])(?P<x>{_WHO}) and (?P<y>{_NAME}|I) (?:are|were) (?:(?:old|good|close) )?"
                     rf"(?P<noun>{_ALT(PLURALS)})\b")  # fmt: skip
# sentence openers a capitalised run may start with ("Maybe Tom manages Priya"): not part of a name
_OPENERS = frozenset({"maybe", "perhaps", "probably", "yesterday", "today", "now", "also", "so", "then", "and",
                      "but", "actually", "apparently", "honestly", "well", "oh", "anyway", "still", "recently",
                      "last", "lately", "besides", "plus", "obviously", "clearly", "sadly", "luckily"})  # fmt: skip
_NOT_PEOPLE = frozenset({"he", "she", "it", "they", "we", "you", "this", "that", "there", "what", "who",
                         "which", "where", "when", "how", "why", "the", "my", "our", "his", "her", "their"})  # fmt: skip


def _person(text: str, me: TermRef | None) -> TermRef | None:
    """A named person (or the speaker), else None: the rule leaves the sentence alone."""
    if text in ("I", "me", "my", "our"):
        return me
    words = re.sub(r"['’]s$", "", text).rstrip(".").split()
    while len(words) > 1 and words[0].casefold() in _OPENERS:
        words.pop(0)
    name = " ".join(words)
    if name == "I":
        return me
    if name.split()[0].casefold() in _NOT_PEOPLE or name.isupper() and len(name) > 1:
        return None
    return TermRef(name)


def relations(sentence: str, me: TermRef | None, add: Callable[..., Any]) -> bool:
    """Read the sentence's interpersonal relations through ``add`` (``rules._sentence``); True
    when one was read.  First-person ends (``I``, ``me``, ``my``) need ``me``."""
    found = False

    def emit(x: TermRef | None, predicate: str, y: TermRef | None, single: bool, pattern: str) -> None:
        nonlocal found
        if x is None or y is None or x == y:
            return
        conf = 0.85 if me is not None and me in (x, y) else 0.75
        add(x, predicate, (y, "entity"), conf=conf, pattern=pattern, single=single)
        found = True

    for m in _VERB.finditer(sentence):
        predicate, single = VERBS[m.group("verb")]
        others = re.split(r", and |, | and ", m.group("more") or "")  # "lives with Dave and Erin"
        for y in [m.group("y"), *(o for o in others if o and o != "I")]:  # "... and I like tea"
            if y[-2:] not in ("'s", "’s"):  # "works with Bob's team": not Bob
                emit(_person(m.group("x"), me), predicate, _person(y, me), single and len(others) < 2,
                     "x_relation_y")  # fmt: skip
    for m in _POSSESSIVE.finditer(sentence):
        noun = m.group("noun").casefold()
        emit(_person(m.group("y"), me), re.sub(r"[ -]+", "_", noun), _person(m.group("x"), me),
             False, "x_is_ys_relation")  # fmt: skip
    for m in _PLURAL.finditer(sentence):
        emit(_person(m.group("x"), me), PLURALS[m.group("noun")], _person(m.group("y"), me), False,
             "x_and_y_are_relation")  # fmt: skip
    return found
