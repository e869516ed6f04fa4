"""Belief math: a Beta posterior over weighted evidence, with a real credible interval.

A belief is a claim (subject, predicate, object).  Evidence for it is the confidence of each
current fact asserting it; evidence against is the confidence of each current fact asserting a
rival value of a single-valued predicate or the negation.  With a uniform Beta(1, 1) prior the
posterior is Beta(1 + for, 1 + against): ``confidence`` is its mean and ``confidence_interval``
its central credible interval (``method: beta_posterior``), computed from the regularised
incomplete beta function — no constants stand in for evidence.
"""

from __future__ import annotations

import math
from functools import lru_cache

PRIOR_ALPHA = 1.0
PRIOR_BETA = 1.0
LEVEL = 0.90
SUPPORTED_AT = 0.6
CONTRADICTED_AT = 0.4


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction for the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-12:
            break
    return h


def beta_cdf(x: float, a: float, b: float) -> float:
    """The regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def beta_ppf(q: float, a: float, b: float) -> float:
    """Inverse of ``beta_cdf`` by bisection (monotone, so 60 halvings reach double precision)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if beta_cdf(mid, a, b) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def posterior(
    evidence_for: float, evidence_against: float, level: float = LEVEL
) -> tuple[float, float, float]:
    """(mean, lower, upper) of Beta(prior + for, prior + against) at the central ``level``."""
    return _posterior(round(max(0.0, evidence_for), 6), round(max(0.0, evidence_against), 6), level)


@lru_cache(maxsize=65536)
def _posterior(
    evidence_for: float, evidence_against: float, level: float
) -> tuple[float, float, float]:
    a = PRIOR_ALPHA + evidence_for
    b = PRIOR_BETA + evidence_against
    tail = (1.0 - level) / 2
    return a / (a + b), beta_ppf(tail, a, b), beta_ppf(1 - tail, a, b)


def stance(confidence: float, evidence_against: float) -> str:
    if confidence >= SUPPORTED_AT:
        return "supported"
    if confidence <= CONTRADICTED_AT and evidence_against > 0:
        return "contradicted"
    return "uncertain"


def should_delete(
    confidence: float, stance_: str, floor: float, evidence_for: float, evidence_against: float
) -> bool:
    """The confidence floor (§7.4) versus the ``contradicted`` stance (§7.4.1).

    A contradicted belief is kept below the floor: the reference keeps it "for explainability",
    and its low confidence *is* the explanation.  Any other belief below the floor is deleted, and
    so is one with no evidence left at all (every supporting fact was withdrawn).
    """
    if evidence_for <= 0 and evidence_against <= 0:
        return True
    return confidence < floor and stance_ != "contradicted"


def tension(a: float, b: float) -> float:
    """How strongly two rival beliefs pull against each other: 1 when equally held, 0 when one is nil."""
    high = max(a, b)
    return round(min(a, b) / high, 4) if high > 0 else 0.0


CALIBRATION_MODEL = "beta_posterior"  # the confidence is the posterior mean, no recalibration map


def calibration(confidence: float, supports: list[dict], at: str | None) -> dict:
    """The ``calibration`` block of a belief (§7.4), from what the belief holds (docs/decisions.md,
    "Belief calibration"): the Brier score of its confidence, read as a forecast of each piece of
    its current evidence (1 for a fact supporting the claim, 0 for one against it), weighted as
    ``supports`` weighs them.  In-sample: it says how well the point estimate agrees with the
    evidence it was computed from (0.25 at a coin toss, towards 0 as one side dominates), not an
    out-of-sample track record, which needs the belief's past versions."""
    pairs = [(float(s.get("weight") or 0.0), 1.0 if s.get("polarity") == "supports" else 0.0)
             for s in supports]  # fmt: skip
    total = sum(weight for weight, _ in pairs)
    brier = sum(weight * (confidence - outcome) ** 2 for weight, outcome in pairs) / total if total > 0 else None
    return {"model": CALIBRATION_MODEL, "score": "brier_in_sample",
            "brier_score": round(brier, 4) if brier is not None else None,
            "samples": len(pairs), "last_calibrated_at": at}  # fmt: skip


def calibrated(wire: dict) -> dict:
    """A belief's wire form with its ``calibration`` computed when the record has none."""
    if wire.get("calibration") is None:
        wire["calibration"] = calibration(wire["confidence"], wire.get("supports") or [], wire.get("last_revised_at"))
    return wire
