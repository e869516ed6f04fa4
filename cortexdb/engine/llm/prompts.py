"""What a chat model is sent (the system and user messages of a ``Prompt``), how tokens are counted
when a provider does not say, and how a text is cut into stream pieces.  Pure."""

from __future__ import annotations

import re
from typing import Any

from ..spi.llm import NARRATIVE, Prompt

# tokens when no tokenizer is at hand: runs of word characters, and every other non-space
# character alone ("Acme's 200-seat deal." -> Acme ' s 200 - seat deal .): close to what BPE
# tokenizers count for English prose, and the same on every machine
TOKEN = re.compile(r"\w+|[^\w\s]")
COUNTED_BY = r"regex \w+|[^\w\s]"
_PIECE = re.compile(r"\s*\S+")

ANSWER_SYSTEM = (
    "You answer questions from an agent's memory. Use only the numbered memory passages you are "
    "given. After every sentence, cite the passages it rests on by their markers in square "
    "brackets, e.g. [2] or [1][3]. If the passages do not answer the question, say that the "
    "memory does not say, and cite nothing. Be brief."
)
NARRATIVE_SYSTEM = (
    "You tell what an agent's memory holds as a short narrative (a few sentences, in time order "
    "where the passages give dates). Use only the numbered memory passages you are given, and "
    "after every sentence cite the passages it rests on by their markers in square brackets, "
    "e.g. [2] or [1][3]."
)


def count_tokens(text: str) -> int:
    return len(TOKEN.findall(text))


def passages_text(prompt: Prompt) -> str:
    return "\n".join(f"{p.marker} ({p.layer}) {p.source + ': ' if p.source else ''}{p.text}"
                     for p in prompt.passages)  # fmt: skip


def messages(prompt: Prompt) -> list[dict[str, Any]]:
    """The chat messages of a prompt (OpenAI's ``messages`` shape)."""
    if prompt.task == NARRATIVE:
        focus = f"\n\nFocus on: {prompt.question}" if prompt.question else ""
        user = f"Memory passages:\n{passages_text(prompt)}{focus}\n\nTell what the memory holds."
        return [{"role": "system", "content": NARRATIVE_SYSTEM}, {"role": "user", "content": user}]
    user = f"Memory passages:\n{passages_text(prompt)}\n\nQuestion: {prompt.question}"
    return [{"role": "system", "content": ANSWER_SYSTEM}, {"role": "user", "content": user}]


def prompt_tokens(prompt: Prompt) -> int:
    """The tokens of what a chat model would be sent for ``prompt`` (by ``COUNTED_BY``)."""
    return sum(count_tokens(m["content"]) for m in messages(prompt))


def pieces(text: str) -> list[str]:
    """``text`` as stream pieces: each word with the white space before it (they join back to
    ``text`` less any trailing white space)."""
    return _PIECE.findall(text)
