"""BM25's words: lower-cased alphanumeric runs, English stop words dropped, Snowball (Porter2)
stems; what the text index, recall's query and the extractive answerer split text into."""

from __future__ import annotations

import functools
import re
import threading

import snowballstemmer

_TOKEN = re.compile(r"[0-9a-z]+")
# a Snowball stemmer keeps its state on the object: one per thread, as long texts are tokenised
# in a worker thread while recall tokenises its query on the event loop
_STEMMERS = threading.local()
# English function words: in a small scope "did" or "when" can be rare enough to outweigh the
# words that carry the question (docs/decisions.md, "BM25 terms")
STOPWORDS = frozenset(["a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are", "as", "at", "be", "because", "been", "before", "being", "below", "between", "both", "but", "by", "can", "could", "did", "do", "does", "doing", "down", "during", "each", "few", "for", "from", "further", "had", "has", "have", "having", "he", "her", "here", "hers", "herself", "him", "himself", "his", "how", "i", "if", "in", "into", "is", "it", "its", "itself", "just", "me", "more", "most", "my", "myself", "no", "nor", "not", "of", "off", "on", "once", "only", "or", "other", "our", "ours", "ourselves", "out", "over", "own", "same", "she", "should", "so", "some", "such", "than", "that", "the", "their", "theirs", "them", "themselves", "then", "there", "these", "they", "this", "those", "through", "to", "too", "under", "until", "up", "very", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom", "why", "will", "with", "would", "you", "your", "yours", "yourself", "yourselves", "s", "t", "d", "ll", "m", "re", "ve"])


# the stem cache holds words: the vocabulary of a language is bounded, so the cache fills and
# stays full.  A token with a digit in it ("2nd", "b0dd", an id's hex runs from a concept's
# citations) belongs to an unbounded vocabulary: it has a small cache of its own, least recently
# used first out, so the ids a concept cites again at each re-synthesis are stemmed once while the
# words keep their places (docs/decisions.md, "The soak's memory, engine alone" and "Stems of
# tokens with digits").
STEM_CACHE_WORDS = 65_536
STEM_CACHE_DIGIT_TOKENS = 4_096
# the tokens of a line of a concept's summary ("works at Umbrella") and of its citation
# ("[fact_01a2…]"), most of which recur at the concept's next re-synthesis: one look-up a piece
# instead of a stem a token, least recently used first out (docs/decisions.md, "Concept summaries
# re-indexed by their difference")
TOKEN_CACHE_LINES = 8_192
# a longer piece is tokenized without the cache, so the cache holds at most about
# TOKEN_CACHE_LINES x CACHED_LINE_CHARS characters and their tokens (a few MB), whatever a summary
# line's length (a line has no length cap of its own)
CACHED_LINE_CHARS = 512
LINE_SEPARATOR = "; "
CITATION_SEPARATOR = " ["  # "likes pottery [fact_01a2…]"
_DIGITS = re.compile(r"[0-9]")


def _stemmer():
    stemmer = getattr(_STEMMERS, "stemmer", None)
    if stemmer is None:
        stemmer = _STEMMERS.stemmer = snowballstemmer.stemmer("english")
    return stemmer


@functools.lru_cache(maxsize=STEM_CACHE_WORDS)
def _stem_cached(word: str) -> str:
    return _stemmer().stemWord(word)


@functools.lru_cache(maxsize=STEM_CACHE_DIGIT_TOKENS)
def _stem_digit_token(token: str) -> str:
    return _stemmer().stemWord(token)


def _stem(token: str) -> str:
    if token.isdigit():  # Porter2 leaves a run of digits as it is
        return token
    if _DIGITS.search(token) is not None:
        return _stem_digit_token(token)
    return _stem_cached(token)


def tokenize(text: str) -> list[str]:
    """Lower-cased alphanumeric runs, English stop words dropped, Snowball (Porter2) stems."""
    return [_stem(token) for token in _TOKEN.findall(text.casefold()) if token not in STOPWORDS]


@functools.lru_cache(maxsize=TOKEN_CACHE_LINES)
def _line_tokens(line: str) -> tuple[str, ...]:
    return tuple(tokenize(line))


def tokenize_lines(text: str) -> list[str]:
    """``tokenize(text)`` of a text of ``LINE_SEPARATOR``-separated lines that recur from one
    version of it to the next (a concept's summary), the tokens of each line's text and of its
    citation (``CITATION_SEPARATOR``: a belief's line changes with its confidence, its citation
    does not) cached.  The same list: the separators hold no token character, and case folding
    maps a character at a time."""
    out: list[str] = []
    for line in text.split(LINE_SEPARATOR):
        for piece in line.split(CITATION_SEPARATOR):
            out += _line_tokens(piece) if len(piece) <= CACHED_LINE_CHARS else tokenize(piece)
    return out
