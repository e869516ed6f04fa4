"""The Embedder SPI: texts in, L2-normalised float32 vectors out."""

from __future__ import annotations

from typing import Protocol

import numpy as np


class Embedder(Protocol):
    name: str  # recorded per data dir: a data dir never mixes vectors of two embedders
    dimension: int

    def embed(self, texts: list[str]) -> np.ndarray:
        """Shape (len(texts), dimension), float32, each row of unit length (or zero)."""
        ...
