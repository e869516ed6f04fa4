"""A caching embedder for benchmarks: the same vectors as the wrapped embedder, each text encoded
once across runs.

``CachedEmbedder(inner, path)`` keeps every text's ``embed_sums`` row (the unnormalised pooled sum
the embedders expose) in memory and in a ``.npz`` file at ``path``; ``embed`` is that row
normalised, exactly what ``MiniLMEmbedder.embed`` and ``HashEmbedder.embed`` compute.  It keeps
the inner embedder's ``name`` and ``dimension``, so the engine cannot tell the two apart, and a
LoCoMo ingest after the first costs derivation only (bench/locomo.py ``--vector-cache``).
"""

from __future__ import annotations

import hashlib
import os

import numpy as np


class CachedEmbedder:
    def __init__(self, inner, path: str) -> None:
        self.inner = inner
        self.name = inner.name
        self.dimension = inner.dimension
        self.inline = getattr(inner, "inline", False)
        self.path = path
        self.rows: dict[str, np.ndarray] = {}
        self.misses = 0
        self.hits = 0
        if os.path.exists(path):
            with np.load(path) as data:
                keys, values = data["keys"], data["values"]
                self.rows = {str(k): values[i] for i, k in enumerate(keys)}
        self._saved = len(self.rows)

    @staticmethod
    def _key(text: str) -> str:
        return hashlib.sha1(text.encode()).hexdigest()

    def embed_sums(self, texts: list[str]) -> np.ndarray:
        keys = [self._key(t) for t in texts]
        missing = list(dict.fromkeys(k for k in keys if k not in self.rows))
        if missing:
            by_key = {self._key(t): t for t in texts}
            computed = self.inner.embed_sums([by_key[k] for k in missing])
            for key, row in zip(missing, computed, strict=True):
                self.rows[key] = np.asarray(row, dtype=np.float32)
            self.misses += len(missing)
        self.hits += len(keys) - len(missing)
        if not keys:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.stack([self.rows[k] for k in keys])

    def embed(self, texts: list[str]) -> np.ndarray:
        """The sums normalised (a zero row stays zero): both shipped embedders' ``embed``."""
        out = self.embed_sums(texts)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)

    def save(self) -> None:
        if len(self.rows) == self._saved:
            return
        keys = np.array(list(self.rows), dtype="U40")
        values = np.stack(list(self.rows.values())) if self.rows else np.zeros((0, self.dimension), np.float32)
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        tmp = self.path + ".tmp.npz"
        np.savez(tmp, keys=keys, values=values)
        os.replace(tmp, self.path)
        self._saved = len(self.rows)
