"""The LLM SPI: a question (or a narrative task) and the numbered passages of a recall pack in,
text citing those passages out — whole (``complete``) or piece by piece (``stream``).

A provider never sees the store: the answer service (``engine/recall/answer.py``) hands it the
pack's items as ``Passage``s, each with the marker (``[3]``) the answer must cite it by, and
reads the markers back out of the text.  Every provider cites inline (``... [3]``); the
request's ``citation_mode`` is applied afterwards, in one place, whatever the provider.
Implementations: ``engine/llm/extractive.py`` (offline, deterministic, the default) and
``engine/llm/openai_compatible.py`` (chat completions over HTTP).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

import attrs

ANSWER, NARRATIVE = "answer", "narrative"  # what a prompt asks for


@attrs.frozen
class Passage:
    """One pack item as the model reads it."""

    marker: str  # "[3]": how the text cites it
    layer: str  # fact | belief | episode | event (singular, as citations name layers)
    id: str
    text: str  # what it says
    source: str = ""  # an event's speaker and date ("caroline on 2023-05-08"), quoted before it
    score: float = 0.0  # its recall score


@attrs.frozen
class Prompt:
    task: str  # ANSWER | NARRATIVE
    question: str  # the question (a narrative: the recall's query, possibly "")
    passages: tuple[Passage, ...]
    max_tokens: int  # the output ceiling


@attrs.frozen
class Usage:
    prompt: int
    completion: int
    counted_by: str  # "provider" (the API's usage block) or how we counted (engine/llm/prompts.py)


@attrs.frozen
class Completion:
    text: str  # cites passages inline by their markers
    model: str  # the model that answered (as the provider names it)
    usage: Usage
    finish_reason: str = "stop"  # stop | length (the ceiling cut it)


class LLM(Protocol):
    provider: str  # "extractive" | "openai_compatible" | a third party's name
    model: str  # the model id requests are routed to this provider by (``answer_model``)

    async def complete(self, prompt: Prompt) -> Completion:
        """The whole text at once; raises ``LLMUnavailable`` when the model cannot answer."""
        ...

    def stream(self, prompt: Prompt) -> AsyncIterator[str | Completion]:
        """Pieces of text as they come, then the ``Completion`` (the whole text and its usage).
        A failure before the first piece raises ``LLMUnavailable`` from the first ``__anext__``."""
        ...

    async def aclose(self) -> None:
        """Release connections (the engine calls it when it closes)."""
        ...
