"""How an LLM's text cites a pack: markers read back out of it, the request's ``citation_mode``
applied to it (also piece by piece, as it streams), and each citation's support strength.

Every provider writes inline markers (``... [3]``).  Then, per ``citation_mode`` (§8.3):

| mode | the text | ``citations`` |
|---|---|---|
| ``inline_with_markers`` | as written | the markers it uses that name passages |
| ``block_at_end`` | markers removed, then ``Sources: [1] fact_…; [3] evt_…`` | the same |
| ``structured_only`` | markers removed | the same |
| ``none`` | markers removed | ``[]`` |

A marker that names no passage (``[99]``) is not a citation; outside ``inline_with_markers`` it
stays in the text as written (it may be a literal).  ``support_strength`` (0-1): of the words
(index terms) of the text a marker closes — everything since the previous marker — the share the
cited passage contains, the best over the places citing it; a sentence quoted verbatim scores 1.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ..retrieve.text_index import tokenize
from ..spi.llm import Passage

INLINE, BLOCK, STRUCTURED, NONE = "inline_with_markers", "block_at_end", "structured_only", "none"
MARKER = re.compile(r"\[(\d{1,4})\]")
_GROUP = re.compile(r"((?:\s*\[\d{1,4}\])+)")
_STRIPPABLE = re.compile(r"\s*\[(\d{1,4})\]")
_PARTIAL = re.compile(r"\s*(\[\d{0,4})?\Z")  # what may still become a marker with more text


class MarkerFilter:
    """A streamed text with ``citation_mode`` applied: ``feed`` each piece, then ``finish``.  The
    pieces it returns join to exactly what ``apply`` makes of the whole text."""

    def __init__(self, mode: str, passages: Iterable[Passage]) -> None:
        self.strip = mode != INLINE
        self.markers = {p.marker for p in passages}
        self.pending = ""

    def _strip(self, text: str) -> str:
        return _STRIPPABLE.sub(lambda m: "" if f"[{m[1]}]" in self.markers else m[0], text)

    def feed(self, piece: str) -> str:
        if not self.strip:
            return piece
        self.pending += piece
        cut = _PARTIAL.search(self.pending).start()  # hold back a tail that may open a marker
        ready, self.pending = self.pending[:cut], self.pending[cut:]
        return self._strip(ready)

    def finish(self) -> str:
        out, self.pending = self._strip(self.pending) if self.strip else self.pending, ""
        return out


def apply(mode: str, text: str, passages: Iterable[Passage]) -> str:
    """The whole text with ``citation_mode`` applied (what the streamed pieces join to), without
    the ``block_at_end`` sources line (``sources_line``)."""
    flt = MarkerFilter(mode, passages)
    return flt.feed(text) + flt.finish()


def cited(text: str, passages: Iterable[Passage]) -> list[tuple[Passage, float]]:
    """The passages ``text`` cites, in order of first citation, each with its support strength."""
    by_marker = {p.marker: p for p in passages}
    claims: dict[str, list[str]] = {}  # marker -> the stretches of text it closes
    start = 0
    for group in _GROUP.finditer(text):
        claim = text[start : group.start()]
        for marker in MARKER.findall(group[0]):
            if f"[{marker}]" in by_marker:
                claims.setdefault(f"[{marker}]", []).append(claim)
        start = group.end()
    out = []
    for marker, stretches in claims.items():
        passage = by_marker[marker]
        terms = set(tokenize(f"{passage.source} {passage.text}"))
        out.append((passage, max(_share(stretch, terms) for stretch in stretches)))
    return out


def _share(stretch: str, terms: set[str]) -> float:
    words = set(tokenize(stretch))
    return round(len(words & terms) / len(words), 2) if words else 0.0


def citations(mode: str, found: list[tuple[Passage, float]]) -> list[dict[str, Any]]:
    """The response's ``citations`` (§8.4): none in mode ``none``."""
    if mode == NONE:
        return []
    return [{"marker": p.marker, "layer": p.layer, "id": p.id, "support_strength": strength} for p, strength in found]


def sources_line(mode: str, found: list[tuple[Passage, float]]) -> str:
    """What ``block_at_end`` appends to the text ('' otherwise, or when nothing is cited)."""
    if mode != BLOCK or not found:
        return ""
    return "\n\nSources: " + "; ".join(f"{p.marker} {p.id}" for p, _ in found)
