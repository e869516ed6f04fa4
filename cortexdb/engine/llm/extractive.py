"""The extractive answerer: the offline, deterministic default ``LLM`` (provider ``extractive``).

It generates nothing.  An answer is the pack's own sentences that best answer the question,
each followed by the marker of the passage it was taken from:

1. every passage is cut into sentences (``.``, ``!`` or ``?`` before white space, or a line end);
   an event's sentences keep who said it and when (``caroline on 2023-05-08: ...``);
2. a sentence's support is the share of the question's terms it contains (the recall index's
   terms: lower-cased, stop words dropped, Snowball stems), each term weighted by its rarity among
   the pack's sentences (``log(1 + n / (1 + df))``), so a name every sentence shares counts less
   than the word that singles the answer out;
3. the sentences with support ≥ ``min_support`` (0.25) and ≥ ``relative_support`` (0.6) times the
   best one's, best first (ties: pack order), at most ``max_sentences`` (3) and within the token
   ceiling; sentences that say the same thing (a fact, its belief, the turn they came from:
   ``near``) are quoted once, with all their markers.  Episodes summarise turns the pack holds
   too: their sentences count only when no belief, fact or event supports an answer;
4. none: ``NO_SUPPORT`` ("The memory holds nothing that answers this question."), citing nothing
   — the answer service reports it as ``supported: false``.

A narrative takes the passages in pack order, the first sentence of each (episodes only when
there is nothing else; up to ``max_narrative_sentences``, 6), or with a query the sentences that
best match it.  Token counts are regex tokens (``prompts.COUNTED_BY``): the prompt is the
question plus the passages it read, the completion the answer.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import AsyncIterator

import attrs

from ..retrieve.text_index import tokenize
from ..spi.llm import NARRATIVE, Completion, Passage, Prompt, Usage
from . import prompts

NO_SUPPORT = "The memory holds nothing that answers this question."
NOTHING_TO_TELL = "The memory holds nothing to tell about this yet."
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\s*\n\s*")
_ASIDE = re.compile(r"\([^()]*\)")


@attrs.frozen
class Sentence:
    text: str  # as the answer quotes it (an event's: with who said it and when)
    terms: frozenset[str]
    core: frozenset[str]  # the terms outside parentheses: a claim without "(belief: ..., confidence ...)"
    passage: int  # the passage's position in the pack
    position: int  # the sentence's position in its passage


def sentences(passages: tuple[Passage, ...]) -> list[tuple[Sentence, Passage]]:
    out = []
    for index, passage in enumerate(passages):
        parts = [s.strip() for s in _SENTENCE_END.split(passage.text) if s and s.strip()]
        for position, part in enumerate(parts):
            text = f"{passage.source}: {part}" if passage.source else part
            core = frozenset(tokenize(_ASIDE.sub(" ", text)))
            out.append((Sentence(text, frozenset(tokenize(text)), core, index, position), passage))
    return out


def weights(found: list[tuple[Sentence, Passage]]) -> dict[str, float]:
    """Each term's rarity among the sentences: ``log(1 + n / (1 + df))``."""
    df = Counter(term for sentence, _ in found for term in sentence.terms)
    n = len(found)
    return {term: math.log(1 + n / (1 + count)) for term, count in df.items()}


def near(terms: frozenset[str], other: frozenset[str]) -> bool:
    """Two sentences that say the same (a fact, its belief and the turn they came from): one's
    terms within the other's, or most of them shared (Jaccard ≥ 0.7)."""
    if not terms or not other:
        return terms == other
    return terms <= other or other <= terms or len(terms & other) / len(terms | other) >= 0.7


class ExtractiveLLM:
    provider = "extractive"

    def __init__(self, model: str = "extractive", *, min_support: float = 0.25, relative_support: float = 0.6,
                 max_sentences: int = 3, max_narrative_sentences: int = 6) -> None:  # fmt: skip
        self.model = model
        self.min_support = min_support
        self.relative_support = relative_support
        self.max_sentences = max_sentences
        self.max_narrative_sentences = max_narrative_sentences

    def __repr__(self) -> str:
        return f"ExtractiveLLM(model={self.model!r})"

    def supported(self, prompt: Prompt) -> list[tuple[float, Sentence, Passage]]:
        """The sentences that support an answer to the prompt's question, best first: those of
        beliefs, facts and events, else (none of them supports one) those of episodes."""
        found = sentences(prompt.passages)
        for part in ([sp for sp in found if sp[1].layer != "episode"], [sp for sp in found if sp[1].layer == "episode"]):
            chosen = self._supported(prompt, part)
            if chosen:
                return chosen
        return []

    def _supported(self, prompt: Prompt, found: list[tuple[Sentence, Passage]]) -> list[tuple[float, Sentence, Passage]]:
        question = set(tokenize(prompt.question))
        weight = weights(found)
        total = sum(weight.get(term, math.log(1 + len(found))) for term in question)
        if not question or not total:
            return []
        scored = []
        for sentence, passage in found:
            support = round(sum(weight[term] for term in question & sentence.terms) / total, 6)
            if support >= self.min_support:
                scored.append((support, sentence, passage))
        scored.sort(key=lambda s: (-s[0], s[1].passage, s[1].position))  # ties: recall's order
        best = scored[0][0] if scored else 0.0
        return [s for s in scored if s[0] >= self.relative_support * best]

    def compose(self, prompt: Prompt) -> tuple[str, bool]:
        """(the text, whether the token ceiling cut it)."""
        if prompt.task == NARRATIVE:
            chosen = self.narrative(prompt)
            limit, empty = self.max_narrative_sentences, NOTHING_TO_TELL
        else:
            chosen = [(s, p) for _, s, p in self.supported(prompt)]
            limit, empty = self.max_sentences, NO_SUPPORT
        kept: list[tuple[str, frozenset[str], list[str]]] = []  # (text, terms, markers)
        for sentence, passage in chosen:
            same = next((k for k in kept if near(sentence.core, k[1])), None)
            if same is None and len(kept) < limit:
                kept.append(same := (sentence.text, sentence.core, []))
            if same is not None and passage.marker not in same[2]:
                same[2].append(passage.marker)
        parts, tokens, cut = [], 0, False
        for text, _, cited in kept:
            part = f"{text if text[-1] in '.!?' else text + '.'} {''.join(cited)}"
            cost = prompts.count_tokens(part)
            if tokens + cost > prompt.max_tokens:
                cut = True
                break
            parts.append(part)
            tokens += cost
        return (" ".join(parts) if parts else empty), cut

    def narrative(self, prompt: Prompt) -> list[tuple[Sentence, Passage]]:
        if prompt.question.strip():
            matching = [(s, p) for _, s, p in self.supported(prompt)]
            if matching:
                return sorted(matching, key=lambda sp: (sp[0].passage, sp[0].position))
        firsts = [(s, p) for s, p in sentences(prompt.passages) if s.position == 0]
        return [(s, p) for s, p in firsts if p.layer != "episode"] or firsts

    async def complete(self, prompt: Prompt) -> Completion:
        text, cut = self.compose(prompt)
        read = prompts.count_tokens(prompt.question) + sum(
            prompts.count_tokens(f"{p.source} {p.text}") for p in prompt.passages)  # fmt: skip
        usage = Usage(prompt=read, completion=prompts.count_tokens(text), counted_by=prompts.COUNTED_BY)
        return Completion(text=text, model=self.model, usage=usage, finish_reason="length" if cut else "stop")

    async def stream(self, prompt: Prompt) -> AsyncIterator[str | Completion]:
        completion = await self.complete(prompt)
        for piece in prompts.pieces(completion.text):
            yield piece
        yield completion

    async def aclose(self) -> None:
        return None
