"""The words that name a scope's voices (the actor ids its events come from), kept as voices are
added: recall's speaker ranking and content query read them (recall/speakers.py)."""

from __future__ import annotations

import re

from .tokens import STOPWORDS

WORD = re.compile(r"[0-9a-z]+")
MIN_NAME_CHARS = 3


def name_words(actor_id: str) -> set[str]:
    """The words that name an actor: its id without the type, split on anything not a letter or
    a digit (``user:caroline_smith`` -> caroline, smith), without numbers and stop words."""
    name = actor_id.split(":", 1)[-1].casefold()
    return {w for w in WORD.findall(name)
            if len(w) >= MIN_NAME_CHARS and not w.isdigit() and w not in STOPWORDS}  # fmt: skip


class Voices:
    """A scope's voices (the actor ids of its indexed events) and the words that name them, kept
    as voices are added, so a recall strips the words without going over every voice."""

    __slots__ = ("ids", "names")

    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.names: set[str] = set()

    def add(self, actor_id: str | None) -> None:
        if actor_id and actor_id not in self.ids:
            self.ids.add(actor_id)
            self.names |= name_words(actor_id)
