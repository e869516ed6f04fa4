"""Passages: how a long event text is split for indexing and recall.

A text longer than ``max_chars`` becomes spans of at most ``max_chars`` characters, each cut at
the last paragraph end in its second half, else the last sentence end (the rule extractor's
sentence boundary: ``.``, ``!`` or ``?`` before white space, or a line end), else the last white
space, else hard at ``max_chars``.  Spans skip the white space between them, never overlap and
keep the text's order; their offsets index the original text.  A passage is indexed under
``<event id>#p<index>`` (``passage_id``), so BM25 and the vector index find the relevant part of a
long document, and recall returns that part instead of the whole text.
"""

from __future__ import annotations

import re

_PARAGRAPH = re.compile(r"\n[ \t\r\f\v]*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s|\n")
SEPARATOR = "#p"


def split(text: str, max_chars: int) -> list[tuple[int, int]]:
    """The (start, end) spans of ``text``'s passages; one span for a text that fits."""
    if len(text) <= max_chars:
        return [(0, len(text))]
    spans: list[tuple[int, int]] = []
    size = len(text)
    start = 0
    while True:
        while start < size and text[start].isspace():
            start += 1
        if start >= size:
            return spans
        if size - start <= max_chars:
            end = size
        else:
            end = max(start + 1, _cut(text, start + max_chars, start + max_chars // 2))
        stop = end
        while stop > start and text[stop - 1].isspace():
            stop -= 1
        spans.append((start, stop))
        start = end


def _cut(text: str, limit: int, half: int) -> int:
    """Where a passage ends: at a break in ``[half, limit)``, else at ``limit``."""
    window = text[half:limit]
    for pattern in (_PARAGRAPH, _SENTENCE_END):
        ends = [match.start() for match in pattern.finditer(window)]
        if ends:
            return half + ends[-1]
    space = max(window.rfind(" "), window.rfind("\t"))
    if space > 0:
        return half + space
    return limit


def passage_id(event_id: str, index: int) -> str:
    return f"{event_id}{SEPARATOR}{index}"


def parse_passage_id(doc_id: str) -> tuple[str, int | None]:
    """``evt_x#p3`` -> ("evt_x", 3); a plain id -> (id, None)."""
    base, sep, index = doc_id.partition(SEPARATOR)
    if not sep or not index.isdigit():
        return doc_id, None
    return base, int(index)
