"""A 64-bit hash of each stored row of a vector segment (vector_files.py: the check that a kept
segment's row is the stored vector of its record), and vectors encoded as an index stores them."""

from __future__ import annotations

import functools

import numpy as np


@functools.lru_cache(maxsize=8)
def _multipliers(words: int) -> np.ndarray:
    """Fixed odd 64-bit multipliers, one a word of a row (the same in every process)."""
    return np.random.default_rng(0x5EED).integers(1, 2**63, size=words, dtype=np.uint64) * np.uint64(2) + np.uint64(1)


def row_hashes(rows: np.ndarray, scales: np.ndarray | None = None) -> np.ndarray:
    """A 64-bit hash of each row's bytes as stored (and its int8 scale): the row's words times
    fixed odd multipliers, summed modulo 2**64, then mixed (a changed word changes the sum)."""
    rows = np.ascontiguousarray(rows)
    raw = rows.reshape(len(rows), -1).view(np.uint8)
    if scales is not None:
        raw = np.concatenate([raw, np.asarray(scales, dtype=np.float32).reshape(-1, 1).view(np.uint8)], axis=1)
    pad = (-raw.shape[1]) % 8
    if pad:
        raw = np.concatenate([raw, np.zeros((len(raw), pad), dtype=np.uint8)], axis=1)
    words = np.ascontiguousarray(raw).view(np.uint64)
    total = (words * _multipliers(words.shape[1])).sum(axis=1, dtype=np.uint64)
    total ^= total >> np.uint64(31)
    total *= np.uint64(0x9E3779B97F4A7C15)
    return total ^ (total >> np.uint64(29))


def encoded(vectors: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Vectors (float32 rows) as a ``VectorIndex`` of ``dtype`` stores them (``VectorIndex._put``)."""
    if dtype != "int8":
        return np.asarray(vectors).astype(dtype), None
    vectors = np.asarray(vectors, dtype=np.float32)
    peaks = np.max(np.abs(vectors), axis=1) if vectors.shape[1] else np.zeros(len(vectors), dtype=np.float32)
    scales = np.where(peaks > 0, peaks / 127.0, 1.0).astype(np.float32)
    return np.rint(vectors / scales[:, None]).astype(np.int8), scales
