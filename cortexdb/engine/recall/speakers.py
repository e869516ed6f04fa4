"""Speaker-aware ranking: a question that names someone who speaks in the scope favours what that
person said (docs/decisions.md, "Recall quality after the blend").

A candidate's *voice* is who it comes from or is about: an event's observed actor, a fact's or a
belief's subject.  The names are the scope's own — the voices among the recall's candidates — so
nothing is listed by hand: an actor ``user:caroline_smith`` is named by a question containing
``caroline`` or ``smith`` (whole words, case-folded, three letters or more, not an English stop
word: ``user:will`` is not named by "what will she do").  When the question
names some voices but not all of those present, each candidate with a named voice gets
``EngineConfig.recall_speaker_weight`` added to its score (after the blend and the router's
handlers, before MMR).  A question naming nobody, or every voice present, changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from ..retrieve.text_index import STOPWORDS
from ..retrieve.voices import MIN_NAME_CHARS, WORD, Voices, name_words  # noqa: F401 (this module's words)


def voice(candidate: Any) -> str | None:
    """The actor id a candidate comes from (an event) or is about (a fact, a belief)."""
    record = candidate.record
    if candidate.layer == "events":
        actor = record.get("observed_actor") or {}
        return actor.get("id") or record.get("actor")
    if candidate.layer == "facts":
        return (record.get("subject") or {}).get("name")
    if candidate.layer == "beliefs":
        return ((record.get("claim") or {}).get("subject") or {}).get("name")
    return None


def named(query: str, voices: set[str]) -> set[str]:
    """The voices the query names."""
    words = set(WORD.findall(query.casefold()))
    return {v for v in voices if name_words(v) & words}


_TOKEN = re.compile(r"\S+")


def content_query(query: str, voices: Voices | set[str] | list[str]) -> str:
    """The question without the words that name a voice of the scope (whole words, case-folded,
    a possessive ``'s`` and punctuation around them ignored), the rest as written; the question
    itself when that leaves nothing but stop words ("Who is Caroline?").  Every turn is indexed led by its speaker's name
    (model/text.py ``turn_text``), so a speaker's name matches half a conversation: it says who,
    which ``prefer`` weighs, not what (docs/decisions.md, "The question's content")."""
    if isinstance(voices, Voices):
        names = voices.names
    else:
        names = set()
        for actor_id in voices:
            names |= name_words(actor_id)
    if not names or not query:
        return query
    kept = []
    for token in _TOKEN.findall(query):
        words = WORD.findall(re.sub(r"['’]s\b", "", token.casefold()))
        if words and all(w in names for w in words):
            continue
        kept.append(token)
    content = " ".join(kept)
    return content if any(w not in STOPWORDS for w in WORD.findall(content.casefold())) else query


class ContentQuery:
    """A recall's question as each scope searches it (``Candidates.content``): the content query
    against the scope's own voices, and its embedding, computed once per distinct text.  Asked by
    the scope inside its candidates request, so the recall stays one message per scope, served
    in mailbox order."""

    def __init__(self, question: str, embed: Callable[[str], Awaitable[Any]]) -> None:
        self.question = question
        self._embed = embed
        self.vectors: dict[str, Any] = {}  # each text searched -> its vector

    async def __call__(self, voices: Voices | set[str]) -> tuple[str, Any]:
        # no lock: two scopes asking at once may both encode a text, but a scope whose vector is
        # known (or an inline embedder) goes on without yielding, as the plain recall does
        text = content_query(self.question, voices)
        if text not in self.vectors:
            self.vectors[text] = await self._embed(text)
        return text, self.vectors[text]

    def searched(self) -> str | list[str] | None:
        """What the trail says was searched instead of the question (None: the question)."""
        texts = [t for t in self.vectors if t != self.question]
        return None if not texts else texts[0] if len(self.vectors) == 1 else sorted(self.vectors)


def prefer(query: str, candidates: list[Any], weight: float) -> int:
    """Add ``weight`` to the candidates whose voice the query names (some but not all of the
    voices present); returns how many were raised."""
    if weight <= 0 or not query or not candidates:
        return 0
    voices = [voice(c) for c in candidates]
    chosen = named(query, set(voices) - {None})
    if not chosen or len(chosen) == len(set(voices) - {None}):
        return 0
    raised = 0
    for candidate, who in zip(candidates, voices, strict=True):
        if who in chosen:
            candidate.score += weight
            candidate.signals["speaker"] = 1.0
            raised += 1
    return raised
