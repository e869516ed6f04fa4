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

    # Optional: ``embed_sums(texts) -> np.ndarray``, each text's vector before normalisation,
    # such that normalising the sum of two rows embeds the two texts' tokens pooled together
    # (mean pooling's sum).  With it a conversation turn is embedded once and pooled with the
    # previous turn's sums (``EngineConfig.turn_context="pooled"``); without it the two texts
    # are embedded together.
    #
    # Optional: ``inline = True`` for an embedder cheap enough to run on the event loop (the hash
    # one).  Any other is run in a worker thread, and with ``EngineConfig.derived_vectors="auto"``
    # derived records' vectors wait in a backlog and are embedded together
    # (``actors/vector_backlog.py``).
