"""A given ``vector`` of an experience envelope (docs/embedding.md, "Given vectors"), checked
and made a unit float32 vector; part of envelope validation (``envelope.validate_envelope``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InvalidEnvelope

MAX_VECTOR = 4096  # numbers in a given ``vector`` (the embedder's dimension is checked on write)


def _fail(field: str, reason: str):
    raise InvalidEnvelope(field, reason)


def validate_vector(value: Any, field: str = "vector") -> np.ndarray | None:
    """A given vector (docs/embedding.md, "Given vectors"): finite numbers, not all zero, as a
    unit float32 vector (recall scores cosines); its length is checked against the embedder's
    dimension where the engine knows it (``writes.check_vector``)."""
    if value is None:
        return None
    numbers = value
    if isinstance(value, np.ndarray):
        if value.ndim != 1 or value.dtype.kind not in "fiu":
            _fail(field, "must be a one-dimensional array of numbers")
    else:
        if not isinstance(value, list | tuple):
            _fail(field, "must be an array of numbers")
        plain = set(map(type, value)) <= {float, int}  # the common case, at C speed: else each
        if not plain and any(isinstance(x, bool) or not isinstance(x, int | float) for x in value):
            _fail(field, "must be an array of numbers")
    if not 0 < len(numbers) <= MAX_VECTOR:
        _fail(field, f"must hold 1 to {MAX_VECTOR} numbers")
    try:
        vector = np.asarray(numbers, dtype=np.float64)
    except OverflowError:
        _fail(field, "must hold finite numbers")
    if not np.isfinite(vector).all():
        _fail(field, "must hold finite numbers (no NaN or infinity)")
    norm = float(np.linalg.norm(vector))
    if not norm or not np.isfinite(norm):
        _fail(field, "must not be all zeros" if not norm else "must hold numbers of a usable size")
    unit = (vector / norm).astype(np.float32)
    if not np.isfinite(unit).all() or not unit.any():
        _fail(field, "must hold numbers of a usable size")
    return unit
