"""An int8 sketch of a flat run's float16 rows: the run's exact search reads it first, to score
only the rows that can still be among the best (decisions.md, "A flat run's search: an int8
sketch, then the exact rows").

SimSIMD scores int8 rows about four times faster than float16 ones (integer dot products; on
this machine's AVX-512 VNNI 0.35 ms for 16k rows of 384 against 1.4 ms).  A sketch row is the
run's row quantized with its own scale, ``x = a·xi + e``; the query (as the float16 kernel reads
it, ``qk``) is quantized alike, ``qk = b·qi + f``.  Then the exact product differs from the
sketch's ``a·b·(xi·qi)`` by ``a·(xi·f) + b·(e·qi) + e·f``, which Cauchy–Schwarz bounds by
``a‖xi‖·‖f‖ + ‖e‖·(b‖qi‖ + ‖f‖)``: ``a‖xi‖`` and ``‖e‖`` are kept per row (8 bytes), ``‖f‖``
and ``b‖qi‖`` are the query's.  Adding the float32 accumulation error of the exact kernel (at
most ``d·2⁻²⁴·Σ|x·qk|``, counted twice over), every row's exact score lies within its bound of
its sketch score.  So a row whose upper bound is below the ``limit``-th best lower bound cannot
be among the ``limit`` best, and the rows left are scored exactly by the same kernel as before:
the answer is the exact scan's, score for score (tests/test_vector_sketch.py).
"""

from __future__ import annotations

import numpy as np

EPS32 = 2.0**-23  # twice float32's unit roundoff


def encode(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(int8 rows, scale ``a``, ``a·‖xi‖`` and ``‖e‖`` per row) of stored rows (float16): the
    scale is float32 (as kept), and ``e`` is what the row differs from ``a·xi`` by exactly."""
    x = np.asarray(rows, dtype=np.float64)
    peak = np.max(np.abs(x), axis=1) if x.size else np.zeros(len(x))
    scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    wide = scale.astype(np.float64)[:, None]
    quantized = np.clip(np.rint(x / wide), -127, 127)
    error = x - wide * quantized
    slack = 1.0 + 1e-6  # float32 storage rounds: round the bounds up
    norms = (scale * np.linalg.norm(quantized, axis=1) * slack).astype(np.float32)
    return quantized.astype(np.int8), scale, norms, (np.linalg.norm(error, axis=1) * slack).astype(np.float32)


def usable() -> bool:
    """Whether the float16 kernel accumulates in float32 (the bound's rounding term): not with
    SimSIMD's half-precision-arithmetic kernels (Sapphire Rapids, Arm's f16), nor without it."""
    try:
        import simsimd
    except ImportError:  # pragma: no cover - a dependency
        return False
    caps = simsimd.get_capabilities()
    return not any(caps.get(name) for name in ("sapphire", "neon_f16", "sve_f16"))


class Query:
    """A query quantized for the sketch: its int8 form and what the bound needs of it."""

    def __init__(self, kernel_query: np.ndarray) -> None:
        qk = np.asarray(kernel_query, dtype=np.float64)
        peak = float(np.max(np.abs(qk))) if qk.size else 0.0
        self.b = peak / 127.0 if peak else 1.0
        quantized = np.rint(qk / self.b)
        self.int8 = quantized.astype(np.int8)[None, :]
        self.f = float(np.linalg.norm(qk - self.b * quantized))
        self.bq = self.b * float(np.linalg.norm(quantized))
        self.norm = float(np.linalg.norm(qk))
        self.dimension = len(qk)

    def coefficients(self) -> tuple[np.float32, np.float32]:
        """What ``bounds`` multiplies a row's ``a‖xi‖`` and ``‖e‖`` by."""
        rounding = 2.0 * self.dimension * EPS32 * self.norm
        up = 1.0 + 1e-5
        return np.float32((self.f + rounding) * up), np.float32((self.bq + self.f + rounding) * up)

    def bounds(self, norms: np.ndarray, errors: np.ndarray) -> np.ndarray:
        """Per row, how far its exact score can be from its sketch score (float32 arithmetic,
        each coefficient rounded up by far more than its three roundings can lose)."""
        on_norms, on_errors = self.coefficients()
        bound = norms * on_norms
        bound += errors * on_errors
        bound += np.float32(1e-9)
        return bound

    def widest(self, norms: np.ndarray, errors: np.ndarray) -> float:
        """At least every row's ``bounds`` (float64, from the largest ``a‖xi‖`` and ``‖e‖``, and
        rounded up past what float32 arithmetic can add to a row's)."""
        if not len(norms):
            return 0.0
        on_norms, on_errors = self.coefficients()
        widest = float(np.max(norms)) * float(on_norms) + float(np.max(errors)) * float(on_errors) + 1e-9
        return widest * (1.0 + 1e-6) + 1e-12


_last: tuple[bytes, Query] | None = None  # the last query prepared (every run of a search asks)


def query_for(kernel_query: np.ndarray) -> Query:
    """``Query(kernel_query)``, prepared once for the runs and segments one search reads."""
    global _last
    key = np.ascontiguousarray(kernel_query).tobytes()
    last = _last
    if last is not None and last[0] == key:
        return last[1]
    prepared = Query(kernel_query)
    _last = (key, prepared)
    return prepared


def shortlist_of(sketch_scores: np.ndarray, query: Query, norms: np.ndarray, errors: np.ndarray,
                 limit: int) -> np.ndarray:  # fmt: skip
    """``shortlist(sketch_scores, query.bounds(norms, errors), limit)``, with the bounds computed
    only for rows that can reach it: with ``w`` at least every row's bound and ``s`` the
    ``limit``-th best sketch score, the ``limit`` best rows by sketch score have lower bounds of
    at least ``s - w``, so the ``limit``-th best lower bound (the threshold) is at least that,
    and a row whose sketch score is below ``s - 2w`` has an upper bound below the threshold and
    a lower bound below it too: it neither is shortlisted nor moves the threshold.  The same
    rows as ``shortlist``'s, ascending (tests/test_vector_sketch.py); each row's bound is the
    same float32 arithmetic on the rows kept."""
    if len(sketch_scores) <= 4 * limit:  # too few to be worth a first pass
        return shortlist(sketch_scores, query.bounds(norms, errors), limit)
    live_count = int(np.count_nonzero(sketch_scores > -np.inf))
    if live_count <= limit:
        return np.flatnonzero(np.isfinite(sketch_scores))
    best = float(np.partition(sketch_scores, len(sketch_scores) - limit)[len(sketch_scores) - limit])
    cut = best - 2.0 * query.widest(norms, errors) - 1e-9
    near = np.flatnonzero(sketch_scores >= cut)  # finite: the limit best are at least ``best``
    return near[shortlist(sketch_scores[near], query.bounds(norms[near], errors[near]), limit)]


def shortlist(sketch_scores: np.ndarray, bounds: np.ndarray, limit: int) -> np.ndarray:
    """The rows that can be among the ``limit`` best (``-inf`` sketch scores are left out),
    ascending: every row whose upper bound reaches the ``limit``-th best lower bound."""
    live = np.isfinite(sketch_scores)
    count = int(live.sum())
    if count <= limit:
        return np.flatnonzero(live)
    lower = np.where(live, sketch_scores - bounds, -np.inf)
    threshold = np.partition(lower, len(lower) - limit)[len(lower) - limit]
    return np.flatnonzero(live & (sketch_scores + bounds >= threshold))
