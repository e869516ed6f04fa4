"""Entity alias normalisation: the key under which surface names resolve to one ``ent_`` id."""

from __future__ import annotations

import re
import unicodedata

_PUNCT = re.compile(r"[^\w\s&+@.:-]", re.UNICODE)
_SPACE = re.compile(r"\s+")
_ARTICLE = re.compile(r"^(the|a|an)\s+")


def normalise_alias(name: str) -> str:
    """Casefold, NFKC, drop punctuation and leading articles, collapse spaces.

    ``"The Acme Corp."`` and ``"acme  corp"`` both become ``"acme corp"``.  Actor ids
    (``user:alice``) are kept verbatim apart from case so they never collide with names.
    """
    text = unicodedata.normalize("NFKC", name).casefold().strip()
    text = _PUNCT.sub(" ", text)
    text = _SPACE.sub(" ", text).strip(" .-")
    text = _ARTICLE.sub("", text)
    return text


def actor_alias(actor_id: str) -> str:
    return "actor:" + actor_id.casefold()
